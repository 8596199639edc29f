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
// - int16 kernel, 4 bits with groups of a multiple of 64 (the MLX default), 1–8 tokens: x is first
//   rounded to int16 per 64 inputs (quantize_x_int16: one scale max|x|/32767, as the cpu backend's
//   VNNI GEMV), and each u32 word of 8 codes costs two masks and four __dp2a (int16 pairs × code bytes,
//   int32 sums) instead of eight float decodes and FMAs: per 32 codes
//   acc += (s·sx)·float(Σ q·x̂) + b·Σx (Σx exact f32 per 32 inputs). An output moves by at most
//   Σ_k |s·q_k|·sx/2 (the op test's bound). KAPITSA_CUDA_AFFINE_INT16=0 turns it off (for measuring).
#include "ops/cuda/kernel_util.cuh"

#include <cstdlib>
#include <cstring>

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

// Each warp's sums of acc into partial[warp] (slot r·MaxT + t), then a barrier: the block's threads
// then add the warps' partials.
template <int MaxT>
__device__ __forceinline__ void write_partials(const float (&acc)[kChunkRows][MaxT],
                                               float (*partial)[kChunkRows * MaxT]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int r = 0; r < kChunkRows; ++r)
#pragma unroll
    for (int t = 0; t < MaxT; ++t) {
      const float v = warp_sum(acc[r][t]);
      if (lane == 0) partial[warp][r * MaxT + t] = v;
    }
  __syncthreads();
}

// Code i (0…31) of a chunk held in words w[0 … BITS-1] (one little-endian bit stream).
template <int BITS>
__device__ __forceinline__ uint32_t code_at(const uint32_t (&w)[BITS], int i) {
  const int at = i * BITS, word = at / 32, shift = at % 32;
  uint32_t q = w[word] >> shift;
  if (shift + BITS > 32) q |= w[word + 1] << (32 - shift);
  return q & ((1u << BITS) - 1u);
}

// A scale or bias: SB the stored type, or void for the type named at run time.
template <typename SB>
__device__ __forceinline__ float scale_at(const void* p, ElemType type, int64_t i) {
  if constexpr (std::is_void_v<SB>) return load_as_float(p, type, i);
  else return to_float(static_cast<const SB*>(p)[i]);
}

// Routed experts (matmul_experts): grid row p = blockIdx.y is (token p / k, choice p % k); it computes
// expert ids[p] on x row p / k into y row p (the caller's offsets). An id outside [0, E) writes NaN into
// y_p, the block's y row (the ids live on the device). Returns false for such a block, else points the
// weights at its expert's.
__device__ __forceinline__ bool route_block(const ExpertRoute& route, AffineArgs& a, float* y_p, int64_t n0, int rows) {
  const int32_t e = route.ids[blockIdx.y];
  if (e < 0 || e >= route.E) {
    if (threadIdx.x < rows) y_p[n0 + threadIdx.x] = __int_as_float(0x7fc00000);
    return false;
  }
  a.words = route.table[e].words, a.scales = route.table[e].scales, a.biases = route.table[e].biases;
  return true;
}

// Block b computes rows [b·kChunkRows, b·kChunkRows + kChunkRows); its threads split the chunks. With
// Experts, one token per grid row (route_block).
template <typename SB, int BITS, int MaxT, bool VEC, bool Experts = false>
__global__ void __launch_bounds__(kWarps * 32) affine_gemv_chunk_kernel(const float* __restrict__ x, AffineArgs a,
                                                                        float* __restrict__ y, int64_t T, int64_t N,
                                                                        const ExpertRoute route) {
  __shared__ float partial[kWarps][kChunkRows * MaxT];
  const int64_t n0 = int64_t{blockIdx.x} * kChunkRows, chunks = a.K / 32, groups = a.K / a.group_size;
  const int rows = N - n0 < kChunkRows ? static_cast<int>(N - n0) : kChunkRows;
  if constexpr (Experts) {
    y += blockIdx.y * N;
    if (!route_block(route, a, y, n0, rows)) return;
    x += blockIdx.y / route.k * a.K;
  }
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
      s[r] = scale_at<SB>(a.scales, a.sb_type, n * groups + g);
      b[r] = scale_at<SB>(a.biases, a.sb_type, n * groups + g);
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
  write_partials(acc, partial);
  const int r = threadIdx.x / MaxT, t = threadIdx.x % MaxT;
  if (threadIdx.x < kChunkRows * MaxT && r < rows && t < T) {
    float sum = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi) sum += partial[wi][threadIdx.x];
    y[t * N + n0 + r] = sum;
  }
}

// ---- int16 kernel (4 bits, groups of a multiple of 64) -------------------------------------------

constexpr int kActBlock = 64;         // inputs per x scale
constexpr float kActMax = 32767.0f;   // |x̂| ≤ kActMax

// Where input j (0…7) of a word sits among the word's 8 int16 slots: [0, 2, 4, 6, 1, 3, 5, 7], so the
// low nibbles of a word (codes 0, 2, 4, 6 as bytes) meet slots 0–3 and the high nibbles slots 4–7.
__device__ __forceinline__ int slot_of(int j) { return (j & 1) * 4 + (j >> 1); }

// x: [T, K] f32 (n64 = T·K/64 blocks of 64) → xq: [T, K] int16 in slot order, sx: [n64], xsum: [2·n64]
// (exact f32 sums of each 32 inputs). One warp per 64 inputs, lane l holding inputs 2l and 2l+1.
__global__ void quantize_x_int16_kernel(const float* __restrict__ x, int16_t* __restrict__ xq, float* __restrict__ sx,
                                        float* __restrict__ xsum, int64_t n64) {
  const int64_t blk = int64_t{blockIdx.x} * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  pdl_trigger();
  pdl_wait();
  if (blk >= n64) return;
  const float2 v = reinterpret_cast<const float2*>(x + blk * kActBlock)[lane];
  float amax = fmaxf(fabsf(v.x), fabsf(v.y)), sum = v.x + v.y;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);  // within each half-warp
  const float inv = amax > 0.0f ? kActMax / amax : 0.0f;
  if (lane == 0) sx[blk] = amax / kActMax;
  if ((lane & 15) == 0) xsum[2 * blk + (lane >> 4)] = sum;
  const int i = 2 * lane, word = i & ~7;
  int16_t* out = xq + blk * kActBlock;
  out[word + slot_of(i & 7)] = static_cast<int16_t>(fminf(fmaxf(rintf(v.x * inv), -kActMax), kActMax));
  out[word + slot_of((i & 7) + 1)] = static_cast<int16_t>(fminf(fmaxf(rintf(v.y * inv), -kActMax), kActMax));
}

// Σ q·x̂ over one u32 word of 8 codes, x̂ its uint4 of int16 slots.
__device__ __forceinline__ int word_dot(uint32_t w, const uint4& xv, int acc) {
  const int lo = static_cast<int>(w & 0x0F0F0F0Fu), hi = static_cast<int>((w >> 4) & 0x0F0F0F0Fu);
  acc = __dp2a_lo(static_cast<int>(xv.x), lo, acc);
  acc = __dp2a_hi(static_cast<int>(xv.y), lo, acc);
  acc = __dp2a_lo(static_cast<int>(xv.z), hi, acc);
  return __dp2a_hi(static_cast<int>(xv.w), hi, acc);
}

// What the blocks of an int16 launch compute (Int16Parts): kChunkRows consecutive rows of one of up
// to kInt16MaxParts weights sharing x (block ranges per part in `first_block`); for SwiGLU, rows n and
// n+1 of the gate and of the up weight, written as silu(gate)·up (as silu_mul does); for Experts, rows
// of the expert a grid row routes to (route_block: x row p / k, y row p, one token).
enum class Int16Mode { parts, swiglu, experts };

// As the chunk kernel (a block computes kChunkRows outputs, its threads split the rows' 32-code chunks;
// a block has as many warps as a row has 32 chunks, at most kWarps: at K = 2560, 3 warps, not 4 with
// 48 threads idle), on x̂ from quantize_x_int16_kernel.
// Queued with programmatic dependent launch: the first weights are prefetched into L2 before pdl_wait()
// (not for Experts: which expert is known only from the router's output).
template <typename SB, int MaxT, Int16Mode M>
__global__ void __launch_bounds__(kWarps * 32) affine_gemv_int16_kernel(const int16_t* __restrict__ xq,
                                                                        const float* __restrict__ sx,
                                                                        const float* __restrict__ xsum,
                                                                        const Int16Parts p, int64_t T,
                                                                        const ExpertRoute route) {
  constexpr bool kSwiGlu = M == Int16Mode::swiglu, kExperts = M == Int16Mode::experts;
  pdl_trigger();
  __shared__ float partial[kWarps][kChunkRows * MaxT];
  int part = 0;
  while (M == Int16Mode::parts && part + 1 < p.n && blockIdx.x >= p.first_block[part + 1]) ++part;
  AffineArgs a = p.a[0];
  const int64_t K = a.K, chunks = K / 32, groups = K / a.group_size;
  const int64_t n0 = kSwiGlu ? int64_t{blockIdx.x} * 2 : (int64_t{blockIdx.x} - p.first_block[part]) * kChunkRows;
  const int group_shift = __ffs(a.group_size / 32) - 1;
  float* y_out = p.y[part];
  if constexpr (kExperts) {
    pdl_wait();  // the router's ids
    const int rows = p.N[0] - n0 < kChunkRows ? static_cast<int>(p.N[0] - n0) : kChunkRows;
    y_out += blockIdx.y * p.N[0];
    if (!route_block(route, a, y_out, n0, rows)) return;
    const int64_t token = blockIdx.y / route.k;
    xq += token * K, sx += token * (K / kActBlock), xsum += token * chunks;
  }
  // Row slot r: its weight's codes, scales and biases (rows past N repeat a valid row, never stored).
  const uint4* wrow[kChunkRows];
  const SB *srow[kChunkRows], *brow[kChunkRows];
#pragma unroll
  for (int r = 0; r < kChunkRows; ++r) {
    const int q = kSwiGlu ? r / 2 : part;
    const AffineArgs& w = kExperts ? a : p.a[q];
    const int64_t want = kSwiGlu ? n0 + r % 2 : n0 + r, n = want < p.N[q] ? want : n0;
    wrow[r] = reinterpret_cast<const uint4*>(w.words + n * w.words_per_row);
    srow[r] = static_cast<const SB*>(w.scales) + n * groups;
    brow[r] = static_cast<const SB*>(w.biases) + n * groups;
    if (!kExperts && threadIdx.x < chunks) asm volatile("prefetch.global.L2 [%0];" ::"l"(wrow[r] + threadIdx.x));
  }
  if constexpr (!kExperts) pdl_wait();
  float acc[kChunkRows][MaxT] = {};
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    uint4 w[kChunkRows];
    float s[kChunkRows], b[kChunkRows];
    const int64_t g = c >> group_shift;
#pragma unroll
    for (int r = 0; r < kChunkRows; ++r) {
      w[r] = load_weights(wrow[r] + c);
      s[r] = to_float(srow[r][g]);
      b[r] = to_float(brow[r][g]);
    }
#pragma unroll
    for (int t = 0; t < MaxT; ++t) {
      if (MaxT > 1 && t >= T) break;
      const uint4* xc = reinterpret_cast<const uint4*>(xq + t * K + c * 32);
      const uint4 x0 = xc[0], x1 = xc[1], x2 = xc[2], x3 = xc[3];
      const float scale_x = sx[t * (K / kActBlock) + (c >> 1)], sum_x = xsum[t * chunks + c];
#pragma unroll
      for (int r = 0; r < kChunkRows; ++r) {
        const int dot = word_dot(w[r].w, x3, word_dot(w[r].z, x2, word_dot(w[r].y, x1, word_dot(w[r].x, x0, 0))));
        acc[r][t] = fmaf(s[r] * scale_x, static_cast<float>(dot), fmaf(b[r], sum_x, acc[r][t]));
      }
    }
  }
  write_partials(acc, partial);
  const auto total = [&](int slot) {
    float sum = 0.0f;
    for (int wi = 0; wi < static_cast<int>(blockDim.x >> 5); ++wi) sum += partial[wi][slot];
    return sum;
  };
  const int r = threadIdx.x / MaxT, t = threadIdx.x % MaxT;
  if constexpr (kSwiGlu) {  // r: 0 or 1, the output row n0 + r
    if (threadIdx.x < 2 * MaxT && n0 + r < p.N[0] && t < T) {
      const float gate = total(r * MaxT + t), up = total((r + 2) * MaxT + t);
      y_out[t * p.N[0] + n0 + r] = gate / (1.0f + expf(-gate)) * up;
    }
  } else {
    if (threadIdx.x < kChunkRows * MaxT && n0 + r < p.N[part] && t < T)
      y_out[t * p.N[part] + n0 + r] = epilogue(total(threadIdx.x), p.act);
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
  affine_gemv_chunk_kernel<SB, BITS, MaxT, kVec><<<blocks, kWarps * 32, 0, s>>>(x, a, y, T, N, ExpertRoute{});
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

bool affine_int16_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("KAPITSA_CUDA_AFFINE_INT16");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

bool affine_int16_supported(const AffineArgs& a, int64_t T) {
  return affine_int16_enabled() && a.bits == 4 && a.group_size % kActBlock == 0 && a.K % a.group_size == 0 &&
         (a.group_size & (a.group_size - 1)) == 0 && T >= 1 && T <= kGemvMaxTokens && a.words_per_row == a.K / 8 &&
         reinterpret_cast<uintptr_t>(a.words) % 16 == 0;
}

size_t affine_int16_scratch_bytes(int64_t T, int64_t K) {
  return static_cast<size_t>(T * K) * sizeof(int16_t) + static_cast<size_t>(T * K / kActBlock * 3) * sizeof(float);
}

void quantize_x_int16(const float* x, int64_t T, int64_t K, void* scratch, cudaStream_t s) {
  const int64_t n64 = T * K / kActBlock;
  auto* xq = static_cast<int16_t*>(scratch);
  float* sx = reinterpret_cast<float*>(xq + T * K);
  constexpr int kWarpsPerBlock = 8;
  const unsigned blocks = static_cast<unsigned>((n64 + kWarpsPerBlock - 1) / kWarpsPerBlock);
  launch(quantize_x_int16_kernel, blocks, kWarpsPerBlock * 32, s, x, xq, sx, sx + n64, n64);
}

namespace {
template <Int16Mode M>
void launch_int16(const void* scratch, const Int16Parts& p, int64_t T, dim3 blocks, cudaStream_t s) {
  const int64_t K = p.a[0].K;
  const auto* xq = static_cast<const int16_t*>(scratch);
  const float* sx = reinterpret_cast<const float*>(xq + T * K);
  const float* xsum = sx + T * K / kActBlock;
  const int64_t warps_for_row = (K / 32 + 31) / 32;
  const unsigned threads = 32u * static_cast<unsigned>(warps_for_row < kWarps ? warps_for_row : kWarps);
  auto go = [&](auto sb) {
    using SB = decltype(sb);
    // 2–4 rows (a verification of up to 3 guesses) get their own instance: the 8-row one keeps 8 rows of
    // accumulators and partial sums whatever T is.
    if (T == 1) launch(affine_gemv_int16_kernel<SB, 1, M>, blocks, threads, s, xq, sx, xsum, p, T, ExpertRoute{});
    else if (T <= 4) launch(affine_gemv_int16_kernel<SB, 4, M>, blocks, threads, s, xq, sx, xsum, p, T, ExpertRoute{});
    else launch(affine_gemv_int16_kernel<SB, kGemvMaxTokens, M>, blocks, threads, s, xq, sx, xsum, p, T, ExpertRoute{});
  };
  switch (p.a[0].sb_type) {
    case ElemType::f16: go(__half{}); break;
    case ElemType::bf16: go(__nv_bfloat16{}); break;
    default: go(float{}); break;
  }
}
}  // namespace

void affine_gemv_int16(const void* scratch, const AffineArgs* a, float* const* y, const int64_t* N, int n, int64_t T,
                       cudaStream_t s, Epilogue act) {
  for (int i0 = 0; i0 < n; i0 += kInt16MaxParts) {
    Int16Parts p{};
    p.n = n - i0 < kInt16MaxParts ? n - i0 : kInt16MaxParts;
    p.act = act;
    int64_t blocks = 0;
    for (int i = 0; i < p.n; ++i) {
      p.a[i] = a[i0 + i], p.y[i] = y[i0 + i], p.N[i] = N[i0 + i];
      p.first_block[i] = blocks;
      blocks += (N[i0 + i] + kChunkRows - 1) / kChunkRows;
    }
    if (T > 0 && blocks > 0) launch_int16<Int16Mode::parts>(scratch, p, T, dim3(static_cast<unsigned>(blocks)), s);
  }
}

void affine_gemv_int16_swiglu(const void* scratch, const AffineArgs& gate, const AffineArgs& up, float* y, int64_t N,
                              int64_t T, cudaStream_t s) {
  if (T == 0 || N == 0) return;
  Int16Parts p{};
  p.n = 2, p.a[0] = gate, p.a[1] = up, p.y[0] = y, p.N[0] = p.N[1] = N;
  launch_int16<Int16Mode::swiglu>(scratch, p, T, dim3(static_cast<unsigned>((N + 1) / 2)), s);
}

bool affine_experts_supported(const AffineArgs& a) {
  const bool bits_ok = a.bits == 2 || a.bits == 3 || a.bits == 4 || a.bits == 5 || a.bits == 6 || a.bits == 8;
  const bool pow2_group = a.group_size >= 32 && (a.group_size & (a.group_size - 1)) == 0;
  return bits_ok && pow2_group && a.K % a.group_size == 0 && a.words_per_row == a.K * a.bits / 32;
}

bool affine_experts_int16(const AffineArgs& a, bool aligned) { return aligned && affine_int16_supported(a, 1); }

void affine_experts(const float* x, const void* scratch, const AffineArgs& a, const ExpertRoute& route, float* y,
                    int64_t T, int64_t N, bool aligned, cudaStream_t s, Epilogue act) {
  const int64_t P = T * route.k;
  if (P == 0 || N == 0) return;
  const unsigned bx = static_cast<unsigned>((N + kChunkRows - 1) / kChunkRows);
  const int64_t per_launch = 65535 / route.k * route.k;  // gridDim.y is at most 65535; whole tokens per launch
  const bool int16 = affine_experts_int16(a, aligned);
  if (int16) quantize_x_int16(x, T, a.K, const_cast<void*>(scratch), s);
  for (int64_t p0 = 0; p0 < P; p0 += per_launch) {
    const int64_t n = P - p0 < per_launch ? P - p0 : per_launch;
    ExpertRoute r = route;
    r.ids += p0;
    const dim3 grid(bx, static_cast<unsigned>(n));
    if (int16) {
      // The rounded x of this launch's first token: the kernel adds its own token's offset.
      const int64_t t0 = p0 / route.k, K = a.K;
      const auto* xq = static_cast<const int16_t*>(scratch);
      const float* sx = reinterpret_cast<const float*>(xq + T * K);
      const float* xsum = sx + T * K / kActBlock;
      Int16Parts p{};
      p.n = 1, p.a[0] = a, p.y[0] = y + p0 * N, p.N[0] = N, p.act = act;
      const int64_t warps_for_row = (K / 32 + 31) / 32;
      const unsigned threads = 32u * static_cast<unsigned>(warps_for_row < kWarps ? warps_for_row : kWarps);
      auto go = [&](auto sb) {
        using SB = decltype(sb);
        launch(affine_gemv_int16_kernel<SB, 1, Int16Mode::experts>, grid, threads, s, xq + t0 * K,
               sx + t0 * (K / kActBlock), xsum + t0 * (K / 32), p, int64_t{1}, r);
      };
      switch (a.sb_type) {
        case ElemType::f16: go(__half{}); break;
        case ElemType::bf16: go(__nv_bfloat16{}); break;
        default: go(float{}); break;
      }
      continue;
    }
    const float* xs = x + p0 / route.k * a.K;
    float* ys = y + p0 * N;
    auto go = [&](auto bits) {
      constexpr int kBits = decltype(bits)::value;
      affine_gemv_chunk_kernel<void, kBits, 1, false, true><<<grid, kWarps * 32, 0, s>>>(xs, a, ys, 1, N, r);
    };
    switch (a.bits) {
      case 2: go(std::integral_constant<int, 2>{}); break;
      case 3: go(std::integral_constant<int, 3>{}); break;
      case 4: go(std::integral_constant<int, 4>{}); break;
      case 5: go(std::integral_constant<int, 5>{}); break;
      case 6: go(std::integral_constant<int, 6>{}); break;
      default: go(std::integral_constant<int, 8>{}); break;
    }
  }
  if (!int16 && act == Epilogue::relu_squared) relu_squared(y, y, P * N, s);  // (the chunk kernel has no epilogue)
}

}  // namespace kapitsa::ops::cuda::kernels
