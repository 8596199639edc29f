// Kernels of MLX affine dequantization (see kernels.h): each value's code from its one or two u32 words
// (3/5/6-bit codes may straddle a word boundary) and fma(scale, q, bias) with its group's scale and bias —
// the ref's arithmetic, so f32 rows come out bit-equal to ref's; written as f32 (one value a thread) or as
// a bf16 hi/lo pair (8 values a thread; DequantOut: prefill's tensor-core GEMMs, matmul.cpp).
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

template <typename SB>
__global__ void dequantize_affine_kernel(AffineArgs a, const int32_t* rows, float* out, int64_t R) {
  const int64_t r = blockIdx.y;
  const int64_t n = rows != nullptr ? rows[r] : r, groups = a.K / a.group_size;
  const uint32_t* row = a.words + n * a.words_per_row;
  const uint32_t mask = (1u << a.bits) - 1u;
  const SB* scales = static_cast<const SB*>(a.scales) + n * groups;
  const SB* biases = static_cast<const SB*>(a.biases) + n * groups;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < a.K; k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t at = k * a.bits, word = at / 32;
    const int shift = static_cast<int>(at % 32);
    uint32_t q = row[word] >> shift;
    if (shift + a.bits > 32) q |= row[word + 1] << (32 - shift);
    const int64_t g = k / a.group_size;
    out[r * a.K + k] = fmaf(to_float(scales[g]), static_cast<float>(q & mask), to_float(biases[g]));
  }
}

// The same rows as bf16 hi/lo pairs (DequantOut::bf16_pair; group sizes multiples of 8): a thread takes
// 8 consecutive values of one group and writes each plane's 8 as one 16-byte store. One value a thread
// (2-byte stores) ran the 4B shape's 4-bit prefill at 6350 tok/s on the H200 against 7890 for GGUF
// blocks (session 21).
template <typename SB>
__global__ void dequantize_affine_pair_kernel(AffineArgs a, const int32_t* rows, __nv_bfloat16* out, int64_t R,
                                              int64_t plane) {
  const int64_t r = blockIdx.y;
  const int64_t n = rows != nullptr ? rows[r] : r, groups = a.K / a.group_size;
  const uint32_t* row = a.words + n * a.words_per_row;
  const uint32_t mask = (1u << a.bits) - 1u;
  for (int64_t k0 = 8 * (blockIdx.x * int64_t{blockDim.x} + threadIdx.x); k0 < a.K; k0 += 8 * int64_t{gridDim.x} * blockDim.x) {
    const int64_t g = k0 / a.group_size;
    const float scale = to_float(static_cast<const SB*>(a.scales)[n * groups + g]);
    const float bias = to_float(static_cast<const SB*>(a.biases)[n * groups + g]);
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int64_t at = (k0 + j) * a.bits, word = at / 32;
      const int shift = static_cast<int>(at % 32);
      uint32_t q = row[word] >> shift;
      if (shift + a.bits > 32) q |= row[word + 1] << (32 - shift);
      v[j] = fmaf(scale, static_cast<float>(q & mask), bias);
    }
    uint4 hi, lo;
    bf16_pair8(v, hi, lo);
    const int64_t at = r * a.K + k0;
    *reinterpret_cast<uint4*>(out + at) = hi;
    *reinterpret_cast<uint4*>(out + plane + at) = lo;
  }
}

template <DequantOut Mode>
void dequantize_affine_as(const AffineArgs& a, const int32_t* rows, void* out, int64_t R, cudaStream_t s) {
  constexpr int kThreads = 256;
  const size_t value_bytes = Mode == DequantOut::f32 ? 4 : 2;
  const int64_t per_thread = Mode == DequantOut::f32 ? 1 : 8;
  const unsigned x_blocks = static_cast<unsigned>((a.K / per_thread + kThreads - 1) / kThreads);
  for (int64_t r0 = 0; r0 < R; r0 += 65535) {  // gridDim.y is at most 65535
    const unsigned n = static_cast<unsigned>(R - r0 < 65535 ? R - r0 : 65535);
    const int32_t* part_rows = rows != nullptr ? rows + r0 : nullptr;
    const AffineArgs part = rows == nullptr ? affine_rows_from(a, r0) : a;  // rows r0… of the weight itself
    void* part_out = static_cast<char*>(out) + r0 * a.K * value_bytes;
    const int64_t plane = R * a.K;  // a pair's lo values, from part_out's first value
    const dim3 grid(x_blocks, n);
    const auto go = [&](auto sb) {
      using SB = decltype(sb);
      if constexpr (Mode == DequantOut::f32)
        dequantize_affine_kernel<SB><<<grid, kThreads, 0, s>>>(part, part_rows, static_cast<float*>(part_out), n);
      else
        dequantize_affine_pair_kernel<SB>
            <<<grid, kThreads, 0, s>>>(part, part_rows, static_cast<__nv_bfloat16*>(part_out), n, plane);
    };
    switch (a.sb_type) {
      case ElemType::f16: go(__half{}); break;
      case ElemType::bf16: go(__nv_bfloat16{}); break;
      default: go(float{}); break;
    }
  }
}

}  // namespace

void dequantize_affine(const AffineArgs& a, const int32_t* rows, void* out, DequantOut mode, int64_t R, cudaStream_t s) {
  if (R == 0 || a.K == 0) return;
  if (mode == DequantOut::bf16_pair) dequantize_affine_as<DequantOut::bf16_pair>(a, rows, out, R, s);
  else dequantize_affine_as<DequantOut::f32>(a, rows, out, R, s);
}

}  // namespace kapitsa::ops::cuda::kernels
