// Reference dequantization of llama.cpp's block types (GGUF), written from the block layouts of ggml
// (ggml-common.h: block_q4_0 … block_q6_K; dequantize_row_* in ggml-quants.c): one block at a time,
// each value from its bits, in the order and f32 arithmetic of ggml's own dequantization. All
// multi-byte fields are little-endian; d / dmin / m are f16.
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

}  // namespace

void dequantize_ggml(GgmlType type, const uint8_t* blocks, int64_t K, float* out) {
  const auto info = ggml_type_info(static_cast<uint32_t>(type));
  KAPITSA_CHECK(info && ggml_type_supported(type) && K % info->block_size == 0,
                "dequantize: ggml type {} for {} values", ggml_type_name(type), K);
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
    default: KAPITSA_CHECK(false, "dequantize: ggml type {}", ggml_type_name(type));
  }
  for (int64_t i = 0; i < K / info->block_size; ++i) block(blocks + i * info->block_bytes, out + i * info->block_size);
}

}  // namespace kapitsa::ops::ref
