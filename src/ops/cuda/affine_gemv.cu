// Kernels of matmul over MLX affine weights for a few tokens (decode): dequantize-and-dot fused, so a
// step reads the packed codes (a 4-bit matrix is an eighth of its f32 dequantization) and writes only y.
// Per run of codes inside one group, with x the inputs, q the codes, s and b the group's scale and bias:
//   Σ x·(s·q + b) = s·Σ x·q + b·Σ x      (regrouped; f32 throughout, within the op test's tolerance)
// Codes become floats without an integer-to-float conversion (a quarter-rate instruction): q is placed
// in the mantissa of 2^23 (0x4B000000 | q) and 2^23 subtracted, exact for q < 2^23.
//
// Two kernels (which runs when: see "launch" below, with the H200 figures that decided it):
// - chunk kernel, one token (any bits) and 3/5/6 bits at 2–8 tokens: a chunk of 32 codes is exactly
//   `bits` u32 words inside one group; a block of 128 threads splits a row's chunks, computes 4 rows
//   (each chunk of x serves the 4), and sums across its warps at the end.
// - word kernel, 2/4/8 bits (codes never straddle a word) at 2–8 tokens: lane l of a warp takes words
//   l, l+32, … of 2 rows, so the weight loads and the x loads are contiguous across the warp; 4 words
//   × 2 rows are loaded before any is used; the decode of a word serves every token.
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kWarps = 4;   // warps of a block
constexpr int kUnroll = 4;  // words a lane loads (per row) before it computes

__device__ __forceinline__ float code_as_float(uint32_t q) { return __uint_as_float(0x4B000000u | q) - 8388608.0f; }

// ---- word kernel (2, 4, 8 bits) ------------------------------------------------------------------

// y: [T, N] = x: [T, K] · dequant(w)ᵀ, T ≤ MaxT. Warp v of block b computes rows
// [(b·kWarps + v)·Rows, … + Rows).
template <int BITS, int Rows, int MaxT>
__global__ void __launch_bounds__(kWarps * 32) affine_gemv_word_kernel(const float* __restrict__ x, const AffineArgs a,
                                                                       float* __restrict__ y, int64_t T, int64_t N) {
  constexpr int kCodes = 32 / BITS;  // codes of a word
  constexpr uint32_t kMask = (1u << BITS) - 1u;
  const int lane = threadIdx.x & 31;
  const int64_t n0 = (int64_t{blockIdx.x} * kWarps + (threadIdx.x >> 5)) * Rows;
  if (n0 >= N) return;
  const int rows = N - n0 < Rows ? static_cast<int>(N - n0) : Rows;
  const int64_t words = a.K / kCodes, groups = a.K / a.group_size;
  const int group_shift = __ffs(a.group_size / kCodes) - 1;  // log2 of words per group (a power of two)
  float acc[Rows][MaxT] = {};
  for (int64_t w0 = lane; w0 < words; w0 += 32 * kUnroll) {
    uint32_t w[kUnroll][Rows];
    float s[kUnroll][Rows], b[kUnroll][Rows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t wi = w0 + 32 * u;
      if (wi < words) {
#pragma unroll
        for (int r = 0; r < Rows; ++r) {
          const int64_t n = n0 + (r < rows ? r : 0);  // rows past N repeat row n0 (loaded, never stored)
          w[u][r] = __ldg(a.words + n * a.words_per_row + wi);
          const int64_t g = n * groups + (wi >> group_shift);
          s[u][r] = load_as_float(a.scales, a.sb_type, g), b[u][r] = load_as_float(a.biases, a.sb_type, g);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t wi = w0 + 32 * u;
      if (wi >= words) break;
#pragma unroll
      for (int t = 0; t < MaxT; ++t) {
        if (MaxT > 1 && t >= T) break;
        const float* xw = x + t * a.K + wi * kCodes;
        float xv[kCodes], xsum = 0.0f;
#pragma unroll
        for (int i = 0; i < kCodes; i += 4) {
          const float4 v = *reinterpret_cast<const float4*>(xw + i);
          xv[i] = v.x, xv[i + 1] = v.y, xv[i + 2] = v.z, xv[i + 3] = v.w;
          xsum += (v.x + v.y) + (v.z + v.w);
        }
#pragma unroll
        for (int r = 0; r < Rows; ++r) {
          float dot = 0.0f;
#pragma unroll
          for (int i = 0; i < kCodes; ++i) dot = fmaf(xv[i], code_as_float((w[u][r] >> (i * BITS)) & kMask), dot);
          acc[r][t] += s[u][r] * dot + b[u][r] * xsum;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < Rows; ++r)
#pragma unroll
    for (int t = 0; t < MaxT; ++t) {
      const float v = warp_sum(acc[r][t]);
      if (lane == 0 && r < rows && t < T) y[t * N + n0 + r] = v;
    }
}

// ---- chunk kernel (3, 5, 6 bits) -----------------------------------------------------------------

constexpr int kChunkRows = 4;  // outputs of a block

// Code i (0…31) of a chunk held in words w[0 … BITS-1] (one little-endian bit stream).
template <int BITS>
__device__ __forceinline__ uint32_t code_at(const uint32_t (&w)[BITS], int i) {
  const int at = i * BITS, word = at / 32, shift = at % 32;
  uint32_t q = w[word] >> shift;
  if (shift + BITS > 32) q |= w[word + 1] << (32 - shift);
  return q & ((1u << BITS) - 1u);
}

// Block b computes rows [b·kChunkRows, b·kChunkRows + kChunkRows); its threads split the chunks.
template <typename SB, int BITS, int MaxT, bool VEC>
__global__ void __launch_bounds__(kWarps * 32) affine_gemv_chunk_kernel(const float* __restrict__ x, const AffineArgs a,
                                                                        float* __restrict__ y, int64_t T, int64_t N) {
  __shared__ float partial[kWarps][kChunkRows * MaxT];
  const int64_t n0 = int64_t{blockIdx.x} * kChunkRows, chunks = a.K / 32, groups = a.K / a.group_size;
  const int rows = N - n0 < kChunkRows ? static_cast<int>(N - n0) : kChunkRows;
  const int group_shift = __ffs(a.group_size / 32) - 1;  // log2 of chunks per group (a power of two)
  float acc[kChunkRows][MaxT] = {};
  for (int64_t c = threadIdx.x; c < chunks; c += kWarps * 32) {
    uint32_t w[kChunkRows][BITS];
    float s[kChunkRows], b[kChunkRows];
    const int64_t g = c >> group_shift;
#pragma unroll
    for (int r = 0; r < kChunkRows; ++r) {
      const int64_t n = n0 + (r < rows ? r : 0);
      const uint32_t* chunk = a.words + n * a.words_per_row + c * BITS;
      if constexpr (VEC) {
#pragma unroll
        for (int v = 0; v < BITS / 4; ++v) {
          const uint4 u = __ldg(reinterpret_cast<const uint4*>(chunk) + v);
          w[r][4 * v] = u.x, w[r][4 * v + 1] = u.y, w[r][4 * v + 2] = u.z, w[r][4 * v + 3] = u.w;
        }
      } else {
#pragma unroll
        for (int i = 0; i < BITS; ++i) w[r][i] = __ldg(chunk + i);
      }
      s[r] = to_float(static_cast<const SB*>(a.scales)[n * groups + g]);
      b[r] = to_float(static_cast<const SB*>(a.biases)[n * groups + g]);
    }
#pragma unroll
    for (int t = 0; t < MaxT; ++t) {
      if (MaxT > 1 && t >= T) break;
      const float* xc = x + t * a.K + c * 32;
      float xv[32], xsum = 0.0f;
#pragma unroll
      for (int i = 0; i < 32; i += 4) {
        const float4 v = *reinterpret_cast<const float4*>(xc + i);
        xv[i] = v.x, xv[i + 1] = v.y, xv[i + 2] = v.z, xv[i + 3] = v.w;
        xsum += (v.x + v.y) + (v.z + v.w);
      }
#pragma unroll
      for (int r = 0; r < kChunkRows; ++r) {
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < 32; ++i) dot = fmaf(xv[i], code_as_float(code_at<BITS>(w[r], i)), dot);
        acc[r][t] += s[r] * dot + b[r] * xsum;
      }
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int r = 0; r < kChunkRows; ++r)
#pragma unroll
    for (int t = 0; t < MaxT; ++t) {
      const float v = warp_sum(acc[r][t]);
      if (lane == 0) partial[warp][r * MaxT + t] = v;
    }
  __syncthreads();
  const int r = threadIdx.x / MaxT, t = threadIdx.x % MaxT;
  if (threadIdx.x < kChunkRows * MaxT && r < rows && t < T) {
    float sum = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi) sum += partial[wi][threadIdx.x];
    y[t * N + n0 + r] = sum;
  }
}

// ---- launch --------------------------------------------------------------------------------------
// Measured on the H200 (bench_ops_cuda, docs/cuda.md): for one token the chunk kernel is the faster
// (12288 × 4096 at 4 bits: 24–27 µs against 36 for the word kernel), for 2–8 tokens the word kernel
// (T = 8: 86 µs against 142). Each instance is device code in every binary, so the word kernel serves
// only 2, 4 and 8 bits at 2–8 tokens, and the scale type is a template parameter only where it paid.

template <typename SB, int BITS, int MaxT>
void launch_chunk(const float* x, const AffineArgs& a, float* y, int64_t T, int64_t N, cudaStream_t s) {
  constexpr bool kVec = BITS % 4 == 0;  // 16-byte loads (alignment checked by affine_gemv_supported)
  const unsigned blocks = static_cast<unsigned>((N + kChunkRows - 1) / kChunkRows);
  affine_gemv_chunk_kernel<SB, BITS, MaxT, kVec><<<blocks, kWarps * 32, 0, s>>>(x, a, y, T, N);
}

template <int BITS>
void launch_word(const float* x, const AffineArgs& a, float* y, int64_t T, int64_t N, cudaStream_t s) {
  constexpr int kRows = 2;
  constexpr int64_t per_block = int64_t{kWarps} * kRows;
  const unsigned blocks = static_cast<unsigned>((N + per_block - 1) / per_block);
  affine_gemv_word_kernel<BITS, kRows, kGemvMaxTokens><<<blocks, kWarps * 32, 0, s>>>(x, a, y, T, N);
}

template <typename SB>
void launch_scales(const float* x, const AffineArgs& a, float* y, int64_t T, int64_t N, cudaStream_t s) {
  if (T == 1) {
    switch (a.bits) {
      case 2: launch_chunk<SB, 2, 1>(x, a, y, T, N, s); break;
      case 3: launch_chunk<SB, 3, 1>(x, a, y, T, N, s); break;
      case 4: launch_chunk<SB, 4, 1>(x, a, y, T, N, s); break;
      case 5: launch_chunk<SB, 5, 1>(x, a, y, T, N, s); break;
      case 6: launch_chunk<SB, 6, 1>(x, a, y, T, N, s); break;
      default: launch_chunk<SB, 8, 1>(x, a, y, T, N, s); break;
    }
    return;
  }
  switch (a.bits) {
    case 2: launch_word<2>(x, a, y, T, N, s); break;
    case 3: launch_chunk<SB, 3, kGemvMaxTokens>(x, a, y, T, N, s); break;
    case 4: launch_word<4>(x, a, y, T, N, s); break;
    case 5: launch_chunk<SB, 5, kGemvMaxTokens>(x, a, y, T, N, s); break;
    case 6: launch_chunk<SB, 6, kGemvMaxTokens>(x, a, y, T, N, s); break;
    default: launch_word<8>(x, a, y, T, N, s); break;
  }
}

}  // namespace

bool affine_gemv_supported(const AffineArgs& a, const float* x, int64_t T) {
  const bool bits_ok = a.bits == 2 || a.bits == 3 || a.bits == 4 || a.bits == 5 || a.bits == 6 || a.bits == 8;
  const bool pow2_group = a.group_size >= 32 && (a.group_size & (a.group_size - 1)) == 0;
  const bool vec_aligned = a.bits % 4 != 0 || reinterpret_cast<uintptr_t>(a.words) % 16 == 0;  // rows: K·bits/8 bytes
  return bits_ok && pow2_group && vec_aligned && T >= 1 && T <= kGemvMaxTokens && a.K % a.group_size == 0 &&
         a.words_per_row == a.K * a.bits / 32 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

void affine_gemv(const float* x, const AffineArgs& a, float* y, int64_t T, int64_t N, cudaStream_t s) {
  if (T == 0 || N == 0) return;
  switch (a.sb_type) {
    case ElemType::f16: launch_scales<__half>(x, a, y, T, N, s); break;
    case ElemType::bf16: launch_scales<__nv_bfloat16>(x, a, y, T, N, s); break;
    default: launch_scales<float>(x, a, y, T, N, s); break;
  }
}

}  // namespace kapitsa::ops::cuda::kernels
