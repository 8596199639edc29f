// Helpers for the op tests in this folder: a seeded RNG that prints its seed on failure, and
// "run an op on a copy" so cpu and ref can be compared on identical inputs (ops may work in place).
#pragma once

#include "test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

namespace kapitsa::ops::test {

struct Rng {
  uint64_t seed = kapitsa::testing::fresh_seed();
  std::mt19937_64 gen{seed};
  std::string trace() const { return "seed " + std::to_string(seed); }
};

inline Buffer clone(const Tensor& t) {
  Buffer b = Buffer::allocate(t.dtype(), t.shape());
  if (t.nbytes() > 0) std::memcpy(b.tensor().data(), t.data(), t.nbytes());
  return b;
}

inline Buffer random_f32(Rng& r, Shape s, float lo = -1.0f, float hi = 1.0f) {
  return kapitsa::testing::random_buffer(r.gen, DType::f32, s, lo, hi);
}

inline bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

}  // namespace kapitsa::ops::test
