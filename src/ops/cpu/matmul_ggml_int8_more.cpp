// The int8-activation GEMV (matmul_ggml_int8.cpp has the method, and Q8_0, Q4_K, Q5_K, Q6_K) for the other
// GGUF block types, on x86-64 with AVX2 (VPDPBUSD / VPDPWSSD where the level has them) and on AArch64 (NEON;
// its section below says what differs): the other types of common files (Q3_K_M, Q2_K, Q4_0, IQ4_XS and
// IQ4_NL mixes, MXFP4 experts, Q5_0 / Q5_1 / Q4_1 fallbacks), which the f32 decoder of matmul_ggml.cpp ran
// ~40-80× slower than Q4_K.
// Each row kernel turns a block's bits into byte codes in registers and sums them against the activation
// codes in integers, with one f32 step per block of 32 (per 256 values for the K-quants, whose sub-block
// scales multiply the 16-bit pair sums in VPDPWSSD). Q3_K's offset (−4) and the mins of Q4_1, Q5_1 and
// Q2_K stay out of the integer sum: they come from the activation's code sums (Act::bsum16 / bsum32).
// Signed codes — Q4_0's q − 8, Q5_0's q − 16, the code-book levels of IQ4_NL / IQ4_XS and MXFP4's doubled
// E2M1 values (looked up by VPSHUFB) — are multiplied as |w| · sign(x, w), as Q8_0 is.
// Byte products stay below 2^15 in pairs (VPMADDUBSW): at most 2 · 127 · 127 for the signed levels, 2 · 31 ·
// 127 for 5-bit codes. The rounding of x is the only change from ref (the bound tests/ops/test_ggml.cpp
// checks); each token's sums are formed alone, whatever the token count (batch invariance).
#include "base/check.h"
#include "ops/cpu/ggml_block32.h"

#include <cstring>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL::ggml_int8 {
#if defined(KAPITSA_GGML_INT8_MORE)
namespace {

#if defined(KAPITSA_GGML_INT8_NEON)
// AArch64 (every level; SDOT at the dotprod level): codes as signed bytes — offsets applied to the codes
// themselves (q − 8, q − 16, Q3_K's q − 4), code-book levels by TBL — multiplied with the activation codes
// signed × signed (dot<DOT>: SDOT, or SMULL + SADALP), sub-block scales applied to the int32 sums (MLA).
// Q4_1 / Q5_1 / Q2_K's mins come from the activation code sums as on x86.

template <GgmlType TYPE, bool DOT, int TB>
void row_b32(const uint8_t* row, const Act& a, int64_t t0, float* y, int64_t N) {
  const int64_t nb = a.K / 32;
  float32x4_t acc[TB];
  float constant[TB];
  for (int t = 0; t < TB; ++t) acc[t] = vdupq_n_f32(0.0f), constant[t] = 0;
  for (int64_t b = 0; b < nb; ++b) {
    const Block32 w = decode32<TYPE>(row + b * kBlockBytes<TYPE>);
    for (int t = 0; t < TB; ++t) {
      const int64_t at = (t0 + t) * nb + b;
      const int8_t* xq = a.q + (t0 + t) * a.K + b * 32;
      const int32x4_t p = dot<DOT>(dot<DOT>(vdupq_n_s32(0), w.codes.lo, load8(xq)), w.codes.hi, load8(xq + 16));
      const float dx = a.d[at];
      acc[t] = vfmaq_n_f32(acc[t], vcvtq_f32_s32(p), w.d * dx);
      if constexpr (!kSignedCodes<TYPE>) constant[t] += w.c * dx * static_cast<float>(a.bsum32[at]);
    }
  }
  for (int t = 0; t < TB; ++t) y[t * N] = vaddvq_f32(acc[t]) + constant[t];
}

// IQ4_XS: 8 IQ4_NL-laid sub-blocks with 6-bit scales stored + 32 (x86's comment).
template <bool DOT, int TB>
void row_iq4_xs(const uint8_t* row, const Act& a, int64_t t0, float* y, int64_t N) {
  const int64_t ns = a.K / 256;
  const int8x16_t table = iq4_table();
  float32x4_t acc[TB];
  for (int t = 0; t < TB; ++t) acc[t] = vdupq_n_f32(0.0f);
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* blk = row + s * 136;
    const float d = f16(blk);
    const int scales_h = blk[2] | blk[3] << 8;
    int32_t ls[8];
    Halves w[8];
    for (int i = 0; i < 8; ++i) {
      ls[i] = ((((blk[4 + i / 2] >> (4 * (i % 2))) & 0xF) | (((scales_h >> (2 * i)) & 3) << 4)) - 32);
      w[i] = lookup(table, nibbles(blk + 8 + 16 * i));
    }
    for (int t = 0; t < TB; ++t) {
      const int8_t* xq = a.q + (t0 + t) * a.K + s * 256;
      int32x4_t sum = vdupq_n_s32(0);
      for (int i = 0; i < 8; ++i)
        sum = vmlaq_n_s32(sum, dot<DOT>(dot<DOT>(vdupq_n_s32(0), w[i].lo, load8(xq + 32 * i)), w[i].hi, load8(xq + 32 * i + 16)), ls[i]);
      acc[t] = vfmaq_n_f32(acc[t], vcvtq_f32_s32(sum), d * a.d[(t0 + t) * ns + s]);
    }
  }
  for (int t = 0; t < TB; ++t) y[t * N] = vaddvq_f32(acc[t]);
}

// Q2_K: value 32j + l of half n is bits 2j.. of qs[32n + l], sub-block 8n + 2j + l / 16 (x86's comment).
template <bool DOT, int TB>
void row_q2_k(const uint8_t* row, const Act& a, int64_t t0, float* y, int64_t N) {
  const int64_t ns = a.K / 256;
  float32x4_t acc[TB];
  float mins[TB];
  for (int t = 0; t < TB; ++t) acc[t] = vdupq_n_f32(0.0f), mins[t] = 0;
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* blk = row + s * 84;
    const float d = f16(blk + 80), dmin = f16(blk + 82);
    const uint8x16_t bytes = vld1q_u8(blk);
    const int16x8_t mn0 = vreinterpretq_s16_u16(vmovl_u8(vshr_n_u8(vget_low_u8(bytes), 4)));
    const int16x8_t mn1 = vreinterpretq_s16_u16(vmovl_u8(vshr_n_u8(vget_high_u8(bytes), 4)));
    int8x16_t q[16];  // sub-block g
    for (int n = 0; n < 2; ++n)
      for (int half = 0; half < 2; ++half) {
        const uint8x16_t v = vld1q_u8(blk + 16 + 32 * n + 16 * half);
        for (int j = 0; j < 4; ++j)
          q[8 * n + 2 * j + half] = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(v, vdupq_n_s8(static_cast<int8_t>(-2 * j))), vdupq_n_u8(3)));
      }
    for (int t = 0; t < TB; ++t) {
      const int8_t* xq = a.q + (t0 + t) * a.K + s * 256;
      int32x4_t sum = vdupq_n_s32(0);
      for (int g = 0; g < 16; ++g) sum = vmlaq_n_s32(sum, dot<DOT>(vdupq_n_s32(0), q[g], load8(xq + 16 * g)), blk[g] & 0xF);
      const int16_t* bs = a.bsum16 + (t0 + t) * (a.K / 16) + s * 16;
      const int32_t msum = vaddvq_s32(vmlal_s16(vmull_s16(vget_low_s16(mn0), vld1_s16(bs)), vget_high_s16(mn0), vld1_s16(bs + 4))) +
                           vaddvq_s32(vmlal_s16(vmull_s16(vget_low_s16(mn1), vld1_s16(bs + 8)), vget_high_s16(mn1), vld1_s16(bs + 12)));
      const float dx = a.d[(t0 + t) * ns + s];
      acc[t] = vfmaq_n_f32(acc[t], vcvtq_f32_s32(sum), d * dx);
      mins[t] += dmin * dx * static_cast<float>(msum);
    }
  }
  for (int t = 0; t < TB; ++t) y[t * N] = vaddvq_f32(acc[t]) - mins[t];
}

// Q3_K: Q2_K's order plus bit 4n + j of hmask[l]; codes q − 4 directly, scales − 32 (x86's comment).
template <bool DOT, int TB>
void row_q3_k(const uint8_t* row, const Act& a, int64_t t0, float* y, int64_t N) {
  const int64_t ns = a.K / 256;
  float32x4_t acc[TB];
  for (int t = 0; t < TB; ++t) acc[t] = vdupq_n_f32(0.0f);
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* blk = row + s * 110;
    const float d = f16(blk + 108);
    const uint8_t* sb = blk + 96;
    int32_t sc[16];
    for (int i = 0; i < 16; ++i)
      sc[i] = (((i < 8 ? sb[i] : sb[i - 8] >> 4) & 0xF) | (((sb[8 + i % 4] >> (2 * (i / 4))) & 3) << 4)) - 32;
    const uint8x16_t hm[2] = {vld1q_u8(blk), vld1q_u8(blk + 16)};
    int8x16_t q[16];
    for (int n = 0; n < 2; ++n)
      for (int half = 0; half < 2; ++half) {
        const uint8x16_t v = vld1q_u8(blk + 32 + 32 * n + 16 * half);
        for (int j = 0; j < 4; ++j) {
          const uint8x16_t low = vandq_u8(vshlq_u8(v, vdupq_n_s8(static_cast<int8_t>(-2 * j))), vdupq_n_u8(3));
          q[8 * n + 2 * j + half] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(low, bit_to(hm[half], 4 * n + j, 2))), vdupq_n_s8(4));
        }
      }
    for (int t = 0; t < TB; ++t) {
      const int8_t* xq = a.q + (t0 + t) * a.K + s * 256;
      int32x4_t sum = vdupq_n_s32(0);
      for (int g = 0; g < 16; ++g) sum = vmlaq_n_s32(sum, dot<DOT>(vdupq_n_s32(0), q[g], load8(xq + 16 * g)), sc[g]);
      acc[t] = vfmaq_n_f32(acc[t], vcvtq_f32_s32(sum), d * a.d[(t0 + t) * ns + s]);
    }
  }
  for (int t = 0; t < TB; ++t) y[t * N] = vaddvq_f32(acc[t]);
}
#else
// One row · TB tokens of a 32-value block type; y[t · N] for token t:
// y = Σ_blocks d·dx·Σ codes·x̂ + c·dx·Σ x̂. Even and odd blocks in two chains (an FMA waits for its
// accumulator); every token's sums in the same order whatever TB.
template <GgmlType TYPE, bool VNNI, int TB>
void row_b32(const uint8_t* row, const Act& a, int64_t t0, float* y, int64_t N) {
  const int64_t nb = a.K / 32;
  __m256 acc[TB][2];
  float constant[TB][2];
  for (int t = 0; t < TB; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps(), constant[t][0] = constant[t][1] = 0;
  // Block b into chain `chain` (a constant after unrolling by two: an index known only at run time put
  // the accumulators on the stack, and each FMA waited for a store).
  auto block = [&](int64_t b, int chain) {
    const Block32 w = decode32<TYPE>(row + b * kBlockBytes<TYPE>);
    const __m256i u = kSignedCodes<TYPE> ? _mm256_sign_epi8(w.codes, w.codes) : w.codes;
    for (int t = 0; t < TB; ++t) {
      const int64_t at = (t0 + t) * nb + b;  // block b of token t0 + t in d and bsum32
      __m256i xq = load(a.q + (t0 + t) * a.K + b * 32);
      if constexpr (kSignedCodes<TYPE>) xq = _mm256_sign_epi8(xq, w.codes);
      const float dx = a.d[at];
      acc[t][chain] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot<VNNI>(u, xq)), _mm256_set1_ps(w.d * dx), acc[t][chain]);
      if constexpr (!kSignedCodes<TYPE>) constant[t][chain] += w.c * dx * static_cast<float>(a.bsum32[at]);
    }
  };
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) block(b, 0), block(b + 1, 1);
  if (b < nb) block(b, 0);
  for (int t = 0; t < TB; ++t)
    y[t * N] = hsum(_mm256_add_ps(acc[t][0], acc[t][1])) + (constant[t][0] + constant[t][1]);
}

// IQ4_XS's 8 six-bit scales (stored + 32) from scales_h and scales_l, in bytes 0–7 (in registers, as Q3_K's).
inline __m128i iq4_xs_scales(const uint8_t* p) {
  uint16_t h;
  uint32_t l;
  std::memcpy(&h, p, 2);
  std::memcpy(&l, p + 2, 4);
  const __m128i low = _mm_unpacklo_epi8(_mm_cvtsi32_si128(static_cast<int>(l & 0x0F0F0F0F)),
                                        _mm_cvtsi32_si128(static_cast<int>((l >> 4) & 0x0F0F0F0F)));
  const __m128i hv = _mm_set1_epi32(h), m2 = _mm_set1_epi32(3);
  const __m128i even = _mm_and_si128(_mm_srlv_epi32(hv, _mm_setr_epi32(0, 4, 8, 12)), m2);  // lane k: scale 2k's bits
  const __m128i odd = _mm_and_si128(_mm_srlv_epi32(hv, _mm_setr_epi32(2, 6, 10, 14)), m2);  // 2k + 1's
  const __m128i pairs = _mm_or_si128(even, _mm_slli_epi32(odd, 8));
  const __m128i high = _mm_shuffle_epi8(pairs, _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1));
  return _mm_or_si128(low, _mm_slli_epi16(high, 4));
}

template <bool VNNI, int TB>
void row_iq4_xs(const uint8_t* row, const Act& a, int64_t t0, float* y, int64_t N) {
  const int64_t ns = a.K / 256;
  __m256 acc[TB];
  for (int t = 0; t < TB; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* blk = row + s * 136;
    const float d = f16(blk);
    const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_sub_epi8(iq4_xs_scales(blk + 2), _mm_set1_epi8(32))));
    __m256i w[8], u[8];
    for (int i = 0; i < 8; ++i) w[i] = iq4_levels(nibbles(blk + 8 + 16 * i)), u[i] = _mm256_sign_epi8(w[i], w[i]);
    for (int t = 0; t < TB; ++t) {
      const int8_t* xq = a.q + (t0 + t) * a.K + s * 256;
      __m256i even = _mm256_setzero_si256(), odd = _mm256_setzero_si256();
      for (int i = 0; i < 8; i += 2) {
        even = dot_scaled<VNNI>(even, u[i], _mm256_sign_epi8(load(xq + 32 * i), w[i]), broadcast16(sc, i));
        odd = dot_scaled<VNNI>(odd, u[i + 1], _mm256_sign_epi8(load(xq + 32 * (i + 1)), w[i + 1]), broadcast16(sc, i + 1));
      }
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(even, odd)), _mm256_set1_ps(d * a.d[(t0 + t) * ns + s]), acc[t]);
    }
  }
  for (int t = 0; t < TB; ++t) y[t * N] = hsum(acc[t]);
}

// Even-numbered then odd-numbered of 16 int16 scales, one per sub-block of 16: the lanes of
// broadcast16(·, k) then hold sub-block 2k's scale (low 128 bits) and 2k + 1's (high), the sub-blocks a
// register of 32 codes of Q2_K / Q3_K covers.
inline __m256i split_even_odd(__m128i scales8, bool is_signed) {
  const __m128i order = _mm_shuffle_epi8(scales8, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
  return is_signed ? _mm256_cvtepi8_epi16(order) : _mm256_cvtepu8_epi16(order);
}

// Q2_K {scales[16]; qs[64]; d, dmin f16}, 84 bytes: 16 sub-blocks of 16, scales[g] = sub-block g's scale
// (low nibble) and min (high); value 32j + l of half n is bits 2j..2j+1 of qs[32n + l] — register (n, j)
// holds sub-blocks 8n + 2j and 8n + 2j + 1. w = d·sc·q − dmin·m.
template <bool VNNI, int TB>
void row_q2_k(const uint8_t* row, const Act& a, int64_t t0, float* y, int64_t N) {
  const int64_t ns = a.K / 256;
  const __m256i m2 = _mm256_set1_epi8(3);
  __m256 acc[TB], mins[TB];
  for (int t = 0; t < TB; ++t) acc[t] = mins[t] = _mm256_setzero_ps();
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* blk = row + s * 84;
    const float d = f16(blk + 80), dmin = f16(blk + 82);
    const __m128i bytes = load16(blk);
    const __m256i sc = split_even_odd(_mm_and_si128(bytes, _mm_set1_epi8(0x0F)), false);
    const __m256i mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0x0F)));
    __m256i q[8];
    for (int n = 0; n < 2; ++n) {
      const __m256i v = load(blk + 16 + 32 * n);
      for (int j = 0; j < 4; ++j) q[4 * n + j] = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m2);
    }
    for (int t = 0; t < TB; ++t) {
      const int8_t* xq = a.q + (t0 + t) * a.K + s * 256;
      __m256i even = _mm256_setzero_si256(), odd = _mm256_setzero_si256();
      for (int k = 0; k < 8; k += 2) {
        even = dot_scaled<VNNI>(even, q[k], load(xq + 32 * k), broadcast16(sc, k));
        odd = dot_scaled<VNNI>(odd, q[k + 1], load(xq + 32 * (k + 1)), broadcast16(sc, k + 1));
      }
      const float dx = a.d[(t0 + t) * ns + s];
      const __m256i msum = _mm256_madd_epi16(mn, load(a.bsum16 + (t0 + t) * (a.K / 16) + s * 16));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(even, odd)), _mm256_set1_ps(d * dx), acc[t]);
      mins[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(dmin * dx), mins[t]);
    }
  }
  for (int t = 0; t < TB; ++t) y[t * N] = hsum(_mm256_sub_ps(acc[t], mins[t]));
}

// Q3_K's 16 six-bit scales (stored + 32) from their 12 bytes, one per byte: scale i's low 4 bits are the
// low (i < 8) or high nibble of byte i % 8, its top 2 bits bits 2(i / 4).. of byte 8 + i % 4. In
// registers: scalar unpacking into memory read back as a vector stalled on store forwarding (a third
// of a Q3_K decode).
inline __m128i q3_k_scales(const uint8_t* p) {
  uint32_t top;
  std::memcpy(&top, p + 8, 4);
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));  // bytes 0..7
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(bytes, m4), _mm_and_si128(_mm_srli_epi16(bytes, 4), m4));
  const __m128i high = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(top)), _mm_setr_epi32(0, 2, 4, 6)),
                                     _mm_set1_epi8(3));  // byte i: bits 2(i / 4).. of byte i % 4 of `top`
  return _mm_or_si128(low, _mm_slli_epi16(high, 4));
}

// Q3_K {hmask[32]; qs[64]; scales[12]; d f16}, 110 bytes: Q2_K's order of 2-bit codes plus a third bit,
// bit 4n + j of hmask[l] for register (n, j); 16 six-bit scales stored + 32 (scale i: low 4 bits the low
// (i < 8) or high nibble of scales[i % 8], top 2 bits bits 2(i / 4).. of scales[8 + i % 4]).
// w = d·(sc − 32)·(q − 4), q = low 2 bits + 4·bit.
template <bool VNNI, int TB>
void row_q3_k(const uint8_t* row, const Act& a, int64_t t0, float* y, int64_t N) {
  const int64_t ns = a.K / 256;
  const __m256i m2 = _mm256_set1_epi8(3);
  __m256 acc[TB];
  for (int t = 0; t < TB; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* blk = row + s * 110;
    const float d = f16(blk + 108);
    const __m128i sc8 = _mm_sub_epi8(q3_k_scales(blk + 96), _mm_set1_epi8(32));
    const __m256i sc = split_even_odd(sc8, true);
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
    const __m256i hm = load(blk);
    __m256i q[8];
    for (int n = 0; n < 2; ++n) {
      const __m256i v = load(blk + 32 + 32 * n);
      for (int j = 0; j < 4; ++j)
        q[4 * n + j] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m2), bit_to(hm, 4 * n + j, 2));
    }
    for (int t = 0; t < TB; ++t) {
      const int8_t* xq = a.q + (t0 + t) * a.K + s * 256;
      __m256i even = _mm256_setzero_si256(), odd = _mm256_setzero_si256();
      for (int k = 0; k < 8; k += 2) {
        even = dot_scaled<VNNI>(even, q[k], load(xq + 32 * k), broadcast16(sc, k));
        odd = dot_scaled<VNNI>(odd, q[k + 1], load(xq + 32 * (k + 1)), broadcast16(sc, k + 1));
      }
      // − 4 · Σ_g (sc_g − 32) · Σ x̂ over sub-block g
      const __m256i corr = _mm256_madd_epi16(sc16, load(a.bsum16 + (t0 + t) * (a.K / 16) + s * 16));
      const __m256i sum = _mm256_sub_epi32(_mm256_add_epi32(even, odd), _mm256_slli_epi32(corr, 2));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(d * a.d[(t0 + t) * ns + s]), acc[t]);
    }
  }
  for (int t = 0; t < TB; ++t) y[t * N] = hsum(acc[t]);
}

#endif  // KAPITSA_GGML_INT8_NEON

// Rows [begin, end) × tokens [t0, t0 + TB), the row kernel called directly (inlined into the loop).
template <bool VNNI, int TB>
void each_row(GgmlType type, const uint8_t* blocks, int64_t row_bytes, const Act& a, int64_t t0, float* y, int64_t N,
              size_t begin, size_t end) {
  auto loop = [&](auto kernel) {
    for (size_t n = begin; n < end; ++n)
      kernel(blocks + static_cast<int64_t>(n) * row_bytes, a, t0, y + t0 * N + static_cast<int64_t>(n), N);
  };
  switch (type) {
    case GgmlType::q4_0: return loop([](auto... args) { row_b32<GgmlType::q4_0, VNNI, TB>(args...); });
    case GgmlType::q4_1: return loop([](auto... args) { row_b32<GgmlType::q4_1, VNNI, TB>(args...); });
    case GgmlType::q5_0: return loop([](auto... args) { row_b32<GgmlType::q5_0, VNNI, TB>(args...); });
    case GgmlType::q5_1: return loop([](auto... args) { row_b32<GgmlType::q5_1, VNNI, TB>(args...); });
    case GgmlType::iq4_nl: return loop([](auto... args) { row_b32<GgmlType::iq4_nl, VNNI, TB>(args...); });
    case GgmlType::mxfp4: return loop([](auto... args) { row_b32<GgmlType::mxfp4, VNNI, TB>(args...); });
    case GgmlType::q2_k: return loop([](auto... args) { row_q2_k<VNNI, TB>(args...); });
    case GgmlType::q3_k: return loop([](auto... args) { row_q3_k<VNNI, TB>(args...); });
    case GgmlType::iq4_xs: return loop([](auto... args) { row_iq4_xs<VNNI, TB>(args...); });
    default: KAPITSA_CHECK(false, "cpu: no int8-activation row kernel for ggml {}", ggml_type_name(type));
  }
}
template <bool VNNI>
void each_row(GgmlType type, int64_t tb, const uint8_t* blocks, int64_t row_bytes, const Act& a, int64_t t0, float* y,
              int64_t N, size_t begin, size_t end) {
  switch (tb) {
    case 1: return each_row<VNNI, 1>(type, blocks, row_bytes, a, t0, y, N, begin, end);
    case 2: return each_row<VNNI, 2>(type, blocks, row_bytes, a, t0, y, N, begin, end);
    case 3: return each_row<VNNI, 3>(type, blocks, row_bytes, a, t0, y, N, begin, end);
    default: return each_row<VNNI, 4>(type, blocks, row_bytes, a, t0, y, N, begin, end);
  }
}

}  // namespace

void rows_more(bool vnni, GgmlType type, int64_t tb, const uint8_t* blocks, int64_t row_bytes, const Act& a, int64_t t0,
               float* y, int64_t N, size_t begin, size_t end) {
  if (vnni) each_row<true>(type, tb, blocks, row_bytes, a, t0, y, N, begin, end);
  else each_row<false>(type, tb, blocks, row_bytes, a, t0, y, N, begin, end);
}

#endif  // KAPITSA_GGML_INT8_MORE
}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL::ggml_int8
