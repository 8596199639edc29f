// The GGUF K-quants with int8-activation kernels (Q2_K–Q6_K, IQ4_XS) decoded superblock by superblock into
// one form (internal to ops/cpu): unsigned byte codes with an offset O, integer sub-block scales and mins,
// and the superblock's f32 scales. Shared by the prefill panels (matmul_ggml_panel.cpp) and the AMX-INT8
// GEMM (matmul_ggml_amx.cpp); plain C++, so every level compiles it.
#pragma once

#include "ops/cpu/ggml_int8.h"

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL::ggml_int8 {
#if defined(KAPITSA_GGML_INT8)

// ---- K-quants: superblocks of 256 values, sub-blocks of S values with an integer scale each ----------
// A row's superblock in one form for every K-quant: w = d · sc_j · (q − O) − dmin · m_j for value k of
// sub-block j, q an unsigned byte code. Σ_k w_k·x̂_k = d · Σ_j sc_j · (Σ_{k∈j} q_k·x̂_k − O · Σ_{k∈j} x̂_k)
// − dmin · Σ_j m_j · Σ_{k∈j} x̂_k: the inner sums in int32 (the panels' VPDPBUSD, AMX's TDPBSSD on q − O),
// times the scales in int32 (at most 2^29 in magnitude), the mins' sum by VPDPWSSD on int16 pairs; one f32
// step per 256 values.
struct SuperRow {
  uint8_t q[256];
  int32_t sc[16], m[16];  // per sub-block (8 of 32 or 16 of 16)
  float d, dmin;
};

// Q4_K {d; dmin; scales[12]; qs[128]} and Q5_K {d; dmin; scales[12]; qh[32]; qs[128]}: 8 sub-blocks of
// 32, each 64 values from 32 bytes of qs (low nibbles, then high), Q5_K's fifth bits from qh (bit 2c of
// qh[l] for the low-nibble half of the c-th 64 values, bit 2c + 1 for the high one).
template <bool FIVE>
struct K4 {
  static constexpr int S = 32, O = 0, kMaxCode = FIVE ? 31 : 15;
  static constexpr bool kMins = true;
  static constexpr int64_t kBytes = FIVE ? 176 : 144;
  static void decode(const uint8_t* b, SuperRow& r) {
    uint8_t sm[16];
    k4_scales_and_mins(b + 4, sm);
    for (int j = 0; j < 8; ++j) r.sc[j] = sm[j], r.m[j] = sm[8 + j];
    r.d = f16(b), r.dmin = f16(b + 2);
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + (FIVE ? 48 : 16);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        const uint8_t v = qs[32 * c + l];
        r.q[64 * c + l] = static_cast<uint8_t>((v & 15) | (FIVE ? ((qh[l] >> (2 * c)) & 1) << 4 : 0));
        r.q[64 * c + 32 + l] = static_cast<uint8_t>((v >> 4) | (FIVE ? ((qh[l] >> (2 * c + 1)) & 1) << 4 : 0));
      }
  }
};

// Q6_K {ql[128]; qh[64]; scales[16] int8; d}: 16 sub-blocks of 16, codes 0..63 with offset 32; in half n,
// value l + 32i (i < 4) takes low bits from ql (low nibbles of ql[l], ql[l + 32], then high nibbles)
// and bits 2i.. of qh[l] as its top two.
struct K6 {
  static constexpr int S = 16, O = 32, kMaxCode = 63;
  static constexpr bool kMins = false;
  static constexpr int64_t kBytes = 210;
  static void decode(const uint8_t* b, SuperRow& r) {
    for (int j = 0; j < 16; ++j) r.sc[j] = static_cast<int8_t>(b[192 + j]), r.m[j] = 0;
    r.d = f16(b + 208), r.dmin = 0;
    for (int n = 0; n < 2; ++n) {
      const uint8_t* ql = b + 64 * n;
      const uint8_t* qh = b + 128 + 32 * n;
      uint8_t* q = r.q + 128 * n;
      for (int l = 0; l < 32; ++l) {
        q[l] = static_cast<uint8_t>((ql[l] & 15) | ((qh[l] & 3) << 4));
        q[l + 32] = static_cast<uint8_t>((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4));
        q[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
        q[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
      }
    }
  }
};

// Q2_K {scales[16]; qs[64]; d; dmin} and Q3_K {hmask[32]; qs[64]; scales[12]; d}: 16 sub-blocks of 16;
// value 32j + l of half n (j < 4, l < 32) is bits 2j.. of qs[32n + l]. Q2_K: scale and min in the nibbles
// of scales[i]. Q3_K: bit 4n + j of hmask[l] as the third bit, offset 4, 6-bit scales stored + 32 (ref's
// q3_k says where their bits are).
template <bool THREE>
struct K23 {
  static constexpr int S = 16, O = THREE ? 4 : 0, kMaxCode = THREE ? 7 : 3;
  static constexpr bool kMins = !THREE;
  static constexpr int64_t kBytes = THREE ? 110 : 84;
  static void decode(const uint8_t* b, SuperRow& r) {
    const uint8_t* qs = b + (THREE ? 32 : 16);
    if constexpr (THREE) {
      const uint8_t* sc = b + 96;
      for (int i = 0; i < 16; ++i)
        r.sc[i] = (((i < 8 ? sc[i] : sc[i - 8] >> 4) & 15) | (((sc[8 + i % 4] >> (2 * (i / 4))) & 3) << 4)) - 32, r.m[i] = 0;
      r.d = f16(b + 108), r.dmin = 0;
    } else {
      for (int i = 0; i < 16; ++i) r.sc[i] = b[i] & 15, r.m[i] = b[i] >> 4;
      r.d = f16(b + 80), r.dmin = f16(b + 82);
    }
    for (int n = 0; n < 2; ++n)
      for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 32; ++l) {
          int q = (qs[32 * n + l] >> (2 * j)) & 3;
          if constexpr (THREE) q |= ((b[l] >> (4 * n + j)) & 1) << 2;
          r.q[128 * n + 32 * j + l] = static_cast<uint8_t>(q);
        }
  }
};

// IQ4_XS {d; scales_h u16; scales_l[4]; qs[128]}: 8 sub-blocks of 32 laid out as IQ4_NL blocks, code-book
// levels (signed: stored + 128, offset 128), 6-bit scales stored + 32.
struct Iq4Xs {
  static constexpr int S = 32, O = 128, kMaxCode = 241;
  static constexpr bool kMins = false;
  static constexpr int64_t kBytes = 136;
  static void decode(const uint8_t* b, SuperRow& r) {
    static constexpr int8_t kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    const int scales_h = b[2] | b[3] << 8;
    r.d = f16(b), r.dmin = 0;
    for (int i = 0; i < 8; ++i) {
      r.sc[i] = (((b[4 + i / 2] >> (4 * (i % 2))) & 15) | (((scales_h >> (2 * i)) & 3) << 4)) - 32, r.m[i] = 0;
      const uint8_t* qs = b + 8 + 16 * i;
      for (int j = 0; j < 16; ++j) {
        r.q[32 * i + j] = static_cast<uint8_t>(kLevels[qs[j] & 15] + 128);
        r.q[32 * i + j + 16] = static_cast<uint8_t>(kLevels[qs[j] >> 4] + 128);
      }
    }
  }
};

#endif  // KAPITSA_GGML_INT8
}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL::ggml_int8
