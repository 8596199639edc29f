// Helpers for the CUDA op tests: a fixture that skips visibly without a GPU, host <-> device copies,
// and outputs poisoned with NaN before each run (so an element the kernel did not write fails the
// comparison). Inputs come from op_test_helpers.h's seeded Rng, fresh on every run.
#pragma once

#include "op_test_helpers.h"
#include "ops/cuda/cuda.h"
#include "ops/cuda/device_buffer.h"
#include "ops/ref/ref.h"

#include <gtest/gtest.h>

#include <limits>

namespace kapitsa::ops::test {

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device: " << cuda::device_description();
  }
};

inline cuda::DeviceBuffer to_device(const Tensor& host) { return cuda::DeviceBuffer::upload(host); }

inline Buffer to_host(const cuda::DeviceBuffer& d) {
  Buffer b = Buffer::allocate(d.tensor().dtype(), d.tensor().shape());
  d.download(b);
  return b;
}

// A device f32 tensor full of NaN.
inline cuda::DeviceBuffer poisoned(Shape shape) {
  Buffer h = Buffer::allocate(DType::f32, shape);
  for (int64_t i = 0; i < h.tensor().numel(); ++i) h.f32()[i] = std::numeric_limits<float>::quiet_NaN();
  return to_device(h);
}

}  // namespace kapitsa::ops::test
