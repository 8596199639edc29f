// Kernels of the row normalisations (RMSNorm, gated RMSNorm, L2 norm): one block per row, the sum of
// squares reduced in f32 over the block, then each element scaled. A thread reads an element before it
// writes the same element, and the block finishes the sum before any write, so y may alias x.
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kThreads = 256;

__device__ float row_sum_of_squares(const float* x, int64_t D, float* shared) {
  float ss = 0.0f;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) ss += x[d] * x[d];
  return block_sum(ss, shared);
}

__global__ void rms_norm_kernel(const float* x, const float* w, float eps, float weight_offset, float* y, int64_t D) {
  __shared__ float shared[32];
  const float* xr = x + blockIdx.x * D;
  float* yr = y + blockIdx.x * D;
  const float inv = rsqrtf(row_sum_of_squares(xr, D, shared) / static_cast<float>(D) + eps);
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) yr[d] = xr[d] * inv * (weight_offset + w[d]);
}

__global__ void rms_norm_gated_kernel(const float* x, const float* z, const float* w, float eps, float* y, int64_t D) {
  __shared__ float shared[32];
  const float* xr = x + blockIdx.x * D;
  const float* zr = z + blockIdx.x * D;
  float* yr = y + blockIdx.x * D;
  const float inv = rsqrtf(row_sum_of_squares(xr, D, shared) / static_cast<float>(D) + eps);
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    const float zz = zr[d];
    yr[d] = xr[d] * inv * w[d] * (zz / (1.0f + expf(-zz)));
  }
}

__global__ void l2_norm_kernel(const float* x, float eps, float scale, float* y, int64_t D) {
  __shared__ float shared[32];
  const float* xr = x + blockIdx.x * D;
  float* yr = y + blockIdx.x * D;
  const float f = scale * rsqrtf(row_sum_of_squares(xr, D, shared) + eps);
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) yr[d] = xr[d] * f;
}

}  // namespace

// Rows go to gridDim.x (up to 2^31 - 1).
void rms_norm(const float* x, const float* w, float eps, float weight_offset, float* y, int64_t R, int64_t D,
              cudaStream_t s) {
  if (R > 0 && D > 0) rms_norm_kernel<<<static_cast<unsigned>(R), kThreads, 0, s>>>(x, w, eps, weight_offset, y, D);
}
void rms_norm_gated(const float* x, const float* z, const float* w, float eps, float* y, int64_t R, int64_t D,
                    cudaStream_t s) {
  if (R > 0 && D > 0) rms_norm_gated_kernel<<<static_cast<unsigned>(R), kThreads, 0, s>>>(x, z, w, eps, y, D);
}
void l2_norm(const float* x, float eps, float scale, float* y, int64_t R, int64_t D, cudaStream_t s) {
  if (R > 0 && D > 0) l2_norm_kernel<<<static_cast<unsigned>(R), kThreads, 0, s>>>(x, eps, scale, y, D);
}

}  // namespace kapitsa::ops::cuda::kernels
