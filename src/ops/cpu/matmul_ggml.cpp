// llama.cpp block weights (WeightFormat::ggml, GGUF) on the cpu backend: each block is unpacked into
// unsigned integer codes (non-uniform levels and signed codes biased to be unsigned) plus a (scale,
// offset) per run of 16 or 32 values, then y = scale·q + offset in one
// loop the compiler vectorizes; rows are decoded kTileR at a time into an f32 panel and multiplied with
// the dense register tiles (dot_tile.h): the path for few tokens of the types without an int8 kernel.
// The types with one (ggml_int8_block: every GGUF type, where AVX2 or NEON is compiled for) go
// to the fused int8-activation kernels of matmul_ggml_int8*.cpp (any token count), the rest at many
// tokens (prefill) to the packed GEMM of matmul.cpp. Compared with ops/ref in tests/ops/test_ggml.cpp.
#include "ops/cpu/level.h"
#include "ops/cpu/dot_tile.h"
#include "ops/cpu/ggml.h"

#include "base/thread_pool.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {
namespace {

float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// A block unpacked: codes q[i] and, per run of `run` values, y = scale·q + offset.
struct Unpacked {
  uint8_t q[256];
  float scale[16];
  float offset[16];
  int run = 32;
  bool direct = false;  // the values are in `values` instead (MXFP4)
  float values[32];
};

// 32 nibbles of a 16-byte array: low nibbles are values 0..15, high nibbles 16..31.
void nibbles32(const uint8_t* qs, uint8_t* q) {
  for (int j = 0; j < 16; ++j) q[j] = qs[j] & 0xF, q[j + 16] = qs[j] >> 4;
}
// Bit j of qh (32 bits) as bit 4 of value j.
void fifth_bits32(const uint8_t* qh, uint8_t* q) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  for (int j = 0; j < 32; ++j) q[j] |= static_cast<uint8_t>(((h >> j) & 1) << 4);
}
// 32 nibbles of a 16-byte array (order as nibbles32), each an IQ4_NL code-book level (ggml's
// kvalues_iq4nl) plus 128.
void iq4_levels32(const uint8_t* qs, uint8_t* q) {
  constexpr uint8_t kLevels[16] = {1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241};
  for (int j = 0; j < 16; ++j) q[j] = kLevels[qs[j] & 0xF], q[j + 16] = kLevels[qs[j] >> 4];
}
// Q4_K / Q5_K 6-bit scale and min of sub-block j from the 12 packed bytes.
void k4_scale(const uint8_t* s, int j, float d, float dmin, float* sc, float* mn) {
  const int a = j < 4 ? s[j] & 63 : (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
  const int b = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  *sc = d * static_cast<float>(a), *mn = -(dmin * static_cast<float>(b));
}

void unpack(GgmlType type, const uint8_t* b, Unpacked& u) {
  switch (type) {
    case GgmlType::q4_0: u.run = 32, nibbles32(b + 2, u.q), u.scale[0] = half(b), u.offset[0] = -8 * half(b); return;
    case GgmlType::q4_1: u.run = 32, nibbles32(b + 4, u.q), u.scale[0] = half(b), u.offset[0] = half(b + 2); return;
    case GgmlType::q5_0:
      u.run = 32, nibbles32(b + 6, u.q), fifth_bits32(b + 2, u.q), u.scale[0] = half(b), u.offset[0] = -16 * half(b);
      return;
    case GgmlType::q5_1:
      u.run = 32, nibbles32(b + 8, u.q), fifth_bits32(b + 4, u.q), u.scale[0] = half(b), u.offset[0] = half(b + 2);
      return;
    case GgmlType::q8_0:  // signed codes: stored biased by 128 so q stays unsigned
      u.run = 32;
      for (int j = 0; j < 32; ++j) u.q[j] = static_cast<uint8_t>(b[2 + j] ^ 0x80);
      u.scale[0] = half(b), u.offset[0] = -128 * half(b);
      return;
    case GgmlType::q4_k:
    case GgmlType::q5_k: {
      const bool five = type == GgmlType::q5_k;
      const uint8_t* qs = b + (five ? 48 : 16);
      const uint8_t* qh = b + 16;
      u.run = 32;
      for (int c = 0; c < 4; ++c)  // 64 values per 32 bytes: low nibbles, then high nibbles
        for (int l = 0; l < 32; ++l) {
          uint8_t lo = qs[32 * c + l] & 0xF, hi = qs[32 * c + l] >> 4;
          if (five) lo |= ((qh[l] >> (2 * c)) & 1) << 4, hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
          u.q[64 * c + l] = lo, u.q[64 * c + 32 + l] = hi;
        }
      for (int j = 0; j < 8; ++j) k4_scale(b + 4, j, half(b), half(b + 2), &u.scale[j], &u.offset[j]);
      return;
    }
    case GgmlType::q6_k: {
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
      const float d = half(b + 208);
      u.run = 16;
      for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 32; ++l) {
          const uint8_t a = ql[64 * h + l], c = ql[64 * h + 32 + l], top = qh[32 * h + l];
          uint8_t* q = u.q + 128 * h + l;
          q[0] = (a & 0xF) | ((top & 3) << 4);
          q[32] = (c & 0xF) | (((top >> 2) & 3) << 4);
          q[64] = (a >> 4) | (((top >> 4) & 3) << 4);
          q[96] = (c >> 4) | (((top >> 6) & 3) << 4);
        }
      for (int j = 0; j < 16; ++j) u.scale[j] = d * static_cast<float>(sc[j]), u.offset[j] = -32 * u.scale[j];
      return;
    }
    case GgmlType::q2_k: {  // 16 runs of 16: scale d·(sc & 15), offset −dmin·(sc >> 4)
      const uint8_t* qs = b + 16;
      const float d = half(b + 80), dmin = half(b + 82);
      u.run = 16;
      for (int h = 0; h < 2; ++h)
        for (int j = 0; j < 4; ++j)
          for (int l = 0; l < 32; ++l) u.q[128 * h + 32 * j + l] = (qs[32 * h + l] >> (2 * j)) & 3;
      for (int i = 0; i < 16; ++i)
        u.scale[i] = d * static_cast<float>(b[i] & 0xF), u.offset[i] = -(dmin * static_cast<float>(b[i] >> 4));
      return;
    }
    case GgmlType::q3_k: {  // codes q + 4 (0..7): low 2 bits as Q2_K, bit 4h + j of hmask[l] as bit 2
      const uint8_t* hm = b;
      const uint8_t* qs = b + 32;
      const uint8_t* s = b + 96;
      const float d = half(b + 108);
      u.run = 16;
      for (int h = 0; h < 2; ++h)
        for (int j = 0; j < 4; ++j)
          for (int l = 0; l < 32; ++l)
            u.q[128 * h + 32 * j + l] =
                static_cast<uint8_t>(((qs[32 * h + l] >> (2 * j)) & 3) | (((hm[l] >> (4 * h + j)) & 1) << 2));
      for (int i = 0; i < 16; ++i) {
        const int sc = ((i < 8 ? s[i] : s[i - 8] >> 4) & 0xF) | (((s[8 + i % 4] >> (2 * (i / 4))) & 3) << 4);
        u.scale[i] = d * static_cast<float>(sc - 32), u.offset[i] = -4 * u.scale[i];
      }
      return;
    }
    case GgmlType::iq4_nl:  // code-book levels biased by 128 so q stays unsigned
      u.run = 32, iq4_levels32(b + 2, u.q), u.scale[0] = half(b), u.offset[0] = -128 * half(b);
      return;
    case GgmlType::iq4_xs: {
      const float d = half(b);
      const int scales_h = b[2] | (b[3] << 8);
      u.run = 32;
      for (int i = 0; i < 8; ++i) {
        iq4_levels32(b + 8 + 16 * i, u.q + 32 * i);
        const int ls = ((b[4 + i / 2] >> (4 * (i % 2))) & 0xF) | (((scales_h >> (2 * i)) & 3) << 4);
        u.scale[i] = d * static_cast<float>(ls - 32), u.offset[i] = -128 * u.scale[i];
      }
      return;
    }
    case GgmlType::mxfp4: {  // values directly: biased codes times scales up to 2^127 would overflow
      constexpr int8_t kE2m1Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
      const uint32_t bits = b[0] < 2 ? 0x00200000u << b[0] : static_cast<uint32_t>(b[0] - 1) << 23;
      float d;
      std::memcpy(&d, &bits, 4);
      for (int j = 0; j < 16; ++j)
        u.values[j] = static_cast<float>(kE2m1Doubled[b[1 + j] & 0xF]) * d,
        u.values[j + 16] = static_cast<float>(kE2m1Doubled[b[1 + j] >> 4]) * d;
      u.direct = true;
      return;
    }
    case GgmlType::f8_e4m3_32: {  // Kapitsa's FP8 blocks (ggml_type.h): values directly
      static const auto kE4m3 = [] {
        std::array<float, 256> t{};
        for (int c = 0; c < 256; ++c) t[static_cast<size_t>(c)] = f8_e4m3_to_f32(static_cast<uint8_t>(c));
        return t;
      }();
      float d;
      std::memcpy(&d, b, 4);
      for (int j = 0; j < 32; ++j) u.values[j] = kE4m3[b[4 + j]] * d;
      u.direct = true;
      return;
    }
    case GgmlType::fp4_e2m1_32: {  // Kapitsa's FP4 blocks (ggml_type.h): values directly
      static constexpr float kE2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
      float d[2];
      std::memcpy(d, b, 8);
      for (int j = 0; j < 32; ++j) u.values[j] = kE2m1[(b[8 + j / 2] >> (4 * (j & 1))) & 0xF] * d[j / 16];
      u.direct = true;
      return;
    }
    default: KAPITSA_CHECK(false, "cpu: ggml type {} is not decoded", ggml_type_name(type));
  }
}

// ---- Kapitsa's float blocks (F8_E4M3_32, FP4_E2M1_32) for few tokens: one row dotted with one token's
// x, the codes widened in registers (the generic path above decodes each block into a struct first:
// ~16× slower than a bf16 GEMV). Per block the 32 products are summed, then times the block's scale.
// E4M3 → f16 by bits: sign-extended code << 7, masked to 0xBF80, is the f16 with the same sign, mantissa
// and (exponent − 8) — subnormals included — so the f16 value times 2^8 is the E4M3 value (its NaN codes
// are refused at load). E2M1 magnitudes from an 8-entry table, bit 3 the sign. AVX-512, AVX2 + F16C and
// NEON; the x86 baseline level keeps the generic decoder.
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__F16C__) && defined(__FMA__))
#define KAPITSA_FLOAT_BLOCKS 1
#if defined(__AVX512F__)
using FV = __m512;
constexpr int kFW = 16;
inline FV f8_widen(const uint8_t* c) {  // 16 codes
  const __m256i s = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c)));
  return _mm512_cvtph_ps(_mm256_and_si256(_mm256_slli_epi16(s, 7), _mm256_set1_epi16(static_cast<short>(0xBF80))));
}
inline FV fp4_widen(const uint8_t* c) {  // 16 codes from 8 bytes, input 2i in the low nibble of byte i
  const __m128i bytes = _mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c)),
                                         _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
  const __m512i n = _mm512_and_si512(_mm512_srlv_epi32(_mm512_cvtepu8_epi32(bytes), _mm512_set4_epi32(4, 0, 4, 0)),
                                     _mm512_set1_epi32(15));
  const __m512 table = _mm512_setr_ps(0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6);
  return _mm512_permutexvar_ps(n, table);
}
inline FV fzero() { return _mm512_setzero_ps(); }
inline FV fload(const float* p) { return _mm512_loadu_ps(p); }
inline FV ffma(FV a, FV b, FV c) { return _mm512_fmadd_ps(a, b, c); }
inline FV fset1(float v) { return _mm512_set1_ps(v); }
inline float fsum(FV v) { return _mm512_reduce_add_ps(v); }
#else
using FV = __m256;
constexpr int kFW = 8;
inline FV f8_widen(const uint8_t* c) {  // 8 codes
  const __m128i s = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c)));
  return _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(s, 7), _mm_set1_epi16(static_cast<short>(0xBF80))));
}
inline FV fp4_widen(const uint8_t* c) {  // 8 codes from 4 bytes
  int32_t four;
  std::memcpy(&four, c, 4);
  const __m128i bytes = _mm_shuffle_epi8(_mm_cvtsi32_si128(four), _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1));
  const __m256i n = _mm256_srlv_epi32(_mm256_cvtepu8_epi32(bytes), _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));
  const __m256 magnitude = _mm256_permutevar8x32_ps(_mm256_setr_ps(0, 0.5f, 1, 1.5f, 2, 3, 4, 6), n);  // low 3 bits
  const __m256i sign = _mm256_and_si256(_mm256_slli_epi32(n, 28), _mm256_set1_epi32(static_cast<int>(0x80000000u)));
  return _mm256_xor_ps(magnitude, _mm256_castsi256_ps(sign));
}
inline FV fzero() { return _mm256_setzero_ps(); }
inline FV fload(const float* p) { return _mm256_loadu_ps(p); }
inline FV ffma(FV a, FV b, FV c) { return _mm256_fmadd_ps(a, b, c); }
inline FV fset1(float v) { return _mm256_set1_ps(v); }
inline float fsum(FV v) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}
#endif

// Σ_k x[k] · w[k] over one row of `blocks` blocks.
float dot_f8_row(const uint8_t* row, const float* x, int64_t blocks) {
  FV acc = fzero();
  for (int64_t b = 0; b < blocks; ++b, row += 36, x += 32) {
    float d;
    std::memcpy(&d, row, 4);
    FV p = fzero();
    for (int j = 0; j < 32; j += kFW) p = ffma(f8_widen(row + 4 + j), fload(x + j), p);
    acc = ffma(p, fset1(d * 256.0f), acc);  // (2^8: the f16 reading of the codes, exact)
  }
  return fsum(acc);
}
float dot_fp4_row(const uint8_t* row, const float* x, int64_t blocks) {
  FV acc = fzero();
  for (int64_t b = 0; b < blocks; ++b, row += 24, x += 32) {
    float d[2];
    std::memcpy(d, row, 8);
    for (int h = 0; h < 2; ++h) {
      FV p = fzero();
      for (int j = 0; j < 16; j += kFW) p = ffma(fp4_widen(row + 8 + (16 * h + j) / 2), fload(x + 16 * h + j), p);
      acc = ffma(p, fset1(d[h]), acc);
    }
  }
  return fsum(acc);
}
#elif defined(__aarch64__)
#define KAPITSA_FLOAT_BLOCKS 1
// NEON (every AArch64 level): the same bit trick for E4M3, 8 codes at a time; E2M1 from a table of the
// doubled values as int8 (0, 1, 2, 3, 4, 6, 8, 12, negated for bit 3), the ½ folded into the scale.
float dot_f8_row(const uint8_t* row, const float* x, int64_t blocks) {
  float32x4_t acc = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < blocks; ++b, row += 36, x += 32) {
    float d;
    std::memcpy(&d, row, 4);
    float32x4_t p = vdupq_n_f32(0.0f);
    for (int j = 0; j < 32; j += 8) {
      const int16x8_t s = vmovl_s8(vld1_s8(reinterpret_cast<const int8_t*>(row + 4 + j)));
      const uint16x8_t h = vandq_u16(vreinterpretq_u16_s16(vshlq_n_s16(s, 7)), vdupq_n_u16(0xBF80));
      const float16x8_t f = vreinterpretq_f16_u16(h);
      p = vfmaq_f32(p, vcvt_f32_f16(vget_low_f16(f)), vld1q_f32(x + j));
      p = vfmaq_f32(p, vcvt_high_f32_f16(f), vld1q_f32(x + j + 4));
    }
    acc = vfmaq_n_f32(acc, p, d * 256.0f);
  }
  return vaddvq_f32(acc);
}
float dot_fp4_row(const uint8_t* row, const float* x, int64_t blocks) {
  static constexpr int8_t kDoubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const int8x16_t table = vld1q_s8(kDoubled);
  float32x4_t acc = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < blocks; ++b, row += 24, x += 32) {
    float d[2];
    std::memcpy(d, row, 8);
    for (int h = 0; h < 2; ++h) {
      const uint8x8_t bytes = vld1_u8(row + 8 + 8 * h);  // 16 codes, input 2i in the low nibble of byte i
      const uint8x8x2_t codes = vzip_u8(vand_u8(bytes, vdup_n_u8(15)), vshr_n_u8(bytes, 4));
      float32x4_t p = vdupq_n_f32(0.0f);
      for (int q = 0; q < 2; ++q) {
        const int16x8_t v = vmovl_s8(vqtbl1_s8(table, codes.val[q]));
        const float* xq = x + 16 * h + 8 * q;
        p = vfmaq_f32(p, vcvtq_f32_s32(vmovl_s16(vget_low_s16(v))), vld1q_f32(xq));
        p = vfmaq_f32(p, vcvtq_f32_s32(vmovl_high_s16(v)), vld1q_f32(xq + 4));
      }
      acc = vfmaq_n_f32(acc, p, d[h] * 0.5f);
    }
  }
  return vaddvq_f32(acc);
}
#endif

}  // namespace

void dequantize_ggml_row(GgmlType type, const uint8_t* row, int64_t K, float* out) {
  const auto info = ggml_type_info(static_cast<uint32_t>(type));
  KAPITSA_CHECK(info && K % info->block_size == 0, "cpu: ggml {} row of {} values", ggml_type_name(type), K);
  Unpacked u;
  for (int64_t blk = 0; blk < K / info->block_size; ++blk) {
    unpack(type, row + blk * info->block_bytes, u);
    float* y = out + blk * info->block_size;
    if (u.direct) {
      std::memcpy(y, u.values, static_cast<size_t>(info->block_size) * sizeof(float));
      continue;
    }
    for (int64_t i = 0; i < info->block_size; ++i)
      y[i] = u.scale[i / u.run] * static_cast<float>(u.q[i]) + u.offset[i / u.run];
  }
}

// x: [T, K] f32;  w: ggml [N, K];  y: [T, N] f32.
void matmul_ggml(const Tensor& x, const Linear& w, const Tensor& y) {
  const int64_t N = w.rows(), K = w.cols(), T = K == 0 ? 0 : x.numel() / K;
  if (T == 0 || N == 0) return;
  if (ggml_int8_activations(w.ggml_type(), T)) return matmul_ggml_int8(x, w, y, true);
  const auto* blocks = w.weight().data_as<const uint8_t>();
  const int64_t row_bytes = w.weight().dim(-1);
  const float* px = x.f32();
  float* py = y.f32();
#if defined(KAPITSA_FLOAT_BLOCKS)
  // Kapitsa's float blocks, up to 8 tokens: each token's row as the one-token GEMV computes it.
  if (ggml_type_internal(w.ggml_type()) && T <= 8) {
    const auto dot = w.ggml_type() == GgmlType::f8_e4m3_32 ? dot_f8_row : dot_fp4_row;
    const size_t grain = static_cast<size_t>(std::max<int64_t>(1, (32 << 10) / std::max<int64_t>(1, row_bytes)));
    parallel_for(static_cast<size_t>(N), grain, [&](size_t begin, size_t end) {
      for (size_t n = begin; n < end; ++n)
        for (int64_t t = 0; t < T; ++t)
          py[t * N + static_cast<int64_t>(n)] = dot(blocks + static_cast<int64_t>(n) * row_bytes, px + t * K, K / 32);
    });
    return;
  }
#endif
  if (ggml_packed_gemm(T)) return matmul_ggml_packed(x, w, y);
  const int64_t panels = (N + kTileR - 1) / kTileR;
  parallel_for(static_cast<size_t>(panels), 1, [&](size_t begin, size_t end) {
    thread_local std::vector<float> panel;
    panel.resize(static_cast<size_t>(kTileR * K));
    for (size_t p = begin; p < end; ++p) {
      const int64_t n0 = static_cast<int64_t>(p) * kTileR;
      const int rb = static_cast<int>(std::min<int64_t>(kTileR, N - n0));
      for (int r = 0; r < rb; ++r) dequantize_ggml_row(w.ggml_type(), blocks + (n0 + r) * row_bytes, K, panel.data() + r * K);
      for (int64_t t0 = 0; t0 < T; t0 += kTileT) {
        const int tb = static_cast<int>(std::min<int64_t>(kTileT, T - t0));
        dot_tile_any<simd::LoadF32>(tb, rb, px + t0 * K, K, panel.data(), K, K, py + t0 * N + n0, N);
      }
    }
  });
}

void embedding_ggml(const Linear& table, std::span<const int32_t> ids, const Tensor& out) {
  const int64_t H = table.cols(), row_bytes = table.weight().dim(-1);
  const auto* blocks = table.weight().data_as<const uint8_t>();
  for (size_t t = 0; t < ids.size(); ++t)
    dequantize_ggml_row(table.ggml_type(), blocks + ids[t] * row_bytes, H, out.f32() + static_cast<int64_t>(t) * H);
}

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
