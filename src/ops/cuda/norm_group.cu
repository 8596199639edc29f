// Kernel of the gated group RMSNorm, gate first (Mamba-2 output norm): one block per (row, group);
// u = x·silu(z) is kept in registers (a thread's first values) or recomputed in the second pass, never
// stored, so y may alias x (each thread reads its elements before writing them, and the block sum
// completes before any write).
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ float gated(float x, float z) { return x * (z / (1.0f + expf(-z))); }

// Each thread's first kPer values of u (elements threadIdx.x + i·kThreads) are loaded at once and kept in
// registers (a loop waiting on memory once per element took 6.3 µs a Mamba-2 layer of Nemotron-3-Nano's
// decode on an H100, groups of 512); a group longer than kPer · kThreads recomputes the rest in a loop.
// Each thread sums its elements in index order whatever kPer: the same bits.
template <int kPer>
__global__ void rms_norm_group_gated_kernel(const float* x, const float* z, const float* w, int64_t group_size,
                                            float eps, float* y, int64_t D) {
  __shared__ float shared[32];
  pdl_trigger();
  pdl_wait();
  const int64_t row = blockIdx.y, g0 = blockIdx.x * group_size;
  const float* xr = x + row * D + g0;
  const float* zr = z + row * D + g0;
  constexpr int64_t kInRegisters = int64_t{kPer} * kThreads;
  float u[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int64_t d = threadIdx.x + int64_t{i} * kThreads;
    u[i] = d < group_size ? gated(xr[d], zr[d]) : 0.0f;
  }
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) ss += u[i] * u[i];
  for (int64_t d = threadIdx.x + kInRegisters; d < group_size; d += kThreads) {
    const float v = gated(xr[d], zr[d]);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, shared) / static_cast<float>(group_size) + eps);
  float* yr = y + row * D + g0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int64_t d = threadIdx.x + int64_t{i} * kThreads;
    if (d < group_size) yr[d] = u[i] * inv * w[g0 + d];
  }
  for (int64_t d = threadIdx.x + kInRegisters; d < group_size; d += kThreads) yr[d] = gated(xr[d], zr[d]) * inv * w[g0 + d];
}

}  // namespace

void rms_norm_group_gated(const float* x, const float* z, const float* w, int64_t group_size, float eps, float* y,
                          int64_t R, int64_t D, cudaStream_t s) {
  if (R == 0 || D == 0) return;
  const unsigned groups = static_cast<unsigned>(D / group_size);
  for (int64_t r0 = 0; r0 < R; r0 += 65535) {  // gridDim.y is at most 65535
    const int64_t n = R - r0 < 65535 ? R - r0 : 65535;
    const dim3 grid(groups, static_cast<unsigned>(n));
    if (group_size <= 4 * kThreads)
      launch(rms_norm_group_gated_kernel<4>, grid, kThreads, s, x + r0 * D, z + r0 * D, w, group_size, eps, y + r0 * D, D);
    else
      launch(rms_norm_group_gated_kernel<8>, grid, kThreads, s, x + r0 * D, z + r0 * D, w, group_size, eps, y + r0 * D, D);
  }
}

}  // namespace kapitsa::ops::cuda::kernels
