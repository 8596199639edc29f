// Decode GEMV for 4- and 8-bit MLX affine weights with int16 activations (AVX-512 VNNI; AVX2 and NEON below): per 64 inputs
// x is rounded to int16 with one scale (sx = max|x| / 32767), codes are widened from bytes to 16-bit
// words (no float conversion), and VPDPWSSD multiplies and adds them in pairs, 32 products per
// instruction, into int32 (at most 4 products of 255 · 32767 per lane per 64 codes: no overflow).
// Per 64 codes: y += float(Σ q·x̂) · s · sx; then + Σ_g b_g · Σ x over the group (exact f32 sums of x).
// The rounding of x is the only change from the f32 kernel: each output moves by at most
// Σ_k |s·q_k| · sx/2 (the bound tests/ops/test_affine.cpp checks) — with int16, ~1e-5 of the output
// (int8 activations, as llama.cpp uses, measured 1.7e-2 relative error on the demo model's logits).
// 4-bit rows are read 32 bytes (64 codes) at a time and split into low and high nibbles — codes in the
// order [even codes of block 0, of block 1, odd codes of block 0, of block 1] — so x is stored in that
// order once per call instead of permuting codes per row.
// 1-8 tokens, 4 bits, groups of 64, K a multiple of 128 (the MLX default: decode, and the rows of a
// speculative verification, each token's sums formed exactly as if alone): the "plane"
// kernel reads 128 codes (64 bytes) as 32 16-bit words and takes nibble p of every word (a shift and a
// mask, no widening shuffle), so 4 VPDPWSSD cover 128 codes; int32 lanes 0–7 then hold the first group's
// sums and 8–15 the second's, and one multiply-add applies both groups' s·sx (built for 16 groups at a
// time and picked per pair by a permute) — about half the instructions a code of the 64-code path.
// AArch64 (NEON, every level): the same rounding and order of x; codes widened to 16 bits (UXTL), and
// SMLAL / SMLAL2 multiply-add them with x into int32 (16 products per lane per 64 codes: no overflow);
// no plane kernel.
// AVX2 (the avx2 and avxvnni levels; 4 bits only): the plane idea at 256 bits — 64 codes (32 bytes) are
// 16 words, nibble p of word w is code 4w + p, so x is stored per 64 inputs as 4 planes of 16 and four
// VPDPWSSD (AVX-VNNI), or VPMADDWD + VPADDD (the same integers, plain AVX2), cover one 64-code block,
// whose 8 int32 lanes all belong to one group.
#include "base/thread_pool.h"
#include "ops/cpu/affine.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
// GCC 12 reports its own _mm512_undefined_*() (self-initialised on purpose, inside intrinsics such as
// _mm512_cvtepi32_ps) as uninitialised once the multi-token plane kernel's loops are unrolled: a known
// false positive in its headers, silenced in this file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#define KAPITSA_AFFINE_INT16 1
#define KAPITSA_AFFINE_INT16_PLANES 1
#elif defined(__aarch64__)
#include <arm_neon.h>
#define KAPITSA_AFFINE_INT16 1
#define KAPITSA_AFFINE_INT16_NEON 1
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define KAPITSA_AFFINE_INT16 1
#define KAPITSA_AFFINE_INT16_AVX2 1
#include "ops/cpu/simd.h"  // simd::reduce_add of an 8-float vector
#endif

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {

bool affine_int16_activations(int bits, int64_t group_size, int64_t tokens) {
#if defined(KAPITSA_AFFINE_INT16_AVX2)
  return bits == 4 && group_size % kActBlock == 0 && tokens >= 1 && tokens <= kActMaxTokens;
#elif defined(KAPITSA_AFFINE_INT16)
  return (bits == 4 || bits == 8) && group_size % kActBlock == 0 && tokens >= 1 && tokens <= kActMaxTokens;
#else
  (void)bits, (void)group_size, (void)tokens;
  return false;
#endif
}

#if defined(KAPITSA_AFFINE_INT16)
namespace {

// Where input c of a 64-input block sits in the bytes the kernel multiplies (see the header comment).
template <int BITS>
constexpr int position(int c) {
  if constexpr (BITS == 8) return c;
#if defined(KAPITSA_AFFINE_INT16_AVX2)
  return (c % 4) * 16 + c / 4;  // plane c % 4, word c / 4
#else
  const int block = c / 32, k = c % 32;
  return (k % 2) * 32 + block * 16 + k / 2;
#endif
}
// The plane kernel's order within 128 inputs: plane p = c % 4 (nibble p of 16-bit word c / 4), word pair
// j = c / 8, and within the pair the word (c / 4) % 2.
constexpr int plane_position(int c) { return (c % 4) * 32 + 2 * (c / 8) + (c / 4) % 2; }

// x: [T, K] f32 → q: [T, K] int16 in kernel order, sx: [T, K/64], xsum: [T, G] exact group sums.
// planes: the plane kernel's order (per 128 inputs), else BITS's.
template <int BITS>
void quantize_activations(const float* x, int64_t T, int64_t K, int64_t group_size, int16_t* q, float* sx,
                          float* xsum, bool planes = false) {
  const int64_t P = K / kActBlock, G = K / group_size;
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * K;
    for (int64_t p = 0; p < P; ++p) {
      const float* v = xt + p * kActBlock;
      float amax = 0;
      for (int i = 0; i < kActBlock; ++i) amax = std::max(amax, std::abs(v[i]));
      const float inv = amax > 0 ? kActMax / amax : 0.0f;
      sx[t * P + p] = amax / kActMax;
      for (int i = 0; i < kActBlock; ++i) {
        const int64_t at = planes ? (p / 2) * 128 + plane_position(static_cast<int>(p % 2) * kActBlock + i)
                                  : p * kActBlock + position<BITS>(i);
        q[t * K + at] = static_cast<int16_t>(std::clamp(std::nearbyint(v[i] * inv), -kActMax, kActMax));
      }
    }
    for (int64_t g = 0; g < G; ++g) {
      float s = 0;
      for (int64_t k = g * group_size; k < (g + 1) * group_size; ++k) s += xt[k];
      xsum[t * G + g] = s;
    }
  }
}

struct Operands {
  const uint8_t* codes;  // [N, K·BITS/8]
  const void* scales;    // [N, G] of Param
  const void* biases;    // [N, G] of Param
  const int16_t* q;      // [T, K]
  const float* sx;       // [T, K/64]
  const float* xsum;     // [T, G]
  int64_t K, G, group_size;
};

#if !defined(KAPITSA_AFFINE_INT16_PLANES)
// Scales and biases of one dtype, read without a switch per element (NEON and AVX2; AVX-512's below).
struct Bf16Param {
  static float at(const void* p, int64_t i) { return bf16_to_f32(static_cast<const uint16_t*>(p)[i]); }
};
struct F16Param {
  static float at(const void* p, int64_t i) { return f16_to_f32(static_cast<const uint16_t*>(p)[i]); }
};
struct F32Param {
  static float at(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; }
};

// Σ_g biases[at + g] · xsum[g] over G groups, in order, as explicit FMAs (a contraction the compiler
// made in some instantiations only would break the bit-equality of rows across token counts).
template <class Param>
float bias_dot(const void* biases, int64_t at, const float* xsum, int64_t G) {
  float s = 0;
  for (int64_t g = 0; g < G; ++g) s = std::fma(Param::at(biases, at + g), xsum[g], s);
  return s;
}
#endif

#if defined(KAPITSA_AFFINE_INT16_NEON)

// Half h (32 codes) of the 64-code block at p as 4 vectors of 8 int16 (codes are at most 255), and the
// offsets of their x within the block's 64 (kernel order: position<BITS>).
template <int BITS>
inline void load_codes(const uint8_t* p, int h, int16x8_t c[4], int at[4]) {
  const auto s16 = [](uint16x8_t v) { return vreinterpretq_s16_u16(v); };
  if constexpr (BITS == 8) {
    const uint8x16_t v0 = vld1q_u8(p + 32 * h), v1 = vld1q_u8(p + 32 * h + 16);
    c[0] = s16(vmovl_u8(vget_low_u8(v0))), c[1] = s16(vmovl_high_u8(v0));
    c[2] = s16(vmovl_u8(vget_low_u8(v1))), c[3] = s16(vmovl_high_u8(v1));
    for (int i = 0; i < 4; ++i) at[i] = 32 * h + 8 * i;
  } else {  // byte j of the half: code 2j in the low nibble (x at 16h + j), 2j + 1 in the high (32 + 16h + j)
    const uint8x16_t v = vld1q_u8(p + 16 * h), lo = vandq_u8(v, vdupq_n_u8(0x0f)), hi = vshrq_n_u8(v, 4);
    c[0] = s16(vmovl_u8(vget_low_u8(lo))), c[1] = s16(vmovl_high_u8(lo));
    c[2] = s16(vmovl_u8(vget_low_u8(hi))), c[3] = s16(vmovl_high_u8(hi));
    at[0] = 16 * h, at[1] = 16 * h + 8, at[2] = 32 + 16 * h, at[3] = 40 + 16 * h;
  }
}

// y[t, n] for the TB tokens and the RB rows from n0 (independent accumulation chains that share the
// x loads). Per 64 codes: acc += float(Σ q·x̂) · (s · sx); the bias term after the loop.
template <int BITS, class Param, int TB, int RB>
void rows_dot(const Operands& o, int64_t n0, float* y, int64_t N) {
  const int64_t P = o.K / kActBlock, pairs_per_group = o.group_size / kActBlock, row_bytes = o.K * BITS / 8;
  float32x4_t acc[TB][RB];
  for (int t = 0; t < TB; ++t)
    for (int r = 0; r < RB; ++r) acc[t][r] = vdupq_n_f32(0.0f);
  for (int64_t g = 0; g < o.G; ++g) {
    float s[RB];
    for (int r = 0; r < RB; ++r) s[r] = Param::at(o.scales, (n0 + r) * o.G + g);
    for (int64_t j = 0; j < pairs_per_group; ++j) {
      const int64_t p = g * pairs_per_group + j;
      int32x4_t sum[TB][RB];
      for (int t = 0; t < TB; ++t)
        for (int r = 0; r < RB; ++r) sum[t][r] = vdupq_n_s32(0);
      for (int h = 0; h < 2; ++h) {
        int16x8_t c[RB][4];
        int at[4];
        for (int r = 0; r < RB; ++r) load_codes<BITS>(o.codes + (n0 + r) * row_bytes + p * (kActBlock * BITS / 8), h, c[r], at);
        for (int t = 0; t < TB; ++t) {
          const int16_t* xq = o.q + t * o.K + p * kActBlock;
          for (int i = 0; i < 4; ++i) {
            const int16x8_t x = vld1q_s16(xq + at[i]);
            for (int r = 0; r < RB; ++r)
              sum[t][r] = vmlal_high_s16(vmlal_s16(sum[t][r], vget_low_s16(c[r][i]), vget_low_s16(x)), c[r][i], x);
          }
        }
      }
      for (int t = 0; t < TB; ++t) {
        const float sx = o.sx[t * P + p];
        for (int r = 0; r < RB; ++r) acc[t][r] = vfmaq_n_f32(acc[t][r], vcvtq_f32_s32(sum[t][r]), s[r] * sx);
      }
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int t = 0; t < TB; ++t)
      y[t * N + n0 + r] = vaddvq_f32(acc[t][r]) + bias_dot<Param>(o.biases, (n0 + r) * o.G, o.xsum + t * o.G, o.G);
}

template <int TB>
constexpr int kRowsFor = TB <= 2 ? 4 : 1;  // rows per pass: independent chains that share the x loads
#elif defined(KAPITSA_AFFINE_INT16_AVX2)
// acc + Σ over pairs of 16-bit lanes of a·b, into 8 int32 lanes (products below 2^20: no overflow).
inline __m256i dot16(__m256i acc, __m256i a, __m256i b) {
#if defined(__AVXVNNI__)
  return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

// y[t, n] for the TB tokens and the RB rows from n0 (4 bits). Per 64 codes: the row's 32 bytes give four
// nibble planes, Σ plane·x̂ in int32, then acc += float(Σ) · (s · sx); the bias term after the loop. Per
// (token, row) the operations and their order do not depend on TB or RB, so a verification row
// (speculative decoding) gives bit for bit what the row alone gives.
template <int BITS, class Param, int TB, int RB>
void rows_dot(const Operands& o, int64_t n0, float* y, int64_t N) {
  static_assert(BITS == 4, "the AVX2 int16 kernel is 4-bit only");
  const int64_t P = o.K / kActBlock, blocks_per_group = o.group_size / kActBlock, row_bytes = o.K / 2;
  const __m256i nibble = _mm256_set1_epi16(0x000f);
  __m256 acc[TB][RB];
  for (int t = 0; t < TB; ++t)
    for (int r = 0; r < RB; ++r) acc[t][r] = _mm256_setzero_ps();
  for (int64_t p = 0; p < P; ++p) {
    const int64_t g = p / blocks_per_group;
    for (int r = 0; r < RB; ++r) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o.codes + (n0 + r) * row_bytes + p * 32));
      const __m256i w0 = _mm256_and_si256(v, nibble), w1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble),
                    w2 = _mm256_and_si256(_mm256_srli_epi16(v, 8), nibble), w3 = _mm256_srli_epi16(v, 12);
      const float s = Param::at(o.scales, (n0 + r) * o.G + g);
      for (int t = 0; t < TB; ++t) {
        const __m256i* xq = reinterpret_cast<const __m256i*>(o.q + t * o.K + p * kActBlock);
        __m256i d = dot16(_mm256_setzero_si256(), w0, _mm256_loadu_si256(xq));
        d = dot16(d, w1, _mm256_loadu_si256(xq + 1));
        d = dot16(d, w2, _mm256_loadu_si256(xq + 2));
        d = dot16(d, w3, _mm256_loadu_si256(xq + 3));
        acc[t][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(s * o.sx[t * P + p]), acc[t][r]);
      }
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int t = 0; t < TB; ++t)
      y[t * N + n0 + r] = simd::reduce_add(acc[t][r]) + bias_dot<Param>(o.biases, (n0 + r) * o.G, o.xsum + t * o.G, o.G);
}

template <int TB>
constexpr int kRowsFor = TB == 1 ? 4 : 1;  // 16 ymm registers: 4 accumulators at one token
#else
// 64 codes of a row as two vectors of 32 unsigned 16-bit words, in kernel order.
template <int BITS>
inline void load_codes(const uint8_t* p, __m512i w[2]) {
  if constexpr (BITS == 8) {
    w[0] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    w[1] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
  } else {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), m = _mm256_set1_epi8(0x0f);
    w[0] = _mm512_cvtepu8_epi16(_mm256_and_si256(v, m));
    w[1] = _mm512_cvtepu8_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), m));
  }
}

constexpr int kRowsPlanes = 4;  // rows per pass of the plane kernel

// Scales and biases of one dtype, read without a switch per element: one at a time (at) or up to 16
// (load16, lanes past `mask` zero).
struct Bf16Param {
  static float at(const void* p, int64_t i) { return bf16_to_f32(static_cast<const uint16_t*>(p)[i]); }
  static __m512 load16(const void* p, int64_t i, __mmask16 mask) {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(p) + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};
struct F16Param {
  static float at(const void* p, int64_t i) { return f16_to_f32(static_cast<const uint16_t*>(p)[i]); }
  static __m512 load16(const void* p, int64_t i, __mmask16 mask) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(p) + i));
  }
};
struct F32Param {
  static float at(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; }
  static __m512 load16(const void* p, int64_t i, __mmask16 mask) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(p) + i);
  }
};

// Σ_g biases[at + g] · xsum[g] over G groups.
template <class Param>
float bias_dot(const void* biases, int64_t at, const float* xsum, int64_t G) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; g += 16) {
    const __mmask16 mask = G - g >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (G - g)) - 1);
    acc = _mm512_fmadd_ps(Param::load16(biases, at + g, mask), _mm512_maskz_loadu_ps(mask, xsum + g), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// y[t, n] for the TB tokens and the RB rows from n0 (independent accumulation chains that share the
// x loads). Per 64 codes: acc += float(Σ q·x̂) · (s · sx); the bias term after the loop.
template <int BITS, class Param, int TB, int RB>
void rows_dot(const Operands& o, int64_t n0, float* y, int64_t N) {
  const int64_t P = o.K / kActBlock, pairs_per_group = o.group_size / kActBlock, row_bytes = o.K * BITS / 8;
  __m512 acc[TB][RB];
  for (int t = 0; t < TB; ++t)
    for (int r = 0; r < RB; ++r) acc[t][r] = _mm512_setzero_ps();
  for (int64_t g = 0; g < o.G; ++g) {
    __m512 s[RB];
    for (int r = 0; r < RB; ++r) s[r] = _mm512_set1_ps(Param::at(o.scales, (n0 + r) * o.G + g));
    for (int64_t j = 0; j < pairs_per_group; ++j) {
      const int64_t p = g * pairs_per_group + j;
      __m512i w[RB][2];
      for (int r = 0; r < RB; ++r) load_codes<BITS>(o.codes + (n0 + r) * row_bytes + p * (kActBlock * BITS / 8), w[r]);
      for (int t = 0; t < TB; ++t) {
        const int16_t* xq = o.q + t * o.K + p * kActBlock;
        const __m512i x0 = _mm512_loadu_si512(xq), x1 = _mm512_loadu_si512(xq + 32);
        const __m512 sx = _mm512_set1_ps(o.sx[t * P + p]);
        for (int r = 0; r < RB; ++r) {
          const __m512i d = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(_mm512_setzero_si512(), w[r][0], x0), w[r][1], x1);
          acc[t][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(s[r], sx), acc[t][r]);
        }
      }
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int t = 0; t < TB; ++t)
      y[t * N + n0 + r] = _mm512_reduce_add_ps(acc[t][r]) + bias_dot<Param>(o.biases, (n0 + r) * o.G, o.xsum + t * o.G, o.G);
}

// The plane kernel (header comment): y[n] for one token and the RB rows from n0; groups of 64, so sx has
// one scale per group. kPairLanes[q]: lanes 0–7 pick group 2q of a 16-group block, lanes 8–15 group 2q + 1.
struct PairLanes {
  alignas(64) int32_t idx[8][16];
  constexpr PairLanes() : idx() {
    for (int q = 0; q < 8; ++q)
      for (int l = 0; l < 16; ++l) idx[q][l] = 2 * q + l / 8;
  }
};
inline constexpr PairLanes kPairLanes{};

// The codes of the rows kPrefetchRows ahead are prefetched at the start of each pass (also when a pass is
// one row, as for 5-8 tokens: 8-row verification of a 0.8B-shaped file −5%): a row is a short run of
// cache lines (512 B at K = 1024), too short for the hardware prefetchers, and without it a matrix
// streamed from DRAM at ~25 GB/s on a machine that reads 62 GB/s with two threads (lm head 248320 × 1024:
// 5.0–6.1 → 2.8–3.3 ms; decode of a 0.8B-shaped model +20%: docs/performance.md). 4
// (on a 12288-row matrix) or 16–32 rows ahead measured slower. KAPITSA_AFFINE_PREFETCH=0 turns it off.
constexpr int64_t kPrefetchRows = 2 * kRowsPlanes;
bool prefetch_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("KAPITSA_AFFINE_PREFETCH");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// y[t, n0 + r] for the TB tokens and the RB rows from n0. n1: where the calling thread's rows end
// (nothing is prefetched past it); N: the row stride of y. The nibble planes of a row's 128 codes are
// extracted once and serve every token; per (token, row) the float operations are those of TB = 1 in
// the same order, so a verification row (speculative decoding) gives bit for bit what the row alone gives.
template <class Param, int TB, int RB>
void rows_dot_planes(const Operands& o, int64_t n0, float* y, int64_t n1, int64_t N) {
  const int64_t G = o.G, row_bytes = o.K / 2;
  if (n0 + kPrefetchRows + RB <= n1 && prefetch_enabled()) {
    const char* ahead = reinterpret_cast<const char*>(o.codes + (n0 + kPrefetchRows) * row_bytes);
    for (int64_t b = 0; b < RB * row_bytes; b += 64) _mm_prefetch(ahead + b, _MM_HINT_T0);
  }
  const __m512i nibble = _mm512_set1_epi16(0x000f);
  __m512 acc[TB][RB];
  for (int t = 0; t < TB; ++t)
    for (int r = 0; r < RB; ++r) acc[t][r] = _mm512_setzero_ps();
  for (int64_t gb = 0; gb < G; gb += 16) {
    const int64_t ng = std::min<int64_t>(16, G - gb);
    const __mmask16 mask = ng == 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << ng) - 1);
    __m512 scale[TB][RB];  // s·sx of 16 groups
    for (int r = 0; r < RB; ++r) {
      const __m512 s = Param::load16(o.scales, (n0 + r) * G + gb, mask), b = Param::load16(o.biases, (n0 + r) * G + gb, mask);
      for (int t = 0; t < TB; ++t) {
        scale[t][r] = _mm512_mul_ps(s, _mm512_maskz_loadu_ps(mask, o.sx + t * G + gb));
        // The bias term b·Σx of the same 16 groups, read beside the scales (the lanes are summed at the end).
        acc[t][r] = _mm512_fmadd_ps(b, _mm512_maskz_loadu_ps(mask, o.xsum + t * G + gb), acc[t][r]);
      }
    }
    for (int64_t q = 0; q < ng / 2; ++q) {
      const int64_t chunk = gb / 2 + q;  // 128 codes
      const __m512i lanes = _mm512_load_si512(kPairLanes.idx[q]);
      __m512i w[RB][4];  // the nibble planes of each row's 128 codes
#pragma GCC unroll 4
      for (int r = 0; r < RB; ++r) {
        const __m512i v = _mm512_loadu_si512(o.codes + (n0 + r) * row_bytes + chunk * 64);
        w[r][0] = _mm512_and_si512(v, nibble), w[r][1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
        w[r][2] = _mm512_and_si512(_mm512_srli_epi16(v, 8), nibble), w[r][3] = _mm512_srli_epi16(v, 12);
      }
#pragma GCC unroll 8
      for (int t = 0; t < TB; ++t) {
        const int16_t* xq = o.q + t * o.K + chunk * 128;
        const __m512i x0 = _mm512_loadu_si512(xq), x1 = _mm512_loadu_si512(xq + 32), x2 = _mm512_loadu_si512(xq + 64),
                      x3 = _mm512_loadu_si512(xq + 96);
#pragma GCC unroll 4
        for (int r = 0; r < RB; ++r) {
          __m512i d = _mm512_dpwssd_epi32(_mm512_setzero_si512(), w[r][0], x0);
          d = _mm512_dpwssd_epi32(d, w[r][1], x1);
          d = _mm512_dpwssd_epi32(d, w[r][2], x2);
          d = _mm512_dpwssd_epi32(d, w[r][3], x3);
          acc[t][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_permutexvar_ps(lanes, scale[t][r]), acc[t][r]);
        }
      }
    }
  }
  for (int t = 0; t < TB; ++t)
    for (int r = 0; r < RB; ++r) y[t * N + n0 + r] = _mm512_reduce_add_ps(acc[t][r]);
}

template <int TB>
constexpr int kRowsFor = TB <= 2 ? 4 : 1;  // rows per pass: independent chains that share the x loads

// Rows a pass for TB tokens: kRowsPlanes for one, fewer beyond, so that the rows' nibble planes (4 a
// row) and the accumulators and scales of the TB · RB (token, row) pairs stay in the 32 registers. Three
// and four tokens take one row (AMD EPYC, avx512 level, head 248320 × 1024 from DRAM, two threads,
// alternating builds: T = 3 12.0 / 11.7 → 10.0 / 9.8 ms, T = 4 14.6 / 14.4 → 12.4 / 12.4; session 22).
template <int TB>
constexpr int kRowsPlanesFor = TB == 1 ? kRowsPlanes : TB == 2 ? 2 : 1;

template <class Param, int TB>
void rows_planes(const Operands& o, float* y, int64_t N) {
  constexpr int RB = kRowsPlanesFor<TB>;
  const int64_t tasks = (N + RB - 1) / RB;
  const size_t grain = static_cast<size_t>(std::max<int64_t>(1, (32 << 10) / std::max<int64_t>(1, RB * o.K / 2)));
  parallel_for(static_cast<size_t>(tasks), grain, [&](size_t begin, size_t end) {
    const int64_t n1 = std::min<int64_t>(N, static_cast<int64_t>(end) * RB);
    int64_t n = static_cast<int64_t>(begin) * RB;
    for (; n + RB <= n1; n += RB) rows_dot_planes<Param, TB, RB>(o, n, y, n1, N);
    for (; n < n1; ++n) rows_dot_planes<Param, TB, 1>(o, n, y, n1, N);
  });
}

template <class Param>
void rows_planes_for_tokens(const Operands& o, float* y, int64_t N, int64_t T) {
  switch (T) {
    case 1: return rows_planes<Param, 1>(o, y, N);
    case 2: return rows_planes<Param, 2>(o, y, N);
    case 3: return rows_planes<Param, 3>(o, y, N);
    case 4: return rows_planes<Param, 4>(o, y, N);
    case 5: return rows_planes<Param, 5>(o, y, N);
    case 6: return rows_planes<Param, 6>(o, y, N);
    case 7: return rows_planes<Param, 7>(o, y, N);
    default: return rows_planes<Param, 8>(o, y, N);
  }
}
#endif  // KAPITSA_AFFINE_INT16_NEON

// Every row, split across threads: kRowsFor<TB> at a time.
template <int BITS, class Param, int TB>
void rows(const Operands& o, float* y, int64_t N) {
  constexpr int RB = kRowsFor<TB>;
  const int64_t tasks = (N + RB - 1) / RB;
  const size_t grain =
      static_cast<size_t>(std::max<int64_t>(1, (32 << 10) / std::max<int64_t>(1, RB * o.K * BITS / 8)));
  parallel_for(static_cast<size_t>(tasks), grain, [&](size_t begin, size_t end) {
    const int64_t n1 = std::min<int64_t>(N, static_cast<int64_t>(end) * RB);
    int64_t n = static_cast<int64_t>(begin) * RB;
    for (; n + RB <= n1; n += RB) rows_dot<BITS, Param, TB, RB>(o, n, y, N);
    for (; n < n1; ++n) rows_dot<BITS, Param, TB, 1>(o, n, y, N);
  });
}

template <int BITS, class Param>
void rows_for_tokens(const Operands& o, float* y, int64_t N, int64_t T) {
  switch (T) {
    case 1: return rows<BITS, Param, 1>(o, y, N);
    case 2: return rows<BITS, Param, 2>(o, y, N);
    case 3: return rows<BITS, Param, 3>(o, y, N);
    case 4: return rows<BITS, Param, 4>(o, y, N);
    case 5: return rows<BITS, Param, 5>(o, y, N);
    case 6: return rows<BITS, Param, 6>(o, y, N);
    case 7: return rows<BITS, Param, 7>(o, y, N);
    default: return rows<BITS, Param, 8>(o, y, N);
  }
}

// The plane kernel unless KAPITSA_AFFINE_PLANES=0 (read once; for measuring).
[[maybe_unused]] bool planes_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("KAPITSA_AFFINE_PLANES");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

template <int BITS>
void gemv(const Tensor& x, const Linear& w, const Tensor& y, int64_t T) {
  const int64_t N = w.rows(), K = w.cols(), G = w.scales().dim(-1), gs = w.group_size();
  thread_local std::vector<int16_t> q;
  thread_local std::vector<float> sx, xsum;
  q.resize(static_cast<size_t>(T * K));
  sx.resize(static_cast<size_t>(T * K / kActBlock));
  xsum.resize(static_cast<size_t>(T * G));
#if !defined(KAPITSA_AFFINE_INT16_PLANES)
  const bool planes = false;  // the plane kernel is AVX-512's
#else
  const bool planes = BITS == 4 && gs == kActBlock && K % 128 == 0 && planes_enabled();
#endif
  quantize_activations<BITS>(x.f32(), T, K, gs, q.data(), sx.data(), xsum.data(), planes);
  const Operands o{w.weight().data_as<const uint8_t>(), w.scales().data(), w.biases().data(), q.data(), sx.data(),
                   xsum.data(), K, G, gs};
#if defined(KAPITSA_AFFINE_INT16_PLANES)
  if (planes) {
    switch (w.scales().dtype()) {
      case DType::bf16: return rows_planes_for_tokens<Bf16Param>(o, y.f32(), N, T);
      case DType::f16: return rows_planes_for_tokens<F16Param>(o, y.f32(), N, T);
      default: return rows_planes_for_tokens<F32Param>(o, y.f32(), N, T);
    }
  }
#endif
  switch (w.scales().dtype()) {
    case DType::bf16: return rows_for_tokens<BITS, Bf16Param>(o, y.f32(), N, T);
    case DType::f16: return rows_for_tokens<BITS, F16Param>(o, y.f32(), N, T);
    default: return rows_for_tokens<BITS, F32Param>(o, y.f32(), N, T);
  }
}

}  // namespace

void matmul_affine_int16(const Tensor& x, const Linear& w, const Tensor& y, int64_t T) {
#if defined(KAPITSA_AFFINE_INT16_AVX2)
  gemv<4>(x, w, y, T);
#else
  if (w.bits() == 8) gemv<8>(x, w, y, T);
  else gemv<4>(x, w, y, T);
#endif
}
#else
void matmul_affine_int16(const Tensor&, const Linear&, const Tensor&, int64_t) {
  KAPITSA_CHECK(false, "affine int16-activation GEMV: not compiled for this CPU (no AVX2, AVX-512 VNNI or NEON)");
}
#endif

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
