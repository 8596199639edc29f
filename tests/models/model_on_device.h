// A model folder with the device a parameterised test runs it on, and the argmax rule the runtime and
// ops::argmax_rows share (the first maximum), stated plainly for tests that check them.
#pragma once

#include "tensor/tensor.h"

#include <cstdint>
#include <ostream>

namespace kapitsa::testing {

struct ModelOnDevice {
  const char* path;  // relative to tests/
  Device device;
};

inline void PrintTo(const ModelOnDevice& c, std::ostream* os) {
  *os << c.path << (c.device == Device::cuda ? " on cuda" : " on cpu");
}

inline int32_t first_max(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return static_cast<int32_t>(best);
}

}  // namespace kapitsa::testing
