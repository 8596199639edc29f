// A thin SIMD layer for the cpu ops (internal to ops/cpu): one float vector type `vf` of width kW
// — AVX-512 (16 lanes), AVX2+FMA (8 lanes), SSE2 (4 lanes: every x86-64), NEON (4 lanes: every
// AArch64) or a portable 4-lane array —
// with loads that widen bf16 (shift into the high half) and f16 (F16C), FMA, horizontal sum and a
// vector exp (Cephes-style polynomial, ≈2 ulp on [-87, 88], 0 below).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "ops/cpu/level.h"
#include "tensor/dtype.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL::simd {

#if defined(__AVX512F__)
constexpr int kW = 16;
using vf = __m512;
inline vf zero() { return _mm512_setzero_ps(); }
inline vf set1(float v) { return _mm512_set1_ps(v); }
inline vf load(const float* p) { return _mm512_loadu_ps(p); }
inline void store(float* p, vf v) { _mm512_storeu_ps(p, v); }
inline vf load_bf16(const uint16_t* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
inline vf load_f16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline vf fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
inline vf fma_exact(vf a, vf b, vf c) { return fma(a, b, c); }
inline vf add(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf div(vf a, vf b) { return _mm512_div_ps(a, b); }
inline vf max(vf a, vf b) { return _mm512_max_ps(a, b); }
inline vf min(vf a, vf b) { return _mm512_min_ps(a, b); }
inline float reduce_add(vf v) { return _mm512_reduce_add_ps(v); }
inline float reduce_max(vf v) { return _mm512_reduce_max_ps(v); }
inline vf round_nearest(vf v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// 2^n for integral-valued n in [-126, 127].
inline vf pow2i(vf n) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
inline vf select_lt(vf a, vf b, vf if_true, vf if_false) {  // a < b ? if_true : if_false
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), if_false, if_true);
}
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int kW = 8;
using vf = __m256;
inline vf zero() { return _mm256_setzero_ps(); }
inline vf set1(float v) { return _mm256_set1_ps(v); }
inline vf load(const float* p) { return _mm256_loadu_ps(p); }
inline void store(float* p, vf v) { _mm256_storeu_ps(p, v); }
inline vf load_bf16(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
inline vf load_f16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline vf fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline vf fma_exact(vf a, vf b, vf c) { return fma(a, b, c); }
inline vf add(vf a, vf b) { return _mm256_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf div(vf a, vf b) { return _mm256_div_ps(a, b); }
inline vf max(vf a, vf b) { return _mm256_max_ps(a, b); }
inline vf min(vf a, vf b) { return _mm256_min_ps(a, b); }
inline float reduce_add(vf v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float reduce_max(vf v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline vf round_nearest(vf v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline vf pow2i(vf n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
inline vf select_lt(vf a, vf b, vf if_true, vf if_false) {
  return _mm256_blendv_ps(if_false, if_true, _mm256_cmp_ps(a, b, _CMP_LT_OQ));
}
#elif defined(__SSE2__)
// The baseline x86-64 level: SSE2 only (no FMA, no F16C, no SSE4.1 rounding). The portable array below
// was 25-110x slower here: at 8 lanes it lived in memory (docs/performance.md).
constexpr int kW = 4;
using vf = __m128;
inline vf zero() { return _mm_setzero_ps(); }
inline vf set1(float v) { return _mm_set1_ps(v); }
inline vf load(const float* p) { return _mm_loadu_ps(p); }
inline void store(float* p, vf v) { _mm_storeu_ps(p, v); }
inline vf load_bf16(const uint16_t* p) {
  const __m128i w = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), w));  // each bf16 into a float's high half
}
inline vf load_f16(const uint16_t* p) {
  return _mm_setr_ps(kapitsa::f16_to_f32(p[0]), kapitsa::f16_to_f32(p[1]), kapitsa::f16_to_f32(p[2]),
                     kapitsa::f16_to_f32(p[3]));
}
inline vf fma(vf a, vf b, vf c) { return _mm_add_ps(_mm_mul_ps(a, b), c); }  // two roundings: no FMA here
// a·b + c rounded once, as the other levels' fma and the ref ops (dequantized weights must match ref
// bit for bit); std::fma per lane (the hardware's where it has FMA, else glibc's exact emulation).
inline vf fma_exact(vf a, vf b, vf c) {
  alignas(16) float x[4], y[4], z[4];
  _mm_store_ps(x, a), _mm_store_ps(y, b), _mm_store_ps(z, c);
  return _mm_setr_ps(std::fma(x[0], y[0], z[0]), std::fma(x[1], y[1], z[1]), std::fma(x[2], y[2], z[2]),
                     std::fma(x[3], y[3], z[3]));
}
inline vf add(vf a, vf b) { return _mm_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm_mul_ps(a, b); }
inline vf div(vf a, vf b) { return _mm_div_ps(a, b); }
inline vf max(vf a, vf b) { return _mm_max_ps(a, b); }
inline vf min(vf a, vf b) { return _mm_min_ps(a, b); }
inline float reduce_add(vf v) {
  const vf s = _mm_add_ps(v, _mm_movehl_ps(v, v));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}
inline float reduce_max(vf v) {
  const vf s = _mm_max_ps(v, _mm_movehl_ps(v, v));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_shuffle_ps(s, s, 1)));
}
// Through int32 (the default rounding: nearest even); |v| < 2^31 (exp's n is within ±128).
inline vf round_nearest(vf v) { return _mm_cvtepi32_ps(_mm_cvtps_epi32(v)); }
inline vf pow2i(vf n) {
  return _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(_mm_cvtps_epi32(n), _mm_set1_epi32(127)), 23));
}
inline vf select_lt(vf a, vf b, vf if_true, vf if_false) {
  const vf m = _mm_cmplt_ps(a, b);
  return _mm_or_ps(_mm_and_ps(m, if_true), _mm_andnot_ps(m, if_false));
}
#elif defined(__aarch64__)
// Every AArch64 level: Advanced SIMD (NEON), 4 lanes, fused multiply-add, f16 conversion (FCVTL) and
// round-to-nearest-even (FRINTN) in ARMv8.0 already.
constexpr int kW = 4;
using vf = float32x4_t;
inline vf zero() { return vdupq_n_f32(0.0f); }
inline vf set1(float v) { return vdupq_n_f32(v); }
inline vf load(const float* p) { return vld1q_f32(p); }
inline void store(float* p, vf v) { vst1q_f32(p, v); }
inline vf load_bf16(const uint16_t* p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
inline vf load_f16(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
inline vf fma(vf a, vf b, vf c) { return vfmaq_f32(c, a, b); }
inline vf fma_exact(vf a, vf b, vf c) { return fma(a, b, c); }
inline vf add(vf a, vf b) { return vaddq_f32(a, b); }
inline vf sub(vf a, vf b) { return vsubq_f32(a, b); }
inline vf mul(vf a, vf b) { return vmulq_f32(a, b); }
inline vf div(vf a, vf b) { return vdivq_f32(a, b); }
inline vf max(vf a, vf b) { return vmaxq_f32(a, b); }
inline vf min(vf a, vf b) { return vminq_f32(a, b); }
inline float reduce_add(vf v) { return vaddvq_f32(v); }
inline float reduce_max(vf v) { return vmaxvq_f32(v); }
inline vf round_nearest(vf v) { return vrndnq_f32(v); }
inline vf pow2i(vf n) {
  return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23));
}
inline vf select_lt(vf a, vf b, vf if_true, vf if_false) { return vbslq_f32(vcltq_f32(a, b), if_true, if_false); }
#else
// Portable fallback (an architecture without its own level): plain arrays.
constexpr int kW = 4;
struct vf {
  float v[kW];
};
#define KAPITSA_SIMD_MAP(expr) \
  vf r;                        \
  for (int i = 0; i < kW; ++i) r.v[i] = (expr);  \
  return r
inline vf zero() { KAPITSA_SIMD_MAP(0.0f); }
inline vf set1(float s) { KAPITSA_SIMD_MAP(s); }
inline vf load(const float* p) { KAPITSA_SIMD_MAP(p[i]); }
inline void store(float* p, vf a) { std::memcpy(p, a.v, sizeof a.v); }
inline vf load_bf16(const uint16_t* p) {
  vf r;
  for (int i = 0; i < kW; ++i) {
    const uint32_t u = static_cast<uint32_t>(p[i]) << 16;
    std::memcpy(&r.v[i], &u, 4);
  }
  return r;
}
inline vf load_f16(const uint16_t* p) { KAPITSA_SIMD_MAP(kapitsa::f16_to_f32(p[i])); }
inline vf fma(vf a, vf b, vf c) { KAPITSA_SIMD_MAP(std::fma(a.v[i], b.v[i], c.v[i])); }
inline vf fma_exact(vf a, vf b, vf c) { return fma(a, b, c); }
inline vf add(vf a, vf b) { KAPITSA_SIMD_MAP(a.v[i] + b.v[i]); }
inline vf sub(vf a, vf b) { KAPITSA_SIMD_MAP(a.v[i] - b.v[i]); }
inline vf mul(vf a, vf b) { KAPITSA_SIMD_MAP(a.v[i] * b.v[i]); }
inline vf div(vf a, vf b) { KAPITSA_SIMD_MAP(a.v[i] / b.v[i]); }
inline vf max(vf a, vf b) { KAPITSA_SIMD_MAP(a.v[i] > b.v[i] ? a.v[i] : b.v[i]); }
inline vf min(vf a, vf b) { KAPITSA_SIMD_MAP(a.v[i] < b.v[i] ? a.v[i] : b.v[i]); }
inline vf round_nearest(vf a) { KAPITSA_SIMD_MAP(std::nearbyint(a.v[i])); }
inline vf pow2i(vf n) { KAPITSA_SIMD_MAP(std::ldexp(1.0f, static_cast<int>(n.v[i]))); }
inline vf select_lt(vf a, vf b, vf t, vf f) { KAPITSA_SIMD_MAP(a.v[i] < b.v[i] ? t.v[i] : f.v[i]); }
#undef KAPITSA_SIMD_MAP
inline float reduce_add(vf a) {
  float s = 0;
  for (float x : a.v) s += x;
  return s;
}
inline float reduce_max(vf a) {
  float s = a.v[0];
  for (float x : a.v) s = x > s ? x : s;
  return s;
}
#endif

// e^x. Inputs below ≈ -87.3 give 0 (what softmax wants for masked / far-below-max scores).
inline vf exp(vf x) {
  const vf lo = set1(-87.33654f);
  const vf xc = min(max(x, lo), set1(88.37626f));
  const vf n = round_nearest(mul(xc, set1(1.44269504088896341f)));
  vf r = fma(n, set1(-0.693359375f), xc);  // Cody-Waite: ln2 split into exact hi + lo
  r = fma(n, set1(2.12194440e-4f), r);
  vf p = set1(1.9875691500e-4f);
  p = fma(p, r, set1(1.3981999507e-3f));
  p = fma(p, r, set1(8.3334519073e-3f));
  p = fma(p, r, set1(4.1665795894e-2f));
  p = fma(p, r, set1(1.6666665459e-1f));
  p = fma(p, r, set1(5.0000001201e-1f));
  p = fma(mul(p, r), r, add(r, set1(1.0f)));
  // n may be 128 at the top end: split the scale in two to stay in range.
  const vf half_n = round_nearest(mul(n, set1(0.5f)));
  const vf res = mul(mul(p, pow2i(half_n)), pow2i(sub(n, half_n)));
  return select_lt(x, lo, zero(), res);
}

// silu(x) = x·sigmoid(x) = x / (1 + e^-x).
inline vf silu(vf x) { return div(x, add(set1(1.0f), exp(sub(zero(), x)))); }
inline vf sigmoid(vf x) { return div(set1(1.0f), add(set1(1.0f), exp(sub(zero(), x)))); }

// Weight-row loaders, so kernels can be templated on the weight dtype.
struct LoadF32 {
  using T = float;
  static vf load(const float* p) { return simd::load(p); }
  static float scalar(const float* p) { return *p; }
};
struct LoadBF16 {
  using T = uint16_t;
  static vf load(const uint16_t* p) { return simd::load_bf16(p); }
  static float scalar(const uint16_t* p) {
    const uint32_t u = static_cast<uint32_t>(*p) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};
struct LoadF16 {
  using T = uint16_t;
  static vf load(const uint16_t* p) { return simd::load_f16(p); }
  static float scalar(const uint16_t* p) { return kapitsa::f16_to_f32(*p); }
};

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL::simd
