// Helpers shared by the tests: seeded random tensors and the error measures the tolerances use.
// Every test draws fresh random inputs from a seed it prints on failure (via SCOPED_TRACE).
#pragma once

#include "tensor/tensor.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>

// True in the sanitizer pass (built with AddressSanitizer): tests whose cost is a large sample (many
// draws, a long matrix of cases) run a smaller one there; the release pass runs them whole.
#if defined(__SANITIZE_ADDRESS__)
#define KAPITSA_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KAPITSA_UNDER_ASAN 1
#endif
#endif

namespace kapitsa::testing {

#if defined(KAPITSA_UNDER_ASAN)
inline constexpr bool kUnderAddressSanitizer = true;
#else
inline constexpr bool kUnderAddressSanitizer = false;
#endif

// A fresh seed per call (time-based), so repeated runs cover new inputs; printed by callers on failure.
uint64_t fresh_seed();

// Buffer of `dtype` (f32, f16 or bf16) with values uniform in [lo, hi).
Buffer random_buffer(std::mt19937_64& rng, DType dtype, Shape shape, float lo = -1.0f, float hi = 1.0f);

// Reads element i of a float tensor (f32, f16, bf16) as float.
float element(const Tensor& t, int64_t i);

// ‖a − b‖ / ‖b‖ over all elements (b is the reference); 0 when both are zero.
double relative_error(const Tensor& a, const Tensor& reference);
// max |a − b|.
double max_abs_diff(const Tensor& a, const Tensor& b);

// Path under tests/ (KAPITSA_TEST_DATA).
std::string test_data_path(const std::string& relative);

}  // namespace kapitsa::testing
