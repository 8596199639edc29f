// The values of a loaded weight [N, K] as f32, whatever the loader kept: a dense bf16 copy widened, or
// block weights (Kapitsa's FP8 / FP4 blocks on the cpu) decoded by ops/ref. For the loader tests of
// quantized checkpoints.
#pragma once

#include "ops/ref/ref.h"
#include "tensor/linear.h"

#include <cstdint>
#include <vector>

namespace kapitsa::testing {

inline std::vector<float> linear_values(const Linear& l) {
  const int64_t N = l.rows(), K = l.cols();
  std::vector<float> v(static_cast<size_t>(N * K));
  if (l.is_dense()) {
    for (int64_t i = 0; i < N * K; ++i) v[static_cast<size_t>(i)] = bf16_to_f32(l.weight().data_as<const uint16_t>()[i]);
  } else {
    const int64_t row_bytes = l.weight().dim(-1);
    for (int64_t n = 0; n < N; ++n)
      ops::ref::dequantize_ggml(l.ggml_type(), l.weight().data_as<const uint8_t>() + n * row_bytes, K, v.data() + n * K);
  }
  return v;
}

}  // namespace kapitsa::testing
