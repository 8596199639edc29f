// Reference dequantization of llama.cpp's block types (GGUF), written from the block layouts of ggml
// (ggml-common.h: block_q4_0 … block_q6_K, block_iq4_nl, block_iq4_xs, block_mxfp4; dequantize_row_*
// in ggml-quants.c): one block at a time, each value from its bits, in the order and f32 arithmetic
// of ggml's own dequantization. All multi-byte fields are little-endian; d / dmin / m are f16.
#include "ops/ref/ref.h"

#include <cstring>

namespace kapitsa::ops::ref {
namespace {

float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Q4_0 {d; qs[16]}: value j is low nibble of qs[j] (j < 16) or high nibble of qs[j-16], minus 8, times d.
void q4_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1 {d; m; qs[16]}: nibbles as Q4_0, unsigned, times d plus m.
void q4_1(const uint8_t* b, float* y) {
  const float d = f16_at(b), m = f16_at(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0xF) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Q5_0 {d; qh u32; qs[16]}: nibble as Q4_0 plus bit j of qh as the fifth bit (bit j + 16 for value
// j + 16), minus 16, times d.
void q5_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int h0 = ((qh >> j) & 1) << 4, h1 = ((qh >> (j + 16)) & 1) << 4;
    y[j] = static_cast<float>(((qs[j] & 0xF) | h0) - 16) * d;
    y[j + 16] = static_cast<float>(((qs[j] >> 4) | h1) - 16) * d;
  }
}

// Q5_1 {d; m; qh u32; qs[16]}: as Q5_0, unsigned, times d plus m.
void q5_1(const uint8_t* b, float* y) {
  const float d = f16_at(b), m = f16_at(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int h0 = ((qh >> j) & 1) << 4, h1 = ((qh >> (j + 16)) & 1) << 4;
    y[j] = static_cast<float>((qs[j] & 0xF) | h0) * d + m;
    y[j + 16] = static_cast<float>((qs[j] >> 4) | h1) * d + m;
  }
}

// Q8_0 {d; qs[32] int8}: qs[j] · d.
void q8_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block's 12 scale bytes: j < 4 in the
// low 6 bits of bytes j and j + 4; j >= 4 in the nibbles of byte j + 4 with the top two bits of bytes
// j - 4 (scale) and j (min).
void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q4_K {d; dmin; scales[12]; qs[128]}: 8 sub-blocks of 32; each 64 values take 32 bytes of qs, low
// nibbles for the first 32, high nibbles for the next: d·sc·q − dmin·m.
void q4_k(const uint8_t* b, float* y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    int sc, m;
    scale_min_k4(is, scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    scale_min_k4(is + 1, scales, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

// Q5_K {d; dmin; scales[12]; qh[32]; qs[128]}: as Q4_K with a fifth bit from qh: bit 2i of qh[l] for
// the low-nibble half of the i-th 64 values, bit 2i + 1 for the high-nibble half.
void q5_k(const uint8_t* b, float* y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
    int sc, m;
    scale_min_k4(is, scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    scale_min_k4(is + 1, scales, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
  }
}

// Q6_K {ql[128]; qh[64]; scales[16] int8; d}: two halves of 128 values; in each, value l + 32i (i < 4)
// has its low 4 bits from ql (low nibbles of ql[l], ql[l + 32], then high nibbles) and its top 2 bits
// from bits 2i of qh[l], minus 32, times d · scale of its 16 values.
void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = f16_at(b + 208);
  for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8, y += 128)
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
}

// Q2_K {scales[16]; qs[64]; d; dmin}: 16 sub-blocks of 16; scales[i] holds sub-block i's scale (low
// nibble) and min (high nibble). Each 128 values take 32 bytes of qs: value 32j + l (j < 4, l < 32) of
// that half is bits 2j..2j+1 of qs[l]; y = d·sc · q − dmin·m.
void q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = f16_at(b + 80), dmin = f16_at(b + 82);
  int is = 0;
  for (int n = 0; n < 256; n += 128, q += 32)
    for (int shift = 0; shift < 8; shift += 2)
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = scales[is++];
        const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[16 * half + l] >> shift) & 3) - ml;
      }
}

// Q3_K {hmask[32]; qs[64]; scales[12]; d}: 16 sub-blocks of 16 with 6-bit signed scales (stored + 32):
// scale i's low 4 bits are the low (i < 8) or high nibble of scales[i % 8], its top 2 bits bits
// 2(i / 4).. of scales[8 + i % 4]. Value 32j + l of half n: low 2 bits as Q2_K, and 4 is subtracted
// unless bit 4n + j of hmask[l] is set; y = d·(sc − 32) · q.
void q3_k(const uint8_t* b, float* y) {
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  const uint8_t* s = b + 96;
  const float d_all = f16_at(b + 108);
  int sc[16];
  for (int i = 0; i < 16; ++i)
    sc[i] = ((i < 8 ? s[i] : s[i - 8] >> 4) & 0xF) | (((s[8 + i % 4] >> (2 * (i / 4))) & 3) << 4);
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < 256; n += 128, q += 32)
    for (int shift = 0; shift < 8; shift += 2, m <<= 1)
      for (int half = 0; half < 2; ++half) {
        const float dl = d_all * static_cast<float>(sc[is++] - 32);
        for (int l = 0; l < 16; ++l) {
          const int k = 16 * half + l;
          *y++ = dl * static_cast<float>(((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4));
        }
      }
}

// IQ4_NL / IQ4_XS code book (ggml's kvalues_iq4nl): a nibble indexes a non-uniform int8 level.
constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// IQ4_NL {d; qs[16]}: nibbles as Q4_0, each a level of the code book, times d.
void iq4_nl(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4Levels[qs[j] & 0xF]);
    y[j + 16] = d * static_cast<float>(kIq4Levels[qs[j] >> 4]);
  }
}

// IQ4_XS {d; scales_h u16; scales_l[4]; qs[128]}: 8 sub-blocks of 32 laid out as IQ4_NL blocks; the
// 6-bit scale of sub-block i is nibble i % 2 of scales_l[i / 2] plus bits 2i, 2i + 1 of scales_h as
// its top two bits, stored + 32: y = d·(ls − 32) · level.
void iq4_xs(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const int scales_h = b[2] | (b[3] << 8);
  const uint8_t* scales_l = b + 4;
  const uint8_t* qs = b + 8;
  for (int ib = 0; ib < 8; ++ib, y += 32, qs += 16) {
    const int ls = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * static_cast<float>(kIq4Levels[qs[j] & 0xF]);
      y[j + 16] = dl * static_cast<float>(kIq4Levels[qs[j] >> 4]);
    }
  }
}

// MXFP4 (OCP microscaling) {e; qs[16]}: nibbles as Q4_0, each an FP4 E2M1 value (sign, 2-bit exponent,
// 1-bit mantissa: 0, 0.5, 1, 1.5, 2, 3, 4, 6), times 2^(e − 127). ggml keeps the E2M1 values doubled
// as integers (0, 1, 2, 3, 4, 6, 8, 12, negated for the sign bit) and halves the scale: 2^(e − 128),
// built as float bits (e < 2 gives a subnormal).
void mxfp4(const uint8_t* b, float* y) {
  constexpr int8_t kE2m1Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const uint8_t e = b[0];
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float d;
  std::memcpy(&d, &bits, 4);
  const uint8_t* qs = b + 1;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(kE2m1Doubled[qs[j] & 0xF]) * d;
    y[j + 16] = static_cast<float>(kE2m1Doubled[qs[j] >> 4]) * d;
  }
}

// Kapitsa's F8_E4M3_32 {float d; uint8 q[32]}: FP8 E4M3 codes (tensor/dtype.h) times d.
void f8_e4m3_32(const uint8_t* b, float* y) {
  float d;
  std::memcpy(&d, b, 4);
  for (int j = 0; j < 32; ++j) y[j] = f8_e4m3_to_f32(b[4 + j]) * d;
}

// Kapitsa's FP4_E2M1_32 {float d[2]; uint8 qs[16]}: input 2i in the low nibble of byte i, 2i + 1 in the
// high one, each an FP4 E2M1 value (0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 the sign) times d[input / 16].
void fp4_e2m1_32(const uint8_t* b, float* y) {
  static constexpr float kE2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  float d[2];
  std::memcpy(d, b, 8);
  for (int j = 0; j < 32; ++j) y[j] = kE2m1[(b[8 + j / 2] >> (4 * (j & 1))) & 0xF] * d[j / 16];
}

}  // namespace

void dequantize_ggml(GgmlType type, const uint8_t* blocks, int64_t K, float* out) {
  const auto info = ggml_type_info(static_cast<uint32_t>(type));
  KAPITSA_CHECK(info && K % info->block_size == 0, "dequantize: ggml type {} for {} values", ggml_type_name(type), K);
  void (*block)(const uint8_t*, float*) = nullptr;
  switch (type) {
    case GgmlType::q4_0: block = q4_0; break;
    case GgmlType::q4_1: block = q4_1; break;
    case GgmlType::q5_0: block = q5_0; break;
    case GgmlType::q5_1: block = q5_1; break;
    case GgmlType::q8_0: block = q8_0; break;
    case GgmlType::q4_k: block = q4_k; break;
    case GgmlType::q5_k: block = q5_k; break;
    case GgmlType::q6_k: block = q6_k; break;
    case GgmlType::q2_k: block = q2_k; break;
    case GgmlType::q3_k: block = q3_k; break;
    case GgmlType::iq4_nl: block = iq4_nl; break;
    case GgmlType::iq4_xs: block = iq4_xs; break;
    case GgmlType::mxfp4: block = mxfp4; break;
    case GgmlType::f8_e4m3_32: block = f8_e4m3_32; break;
    case GgmlType::fp4_e2m1_32: block = fp4_e2m1_32; break;
    default: KAPITSA_CHECK(false, "dequantize: ggml type {}", ggml_type_name(type));
  }
  for (int64_t i = 0; i < K / info->block_size; ++i) block(blocks + i * info->block_bytes, out + i * info->block_size);
}

}  // namespace kapitsa::ops::ref
