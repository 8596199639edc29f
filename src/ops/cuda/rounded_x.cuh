// x rounded to int16 for the 4-bit affine GEMV (affine_gemv.cu, "int16 kernel"): the layout of the
// rounding and the rounding of one block of 64 inputs by one warp. Shared by quantize_x_int16 and by
// the RMSNorm kernels that write the rounding of their output beside it (rounded_x.h), so that both give
// the same bits.
// Layout of the rounding of x: [T, K] (T·K/64 blocks of 64 in row-major order), in a scratch of
// affine_int16_scratch_bytes(T, K): xq [T·K] int16 in slot order, then sx [T·K/64] (each block's scale),
// then xsum [T·K/32] (exact f32 sums of each 32 inputs).
#pragma once

#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {

constexpr int kActBlock = 64;        // inputs per x scale
constexpr float kActMax = 32767.0f;  // |x̂| ≤ kActMax

struct RoundedRows {
  int16_t* xq;
  float* sx;
  float* xsum;
};

__host__ __device__ inline RoundedRows rounded_rows(void* scratch, int64_t numel) {
  RoundedRows r;
  r.xq = static_cast<int16_t*>(scratch);
  r.sx = reinterpret_cast<float*>(r.xq + numel);
  r.xsum = r.sx + numel / kActBlock;
  return r;
}

// Where input j (0…7) of a word sits among the word's 8 int16 slots: [0, 2, 4, 6, 1, 3, 5, 7], so the
// low nibbles of a word (codes 0, 2, 4, 6 as bytes) meet slots 0–3 and the high nibbles slots 4–7.
__device__ __forceinline__ int slot_of(int j) { return (j & 1) * 4 + (j >> 1); }

// Block `blk` of 64 inputs, lane l of a warp holding inputs 2l and 2l+1 (v): one scale max|x|/32767,
// x̂ = rint(x / scale), and the two sums of 32.
__device__ __forceinline__ void round_block64(float2 v, int lane, int64_t blk, const RoundedRows& r) {
  float amax = fmaxf(fabsf(v.x), fabsf(v.y)), sum = v.x + v.y;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);  // within each half-warp
  const float inv = amax > 0.0f ? kActMax / amax : 0.0f;
  if (lane == 0) r.sx[blk] = amax / kActMax;
  if ((lane & 15) == 0) r.xsum[2 * blk + (lane >> 4)] = sum;
  const int i = 2 * lane, word = i & ~7;
  int16_t* out = r.xq + blk * kActBlock;
  out[word + slot_of(i & 7)] = static_cast<int16_t>(fminf(fmaxf(rintf(v.x * inv), -kActMax), kActMax));
  out[word + slot_of((i & 7) + 1)] = static_cast<int16_t>(fminf(fmaxf(rintf(v.y * inv), -kActMax), kActMax));
}

}  // namespace kapitsa::ops::cuda::kernels
