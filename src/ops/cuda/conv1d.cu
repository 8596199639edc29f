// Kernel of the causal depthwise conv1d with a carried window, for one sequence or a batch of them
// (Seqs): one thread per (channel, sequence) walks the sequence's tokens in order, holding the last K-1
// inputs in registers (K ≤ kConvMaxWidth, unrolled so the array stays in registers), and after each
// checkpointed token also stores them into its checkpoint slot. Each thread reads x[t, c] before
// writing y[t, c], so y may alias x.
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxHistory = static_cast<int>(kConvMaxWidth) - 1;

// hist (K-1 values, oldest first) → window column c of slot `slot`.
__device__ __forceinline__ void store_window(const float* hist, float* windows, int64_t slot, int64_t C, int64_t c,
                                             int K) {
  float* window = windows + slot * (K - 1) * C;
#pragma unroll
  for (int j = 0; j < kMaxHistory; ++j)
    if (j < K - 1) window[j * C + c] = hist[j];
}

__global__ void conv1d_causal_kernel(const float* x, const float* w, const float* bias, float* windows, bool silu,
                                     float* y, int64_t T, int64_t C, int K, Seqs seqs) {
  pdl_trigger();
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x, i = blockIdx.y;
  if (c >= C) return;  // writes nothing
  float hist[kMaxHistory > 0 ? kMaxHistory : 1] = {};  // hist[0] is the oldest input
  float wc[kConvMaxWidth] = {};
#pragma unroll
  for (int j = 0; j < kConvMaxWidth; ++j)
    if (j < K) wc[j] = w[c * K + j];  // weights: read before pdl_wait()
  const float b = bias != nullptr ? bias[c] : 0.0f;
  pdl_wait();
  const SeqRows sq = seq_rows(seqs, i, T);
  const float* window = windows != nullptr ? windows + sq.slot * (K - 1) * C : nullptr;
#pragma unroll
  for (int j = 0; j < kMaxHistory; ++j)
    if (j < K - 1) hist[j] = window[j * C + c];
  for (int64_t t = sq.r0; t < sq.r1; ++t) {
    const float xt = x[t * C + c];
    float acc = b;
#pragma unroll
    for (int j = 0; j < kMaxHistory; ++j)
      if (j < K - 1) acc += wc[j] * hist[j];
#pragma unroll
    for (int j = 0; j < kConvMaxWidth; ++j)
      if (j == K - 1) acc += wc[j] * xt;
    if (silu) acc = acc / (1.0f + expf(-acc));
    y[t * C + c] = acc;
#pragma unroll
    for (int j = 0; j < kMaxHistory; ++j) {
      if (j < K - 2) hist[j] = hist[j + 1 < kMaxHistory ? j + 1 : j];
      else if (j == K - 2) hist[j] = xt;
    }
    if (t >= sq.ckpt_begin && K > 1) store_window(hist, windows, ckpt_slot(seqs, i, sq, t), C, c, K);
  }
  if (K > 1) store_window(hist, windows, sq.slot, C, c, K);
}

}  // namespace

void conv1d_causal(const float* x, const float* w, const float* bias, float* windows, bool silu, float* y, int64_t T,
                   int64_t C, int64_t K, const Seqs& seqs, cudaStream_t s) {
  if (C == 0 || seqs.n_seqs == 0) return;
  const dim3 grid(static_cast<unsigned>((C + kThreads - 1) / kThreads), static_cast<unsigned>(seqs.n_seqs));
  launch(conv1d_causal_kernel, grid, kThreads, s, x, w, bias, windows, silu, y, T, C, static_cast<int>(K), seqs);
}

}  // namespace kapitsa::ops::cuda::kernels
