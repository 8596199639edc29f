// GGUF blocks for the op tests of this folder (test_ggml.cpp, test_ggml_amx.cpp): random blocks of a type
// with finite scales, and the bound rounding x to int8 per block puts on a dot product.
#pragma once

#include "op_test_helpers.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace kapitsa::ops::test {

// Random blocks of a type: random bytes, with each f16 scale field set to a finite value in ±[2^-8, 2].
inline std::vector<uint8_t> random_blocks(test::Rng& r, GgmlType type, int64_t N, int64_t K) {
  const auto info = *ggml_type_info(static_cast<uint32_t>(type));
  const int64_t per_row = K / info.block_size, total = N * per_row;
  std::vector<uint8_t> bytes(static_cast<size_t>(total * info.block_bytes));
  for (auto& v : bytes) v = static_cast<uint8_t>(r.gen());
  std::uniform_real_distribution<float> mag(-8.0f, 1.0f);
  std::vector<size_t> halves;  // byte offsets of the f16 fields within a block
  switch (type) {
    case GgmlType::q4_0: case GgmlType::q5_0: case GgmlType::q8_0: halves = {0}; break;
    case GgmlType::q6_k: halves = {208}; break;
    case GgmlType::q2_k: halves = {80, 82}; break;
    case GgmlType::q3_k: halves = {108}; break;
    case GgmlType::iq4_nl: case GgmlType::iq4_xs: halves = {0}; break;
    case GgmlType::mxfp4:  // no f16 field: the E8M0 scale byte within 2^±8
      for (int64_t blk = 0; blk < total; ++blk) bytes[static_cast<size_t>(blk * info.block_bytes)] = static_cast<uint8_t>(119 + r.gen() % 17);
      break;
    case GgmlType::f8_e4m3_32:
    case GgmlType::fp4_e2m1_32:  // f32 scales (one, or two), codes without NaN (E4M3 0x7F / 0xFF)
      for (int64_t blk = 0; blk < total; ++blk) {
        uint8_t* p = bytes.data() + blk * info.block_bytes;
        const int scales = type == GgmlType::f8_e4m3_32 ? 1 : 2;
        for (int i = 0; i < scales; ++i) {
          const float v = std::exp2(mag(r.gen)) * (r.gen() % 2 ? 1.0f : -1.0f);
          std::memcpy(p + 4 * i, &v, 4);
        }
        if (type == GgmlType::f8_e4m3_32)
          for (int j = 4; j < 36; ++j)
            if ((p[j] & 0x7F) == 0x7F) p[j] ^= 1;
      }
      break;
    default: halves = {0, 2}; break;  // q4_1, q5_1 (d, m); q4_k, q5_k (d, dmin)
  }
  for (int64_t blk = 0; blk < total; ++blk)
    for (size_t h : halves) {
      const float v = std::exp2(mag(r.gen)) * (r.gen() % 2 ? 1.0f : -1.0f);
      const uint16_t f = f32_to_f16(v);
      std::memcpy(bytes.data() + static_cast<size_t>(blk * info.block_bytes) + h, &f, 2);
    }
  return bytes;
}

// How far rounding x to int8 (d·round(x/d) per block of B inputs, d = max|x|/127 over the block) may
// move Σ_k w_k·x_k: each x_k moves by at most d/2, so by Σ_blocks d/2 · Σ_k∈block |w_k|.
inline double int8_rounding_bound(const float* x, const float* w, int64_t K, int64_t B) {
  double bound = 0;
  for (int64_t b = 0; b < K; b += B) {
    double amax = 0, wsum = 0;
    for (int64_t k = b; k < b + B; ++k) amax = std::max(amax, std::abs(static_cast<double>(x[k]))), wsum += std::abs(w[k]);
    bound += amax / 127 / 2 * wsum;
  }
  return bound;
}

}  // namespace kapitsa::ops::test
