// Decode GEMV (and prefill) for llama.cpp's Q8_0, Q4_K, Q5_K and Q6_K blocks with int8 activations, as llama.cpp does it
// (the other GGUF types' row kernels: matmul_ggml_int8_more.cpp):
// each token's x is rounded once per call to int8 codes with one f32 scale per block of inputs
// (dx = max|x| / 127 over 32 inputs for Q8_0 — llama.cpp's q8_0 — and over 256 for the K-quants —
// its q8_K — with Σ codes per 16 and per 32 inputs), then each weight block is dotted in integers
// without being widened to floats: 32 unsigned × signed byte products summed four to an int32 lane by
// VPDPBUSD (AVX-512 VNNI or AVX-VNNI) or by VPMADDUBSW + VPMADDWD (AVX2; 16-bit pair sums stay below
// 32767 for these code ranges); Q4_K / Q6_K sub-block scales multiply the 16-bit pair sums in the same
// instruction that adds them (VPDPWSSD, or VPMADDWD), d·dx multiplies in f32; the constant parts of the codes (Q4_K's min, Q6_K's −32) come out
// of the activation's code sums. Signed Q8_0 codes use |w| and sign(x, w) (llama.cpp's trick).
// The rounding of x is the only change from ref: an output moves by at most Σ_k |w_k| · dx_k / 2
// (the bound tests/ops/test_ggml.cpp checks). Rows are split across threads; tokens 4 at a time.
// AArch64 (NEON, every level): the same rounding of x, the codes as signed bytes (Q6_K's q − 32
// directly), 16 byte products summed four to an int32 lane by SDOT (the dotprod level) or by SMULL
// pairs + SADALP (baseline: |a·b + c·d| ≤ 2·128·127 fits int16); sub-block scales multiply the int32
// sums (MLA), d·dx in f32.
// Built where AVX2, FMA and F16C or NEON are compiled for; other builds keep matmul_ggml.cpp's decoder.
#include "base/thread_pool.h"
#include "ops/cpu/ggml.h"
#include "ops/cpu/ggml_int8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>


namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {

int64_t ggml_int8_block(GgmlType type) {
#if defined(KAPITSA_GGML_INT8)
  switch (type) {
    case GgmlType::q8_0: return 32;
    case GgmlType::q4_k:
    case GgmlType::q6_k: return 256;
#if defined(KAPITSA_GGML_INT8_MORE)
    case GgmlType::q4_0:
    case GgmlType::q4_1:
    case GgmlType::q5_0:
    case GgmlType::q5_1:
    case GgmlType::iq4_nl:
    case GgmlType::mxfp4: return 32;
    case GgmlType::q2_k:
    case GgmlType::q3_k:
    case GgmlType::q5_k:
    case GgmlType::iq4_xs: return 256;
#endif
    default: return 0;
  }
#else
  (void)type;
  return 0;
#endif
}

bool ggml_int8_activations(GgmlType type, int64_t tokens) {
  return ggml_int8_block(type) > 0 && tokens >= 1;
}

bool ggml_int8_has_vnni() {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__) || defined(__AVXVNNI__) || defined(__ARM_FEATURE_DOTPROD)
  return true;
#else
  return false;
#endif
}

#if defined(KAPITSA_GGML_INT8)
namespace {

using namespace ggml_int8;

// x: [T, K] → the arrays of Act. q = round(x / d), ties to even; |q| ≤ 127.
void quantize(const float* x, int64_t T, int64_t K, int64_t B, bool sums, int8_t* q, float* d, int16_t* b16,
              int16_t* b32) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t p = 0; p < K / B; ++p) {
      const float* v = x + t * K + p * B;
      int8_t* out = q + t * K + p * B;
      float amax = 0;
      for (int64_t i = 0; i < B; ++i) amax = std::max(amax, std::abs(v[i]));
      const float inv = amax > 0 ? 127.0f / amax : 0.0f;
      d[t * (K / B) + p] = amax / 127.0f;
      for (int64_t i = 0; i < B; ++i)
        out[i] = static_cast<int8_t>(std::clamp(std::nearbyint(v[i] * inv), -127.0f, 127.0f));
    }
  if (!sums) return;
  for (int64_t g = 0; g < T * K / 16; ++g) {
    int s = 0;
    for (int i = 0; i < 16; ++i) s += q[g * 16 + i];
    b16[g] = static_cast<int16_t>(s);
    if (g % 2 == 1) b32[g / 2] = static_cast<int16_t>(b16[g - 1] + s);
  }
}

#if defined(KAPITSA_GGML_INT8_NEON)
// One row · TB tokens; y[t · N] for token t. Q8_0 {d f16; qs[32] int8}, 34 bytes.
template <bool DOT, int TB>
void row_q8_0(const uint8_t* row, const Act& a, int64_t t0, float* y, int64_t N) {
  const int64_t nb = a.K / 32;
  float32x4_t acc[TB];
  for (int t = 0; t < TB; ++t) acc[t] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * 34;
    const int8x16_t w0 = load8(blk + 2), w1 = load8(blk + 18);
    const float dw = f16(blk);
    for (int t = 0; t < TB; ++t) {
      const int8_t* xq = a.q + (t0 + t) * a.K + b * 32;
      const int32x4_t p = dot<DOT>(dot<DOT>(vdupq_n_s32(0), w0, load8(xq)), w1, load8(xq + 16));
      acc[t] = vfmaq_n_f32(acc[t], vcvtq_f32_s32(p), dw * a.d[(t0 + t) * nb + b]);
    }
  }
  for (int t = 0; t < TB; ++t) y[t * N] = vaddvq_f32(acc[t]);
}

// Q4_K {d, dmin f16; scales[12]; qs[128]}, 144 bytes: per 64 values, 32 bytes of qs hold sub-block 2c
// in low nibbles and 2c + 1 in high nibbles; w = d·sc·q − dmin·m per sub-block of 32. FIVE: Q5_K {d, dmin;
// scales[12]; qh[32]; qs[128]}, 176 bytes, the same plus bit j of qh[l] as the fifth bit of value l of
// sub-block j.
template <bool DOT, int TB, bool FIVE = false>
void row_q4_k(const uint8_t* row, const Act& a, int64_t t0, float* y, int64_t N) {
  const int64_t ns = a.K / 256;
  const uint8x16_t m4 = vdupq_n_u8(0x0F);
  float32x4_t acc[TB];
  float mins[TB];  // Σ dmin·dx·Σ_j m_j·Σx̂_j
  for (int t = 0; t < TB; ++t) acc[t] = vdupq_n_f32(0.0f), mins[t] = 0;
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* blk = row + s * (FIVE ? 176 : 144);
    const float d = f16(blk), dmin = f16(blk + 2);
    alignas(16) uint8_t sm[16];
    k4_scales_and_mins(blk + 4, sm);
    const int16x8_t mn = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sm + 8)));
    const uint8_t* qs = blk + (FIVE ? 48 : 16);
    int8x16_t q[8][2];  // sub-block j in two halves of 16
    for (int c = 0; c < 4; ++c)
      for (int h = 0; h < 2; ++h) {
        const uint8x16_t v = vld1q_u8(qs + 32 * c + 16 * h);
        uint8x16_t lo = vandq_u8(v, m4), hi = vshrq_n_u8(v, 4);
        if constexpr (FIVE) {
          const uint8x16_t qh = vld1q_u8(blk + 16 + 16 * h);
          lo = vorrq_u8(lo, bit_to(qh, 2 * c, 4)), hi = vorrq_u8(hi, bit_to(qh, 2 * c + 1, 4));
        }
        q[2 * c][h] = vreinterpretq_s8_u8(lo), q[2 * c + 1][h] = vreinterpretq_s8_u8(hi);
      }
    for (int t = 0; t < TB; ++t) {
      const int8_t* xq = a.q + (t0 + t) * a.K + s * 256;
      int32x4_t sum = vdupq_n_s32(0);
      for (int j = 0; j < 8; ++j) {
        const int32x4_t p = dot<DOT>(dot<DOT>(vdupq_n_s32(0), q[j][0], load8(xq + 32 * j)), q[j][1], load8(xq + 32 * j + 16));
        sum = vmlaq_n_s32(sum, p, sm[j]);
      }
      const int16x8_t bs = vld1q_s16(a.bsum32 + (t0 + t) * (a.K / 32) + s * 8);
      const int32_t msum = vaddvq_s32(vmlal_high_s16(vmull_s16(vget_low_s16(mn), vget_low_s16(bs)), mn, bs));
      const float dx = a.d[(t0 + t) * ns + s];
      acc[t] = vfmaq_n_f32(acc[t], vcvtq_f32_s32(sum), d * dx);
      mins[t] += dmin * dx * static_cast<float>(msum);
    }
  }
  for (int t = 0; t < TB; ++t) y[t * N] = vaddvq_f32(acc[t]) - mins[t];
}

// Q6_K {ql[128]; qh[64]; scales[16] int8; d f16}, 210 bytes: in half h, values 32i + l (i < 4) take
// their low 4 bits from ql[64h + 32(i % 2) + l] (low nibble for i < 2) and bits 2i..2i+1 of
// qh[32h + l] as bits 4..5; w = d·scale·(q − 32) per 16 values.
template <bool DOT, int TB>
void row_q6_k(const uint8_t* row, const Act& a, int64_t t0, float* y, int64_t N) {
  const int64_t ns = a.K / 256;
  const uint8x16_t m4 = vdupq_n_u8(0x0F), m2 = vdupq_n_u8(0x30);
  const int8x16_t k32 = vdupq_n_s8(32);
  float32x4_t acc[TB];
  for (int t = 0; t < TB; ++t) acc[t] = vdupq_n_f32(0.0f);
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* blk = row + s * 210;
    const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
    const float d = f16(blk + 208);
    int8x16_t q[16];  // q − 32 of values 16g..16g+15
    for (int h = 0; h < 2; ++h)
      for (int half = 0; half < 2; ++half) {  // l in [16·half, 16·half + 16)
        const uint8x16_t l0 = vld1q_u8(blk + 64 * h + 16 * half), l1 = vld1q_u8(blk + 64 * h + 32 + 16 * half);
        const uint8x16_t hb = vld1q_u8(blk + 128 + 32 * h + 16 * half);
        const uint8x16_t v[4] = {vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8(hb, 4), m2)),
                                 vorrq_u8(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8(hb, 2), m2)),
                                 vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(hb, m2)),
                                 vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(hb, 2), m2))};
        for (int i = 0; i < 4; ++i) q[8 * h + 2 * i + half] = vsubq_s8(vreinterpretq_s8_u8(v[i]), k32);
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
// One row · TB tokens; y[t · N] for token t. Q8_0 {d f16; qs[32] int8}, 34 bytes. Block b adds into
// chain b % kQ8Chains of its token: one chain would wait for each FMA before the next (the latency, not
// the loads, bounded a row), and the rows stay one sequential stream (rows interleaved in one pass
// measured 1.3–3× slower from DRAM). The chains' order does not depend on TB (batch invariance).
constexpr int kQ8Chains = 4;
template <bool VNNI, int TB>
void row_q8_0(const uint8_t* row, const Act& a, int64_t t0, float* y, int64_t N) {
  const int64_t nb = a.K / 32;
  __m256 acc[TB][kQ8Chains];
  for (int t = 0; t < TB; ++t)
    for (int c = 0; c < kQ8Chains; ++c) acc[t][c] = _mm256_setzero_ps();
  for (int64_t b0 = 0; b0 < nb; b0 += kQ8Chains)
    for (int c = 0; c < kQ8Chains && b0 + c < nb; ++c) {
      const int64_t b = b0 + c;
      const uint8_t* blk = row + b * 34;
      const __m256i w = load(blk + 2), aw = _mm256_sign_epi8(w, w);
      const float dw = f16(blk);
      for (int t = 0; t < TB; ++t) {
        const __m256i p = dot<VNNI>(aw, _mm256_sign_epi8(load(a.q + (t0 + t) * a.K + b * 32), w));
        acc[t][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * a.d[(t0 + t) * nb + b]), acc[t][c]);
      }
    }
  for (int t = 0; t < TB; ++t)
    y[t * N] = hsum(_mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][1]), _mm256_add_ps(acc[t][2], acc[t][3])));
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
// Q8_0 for 2–4 tokens at the avx512 level: R rows × TB tokens a pass, two blocks a 512-bit step. The
// activation codes go in unsigned (q + 128, an XOR) so VPDPBUSD takes the signed weights as they are,
// starting from −128·Σw (the same dot of the weights with 128s): Σ(q + 128)·w − 128·Σw = Σ q·w, the
// int32 lanes row_q8_0 gets with the sign trick, without its two VPSIGNB per token. One step's 16
// lanes are block 2j (low half) and 2j + 1 (high half); accumulator j % 2 of a token therefore holds
// row_q8_0's chains 2·(j % 2) and 2·(j % 2) + 1 in its halves, each chain's blocks in the same order,
// each block scaled by the same f32 product dw·dx and summed the same way at the end: the outputs are
// bit-equal to row_q8_0's (one token) whatever TB (GgmlRowsOfSeveralTokensEqualEachTokenAlone).
// Per weight pair a row costs 9 operations and a token pair 4; the 4 per row, token and pair make the
// 2 × 4 tile ~1.8× less work than row_q8_0 per weight and token.
template <int R, int TB>
void rows_q8_0_x2(const uint8_t* row, int64_t row_bytes, const Act& a, int64_t t0, float* y, int64_t N) {
  const int64_t nb = a.K / 32;
  const __m512i k128 = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i halves = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  __m512 acc[R][TB][2];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TB; ++t) acc[r][t][0] = acc[r][t][1] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b += 2) {
    const bool pair = b + 1 < nb;  // an odd block count ends on one block: the low halves only
    const int j = static_cast<int>((b / 2) % 2);
    __m512i w[R], negc[R];
    __m512 dw[R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = row + r * row_bytes + b * 34;
      const __m256i lo = load(blk + 2);
      w[r] = pair ? _mm512_inserti64x4(_mm512_castsi256_si512(lo), load(blk + 36), 1) : _mm512_zextsi256_si512(lo);
      negc[r] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), k128, w[r]));
      uint16_t h0, h1 = 0;
      std::memcpy(&h0, blk, 2);
      if (pair) std::memcpy(&h1, blk + 34, 2);
      const __m128 d01 = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h0 | uint32_t{h1} << 16)));
      dw[r] = _mm512_permutexvar_ps(halves, _mm512_castps128_ps512(d01));
    }
    for (int t = 0; t < TB; ++t) {
      const int8_t* xq = a.q + (t0 + t) * a.K + b * 32;
      const float* dxp = a.d + (t0 + t) * nb + b;
      const __m512i xu = _mm512_xor_si512(
          k128, pair ? _mm512_loadu_si512(xq) : _mm512_zextsi256_si512(load(xq)));
      const __m128 dx01 = pair ? _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(dxp))) : _mm_load_ss(dxp);
      const __m512 dx = _mm512_permutexvar_ps(halves, _mm512_castps128_ps512(dx01));
      for (int r = 0; r < R; ++r) {
        const __m512 p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(negc[r], xu, w[r]));
        const __m512 sc = _mm512_mul_ps(dw[r], dx);
        acc[r][t][j] = pair ? _mm512_fmadd_ps(p, sc, acc[r][t][j]) : _mm512_mask3_fmadd_ps(p, sc, acc[r][t][j], 0x00FF);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TB; ++t) {
      const __m256 c0 = _mm512_castps512_ps256(acc[r][t][0]), c1 = _mm512_extractf32x8_ps(acc[r][t][0], 1);
      const __m256 c2 = _mm512_castps512_ps256(acc[r][t][1]), c3 = _mm512_extractf32x8_ps(acc[r][t][1], 1);
      y[t * N + r] = hsum(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)));
    }
}
#define KAPITSA_Q8_0_X2 1
#endif

// Q4_K {d, dmin f16; scales[12]; qs[128]}, 144 bytes: per 64 values, 32 bytes of qs hold sub-block 2c
// in low nibbles and 2c + 1 in high nibbles; w = d·sc·q − dmin·m per sub-block of 32. FIVE: Q5_K {d, dmin;
// scales[12]; qh[32]; qs[128]}, 176 bytes, the same plus bit j of qh[l] as the fifth bit of value l of
// sub-block j (codes up to 31: pair sums 2 · 31 · 127 stay below 2^15).
template <bool VNNI, int TB, bool FIVE = false>
void row_q4_k(const uint8_t* row, const Act& a, int64_t t0, float* y, int64_t N) {
  const int64_t ns = a.K / 256;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[TB];
  __m128 mins[TB];  // Σ dmin·dx·m·Σx̂, 4 lanes
  for (int t = 0; t < TB; ++t) acc[t] = _mm256_setzero_ps(), mins[t] = _mm_setzero_ps();
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* blk = row + s * (FIVE ? 176 : 144);
    const float d = f16(blk), dmin = f16(blk + 2);
    const __m128i sm = k4_scales_and_mins(blk + 4);
    const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));  // scale j: broadcast16(sc, j)
    const __m128i mn = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
    __m256i q[8];
    const __m256i qh = FIVE ? load(blk + 16) : _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i v = load(blk + (FIVE ? 48 : 16) + 32 * c);
      q[2 * c] = _mm256_and_si256(v, m4), q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      if constexpr (FIVE) {
        q[2 * c] = _mm256_or_si256(q[2 * c], bit_to(qh, 2 * c, 4));
        q[2 * c + 1] = _mm256_or_si256(q[2 * c + 1], bit_to(qh, 2 * c + 1, 4));
      }
    }
    for (int t = 0; t < TB; ++t) {
      const int8_t* xq = a.q + (t0 + t) * a.K + s * 256;
      // Two chains of integer sums (even and odd sub-blocks): VPDPWSSD waits for its accumulator, and
      // integer addition in any order gives the same sum.
      __m256i even = _mm256_setzero_si256(), odd = _mm256_setzero_si256();
      for (int j = 0; j < 8; j += 2) {
        even = dot_scaled<VNNI>(even, q[j], load(xq + 32 * j), broadcast16(sc, j));
        odd = dot_scaled<VNNI>(odd, q[j + 1], load(xq + 32 * (j + 1)), broadcast16(sc, j + 1));
      }
      const __m256i sum = _mm256_add_epi32(even, odd);
      const __m128i bs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.bsum32 + (t0 + t) * (a.K / 32) + s * 8));
      const float dx = a.d[(t0 + t) * ns + s];
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(d * dx), acc[t]);
      mins[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(_mm_madd_epi16(mn, bs)), _mm_set1_ps(dmin * dx), mins[t]);
    }
  }
  for (int t = 0; t < TB; ++t) y[t * N] = hsum(_mm256_sub_ps(acc[t], _mm256_setr_m128(mins[t], _mm_setzero_ps())));
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
// Q4_K at the avx512 level, 512 bits a step: the 32 bytes of qs that hold sub-blocks 2c (low nibbles)
// and 2c + 1 (high nibbles) are broadcast to both halves and shifted by 0 and 4 bits, so one step
// covers 64 consecutive values, against 64 consecutive activation codes; the int16 scales of 2c and
// 2c + 1 fill the two halves of the VPDPWSSD operand. dot_256_codes folds the halves before the float
// step, so the float arithmetic and the outputs are row_q4_k's, bit for bit, whatever TB (GgmlInt8 test).
// Σ scale·(q · x) over 256 codes in four 512-bit steps (step m: codes 64m..64m+63 against xq[64m..]), in
// two integer chains (VPDPWSSD waits for its accumulator), the result folded to 8 int32 lanes: lane l +
// lane l + 8, the lanes of the 256-bit kernels' sums (integers: exact in any order).
inline __m256i dot_256_codes(const __m512i q[4], const __m512i scale[4], const int8_t* xq) {
  __m512i even = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(q[0], _mm512_loadu_si512(xq)), scale[0]);
  __m512i odd = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(q[1], _mm512_loadu_si512(xq + 64)), scale[1]);
  even = _mm512_dpwssd_epi32(even, _mm512_maddubs_epi16(q[2], _mm512_loadu_si512(xq + 128)), scale[2]);
  odd = _mm512_dpwssd_epi32(odd, _mm512_maddubs_epi16(q[3], _mm512_loadu_si512(xq + 192)), scale[3]);
  const __m512i sum = _mm512_add_epi32(even, odd);
  return _mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1));
}

template <int TB>
void row_q4_k_512(const uint8_t* row, const Act& a, int64_t t0, float* y, int64_t N) {
  const int64_t ns = a.K / 256;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i nibble = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
  // int16 element 2c (lanes of the low half) or 2c + 1 (high half) of each 128-bit lane's 8 scales
  __m512i pick[4];
  for (int c = 0; c < 4; ++c) {
    const int16_t lo = static_cast<int16_t>((4 * c + 1) << 8 | 4 * c), hi = static_cast<int16_t>((4 * c + 3) << 8 | (4 * c + 2));
    pick[c] = _mm512_inserti64x4(_mm512_set1_epi16(lo), _mm256_set1_epi16(hi), 1);
  }
  __m256 acc[TB];
  __m128 mins[TB];  // Σ dmin·dx·m·Σx̂, 4 lanes
  for (int t = 0; t < TB; ++t) acc[t] = _mm256_setzero_ps(), mins[t] = _mm_setzero_ps();
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* blk = row + s * 144;
    uint32_t d_dmin;
    std::memcpy(&d_dmin, blk, 4);
    const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(d_dmin)));  // [d, dmin, 0, 0], one conversion
    const __m128i sm = k4_scales_and_mins(blk + 4);
    const __m512i sc = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(sm));
    const __m128i mn = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
    __m512i q[4], scale[4];
    for (int c = 0; c < 4; ++c) {
      const __m512i v = _mm512_broadcast_i64x4(load(blk + 16 + 32 * c));
      q[c] = _mm512_and_si512(_mm512_srlv_epi64(v, nibble), m4);
      scale[c] = _mm512_shuffle_epi8(sc, pick[c]);
    }
    for (int t = 0; t < TB; ++t) {
      const int8_t* xq = a.q + (t0 + t) * a.K + s * 256;
      const __m256i sum8 = dot_256_codes(q, scale, xq);
      const __m128i bs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.bsum32 + (t0 + t) * (a.K / 32) + s * 8));
      const __m128 scaled = _mm_mul_ps(dd, _mm_set1_ps(a.d[(t0 + t) * ns + s]));  // [d·dx, dmin·dx]: row_q4_k's products
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum8), _mm256_broadcastss_ps(scaled), acc[t]);
      mins[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(_mm_madd_epi16(mn, bs)), _mm_permute_ps(scaled, 0x55), mins[t]);
    }
  }
  for (int t = 0; t < TB; ++t) y[t * N] = hsum(_mm256_sub_ps(acc[t], _mm256_setr_m128(mins[t], _mm_setzero_ps())));
}
#define KAPITSA_Q4_K_512 1
#endif

// Q6_K {ql[128]; qh[64]; scales[16] int8; d f16}, 210 bytes: in half h, values 32i + l (i < 4) take
// their low 4 bits from ql[64h + 32(i % 2) + l] (low nibble for i < 2) and bits 2i..2i+1 of
// qh[32h + l] as bits 4..5; w = d·scale·(q − 32) per 16 values.
template <bool VNNI, int TB>
void row_q6_k(const uint8_t* row, const Act& a, int64_t t0, float* y, int64_t N) {
  const int64_t ns = a.K / 256;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
  __m256 acc[TB];
  for (int t = 0; t < TB; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* blk = row + s * 210;
    const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
    const float d = f16(blk + 208);
    __m256i q[8], scale[8];
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = load(blk + 64 * h), l1 = load(blk + 64 * h + 32), hb = load(blk + 128 + 32 * h);
      q[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m2));
      q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m2));
      q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m2));
      q[4 * h + 3] =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(hb, 2), m2));
    }
    // 32 values k: scales 2k (first 16) and 2k + 1 — even scales in the low lane, odd in the high one
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sc));
    const __m256i split = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15)));
    for (int k = 0; k < 8; ++k) scale[k] = broadcast16(split, k);
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
    for (int t = 0; t < TB; ++t) {
      const int8_t* xq = a.q + (t0 + t) * a.K + s * 256;
      __m256i even = _mm256_setzero_si256(), odd = _mm256_setzero_si256();  // two chains, as in Q4_K
      for (int k = 0; k < 8; k += 2) {
        even = dot_scaled<VNNI>(even, q[k], load(xq + 32 * k), scale[k]);
        odd = dot_scaled<VNNI>(odd, q[k + 1], load(xq + 32 * (k + 1)), scale[k + 1]);
      }
      __m256i sum = _mm256_add_epi32(even, odd);
      // − 32 · Σ_g scale_g · Σ x̂ over group g
      const __m256i corr = _mm256_madd_epi16(sc16, load(a.bsum16 + (t0 + t) * (a.K / 16) + s * 16));
      sum = _mm256_sub_epi32(sum, _mm256_slli_epi32(corr, 5));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(d * a.d[(t0 + t) * ns + s]), acc[t]);
    }
  }
  for (int t = 0; t < TB; ++t) y[t * N] = hsum(acc[t]);
}
#if defined(KAPITSA_Q4_K_512)
// Q6_K at the avx512 level, 512 bits a step: ql's 64 bytes of half h, whole, give values 0–63 of the half
// (low nibbles: ql[0..31] then ql[32..63]) and, shifted, values 64–127 (high nibbles); qh's 32 bytes,
// broadcast to both halves and shifted by a different count in each, give bits 4–5. Group g of 16
// values takes scale g: each 128-bit lane of a step holds one group, its int16 scale broadcast by
// VPERMW. As in row_q4_k_512 the halves' int32 lanes are added before the float step: outputs equal
// row_q6_k's bit for bit.
template <int TB>
void row_q6_k_512(const uint8_t* row, const Act& a, int64_t t0, float* y, int64_t N) {
  const int64_t ns = a.K / 256;
  const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x30);
  const __m512i up_lo = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4), down_hi = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);
  __m512i pick[4];  // int16 element 4m + lane / 8 in 128-bit lane i of step m (32 elements: i = element / 8)
  for (int m = 0; m < 4; ++m) pick[m] = _mm512_set_epi16(
      4 * m + 3, 4 * m + 3, 4 * m + 3, 4 * m + 3, 4 * m + 3, 4 * m + 3, 4 * m + 3, 4 * m + 3,
      4 * m + 2, 4 * m + 2, 4 * m + 2, 4 * m + 2, 4 * m + 2, 4 * m + 2, 4 * m + 2, 4 * m + 2,
      4 * m + 1, 4 * m + 1, 4 * m + 1, 4 * m + 1, 4 * m + 1, 4 * m + 1, 4 * m + 1, 4 * m + 1,
      4 * m, 4 * m, 4 * m, 4 * m, 4 * m, 4 * m, 4 * m, 4 * m);
  __m256 acc[TB];
  for (int t = 0; t < TB; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* blk = row + s * 210;
    const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
    const float d = f16(blk + 208);
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sc));
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
    const __m512i sc32 = _mm512_castsi256_si512(sc16);
    __m512i q[4], scale[4];  // step m: values 64m..64m+63
    for (int h = 0; h < 2; ++h) {
      const __m512i l = _mm512_loadu_si512(blk + 64 * h), hb = _mm512_broadcast_i64x4(load(blk + 128 + 32 * h));
      q[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_sllv_epi64(hb, up_lo), m2));
      q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                     _mm512_and_si512(_mm512_srlv_epi64(hb, down_hi), m2));
    }
    for (int m = 0; m < 4; ++m) scale[m] = _mm512_permutexvar_epi16(pick[m], sc32);
    for (int t = 0; t < TB; ++t) {
      const int8_t* xq = a.q + (t0 + t) * a.K + s * 256;
      __m256i sum = dot_256_codes(q, scale, xq);
      // − 32 · Σ_g scale_g · Σ x̂ over group g
      const __m256i corr = _mm256_madd_epi16(sc16, load(a.bsum16 + (t0 + t) * (a.K / 16) + s * 16));
      sum = _mm256_sub_epi32(sum, _mm256_slli_epi32(corr, 5));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(d * a.d[(t0 + t) * ns + s]), acc[t]);
    }
  }
  for (int t = 0; t < TB; ++t) y[t * N] = hsum(acc[t]);
}
#endif
#endif  // KAPITSA_GGML_INT8_NEON

// Rows [begin, end) × tokens [t0, t0 + TB) through the row kernel of `type`, called directly so that it
// inlines into the loop (an indirect call per row cost ~5% of a 0.8B Q8_0 decode: 500k rows a token).
template <bool VNNI, int TB>
void each_row(GgmlType type, const uint8_t* blocks, int64_t row_bytes, const Act& a, int64_t t0, float* y, int64_t N,
              size_t begin, size_t end) {
  auto loop = [&](auto kernel) {
    for (size_t n = begin; n < end; ++n)
      kernel(blocks + static_cast<int64_t>(n) * row_bytes, a, t0, y + t0 * N + static_cast<int64_t>(n), N);
  };
  switch (type) {
    case GgmlType::q8_0: return loop([](auto... args) { row_q8_0<VNNI, TB>(args...); });
    case GgmlType::q5_k: return loop([](auto... args) { row_q4_k<VNNI, TB, true>(args...); });
#if defined(KAPITSA_Q4_K_512)
    case GgmlType::q4_k:
      if constexpr (VNNI) return loop([](auto... args) { row_q4_k_512<TB>(args...); });
      else return loop([](auto... args) { row_q4_k<VNNI, TB>(args...); });
    default:
      if constexpr (VNNI) return loop([](auto... args) { row_q6_k_512<TB>(args...); });
      else return loop([](auto... args) { row_q6_k<VNNI, TB>(args...); });
#else
    case GgmlType::q4_k: return loop([](auto... args) { row_q4_k<VNNI, TB>(args...); });
    default: return loop([](auto... args) { row_q6_k<VNNI, TB>(args...); });
#endif
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

#if defined(KAPITSA_Q8_0_X2)
// Rows [begin, end) × tokens [t0, t0 + tb) through rows_q8_0_x2: two rows a pass where the rows are
// in cache (`pairs`: a task's later token passes), one where they stream from DRAM (its first pass) —
// two interleaved row streams a thread read DRAM ~2× slower: a verification of 2 tokens on the 0.8B
// Q8_0 file took 47–57 ms with pairs, 24–28 ms without (one token: 18–20 ms; docs/performance.md).
template <int TB>
void q8_0_x2(const uint8_t* blocks, int64_t row_bytes, const Act& a, int64_t t0, float* y, int64_t N, size_t begin,
             size_t end, bool pairs) {
  size_t n = begin;
  if (pairs)
    for (; n + 2 <= end; n += 2)
      rows_q8_0_x2<2, TB>(blocks + static_cast<int64_t>(n) * row_bytes, row_bytes, a, t0, y + t0 * N + static_cast<int64_t>(n), N);
  for (; n < end; ++n)
    rows_q8_0_x2<1, TB>(blocks + static_cast<int64_t>(n) * row_bytes, row_bytes, a, t0, y + t0 * N + static_cast<int64_t>(n), N);
}
void q8_0_x2(const uint8_t* blocks, int64_t row_bytes, const Act& a, int64_t t0, int64_t tb, float* y, int64_t N,
             size_t begin, size_t end, bool pairs) {
  switch (tb) {
    case 2: return q8_0_x2<2>(blocks, row_bytes, a, t0, y, N, begin, end, pairs);
    case 3: return q8_0_x2<3>(blocks, row_bytes, a, t0, y, N, begin, end, pairs);
    default: return q8_0_x2<4>(blocks, row_bytes, a, t0, y, N, begin, end, pairs);
  }
}
#endif

template <bool VNNI>
void rows(GgmlType type, const uint8_t* blocks, int64_t row_bytes, const Act& a, int64_t T, float* y, int64_t N) {
  const size_t grain = static_cast<size_t>(std::max<int64_t>(1, (32 << 10) / row_bytes));
  parallel_for(static_cast<size_t>(N), grain, [&](size_t begin, size_t end) {
    for (int64_t t0 = 0; t0 < T; t0 += kTokens) {  // the task's rows stay in cache for the next tokens
      const int64_t tb = std::min<int64_t>(kTokens, T - t0);
#if defined(KAPITSA_Q8_0_X2)
      if (VNNI && type == GgmlType::q8_0 && tb >= 2) {
        q8_0_x2(blocks, row_bytes, a, t0, tb, y, N, begin, end, /*pairs=*/t0 > 0);
        continue;
      }
#endif
#if defined(KAPITSA_GGML_INT8_MORE)
      if (type != GgmlType::q8_0 && type != GgmlType::q4_k && type != GgmlType::q5_k && type != GgmlType::q6_k) {
        rows_more(VNNI, type, tb, blocks, row_bytes, a, t0, y, N, begin, end);
        continue;
      }
#endif
      each_row<VNNI>(type, tb, blocks, row_bytes, a, t0, y, N, begin, end);
    }
  });
}

}  // namespace

void matmul_ggml_int8(const Tensor& x, const Linear& w, const Tensor& y, bool vnni) {
  const GgmlType type = w.ggml_type();
  const int64_t N = w.rows(), K = w.cols(), T = x.numel() / K, B = ggml_int8_block(type);
  KAPITSA_CHECK(B > 0 && K % B == 0, "cpu: int8-activation GEMV for ggml {} with {} inputs", ggml_type_name(type), K);
  // The offsets and mins of the other types come from Σ x̂, and so does the panels' + 128.
  const bool sums = type != GgmlType::q8_0 || T >= kPanelTokens;
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> d;
  thread_local std::vector<int16_t> b16, b32;
  q.resize(static_cast<size_t>(T * K)), d.resize(static_cast<size_t>(T * K / B));
  b16.resize(sums ? static_cast<size_t>(T * K / 16) : 0), b32.resize(sums ? static_cast<size_t>(T * K / 32) : 0);
  quantize(x.f32(), T, K, B, sums, q.data(), d.data(), b16.data(), b32.data());
  const Act a{q.data(), d.data(), b16.data(), b32.data(), K, B};
  const auto* blocks = w.weight().data_as<const uint8_t>();
  const int64_t row_bytes = w.weight().dim(-1);
  if (vnni && ggml_panels(type, blocks, row_bytes, a, T, y.f32(), N)) return;  // many tokens, where the level has them
  if (vnni && ggml_int8_has_vnni()) rows<true>(type, blocks, row_bytes, a, T, y.f32(), N);
  else rows<false>(type, blocks, row_bytes, a, T, y.f32(), N);
}
#else
void matmul_ggml_int8(const Tensor&, const Linear& w, const Tensor&, bool) {
  KAPITSA_CHECK(false, "cpu: int8-activation GEMV for ggml {}: not compiled for this CPU (no AVX2)",
                ggml_type_name(w.ggml_type()));
}
#endif

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
