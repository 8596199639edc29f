// Kernel of argmax_rows: a block of 1024 threads a row, each scanning a strided share of the columns,
// then (value, index) pairs reduced by warps and across the block, the larger value or, equal, the
// smaller index winning: the first maximum, as the reference scan finds it.
#include "ops/cuda/kernel_util.cuh"

#include <climits>
#include <cmath>

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kArgmaxThreads = 1024;

struct Best {
  float value;
  int index;  // INT_MAX: no value above -inf seen
};

__device__ __forceinline__ Best better(Best a, Best b) {
  return b.value > a.value || (b.value == a.value && b.index < a.index) ? b : a;
}

__device__ __forceinline__ Best warp_best(Best v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = better(v, Best{__shfl_xor_sync(0xffffffffu, v.value, o), __shfl_xor_sync(0xffffffffu, v.index, o)});
  return v;
}

__global__ void __launch_bounds__(kArgmaxThreads) argmax_rows_kernel(const float* x, int64_t V, int64_t columns, int32_t* out) {
  pdl_trigger();
  pdl_wait();
  __shared__ Best warps[kArgmaxThreads / 32];
  const float* row = x + blockIdx.x * V;
  // Strict > from -inf: a NaN is never taken, nor a -inf (when nothing is above -inf every value is -inf
  // or NaN, and the answer is 0 below).
  Best best{-INFINITY, INT_MAX};
  for (int64_t i = threadIdx.x; i < columns; i += kArgmaxThreads) {
    const float v = row[i];
    if (v > best.value) best = Best{v, static_cast<int>(i)};
  }
  best = warp_best(best);
  if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = best;
  __syncthreads();
  if (threadIdx.x < 32) {
    best = warp_best(warps[threadIdx.x]);
    if (threadIdx.x == 0) out[blockIdx.x] = best.index == INT_MAX || isnan(row[0]) ? 0 : best.index;
  }
}

}  // namespace

void argmax_rows(const float* x, int64_t V, int64_t columns, int32_t* out, int64_t R, cudaStream_t s) {
  if (R > 0) launch(argmax_rows_kernel, static_cast<unsigned>(R), kArgmaxThreads, s, x, V, columns, out);
}

}  // namespace kapitsa::ops::cuda::kernels
