// Small float formats computed from their definitions (never with Kapitsa's decoders), for the tests
// of quantized checkpoints: FP8 E4M3 ("fn": bias 7, no infinities, S.1111.111 NaN), FP4 E2M1 (bias 1,
// one mantissa bit, no Inf/NaN), E8M0 (a power of two, bias 127), and nearest-code encoders for the
// test-side quantizers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace kapitsa::testing {

inline float e4m3(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const float sign = (b & 0x80) ? -1.0f : 1.0f;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(float(m) / 8.0f, -6);
  return sign * std::ldexp(1.0f + float(m) / 8.0f, e - 7);
}

inline float e2m1(uint8_t c) {
  const int e = (c >> 1) & 3, m = c & 1;
  const float sign = (c & 8) ? -1.0f : 1.0f;
  if (e == 0) return sign * 0.5f * float(m);  // subnormal: m · 2^(1 − 1) / 2
  return sign * std::ldexp(1.0f + 0.5f * float(m), e - 1);
}

inline float e8m0(uint8_t e) { return std::ldexp(1.0f, int(e) - 127); }

// Nearest E4M3 code to x (ties to the smaller magnitude), by bisection over the 127 non-negative finite values.
inline uint8_t to_e4m3(float x) {
  static const std::vector<float> values = [] {
    std::vector<float> v(127);
    for (int i = 0; i < 127; ++i) v[i] = e4m3(uint8_t(i));
    return v;
  }();
  const float a = std::min(std::fabs(x), 448.0f);
  const auto it = std::lower_bound(values.begin(), values.end(), a);
  int i = int(it - values.begin());
  if (i == 127 || (i > 0 && a - values[i - 1] <= values[i] - a)) --i;
  return uint8_t(i) | (x < 0 ? 0x80 : 0);
}

// Nearest E2M1 code to x (clamped to ±6; ties to the smaller magnitude).
inline uint8_t to_e2m1(float x) {
  uint8_t best = 0;
  for (uint8_t c = 1; c < 8; ++c)
    if (std::fabs(std::fabs(x) - e2m1(c)) < std::fabs(std::fabs(x) - e2m1(best))) best = c;
  return best | (x < 0 ? 8 : 0);
}

}  // namespace kapitsa::testing
