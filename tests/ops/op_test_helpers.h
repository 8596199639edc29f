// Helpers for the op tests in this folder: a seeded RNG that prints its seed on failure, "run an op
// on a copy" so a backend and ref can be compared on identical inputs (ops may work in place), and the
// backend parameterisation: TEST_P(OnBackend, ...) runs once per registered backend other than ref
// (instantiated in test_backends.cpp), with backend() the one under test and run(b, op, args...)
// calling an op through ops.h (argument checks included) with b selected.
#pragma once

#include "ops/backend.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

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

// The oracle.
inline const BackendTable& ref() { return *find_backend("ref"); }

// Every registered backend but ref: what the op tests compare against ref.
inline std::vector<const BackendTable*> backends_under_test() {
  std::vector<const BackendTable*> v;
  for (const BackendTable* b : backends())
    if (b->name != "ref") v.push_back(b);
  return v;
}

// op(args...) with backend b selected on this thread.
template <class Op, class... Args>
void run(const BackendTable& b, Op op, Args&&... args) {
  ScopedBackend on(b);
  op(std::forward<Args>(args)...);
}

// op as a callable that selects b first (for tests that take the op as a parameter).
template <class Op>
auto bound(const BackendTable& b, Op op) {
  return [&b, op](auto&&... args) { run(b, op, std::forward<decltype(args)>(args)...); };
}


inline bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

}  // namespace kapitsa::ops::test

namespace kapitsa::ops {
// The fixture of every test that runs on each backend (TEST_P(OnBackend, ...)).
class OnBackend : public ::testing::TestWithParam<const BackendTable*> {
 protected:
  const BackendTable& backend() const { return *GetParam(); }
};
inline void PrintTo(const BackendTable* b, std::ostream* os) { *os << b->name; }
}  // namespace kapitsa::ops

