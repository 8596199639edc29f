// CPU causal depthwise conv1d with a carried window. Vectorised across channels: each task owns a
// block of channels and walks time once, keeping the last K-1 inputs in registers (so y may even
// alias x), and finally stores them as the new window. Bit-identical windows to ops/ref.
#include "base/thread_pool.h"
#include "ops/cpu/level.h"
#include "ops/cpu/simd.h"
#include "ops/ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <span>
#include <vector>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {
namespace {

// One sequence of a call: x, y rows and its window; after token t ≥ ckpt_from the window is also stored
// into ckpt[t - ckpt_from] (each [K-1, C]).
struct ConvSeq {
  const float* x;
  float* y;
  float* window;
  int64_t T;
  int64_t ckpt_from = INT64_MAX;
  float* const* ckpt = nullptr;
};

// Channels [c0, c0 + kW) of every row (x, y, window rows have stride C). KK > 0 fixes K at compile
// time (the models' K = 4), so the window history lives in registers.
template <int64_t KK>
void conv_block_simd(const ConvSeq& sq, const float* w, const float* bias, bool silu, int64_t C, int64_t K_runtime,
                     int64_t c0) {
  using namespace simd;
  const float* x = sq.x;
  float *y = sq.y, *window = sq.window;
  const int64_t T = sq.T;
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
    if (t >= sq.ckpt_from)
      for (int64_t j = 0; j + 1 < K; ++j) store(sq.ckpt[t - sq.ckpt_from] + j * C + c0, hist[j]);
  }
  for (int64_t j = 0; j + 1 < K; ++j) store(window + j * C + c0, hist[j]);
}

void conv_channel_scalar(const ConvSeq& sq, const float* w, const float* bias, bool silu, int64_t C, int64_t K,
                         int64_t c) {
  const float* x = sq.x;
  float *y = sq.y, *window = sq.window;
  const int64_t T = sq.T;
  std::array<float, kMaxConvWidth> hist{};
  for (int64_t j = 0; j + 1 < K; ++j) hist[static_cast<size_t>(j)] = window[j * C + c];
  for (int64_t t = 0; t < T; ++t) {
    const float xt = x[t * C + c];
    float acc = std::fma(w[c * K + K - 1], xt, bias ? bias[c] : 0.0f);
    for (int64_t j = 0; j + 1 < K; ++j) acc = std::fma(w[c * K + j], hist[static_cast<size_t>(j)], acc);
    for (int64_t j = 0; j + 2 < K; ++j) hist[static_cast<size_t>(j)] = hist[static_cast<size_t>(j + 1)];
    if (K > 1) hist[static_cast<size_t>(K - 2)] = xt;
    y[t * C + c] = silu ? acc / (1.0f + std::exp(-acc)) : acc;
    if (t >= sq.ckpt_from)
      for (int64_t j = 0; j + 1 < K; ++j) sq.ckpt[t - sq.ckpt_from][j * C + c] = hist[static_cast<size_t>(j)];
  }
  for (int64_t j = 0; j + 1 < K; ++j) window[j * C + c] = hist[static_cast<size_t>(j)];
}

// Every (sequence, block of channels) task in one parallel loop.
void run_conv(std::span<const ConvSeq> seqs, const Tensor& w, const Tensor& bias, bool silu) {
  const int64_t C = w.dim(0), K = w.dim(1);
  const float *pw = w.f32(), *pb = bias.empty() ? nullptr : bias.f32();
  const int64_t n_vec = C / simd::kW;
  const int64_t n_blocks = n_vec + (C % simd::kW ? 1 : 0);  // last block: the scalar tail
  int64_t max_t = 1;
  for (const ConvSeq& sq : seqs) max_t = std::max(max_t, sq.T);
  const size_t grain = static_cast<size_t>(std::max<int64_t>(1, 16384 / (max_t * simd::kW)));
  parallel_for(static_cast<size_t>(n_blocks) * seqs.size(), grain, [&](size_t begin, size_t end) {
    for (size_t task = begin; task < end; ++task) {
      const ConvSeq& sq = seqs[task / static_cast<size_t>(n_blocks)];
      const int64_t blk = static_cast<int64_t>(task % static_cast<size_t>(n_blocks)), c0 = blk * simd::kW;
      if (blk < n_vec) {
        if (K == 4)
          conv_block_simd<4>(sq, pw, pb, silu, C, K, c0);
        else
          conv_block_simd<0>(sq, pw, pb, silu, C, K, c0);
      } else {
        for (int64_t c = c0; c < C; ++c) conv_channel_scalar(sq, pw, pb, silu, C, K, c);
      }
    }
  });
}

}  // namespace

// x, y: [T, C];  w: [C, K] f32;  bias: [C] f32 or empty;  window: [K-1, C] f32, in/out.
void conv1d_causal(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& window, bool silu,
                   const Tensor& y) {
  const int64_t C = w.dim(0), K = w.dim(1);
  const ConvSeq seq{x.f32(), y.f32(), K > 1 ? window.f32() : nullptr, C == 0 ? 0 : x.numel() / C};
  run_conv({&seq, 1}, w, bias, silu);
}

// x, y: [T, C];  windows: [n_slots, K-1, C].
void conv1d_causal_varlen(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& windows, bool silu,
                          const SeqBatch& batch, const Tensor& y) {
  const int64_t C = w.dim(0), K = w.dim(1), window_size = (K - 1) * C;
  std::vector<float*> ckpt(batch.ckpt_slots.size());
  for (size_t c = 0; c < ckpt.size(); ++c) ckpt[c] = windows.f32() + batch.ckpt_slots[c] * window_size;
  std::vector<ConvSeq> seqs;
  for (int64_t i = 0; i < batch.n_seqs(); ++i) {
    const int64_t r0 = batch.row_offsets[size_t(i)];
    ConvSeq sq{x.f32() + r0 * C, y.f32() + r0 * C, windows.f32() + batch.state_slots[size_t(i)] * window_size,
               batch.rows(i)};
    if (batch.n_ckpts(i) > 0) {
      sq.ckpt_from = sq.T - batch.n_ckpts(i);
      sq.ckpt = ckpt.data() + batch.ckpt_offsets[size_t(i)];
    }
    seqs.push_back(sq);
  }
  run_conv(seqs, w, bias, silu);
}

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
