// Kernel of matmul for a few tokens (decode): a GEMV reading the weight once for up to kGemvMaxTokens
// rows of x. One warp per output feature n: lanes stride over K (coalesced weight reads), accumulate
// in f32 for every token, then a warp sum. Larger T goes to cuBLAS (matmul.cpp).
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kWarps = 8;

template <typename W>
__device__ __forceinline__ float widen(W v) {
  if constexpr (std::is_same_v<W, __half>) return __half2float(v);
  else if constexpr (std::is_same_v<W, __nv_bfloat16>) return __bfloat162float(v);
  else return v;
}

template <typename W>
__global__ void gemv_kernel(const float* x, const W* w, float* y, int64_t T, int64_t K, int64_t N) {
  const int lane = threadIdx.x & 31;
  const int64_t n = blockIdx.x * int64_t{kWarps} + (threadIdx.x >> 5);
  if (n >= N) return;
  const W* wn = w + n * K;
  float acc[kGemvMaxTokens] = {};
  for (int64_t k = lane; k < K; k += 32) {
    const float wk = widen(wn[k]);
#pragma unroll
    for (int t = 0; t < kGemvMaxTokens; ++t)
      if (t < T) acc[t] += x[t * K + k] * wk;
  }
#pragma unroll
  for (int t = 0; t < kGemvMaxTokens; ++t) {
    if (t < T) {
      const float sum = warp_sum(acc[t]);
      if (lane == 0) y[t * N + n] = sum;
    }
  }
}

}  // namespace

void gemv(const float* x, const void* w, ElemType type, float* y, int64_t T, int64_t K, int64_t N, cudaStream_t s) {
  if (T == 0 || N == 0) return;
  const unsigned blocks = static_cast<unsigned>((N + kWarps - 1) / kWarps);
  switch (type) {
    case ElemType::f16: gemv_kernel<<<blocks, kWarps * 32, 0, s>>>(x, static_cast<const __half*>(w), y, T, K, N); break;
    case ElemType::bf16:
      gemv_kernel<<<blocks, kWarps * 32, 0, s>>>(x, static_cast<const __nv_bfloat16*>(w), y, T, K, N);
      break;
    default: gemv_kernel<<<blocks, kWarps * 32, 0, s>>>(x, static_cast<const float*>(w), y, T, K, N); break;
  }
}

}  // namespace kapitsa::ops::cuda::kernels
