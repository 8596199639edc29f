// The GGUF block types of 32 values (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4) as the int8-activation
// kernels read them (internal to ops/cpu): each block's bytes, and its decoding into 32 byte codes in
// registers with w = d · code + c (x86-64: one 256-bit register, unsigned where the row kernels want it;
// AArch64: two 128-bit halves, signed). Shared by the row kernels (matmul_ggml_int8_more.cpp) and the
// prefill panels (matmul_ggml_panel.cpp).
#pragma once

#include "ops/cpu/ggml_int8.h"

#include <array>
#include <bit>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL::ggml_int8 {
#if defined(KAPITSA_GGML_INT8)

// Bytes of a 32-value block, whether its codes are signed (multiplied as |w| · sign(x, w) on x86), and
// MXFP4's E8M0 scale 2^(e − 127) halved for the doubled values: 2^(e − 128) as float bits (ref's), from a
// table (building the bits per block, through a general register, cost a quarter of the x86 kernel).
template <GgmlType TYPE>
constexpr int64_t kBlockBytes = TYPE == GgmlType::q4_1 ? 20 : TYPE == GgmlType::q5_0 ? 22 : TYPE == GgmlType::q5_1 ? 24
                                : TYPE == GgmlType::mxfp4 ? 17 : TYPE == GgmlType::q8_0 ? 34 : 18;  // q4_0, iq4_nl
template <GgmlType TYPE>
constexpr bool kSignedCodes = TYPE != GgmlType::q4_1 && TYPE != GgmlType::q5_1;  // and no min
constexpr std::array<float, 256> kE8m0Half = [] {
  std::array<float, 256> table{};
  for (uint32_t e = 0; e < 256; ++e) table[e] = std::bit_cast<float>(e < 2 ? 0x00200000u << e : (e - 1) << 23);
  return table;
}();

#if defined(KAPITSA_GGML_INT8_NEON)
// AArch64: the codes as signed bytes with the offsets applied (q − 8, q − 16), code-book levels by TBL.
// 16 bytes of nibbles: value j in lane j of lo (low nibbles) and hi (high nibbles, values 16–31).
struct Halves {
  int8x16_t lo, hi;
};
inline Halves nibbles(const uint8_t* qs) {
  const uint8x16_t v = vld1q_u8(qs);
  return {vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))), vreinterpretq_s8_u8(vshrq_n_u8(v, 4))};
}
// Bits 0–15 (lo) and 16–31 (hi) of 4 little-endian bytes as 0x10 in lane j (Q5_0 / Q5_1's fifth bits).
inline Halves fifth_bits(const uint8_t* qh) {
  const uint8x16_t bit = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  auto spread = [&](uint8_t b0, uint8_t b1) {
    const uint8x16_t v = vcombine_u8(vdup_n_u8(b0), vdup_n_u8(b1));
    return vreinterpretq_s8_u8(vandq_u8(vtstq_u8(v, bit), vdupq_n_u8(0x10)));
  };
  return {spread(qh[0], qh[1]), spread(qh[2], qh[3])};
}
inline Halves offset(Halves h, int8_t by) { return {vaddq_s8(h.lo, vdupq_n_s8(by)), vaddq_s8(h.hi, vdupq_n_s8(by))}; }
inline Halves either(Halves a, Halves b) { return {vorrq_s8(a.lo, b.lo), vorrq_s8(a.hi, b.hi)}; }
inline Halves lookup(int8x16_t table, Halves h) {
  return {vqtbl1q_s8(table, vreinterpretq_u8_s8(h.lo)), vqtbl1q_s8(table, vreinterpretq_u8_s8(h.hi))};
}
inline int8x16_t iq4_table() {
  return int8x16_t{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
}

// A block of 32 values decoded: w_j = d · codes_j + c (c only for Q4_1 / Q5_1's min).
struct Block32 {
  Halves codes;
  float d, c;
};
template <GgmlType TYPE>
inline Block32 decode32(const uint8_t* b) {
  if constexpr (TYPE == GgmlType::q8_0) return {{vld1q_s8(reinterpret_cast<const int8_t*>(b + 2)), vld1q_s8(reinterpret_cast<const int8_t*>(b + 18))}, f16(b), 0};
  if constexpr (TYPE == GgmlType::q4_0) return {offset(nibbles(b + 2), -8), f16(b), 0};
  if constexpr (TYPE == GgmlType::q4_1) return {nibbles(b + 4), f16(b), f16(b + 2)};
  if constexpr (TYPE == GgmlType::q5_0) return {offset(either(nibbles(b + 6), fifth_bits(b + 2)), -16), f16(b), 0};
  if constexpr (TYPE == GgmlType::q5_1) return {either(nibbles(b + 8), fifth_bits(b + 4)), f16(b), f16(b + 2)};
  if constexpr (TYPE == GgmlType::iq4_nl) return {lookup(iq4_table(), nibbles(b + 2)), f16(b), 0};
  if constexpr (TYPE == GgmlType::mxfp4)
    return {lookup(int8x16_t{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}, nibbles(b + 1)), kE8m0Half[b[0]], 0};
}

#else
inline __m128i load16(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m256i low4() { return _mm256_set1_epi8(0x0F); }  // a function: a global would run AVX2 at start-up

// 16 bytes of nibbles → value j in byte j: the low nibbles are values 0–15, the high ones 16–31 (the
// order of Q4_0, Q5_0, IQ4_NL, MXFP4 and each IQ4_XS sub-block).
inline __m256i nibbles(const uint8_t* qs) {
  const __m128i v = load16(qs);
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), low4());
}
// Bit j of 4 little-endian bytes as 0x10 in byte j (Q5_0 / Q5_1's fifth bits).
inline __m256i fifth_bits(const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(h)),
                                             _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}
// Code-book lookups (VPSHUFB, per 128-bit lane): ggml's kvalues_iq4nl, and MXFP4's E2M1 values doubled
// to integers (0, 1, 2, 3, 4, 6, 8, 12; bit 3 the sign), whose scale is then halved.
inline __m256i iq4_levels(__m256i codes) {
  const __m256i table = _mm256_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
                                         -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
  return _mm256_shuffle_epi8(table, codes);
}
inline __m256i e2m1_doubled(__m256i codes) {
  const __m256i table = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
                                         0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  return _mm256_shuffle_epi8(table, codes);
}
// A block of 32 values decoded: w_j = d · codes_j + c (c = 0 for the signed code books).
struct Block32 {
  __m256i codes;
  float d, c;
};
template <GgmlType TYPE>
inline Block32 decode32(const uint8_t* b) {
  if constexpr (TYPE == GgmlType::q8_0) return {load(b + 2), f16(b), 0};  // {d; qs[32]}
  if constexpr (TYPE == GgmlType::q4_0) return {_mm256_sub_epi8(nibbles(b + 2), _mm256_set1_epi8(8)), f16(b), 0};  // {d; qs[16]}
  if constexpr (TYPE == GgmlType::q4_1) return {nibbles(b + 4), f16(b), f16(b + 2)};   // {d; m; qs[16]}
  if constexpr (TYPE == GgmlType::q5_0)  // {d; qh u32; qs[16]}
    return {_mm256_sub_epi8(_mm256_or_si256(nibbles(b + 6), fifth_bits(b + 2)), _mm256_set1_epi8(16)), f16(b), 0};
  if constexpr (TYPE == GgmlType::q5_1)  // {d; m; qh u32; qs[16]}
    return {_mm256_or_si256(nibbles(b + 8), fifth_bits(b + 4)), f16(b), f16(b + 2)};
  if constexpr (TYPE == GgmlType::iq4_nl) return {iq4_levels(nibbles(b + 2)), f16(b), 0};  // {d; qs[16]}
  if constexpr (TYPE == GgmlType::mxfp4) return {e2m1_doubled(nibbles(b + 1)), kE8m0Half[b[0]], 0};  // {e; qs[16]}
}
#endif
#endif  // KAPITSA_GGML_INT8
}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL::ggml_int8
