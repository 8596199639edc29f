// Linear: the weight of a matmul (y = x·wᵀ) or an embedding table, as the ops take it — the stored
// data plus the format that says how to read it. A non-owning view, like Tensor: the memory belongs to
// the checkpoint mapping or to a Buffer the model keeps. Logical shape [rows, cols] = [N, K].
// Only WeightFormat::dense (f32 / f16 / bf16, used in place) exists today. Quantized formats (MLX
// affine, GGUF blocks, NVFP4 / FP8 block scales) join as new enum values with their parameters and
// scale tensors here; until a kernel implements a format, it stops with an error naming it.
#pragma once

#include "tensor/tensor.h"

#include <string_view>

namespace kapitsa {

enum class WeightFormat : uint8_t {
  dense,  // weight_: [N, K] f32 | f16 | bf16, row-major
};

inline std::string_view weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::dense: return "dense";
  }
  return "unknown";
}

class Linear {
 public:
  Linear() = default;
  // A dense weight: w: [N, K] f32 | f16 | bf16 (checked where it is used, so an empty Tensor is fine
  // as a "no weight" member). Implicit, so every bare-Tensor caller keeps compiling.
  Linear(const Tensor& w) : weight_(w) {}  // NOLINT(google-explicit-constructor)
  Linear(const Buffer& w) : weight_(w.tensor()) {}  // NOLINT(google-explicit-constructor)

  WeightFormat format() const { return format_; }
  bool is_dense() const { return format_ == WeightFormat::dense; }
  bool empty() const { return weight_.empty(); }
  Device device() const { return weight_.device(); }

  // Logical output features N and input features K.
  int64_t rows() const { return weight_.rank() >= 1 ? weight_.dim(0) : 0; }
  int64_t cols() const { return weight_.rank() >= 2 ? weight_.dim(1) : 0; }
  // Bytes stored per output row (what a GEMV streams per output feature).
  size_t bytes_per_row() const { return rows() == 0 ? 0 : nbytes() / static_cast<size_t>(rows()); }
  // Resident bytes of everything this Linear holds (weight data, and scales once formats have them).
  size_t nbytes() const { return empty() ? 0 : weight_.nbytes(); }

  // The stored data. For dense: the [N, K] matrix itself.
  const Tensor& weight() const { return weight_; }
  // The [N, K] matrix of a dense Linear; any other format stops with an error naming `op` and the format
  // (what a kernel that reads dense weights calls first).
  const Tensor& dense(const char* op) const {
    KAPITSA_CHECK(is_dense(), "{}: weight format {} is not implemented here", op, weight_format_name(format_));
    return weight_;
  }

 private:
  WeightFormat format_ = WeightFormat::dense;
  Tensor weight_;
};

}  // namespace kapitsa
