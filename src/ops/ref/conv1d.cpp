// Reference causal depthwise conv1d with a carried window of the last K-1 inputs (so a sequence can
// be fed in pieces). Builds the extended input x̃ = [window; x] explicitly, which also makes it safe
// against y aliasing x.
#include "ops/ref/ref.h"
#include "ops/ref/ref_util.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace kapitsa::ops::ref {

// x, y: [T, C];  w: [C, K] f32;  bias: [C] f32 or empty;  window: [K-1, C] f32, in/out.
void conv1d_causal(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& window, bool silu,
                   const Tensor& y) {
  const int64_t C = w.dim(0), K = w.dim(1);
  const int64_t T = detail::rows_of(x);
  const bool has_bias = !bias.empty();
  const int64_t L = K - 1 + T;
  std::vector<float> xt(static_cast<size_t>(L * C));
  if (K > 1) std::memcpy(xt.data(), window.data(), static_cast<size_t>((K - 1) * C) * sizeof(float));
  if (T > 0) std::memcpy(xt.data() + (K - 1) * C, x.data(), static_cast<size_t>(T * C) * sizeof(float));
  const float* pw = w.f32();
  float* py = y.f32();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) {
      double acc = has_bias ? bias.f32()[c] : 0.0;
      for (int64_t j = 0; j < K; ++j) acc += static_cast<double>(pw[c * K + j]) * xt[static_cast<size_t>((t + j) * C + c)];
      if (silu) acc = acc / (1.0 + std::exp(-acc));
      py[t * C + c] = static_cast<float>(acc);
    }
  if (K > 1)
    std::memcpy(window.data(), xt.data() + (L - (K - 1)) * C, static_cast<size_t>((K - 1) * C) * sizeof(float));
}

// x, y: [T, C];  windows: [n_slots, K-1, C].  Each sequence: one call up to its checkpoints, then one
// call per checkpointed token, copying the window after it.
void conv1d_causal_varlen(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& windows, bool silu,
                          const SeqBatch& batch, const Tensor& y) {
  for (int64_t i = 0; i < batch.n_seqs(); ++i) {
    const int64_t r0 = batch.row_offsets[size_t(i)], n = batch.n_ckpts(i), r1 = r0 + batch.rows(i) - n;
    const Tensor window = windows.index(batch.state_slots[size_t(i)]);
    conv1d_causal(x.rows(r0, r1), w, bias, window, silu, y.rows(r0, r1));
    for (int64_t j = 0; j < n; ++j) {
      conv1d_causal(x.rows(r1 + j, r1 + j + 1), w, bias, window, silu, y.rows(r1 + j, r1 + j + 1));
      detail::copy_bytes(window, windows.index(batch.ckpt_slot(i, j)));
    }
  }
}

}  // namespace kapitsa::ops::ref
