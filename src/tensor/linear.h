// Linear: the weight of a matmul (y = x·wᵀ) or an embedding table, as the ops take it — the stored
// data plus the format that says how to read it. A non-owning view, like Tensor: the memory belongs to
// the checkpoint mapping or to a Buffer the model keeps. Logical shape [N, K] (rows = output features,
// cols = input features), or [E, N, K] for a stack of experts, of which expert(e) is one [N, K] view.
// Formats: dense (f32 / f16 / bf16, used in place), MLX affine (packed integer codes with a scale and
// a bias per group, docs/quantization.md) and llama.cpp's GGUF block types (ggml). A format's parameters (bits, group size) and per-group
// tensors (scales, biases) are members, sliced along with the weight by expert() / row_range() and
// counted by nbytes(), so call sites do not change; a kernel that does not implement a format stops
// with an error naming it.
#pragma once

#include "tensor/ggml_type.h"
#include "tensor/tensor.h"

#include <string_view>

namespace kapitsa {

enum class WeightFormat : uint8_t {
  dense,   // weight_: [(E,) N, K] f32 | f16 | bf16, row-major; no scales
  affine,  // MLX affine: weight_ u32 [(E,) N, K·bits/32], each row's K codes one little-endian bit
           // stream (code k in bits [k·bits, (k+1)·bits), so 3/5/6-bit codes may straddle words);
           // scales_, biases_ [(E,) N, K/group_size] f32 | f16 | bf16; w[n, k] = scale·q + bias of
           // group k / group_size
  ggml,    // llama.cpp blocks (GGUF): weight_ u8 [(E,) N, K/block_size·block_bytes], each row's blocks back
           // to back, scales inside the blocks; block type ggml_type() (tensor/ggml_type.h)
};

inline std::string_view weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::dense: return "dense";
    case WeightFormat::affine: return "affine";
    case WeightFormat::ggml: return "ggml";
  }
  return "unknown";
}

class Linear {
 public:
  Linear() = default;
  // A dense weight: w: [(E,) N, K] f32 | f16 | bf16 (checked where it is used, so an empty Tensor is fine
  // as a "no weight" member). Explicit: a weight is loaded as a Linear (WeightLoader::linear), not
  // converted from whatever Tensor is at hand.
  explicit Linear(const Tensor& w) : weight_(w) {}
  explicit Linear(const Buffer& w) : weight_(w.tensor()) {}

  // MLX affine codes of `bits` bits with a scale and bias per `group_size` inputs (see WeightFormat).
  // Shapes are a contract here: a loader reports a bad file as an error before building one.
  static Linear affine(const Tensor& packed, const Tensor& scales, const Tensor& biases, int bits, int group_size) {
    KAPITSA_CHECK(affine_supported(bits, group_size), "affine: {} bits, group size {} (bits 2, 3, 4, 5, 6, 8; groups 32, 64, 128)",
                  bits, group_size);
    const int r = packed.rank();
    KAPITSA_CHECK(packed.dtype() == DType::u32 && (r == 2 || r == 3) && scales.rank() == r &&
                      scales.shape() == biases.shape() && scales.dtype() == biases.dtype(),
                  "affine: weight {} {}, scales {} {}, biases {} {}", dtype_name(packed.dtype()), packed.shape().str(),
                  dtype_name(scales.dtype()), scales.shape().str(), dtype_name(biases.dtype()), biases.shape().str());
    const int64_t K = packed.dim(-1) * 32 / bits;
    for (int i = 0; i + 1 < r; ++i)
      KAPITSA_CHECK(scales.dim(i) == packed.dim(i), "affine: scales {} for weight {}", scales.shape().str(),
                    packed.shape().str());
    KAPITSA_CHECK(K * bits == packed.dim(-1) * 32 && K % group_size == 0 && scales.dim(-1) == K / group_size,
                  "affine: scales {} for weight {} at {} bits, group size {}", scales.shape().str(),
                  packed.shape().str(), bits, group_size);
    Linear l;
    l.format_ = WeightFormat::affine;
    l.weight_ = packed, l.scales_ = scales, l.biases_ = biases;
    l.bits_ = bits, l.group_size_ = group_size, l.cols_ = K;
    return l;
  }
  static bool affine_supported(int bits, int group_size) {
    return (bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8) &&
           (group_size == 32 || group_size == 64 || group_size == 128);
  }

  // llama.cpp blocks of `type` (ggml_type_supported) for K inputs per row: blocks u8 [(E,) N, row bytes].
  static Linear ggml(const Tensor& blocks, GgmlType type, int64_t K) {
    const auto info = ggml_type_info(static_cast<uint32_t>(type));
    KAPITSA_CHECK(info && ggml_type_supported(type), "ggml: block type {} is not supported", ggml_type_name(type));
    const int r = blocks.rank();
    KAPITSA_CHECK(blocks.dtype() == DType::u8 && (r == 2 || r == 3) && K % info->block_size == 0 &&
                      blocks.dim(-1) == K / info->block_size * info->block_bytes,
                  "ggml: {} blocks {} {} for {} inputs", info->name, dtype_name(blocks.dtype()), blocks.shape().str(), K);
    Linear l;
    l.format_ = WeightFormat::ggml;
    l.weight_ = blocks, l.ggml_type_ = type, l.cols_ = K;
    return l;
  }

  WeightFormat format() const { return format_; }
  bool is_dense() const { return format_ == WeightFormat::dense; }
  bool empty() const { return weight_.empty(); }
  Device device() const { return weight_.device(); }
  // Quantization parameters (0 for dense).
  int bits() const { return bits_; }
  int group_size() const { return group_size_; }
  // The block type of a ggml Linear.
  GgmlType ggml_type() const { return ggml_type_; }

  // A stack of experts [E, N, K]: E; a single matrix: 0.
  int64_t experts() const { return weight_.rank() == 3 ? weight_.dim(0) : 0; }
  // Logical output features N and input features K (of each expert, for a stack).
  int64_t rows() const { return weight_.rank() >= 2 ? weight_.dim(-2) : 0; }
  int64_t cols() const { return weight_.rank() >= 2 ? (is_dense() ? weight_.dim(-1) : cols_) : 0; }
  // Bytes stored per output row (what a GEMV streams per output feature), scales included.
  size_t bytes_per_row() const {
    const int64_t n = rows() * (experts() > 0 ? experts() : 1);
    return n == 0 ? 0 : nbytes() / static_cast<size_t>(n);
  }
  // Resident bytes of everything this Linear holds: weight data, scales and biases.
  size_t nbytes() const {
    return bytes_of(weight_) + bytes_of(scales_) + bytes_of(biases_);
  }

  // The stored data. For dense: the matrix itself.
  const Tensor& weight() const { return weight_; }
  // Per-group parameters of a quantized format, [(E,) N, groups] (empty for dense).
  const Tensor& scales() const { return scales_; }
  const Tensor& biases() const { return biases_; }
  // The [N, K] matrix of a dense Linear; any other format stops with an error naming `op` and the format
  // (what a kernel that reads dense weights calls first).
  const Tensor& dense(const char* op) const {
    KAPITSA_CHECK(is_dense(), "{}: weight format {} is not implemented here", op, weight_format_name(format_));
    return weight_;
  }

  // Expert e of a stack [E, N, K]: an [N, K] view with the same format and its own scales.
  Linear expert(int64_t e) const {
    KAPITSA_CHECK(experts() > 0 && e >= 0 && e < experts(), "Linear::expert({}) of a weight {}", e,
                  weight_.shape().str());
    return with([e](const Tensor& t) { return t.index(e); });
  }
  // Output rows [begin, end) of an [N, K] weight (e.g. the gate and up halves of a fused gate_up).
  Linear row_range(int64_t begin, int64_t end) const {
    KAPITSA_CHECK(weight_.rank() == 2 && 0 <= begin && begin <= end && end <= rows(),
                  "Linear::row_range({}, {}) of a weight {}", begin, end, weight_.shape().str());
    return with([begin, end](const Tensor& t) { return t.rows(begin, end); });
  }

 private:
  // The same Linear with `view` applied to the weight and to each per-group tensor (each is sliced
  // along its leading dims the same way, so formats stay consistent).
  template <class View>
  Linear with(View&& view) const {
    Linear l = *this;
    l.weight_ = view(weight_);
    if (!scales_.empty()) l.scales_ = view(scales_);
    if (!biases_.empty()) l.biases_ = view(biases_);
    return l;
  }

  static size_t bytes_of(const Tensor& t) { return t.empty() ? 0 : t.nbytes(); }

  WeightFormat format_ = WeightFormat::dense;
  Tensor weight_;
  Tensor scales_;  // [(E,) N, K / group_size] (quantized formats)
  Tensor biases_;  // [(E,) N, K / group_size]
  int bits_ = 0;
  int group_size_ = 0;
  GgmlType ggml_type_ = GgmlType::f32;  // ggml only
  int64_t cols_ = 0;  // logical K when the stored row is packed
};

}  // namespace kapitsa
