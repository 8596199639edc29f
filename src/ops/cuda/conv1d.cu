// Kernel of the causal depthwise conv1d with a carried window: one thread per channel walks the tokens
// in order, holding the last K-1 inputs in registers (K ≤ kConvMaxWidth, unrolled so the array stays
// in registers). Each thread reads x[t, c] before writing y[t, c], so y may alias x.
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxHistory = static_cast<int>(kConvMaxWidth) - 1;

__global__ void conv1d_causal_kernel(const float* x, const float* w, const float* bias, float* window, bool silu,
                                     float* y, int64_t T, int64_t C, int K) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  float hist[kMaxHistory > 0 ? kMaxHistory : 1] = {};  // hist[0] is the oldest input
  float wc[kConvMaxWidth] = {};
#pragma unroll
  for (int j = 0; j < kConvMaxWidth; ++j)
    if (j < K) wc[j] = w[c * K + j];
#pragma unroll
  for (int j = 0; j < kMaxHistory; ++j)
    if (j < K - 1) hist[j] = window[j * C + c];
  const float b = bias != nullptr ? bias[c] : 0.0f;
  for (int64_t t = 0; t < T; ++t) {
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
  }
#pragma unroll
  for (int j = 0; j < kMaxHistory; ++j)
    if (j < K - 1) window[j * C + c] = hist[j];
}

}  // namespace

void conv1d_causal(const float* x, const float* w, const float* bias, float* window, bool silu, float* y, int64_t T,
                   int64_t C, int64_t K, cudaStream_t s) {
  if (C == 0) return;
  conv1d_causal_kernel<<<static_cast<unsigned>((C + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      x, w, bias, window, silu, y, T, C, static_cast<int>(K));
}

}  // namespace kapitsa::ops::cuda::kernels
