// A model folder with the device a parameterised test runs it on, the cases the step-output tests share,
// and the argmax rule the runtime and ops::argmax_rows share (the first maximum), stated plainly for tests
// that check them.
#pragma once

#include "tensor/tensor.h"

#include <cstdint>
#include <ostream>
#include <vector>

namespace kapitsa::testing {

struct ModelOnDevice {
  const char* path;  // relative to tests/
  Device device;
};

inline void PrintTo(const ModelOnDevice& c, std::ostream* os) {
  *os << c.path << (c.device == Device::cuda ? " on cuda" : " on cpu");
}

// The demo draft (dense, 4 layers) and a Qwen3.5 MoE and a Nemotron-H fixture, on the cpu and on cuda.
inline std::vector<ModelOnDevice> draft_and_tiny_fixtures() {
  std::vector<ModelOnDevice> cases;
  for (Device device : {Device::cpu, Device::cuda})
    for (const char* path : {"../models/demo/draft", "fixtures/qwen35-moe-tiny", "fixtures/nemotron-h-tiny"})
      cases.push_back({path, device});
  return cases;
}

inline int32_t first_max(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return static_cast<int32_t>(best);
}

}  // namespace kapitsa::testing
