// Implementation of tests/test_util.h (linked into every test executable).
#include "test_util.h"

#include <chrono>

namespace kapitsa::testing {

uint64_t fresh_seed() {
  static uint64_t counter = 0;
  return static_cast<uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count()) + counter++;
}

Buffer random_buffer(std::mt19937_64& rng, DType dtype, Shape shape, float lo, float hi) {
  Buffer b = Buffer::allocate(dtype, shape);
  std::uniform_real_distribution<float> dist(lo, hi);
  const int64_t n = shape.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = dist(rng);
    switch (dtype) {
      case DType::f32: b.tensor().data_as<float>()[i] = v; break;
      case DType::bf16: b.tensor().data_as<uint16_t>()[i] = f32_to_bf16(v); break;
      case DType::f16: b.tensor().data_as<uint16_t>()[i] = f32_to_f16(v); break;
      default: KAPITSA_CHECK(false, "random_buffer: unsupported dtype {}", dtype_name(dtype));
    }
  }
  return b;
}

float element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return t.data_as<const float>()[i];
    case DType::bf16: return bf16_to_f32(t.data_as<const uint16_t>()[i]);
    case DType::f16: return f16_to_f32(t.data_as<const uint16_t>()[i]);
    default: KAPITSA_CHECK(false, "element: unsupported dtype {}", dtype_name(t.dtype()));
  }
  return 0;
}

double relative_error(const Tensor& a, const Tensor& reference) {
  KAPITSA_CHECK(a.numel() == reference.numel(), "{} vs {}", a.shape().str(), reference.shape().str());
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = element(a, i), r = element(reference, i);
    if (std::isnan(x) || std::isnan(r)) return INFINITY;
    diff += (x - r) * (x - r);
    norm += r * r;
  }
  if (norm == 0) return diff == 0 ? 0 : INFINITY;
  return std::sqrt(diff / norm);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  KAPITSA_CHECK(a.numel() == b.numel(), "{} vs {}", a.shape().str(), b.shape().str());
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::fabs(static_cast<double>(element(a, i)) - element(b, i));
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

std::string test_data_path(const std::string& relative) { return std::string(KAPITSA_TEST_DATA) + "/" + relative; }

}  // namespace kapitsa::testing
