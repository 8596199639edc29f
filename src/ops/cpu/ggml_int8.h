// The int8-activation GEMV's shared parts (internal to ops/cpu; matmul_ggml_int8.cpp has the method): the
// activation codes a row kernel reads (Act) and the integer dot-product steps of each instruction set.
// Included by the files holding row kernels (matmul_ggml_int8.cpp: Q8_0, Q4_K, Q5_K, Q6_K;
// matmul_ggml_int8_more.cpp: the other GGUF types), each compiled once per cpu level.
#pragma once

#include "ops/cpu/level.h"
#include "tensor/ggml_type.h"

#include <cstdint>
#include <cstddef>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
// GCC 12 reports its own _mm512_undefined_*() inside intrinsics (_mm512_cvtepi32_ps, the 512-bit casts)
// as uninitialised once rows_q8_0_x2's loops are unrolled: a known false positive in its headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#define KAPITSA_GGML_INT8 1
#define KAPITSA_GGML_INT8_MORE 1  // matmul_ggml_int8_more.cpp's types
#elif defined(__aarch64__)
#include <arm_neon.h>
#define KAPITSA_GGML_INT8 1
#define KAPITSA_GGML_INT8_MORE 1
#define KAPITSA_GGML_INT8_NEON 1
#endif

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL::ggml_int8 {

#if defined(KAPITSA_GGML_INT8)
constexpr int kTokens = 4;  // tokens per pass over a row (accumulators stay in registers)

// T tokens' activations as int8: x ≈ d · q per block of B inputs.
struct Act {
  const int8_t* q;        // [T, K]
  const float* d;         // [T, K/B]
  const int16_t* bsum16;  // [T, K/16] Σ q over each 16 inputs (types whose codes have offsets or mins)
  const int16_t* bsum32;  // [T, K/32] Σ q over each 32 inputs (same)
  int64_t K, B;
};

// The 12 scale bytes of a Q4_K block as 8 six-bit scales then 8 mins, one per byte (llama.cpp's
// unpacking; ref's scale_min_k4 says where each bit is).
inline void k4_scales_and_mins(const uint8_t* p, uint8_t out[16]) {
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  uint32_t u[4];
  std::memcpy(u, p, 12);
  u[3] = ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4);  // mins 4..7
  const uint32_t mins03 = u[1] & kLow6;
  u[1] = (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4);  // scales 4..7
  u[2] = mins03;
  u[0] &= kLow6;  // scales 0..3
  std::memcpy(out, u, 16);
}

#if defined(KAPITSA_GGML_INT8_NEON)
inline float f16(const uint8_t* p) {
  __fp16 h;  // FCVT: the conversion is in ARMv8.0
  std::memcpy(&h, p, 2);
  return h;
}

// acc + Σ a·b over each 4 bytes into 4 int32 lanes (signed × signed): SDOT, or without it SMULL of the
// two halves, added in int16 (each pair at most 2·128·127 = 32512), then SADALP. The lanes' sums differ
// between the two; their total does not.
template <bool DOT>
inline int32x4_t dot(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
  if constexpr (DOT) return vdotq_s32(acc, a, b);
#endif
  return vpadalq_s16(acc, vaddq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b)), vmull_high_s8(a, b)));
}
inline int8x16_t load8(const void* p) { return vld1q_s8(static_cast<const int8_t*>(p)); }
// Bit k of each byte moved to bit `to` (a signed shift count: right where negative).
inline uint8x16_t bit_to(uint8x16_t v, int k, int to) {
  return vandq_u8(vshlq_u8(v, vdupq_n_s8(static_cast<int8_t>(to - k))), vdupq_n_u8(static_cast<uint8_t>(1 << to)));
}

#else
inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
inline __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// Σ u·s over each 4 bytes (u unsigned, s signed) into 8 int32 lanes.
template <bool VNNI>
inline __m256i dot(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  if constexpr (VNNI) return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#elif defined(__AVXVNNI__)
  if constexpr (VNNI) return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#endif
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// Σ u·s·scale over each 4 bytes into acc: u·s summed in byte pairs (VPMADDUBSW; below 2^15 for the
// 4- and 6-bit codes), times an int16 scale per pair, the pairs added into int32 lanes (VPDPWSSD, or
// VPMADDWD + VPADDD).
template <bool VNNI>
inline __m256i dot_scaled(__m256i acc, __m256i u, __m256i s, __m256i scale16) {
  const __m256i p = _mm256_maddubs_epi16(u, s);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  if constexpr (VNNI) return _mm256_dpwssd_epi32(acc, p, scale16);
#elif defined(__AVXVNNI__)
  if constexpr (VNNI) return _mm256_dpwssd_avx_epi32(acc, p, scale16);
#endif
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, scale16));
}
// Lane-half k of a 16-bit vector broadcast: within each 128-bit lane, int16 element k everywhere.
inline __m256i broadcast16(__m256i v, int k) {
  return _mm256_shuffle_epi8(v, _mm256_set1_epi16(static_cast<int16_t>((2 * k + 1) << 8 | 2 * k)));
}
// Bit k of each byte moved to bit `to` (16-bit shifts: the bits that cross into the neighbour byte land
// below `to`, or above it, and are masked off).
inline __m256i bit_to(__m256i v, int k, int to) {
  const __m256i moved = k >= to ? _mm256_srli_epi16(v, k - to) : _mm256_slli_epi16(v, to - k);
  return _mm256_and_si256(moved, _mm256_set1_epi8(static_cast<char>(1 << to)));
}
// The same in a vector register, computed there: four 32-bit stores read back as one 128-bit load would
// miss store-to-load forwarding on every superblock. p[0..15] must be readable (a Q4_K / Q5_K block's
// scales are followed by its codes). Lanes: [u0 & 0x3f, (u2 & 0x0f) | (u0 >> 2 & 0x30), u1 & 0x3f,
// (u2 >> 4 & 0x0f) | (u1 >> 2 & 0x30)] — the scalar version's, byte by byte.
inline __m128i k4_scales_and_mins(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));  // u0 u1 u2 (and 4 bytes of codes)
  const __m128i low = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, 0x98), _mm_setr_epi32(0, 0, 0, 4)),  // u0 u2 u1 u2>>4
                                    _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  const __m128i high = _mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi32(v, 0x50), 2),  // u0 u0 u1 u1, >> 2
                                     _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  return _mm_or_si128(low, high);
}
#endif
#endif  // KAPITSA_GGML_INT8

// Rows [begin, end) × tokens [t0, t0 + tb) (tb ≤ kTokens) of a type matmul_ggml_int8_more.cpp holds
// (vnni: VPDPBUSD on x86-64, SDOT on AArch64, where the level has it):
// Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 (x in blocks of 32), Q2_K, Q3_K, IQ4_XS (blocks of 256).
#if defined(KAPITSA_GGML_INT8_MORE)
void rows_more(bool vnni, GgmlType type, int64_t tb, const uint8_t* blocks, int64_t row_bytes, const Act& a, int64_t t0,
               float* y, int64_t N, size_t begin, size_t end);
#endif

#if defined(KAPITSA_GGML_INT8)
// From this many tokens, the types with row kernels run as panels of 16 or 8 rows where the level has
// them (matmul_ggml_panel.cpp: the x86 levels with AVX2): returns false, having done nothing, where it does not apply.
constexpr int64_t kPanelTokens = 64;
bool ggml_panels(GgmlType type, const uint8_t* blocks, int64_t row_bytes, const Act& a, int64_t T, float* y, int64_t N);
#endif

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL::ggml_int8
