// MLX affine quantization of a matrix (see affine_quantize.h for the formulas and where they come from).
#include "models/affine_quantize.h"

#include "base/thread_pool.h"
#include "tensor/linear.h"
#include "weights/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace kapitsa::models {

AffineGroupParams affine_group_params(const float* w, int group_size, int bits) {
  const float n_bins = static_cast<float>((1 << bits) - 1);
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  for (int i = 0; i < group_size; ++i) lo = std::min(lo, w[i]), hi = std::max(hi, w[i]);
  const bool low_edge = std::abs(lo) > std::abs(hi);
  float scale = std::max((hi - lo) / n_bins, 1e-7f);
  if (!low_edge) scale = -scale;
  const float edge = low_edge ? lo : hi;
  const float q0 = std::rint(edge / scale);
  if (q0 == 0) return {scale, 0.0f};
  return {edge / q0, edge};
}

namespace {

void store(void* base, DType dtype, int64_t i, float v) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(base)[i] = v; break;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = f32_to_bf16(v); break;
    default: static_cast<uint16_t*>(base)[i] = f32_to_f16(v); break;  // f16
  }
}

}  // namespace

Expected<AffineQuantized> affine_quantize(const Tensor& w, int bits, int group_size) {
  if (!Linear::affine_supported(bits, group_size))
    return error("affine quantization: {} bits with group size {} is not supported (bits 2, 3, 4, 5, 6, 8; group sizes "
                 "32, 64, 128)", bits, group_size);
  const DType dt = w.dtype();
  if (dt != DType::f32 && dt != DType::f16 && dt != DType::bf16)
    return error("affine quantization: dtype {}, expected F32, F16 or BF16", dtype_name(dt));
  if (w.rank() < 2 || w.dim(-1) % group_size != 0)
    return error("affine quantization: shape {} is not [.., N, K] with K a multiple of the group size {}", w.shape().str(),
                 group_size);
  const int64_t K = w.dim(-1), rows = w.numel() / K, G = K / group_size;
  Shape codes_shape = w.shape(), group_shape = w.shape();
  codes_shape.dims[static_cast<size_t>(codes_shape.rank - 1)] = K * bits / 32;
  group_shape.dims[static_cast<size_t>(group_shape.rank - 1)] = G;
  AffineQuantized out{Buffer::zeros(DType::u32, codes_shape), Buffer::allocate(dt, group_shape),
                      Buffer::allocate(dt, group_shape)};
  uint32_t* codes = out.codes.tensor().data_as<uint32_t>();
  void* scales = out.scales.tensor().data();
  void* biases = out.biases.tensor().data();
  const float n_bins = static_cast<float>((1 << bits) - 1);
  const size_t row_bytes = static_cast<size_t>(K) * dtype_size(dt);
  parallel_for(static_cast<size_t>(rows), 16, [&](size_t begin, size_t end) {
    std::vector<float> x(static_cast<size_t>(K));
    for (size_t r = begin; r < end; ++r) {
      const Tensor row(dt, Shape{K}, const_cast<char*>(static_cast<const char*>(w.data()) + r * row_bytes));
      weights::convert_to_f32(row, x.data());
      // A row is K·bits bits = K·bits/32 whole words (K is a multiple of 32): rows never share a word.
      uint32_t* row_codes = codes + static_cast<int64_t>(r) * K * bits / 32;
      for (int64_t g = 0; g < G; ++g) {
        const float* v = x.data() + g * group_size;
        const AffineGroupParams p = affine_group_params(v, group_size, bits);
        store(scales, dt, static_cast<int64_t>(r) * G + g, p.scale);
        store(biases, dt, static_cast<int64_t>(r) * G + g, p.bias);
        for (int i = 0; i < group_size; ++i) {
          const uint64_t q = static_cast<uint64_t>(std::clamp(std::rint((v[i] - p.bias) / p.scale), 0.0f, n_bins));
          const int64_t at = (g * group_size + i) * bits;  // bit position of the code in the row
          const uint64_t shifted = q << (at % 32);
          row_codes[at / 32] |= static_cast<uint32_t>(shifted);
          if ((at % 32) + bits > 32) row_codes[at / 32 + 1] |= static_cast<uint32_t>(shifted >> 32);
        }
      }
    }
  });
  return out;
}

}  // namespace kapitsa::models
