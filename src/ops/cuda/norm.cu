// Kernels of the row normalisations (RMSNorm, residual add + RMSNorm, gated RMSNorm, L2 norm): one block per row, the sum of
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

// RMSNorm of rows up to kRowRegs · 1024 wide, with x ← x + delta first when Add: each thread holds its
// kRowRegs elements (strided by blockDim) in registers, so all its loads are issued at once and the
// row is read once (a decode step's norm is one row: a loop of dependent loads made it latency-bound,
// 7 µs for 2560 floats). Each thread writes only elements it read itself, so y may alias x.
constexpr int kRowRegs = 8;
template <bool Add>
__global__ void rms_norm_regs_kernel(float* x, const float* delta, const float* w, float eps, float weight_offset,
                                     float* y, int64_t D) {
  __shared__ float shared[32];
  pdl_trigger();
  float* xr = x + blockIdx.x * D;
  float* yr = y + blockIdx.x * D;
  float v[kRowRegs], wv[kRowRegs];  // w too is loaded before any store (y may alias it for all the compiler knows)
#pragma unroll
  for (int i = 0; i < kRowRegs; ++i) {
    const int64_t d = threadIdx.x + int64_t{i} * blockDim.x;
    wv[i] = d < D ? w[d] : 0.0f;  // a weight: read before pdl_wait()
  }
  pdl_wait();
#pragma unroll
  for (int i = 0; i < kRowRegs; ++i) {
    const int64_t d = threadIdx.x + int64_t{i} * blockDim.x;
    v[i] = d < D ? xr[d] : 0.0f;
    if constexpr (Add) v[i] += d < D ? delta[blockIdx.x * D + d] : 0.0f;
  }
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kRowRegs; ++i) {
    const int64_t d = threadIdx.x + int64_t{i} * blockDim.x;
    if constexpr (Add) {
      if (d < D) xr[d] = v[i];
    }
    ss += v[i] * v[i];
  }
  const float inv = rsqrtf(block_sum(ss, shared) / static_cast<float>(D) + eps);
#pragma unroll
  for (int i = 0; i < kRowRegs; ++i) {
    const int64_t d = threadIdx.x + int64_t{i} * blockDim.x;
    if (d < D) yr[d] = v[i] * inv * (weight_offset + wv[i]);
  }
}

// Wider rows: a loop over the row, twice.
__global__ void rms_norm_kernel(const float* x, const float* w, float eps, float weight_offset, float* y, int64_t D) {
  pdl_trigger();
  pdl_wait();
  __shared__ float shared[32];
  const float* xr = x + blockIdx.x * D;
  float* yr = y + blockIdx.x * D;
  const float inv = rsqrtf(row_sum_of_squares(xr, D, shared) / static_cast<float>(D) + eps);
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) yr[d] = xr[d] * inv * (weight_offset + w[d]);
}

// x ← x + delta, then as rms_norm_kernel: each thread reads back only the sums it wrote itself.
__global__ void add_rms_norm_kernel(float* x, const float* delta, const float* w, float eps, float weight_offset,
                                    float* y, int64_t D) {
  pdl_trigger();
  pdl_wait();
  __shared__ float shared[32];
  float* xr = x + blockIdx.x * D;
  const float* dr = delta + blockIdx.x * D;
  float* yr = y + blockIdx.x * D;
  float ss = 0.0f;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    const float v = xr[d] + dr[d];
    xr[d] = v;
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, shared) / static_cast<float>(D) + eps);
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) yr[d] = xr[d] * inv * (weight_offset + w[d]);
}

// Threads for the register kernel: enough that kRowRegs per thread cover D (a multiple of 32), or 0
// when D is too wide for it.
int regs_threads(int64_t D) {
  const int64_t t = ((D + kRowRegs - 1) / kRowRegs + 31) / 32 * 32;
  return t <= 1024 ? static_cast<int>(t) : 0;
}

__global__ void rms_norm_gated_kernel(const float* x, const float* z, const float* w, float eps, float* y, int64_t D) {
  pdl_trigger();
  pdl_wait();
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
  pdl_trigger();
  pdl_wait();
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
  if (R <= 0 || D <= 0) return;
  if (const int threads = regs_threads(D))
    launch(rms_norm_regs_kernel<false>, static_cast<unsigned>(R), threads, s, const_cast<float*>(x), nullptr, w, eps,
           weight_offset, y, D);
  else launch(rms_norm_kernel, static_cast<unsigned>(R), kThreads, s, x, w, eps, weight_offset, y, D);
}
void add_rms_norm(float* x, const float* delta, const float* w, float eps, float weight_offset, float* y, int64_t R,
                  int64_t D, cudaStream_t s) {
  if (R <= 0 || D <= 0) return;
  if (const int threads = regs_threads(D))
    launch(rms_norm_regs_kernel<true>, static_cast<unsigned>(R), threads, s, x, delta, w, eps, weight_offset, y, D);
  else launch(add_rms_norm_kernel, static_cast<unsigned>(R), kThreads, s, x, delta, w, eps, weight_offset, y, D);
}
void rms_norm_gated(const float* x, const float* z, const float* w, float eps, float* y, int64_t R, int64_t D,
                    cudaStream_t s) {
  if (R > 0 && D > 0) launch(rms_norm_gated_kernel, static_cast<unsigned>(R), kThreads, s, x, z, w, eps, y, D);
}
void l2_norm(const float* x, float eps, float scale, float* y, int64_t R, int64_t D, cudaStream_t s) {
  if (R > 0 && D > 0) launch(l2_norm_kernel, static_cast<unsigned>(R), kThreads, s, x, eps, scale, y, D);
}

}  // namespace kapitsa::ops::cuda::kernels
