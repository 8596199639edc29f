// CPU causal depthwise conv1d with a carried window. Vectorised across channels: each task owns a
// block of channels and walks time once, keeping the last K-1 inputs in registers (so y may even
// alias x), and finally stores them as the new window. Bit-identical windows to ops/ref.
#include "base/thread_pool.h"
#include "ops/cpu/cpu.h"
#include "ops/cpu/simd.h"
#include "ops/ops.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace kapitsa::ops::cpu {
namespace {

// Channels [c0, c0 + kW) of every row (x, y, window rows have stride C). KK > 0 fixes K at compile
// time (the models' K = 4), so the window history lives in registers.
template <int64_t KK>
void conv_block_simd(const float* x, const float* w, const float* bias, float* window, bool silu, float* y,
                     int64_t T, int64_t C, int64_t K_runtime, int64_t c0) {
  using namespace simd;
  const int64_t K = KK > 0 ? KK : K_runtime;
  vf wv[kMaxConvWidth], hist[kMaxConvWidth];  // plain arrays: std::array would drop the vector alignment attribute
  alignas(64) float tmp[kW];
  for (int64_t j = 0; j < K; ++j) {
    for (int i = 0; i < kW; ++i) tmp[i] = w[(c0 + i) * K + j];
    wv[j] = load(tmp);
  }
  for (int64_t j = 0; j + 1 < K; ++j) hist[j] = load(window + j * C + c0);
  const vf b = bias ? load(bias + c0) : zero();
  for (int64_t t = 0; t < T; ++t) {
    const vf xt = load(x + t * C + c0);
    vf acc = simd::fma(wv[K - 1], xt, b);
    for (int64_t j = 0; j + 1 < K; ++j) acc = simd::fma(wv[j], hist[j], acc);
    for (int64_t j = 0; j + 2 < K; ++j) hist[j] = hist[j + 1];
    if (K > 1) hist[K - 2] = xt;
    store(y + t * C + c0, silu ? simd::silu(acc) : acc);
  }
  for (int64_t j = 0; j + 1 < K; ++j) store(window + j * C + c0, hist[j]);
}

void conv_channel_scalar(const float* x, const float* w, const float* bias, float* window, bool silu, float* y,
                         int64_t T, int64_t C, int64_t K, int64_t c) {
  std::array<float, kMaxConvWidth> hist{};
  for (int64_t j = 0; j + 1 < K; ++j) hist[static_cast<size_t>(j)] = window[j * C + c];
  for (int64_t t = 0; t < T; ++t) {
    const float xt = x[t * C + c];
    float acc = std::fma(w[c * K + K - 1], xt, bias ? bias[c] : 0.0f);
    for (int64_t j = 0; j + 1 < K; ++j) acc = std::fma(w[c * K + j], hist[static_cast<size_t>(j)], acc);
    for (int64_t j = 0; j + 2 < K; ++j) hist[static_cast<size_t>(j)] = hist[static_cast<size_t>(j + 1)];
    if (K > 1) hist[static_cast<size_t>(K - 2)] = xt;
    y[t * C + c] = silu ? acc / (1.0f + std::exp(-acc)) : acc;
  }
  for (int64_t j = 0; j + 1 < K; ++j) window[j * C + c] = hist[static_cast<size_t>(j)];
}

}  // namespace

// x, y: [T, C];  w: [C, K] f32;  bias: [C] f32 or empty;  window: [K-1, C] f32, in/out.
void conv1d_causal(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& window, bool silu,
                   const Tensor& y) {
  const int64_t C = w.dim(0), K = w.dim(1);
  const int64_t T = C == 0 ? 0 : x.numel() / C;
  const float *px = x.f32(), *pw = w.f32(), *pb = bias.empty() ? nullptr : bias.f32();
  float* py = y.f32();
  float* pwin = K > 1 ? window.f32() : nullptr;
  const int64_t n_vec = C / simd::kW;
  const int64_t n_blocks = n_vec + (C % simd::kW ? 1 : 0);  // last block: the scalar tail
  const size_t grain = static_cast<size_t>(std::max<int64_t>(1, 16384 / (std::max<int64_t>(T, 1) * simd::kW)));
  parallel_for(static_cast<size_t>(n_blocks), grain, [&](size_t begin, size_t end) {
    for (size_t blk = begin; blk < end; ++blk) {
      const int64_t c0 = static_cast<int64_t>(blk) * simd::kW;
      if (static_cast<int64_t>(blk) < n_vec) {
        if (K == 4)
          conv_block_simd<4>(px, pw, pb, pwin, silu, py, T, C, K, c0);
        else
          conv_block_simd<0>(px, pw, pb, pwin, silu, py, T, C, K, c0);
      }
      else
        for (int64_t c = c0; c < C; ++c) conv_channel_scalar(px, pw, pb, pwin, silu, py, T, C, K, c);
    }
  });
}

}  // namespace kapitsa::ops::cpu
