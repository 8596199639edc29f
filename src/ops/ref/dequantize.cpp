// Reference dequantization: row n of any Linear as f32, straight from the format's definition. What
// the ref matmul and embedding read, and what every faster kernel is compared against.
#include "ops/ref/ref.h"
#include "ops/ref/ref_util.h"

#include <cmath>

namespace kapitsa::ops::ref {

// MLX affine: the K codes of a row are one little-endian bit stream over its uint32 words (code k in
// bits [k·bits, (k+1)·bits), so 3/5/6-bit codes may straddle two words); w = scale[g]·q + bias[g]
// for the group g = k / group_size.
static void dequantize_affine_row(const Linear& w, int64_t n, float* out) {
  const int bits = w.bits(), gs = w.group_size();
  const int64_t K = w.cols(), words = w.weight().dim(-1), groups = w.scales().dim(-1);
  const auto* row = w.weight().data_as<const uint32_t>() + n * words;
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t k = 0; k < K; ++k) {
    uint32_t q = 0;
    for (int b = 0; b < bits; ++b) {  // bit by bit: the definition, not a fast path
      const int64_t at = k * bits + b;
      q |= ((row[at / 32] >> (at % 32)) & 1u) << b;
    }
    const int64_t g = k / gs;
    const float scale = detail::load(w.scales(), n * groups + g), bias = detail::load(w.biases(), n * groups + g);
    out[k] = std::fma(scale, static_cast<float>(q & mask), bias);  // one rounding, as the cpu kernels
  }
}

void dequantize_row(const Linear& w, int64_t n, float* out) {
  switch (w.format()) {
    case WeightFormat::dense:
      for (int64_t k = 0; k < w.cols(); ++k) out[k] = detail::load(w.weight(), n * w.cols() + k);
      return;
    case WeightFormat::affine: return dequantize_affine_row(w, n, out);
    case WeightFormat::ggml:
      return dequantize_ggml(w.ggml_type(), w.weight().data_as<const uint8_t>() + n * w.weight().dim(-1), w.cols(), out);
  }
  KAPITSA_CHECK(false, "dequantize: weight format {}", weight_format_name(w.format()));
}

}  // namespace kapitsa::ops::ref
