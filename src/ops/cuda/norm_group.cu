// Kernel of the gated group RMSNorm, gate first (Mamba-2 output norm): one block per (row, group);
// u = x·silu(z) is recomputed in the second pass rather than stored, so y may alias x (each thread
// reads its elements before writing them, and the block sum completes before any write).
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ float gated(float x, float z) { return x * (z / (1.0f + expf(-z))); }

__global__ void rms_norm_group_gated_kernel(const float* x, const float* z, const float* w, int64_t group_size,
                                            float eps, float* y, int64_t D) {
  __shared__ float shared[32];
  pdl_trigger();
  pdl_wait();
  const int64_t row = blockIdx.y, g0 = blockIdx.x * group_size;
  const float* xr = x + row * D + g0;
  const float* zr = z + row * D + g0;
  float ss = 0.0f;
  for (int64_t d = threadIdx.x; d < group_size; d += blockDim.x) {
    const float u = gated(xr[d], zr[d]);
    ss += u * u;
  }
  const float inv = rsqrtf(block_sum(ss, shared) / static_cast<float>(group_size) + eps);
  float* yr = y + row * D + g0;
  for (int64_t d = threadIdx.x; d < group_size; d += blockDim.x) yr[d] = gated(xr[d], zr[d]) * inv * w[g0 + d];
}

}  // namespace

void rms_norm_group_gated(const float* x, const float* z, const float* w, int64_t group_size, float eps, float* y,
                          int64_t R, int64_t D, cudaStream_t s) {
  if (R == 0 || D == 0) return;
  const unsigned groups = static_cast<unsigned>(D / group_size);
  for (int64_t r0 = 0; r0 < R; r0 += 65535) {  // gridDim.y is at most 65535
    const int64_t n = R - r0 < 65535 ? R - r0 : 65535;
    launch(rms_norm_group_gated_kernel, dim3(groups, static_cast<unsigned>(n)), kThreads, s, x + r0 * D, z + r0 * D, w,
           group_size, eps, y + r0 * D, D);
  }
}

}  // namespace kapitsa::ops::cuda::kernels
