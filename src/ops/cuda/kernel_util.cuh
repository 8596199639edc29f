// Internal to ops/cuda's .cu files: reading f32/f16/bf16 elements as float, warp and block sums, grid
// sizing, and a sequence's rows and slots in a batch (Seqs). Device code only; no host headers of the project.
#pragma once

#include "ops/cuda/kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace kapitsa::ops::cuda::kernels {

__device__ __forceinline__ float load_as_float(const void* p, ElemType t, int64_t i) {
  switch (t) {
    case ElemType::f16: return __half2float(static_cast<const __half*>(p)[i]);
    case ElemType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Sequence i of a batch (kernels.h, Seqs): its rows [r0, r1), its state slot, and the first row after
// which the state is also checkpointed (r1 when there are no checkpoints).
struct SeqRows {
  int64_t r0, r1, slot, ckpt_begin;
};
__device__ __forceinline__ SeqRows seq_rows(const Seqs& s, int64_t i, int64_t T) {
  SeqRows v;
  v.r0 = s.row_offsets != nullptr ? s.row_offsets[i] : 0;
  v.r1 = s.row_offsets != nullptr ? s.row_offsets[i + 1] : T;
  v.slot = s.state_slots != nullptr ? s.state_slots[i] : 0;
  v.ckpt_begin = s.ckpt_offsets != nullptr ? v.r1 - (s.ckpt_offsets[i + 1] - s.ckpt_offsets[i]) : v.r1;
  return v;
}
// The checkpoint slot of the state after row t (t ≥ ckpt_begin) of sequence i.
__device__ __forceinline__ int64_t ckpt_slot(const Seqs& s, int64_t i, const SeqRows& v, int64_t t) {
  return s.ckpt_slots[s.ckpt_offsets[i] + (t - v.ckpt_begin)];
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum of v over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result.
// `shared` holds 32 floats. Contains barriers: every thread of the block must call it.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < n_warps ? shared[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + __expf(-x)); }

// Blocks of `threads` for a grid-stride loop over n elements (capped; the loop covers the rest).
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? (blocks > 0 ? blocks : 1) : 65535 * 8);
}

}  // namespace kapitsa::ops::cuda::kernels
