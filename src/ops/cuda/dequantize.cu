// Kernel of MLX affine dequantization (see kernels.h): one thread per output element reads its code's
// one or two u32 words (3/5/6-bit codes may straddle a word boundary), its group's scale and bias, and
// writes fma(scale, q, bias) in f32 — the ref's arithmetic, so rows come out bit-equal to ref's — or that
// value as a bf16 hi/lo pair (DequantOut: prefill's tensor-core GEMMs, matmul.cpp).
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

template <typename SB, DequantOut Mode>
__global__ void dequantize_affine_kernel(AffineArgs a, const int32_t* rows, void* out, int64_t R, int64_t plane) {
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
    put<Mode>(out, plane, r * a.K + k, fmaf(to_float(scales[g]), static_cast<float>(q & mask), to_float(biases[g])));
  }
}

template <DequantOut Mode>
void dequantize_affine_as(const AffineArgs& a, const int32_t* rows, void* out, int64_t R, cudaStream_t s) {
  constexpr int kThreads = 256;
  const size_t value_bytes = Mode == DequantOut::f32 ? 4 : 2;
  const unsigned x_blocks = static_cast<unsigned>((a.K + kThreads - 1) / kThreads);
  for (int64_t r0 = 0; r0 < R; r0 += 65535) {  // gridDim.y is at most 65535
    const unsigned n = static_cast<unsigned>(R - r0 < 65535 ? R - r0 : 65535);
    const int32_t* part_rows = rows != nullptr ? rows + r0 : nullptr;
    const AffineArgs part = rows == nullptr ? affine_rows_from(a, r0) : a;  // rows r0… of the weight itself
    void* part_out = static_cast<char*>(out) + r0 * a.K * value_bytes;
    const int64_t plane = R * a.K;  // a pair's lo values, from part_out's first value
    const dim3 grid(x_blocks, n);
    switch (a.sb_type) {
      case ElemType::f16:
        dequantize_affine_kernel<__half, Mode><<<grid, kThreads, 0, s>>>(part, part_rows, part_out, n, plane);
        break;
      case ElemType::bf16:
        dequantize_affine_kernel<__nv_bfloat16, Mode><<<grid, kThreads, 0, s>>>(part, part_rows, part_out, n, plane);
        break;
      default: dequantize_affine_kernel<float, Mode><<<grid, kThreads, 0, s>>>(part, part_rows, part_out, n, plane); break;
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
