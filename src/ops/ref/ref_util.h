// Small helpers shared by the reference ops (internal to ops/ref): reading any float dtype as f32 and
// flattening a tensor to [rows, last dim]. Not part of the op vocabulary; no speed concerns here.
#pragma once

#include "tensor/tensor.h"

#include <cstdint>
#include <cstring>

namespace kapitsa::ops::ref::detail {

// Element i (flat index) of an f32 / f16 / bf16 tensor, widened to float.
inline float load(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return t.data_as<const float>()[i];
    case DType::bf16: return bf16_to_f32(t.data_as<const uint16_t>()[i]);
    case DType::f16: return f16_to_f32(t.data_as<const uint16_t>()[i]);
    default: KAPITSA_CHECK(false, "ref: unsupported dtype {}", dtype_name(t.dtype()));
  }
  return 0;
}

// Stores v into element i of an f32 / f16 / bf16 tensor (round to nearest even when narrowing).
inline void store(const Tensor& t, int64_t i, float v) {
  switch (t.dtype()) {
    case DType::f32: t.data_as<float>()[i] = v; break;
    case DType::bf16: t.data_as<uint16_t>()[i] = f32_to_bf16(v); break;
    case DType::f16: t.data_as<uint16_t>()[i] = f32_to_f16(v); break;
    default: KAPITSA_CHECK(false, "ref: unsupported dtype {}", dtype_name(t.dtype()));
  }
}

// dst = src, same size (a state slot into a checkpoint slot).
inline void copy_bytes(const Tensor& src, const Tensor& dst) {
  if (src.nbytes() > 0) std::memcpy(dst.data(), src.data(), src.nbytes());
}

inline bool is_weight_dtype(DType d) { return d == DType::f32 || d == DType::f16 || d == DType::bf16; }

// Number of rows when the tensor is taken as 2-D [rows, last dim].
inline int64_t rows_of(const Tensor& t) {
  KAPITSA_CHECK(t.rank() >= 1, "tensor of rank 0");
  const int64_t cols = t.dim(-1);
  return cols == 0 ? 0 : t.numel() / cols;
}

}  // namespace kapitsa::ops::ref::detail
