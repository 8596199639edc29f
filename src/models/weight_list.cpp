// WeightLoader: Linears by name, counted once each (see weight_list.h).
#include "models/weight_list.h"

#include "models/block_float.h"
#include "models/fp8_weights.h"
#include "ops/memory.h"
#include "ops/ops.h"

#include <algorithm>
#include <cmath>
#include <fnmatch.h>
#include <vector>

namespace kapitsa::models {

namespace {

// The logical shape with its last dim (K) replaced.
Shape with_last(Shape s, int64_t last) {
  s.dims[static_cast<size_t>(s.rank - 1)] = last;
  return s;
}

// Scales and biases must be finite: a NaN would turn a whole group of weights into NaN silently.
Status check_finite(const Tensor& t, const std::string& file, const std::string& name) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  weights::convert_to_f32(t, v.data());
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      return error("{}: tensor '{}' has {} at flat index {} (scales and biases must be finite)", file, name, v[i], i);
  return ok_status();
}

}  // namespace

Expected<Linear> WeightLoader::linear(const std::string& name, const Shape& shape) {
  const std::string suffix = ".weight";
  const bool has_suffix = name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  const std::string module = has_suffix ? name.substr(0, name.size() - suffix.size()) : name;
  modules_.insert(module);
  if (checkpoint_.contains(module + ".scales")) return affine(name, module, shape);
  const weights::TensorEntry* entry = checkpoint_.find(name);
  if (entry != nullptr && entry->ggml) return ggml(name, *entry, shape);
  if (entry != nullptr && entry->dtype == DType::f8_e4m3) return fp8(name, module, shape);
  if (entry != nullptr && entry->dtype == DType::u8 && (quantization_.nvfp4 || checkpoint_.contains(module + ".weight_scale")))
    return nvfp4(name, module, shape);
  if (entry != nullptr && entry->dtype == DType::u32)
    return error("{}: tensor '{}' is packed (U32) but '{}.scales' is missing (MLX affine weights need scales and biases)",
                 checkpoint_.file_of(name), name, module);
  KAPITSA_TRY(Tensor t, checkpoint_.get(name, shape));
  const Linear l(on_device(t));
  count(l);
  return l;
}

Expected<Linear> WeightLoader::affine(const std::string& name, const std::string& module, const Shape& shape) {
  KAPITSA_TRY(const Quantization::Params p, quantization_.params(module));
  if (p.mode != "affine") return mlx_block_float(name, module, shape, p);
  const std::string scales_name = module + ".scales", biases_name = module + ".biases";
  const std::string file = checkpoint_.file_of(scales_name);
  const int64_t K = shape[-1];
  if (K % p.group_size != 0)
    return error("{}: '{}' has {} inputs, not a multiple of its group size {}", file, name, K, p.group_size);
  if (!checkpoint_.contains(biases_name))
    return error("{}: tensor '{}' is missing (MLX affine weights need scales and biases; '{}' is there)", file,
                 biases_name, scales_name);
  // codes: [.., N, K·bits/32] u32;  scales, biases: [.., N, K/group] f32|f16|bf16
  KAPITSA_TRY(const Tensor packed, checkpoint_.get(name, with_last(shape, K * p.bits / 32), {DType::u32}));
  KAPITSA_TRY(const Tensor scales, checkpoint_.get(scales_name, with_last(shape, K / p.group_size)));
  KAPITSA_TRY(const Tensor biases, checkpoint_.get(biases_name, with_last(shape, K / p.group_size)));
  if (scales.dtype() != biases.dtype())
    return error("{}: '{}' is {} but '{}' is {}", file, scales_name, dtype_name(scales.dtype()), biases_name,
                 dtype_name(biases.dtype()));
  KAPITSA_RETURN_IF_ERROR(check_finite(scales, file, scales_name));
  KAPITSA_RETURN_IF_ERROR(check_finite(biases, checkpoint_.file_of(biases_name), biases_name));
  const Linear l = Linear::affine(on_device(packed), on_device(scales), on_device(biases), p.bits, p.group_size);
  count(l);
  return l;
}

Expected<Linear> WeightLoader::ggml(const std::string& name, const weights::TensorEntry& entry, const Shape& shape) {
  const GgmlType type = *entry.ggml;
  const auto info = ggml_type_info(static_cast<uint32_t>(type));
  if (!ggml_type_supported(type))
    return error("{}: tensor '{}' has ggml type {}, which Kapitsa does not decode yet (it reads F32, F16, BF16, Q4_0, "
                 "Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4)",
                 checkpoint_.file_of(name), name, ggml_type_name(type));
  if (entry.ggml_cols != shape[-1])
    return error("{}: tensor '{}' has rows of {} values, expected {} (logical shape {})", checkpoint_.file_of(name), name,
                 entry.ggml_cols, shape[-1], shape.str());
  // blocks: [.., N, K/block·block_bytes] u8
  KAPITSA_TRY(const Tensor blocks,
              checkpoint_.get(name, with_last(shape, shape[-1] / info->block_size * info->block_bytes), {DType::u8}));
  const Linear l = Linear::ggml(on_device(blocks), type, shape[-1]);
  count(l);
  return l;
}

Expected<Linear> WeightLoader::fp8(const std::string& name, const std::string& module, const Shape& shape) {
  const std::string file = checkpoint_.file_of(name);
  if (shape.rank != 2)
    return error("{}: tensor '{}' is F8_E4M3 with logical shape {}: FP8 weights load as 2-D matrices only (per-expert "
                 "tensors, not fused expert stacks)", file, name, shape.str());
  std::string scale_name = module + ".weight_scale_inv";  // block-FP8's name; compressed-tensors / modelopt: weight_scale
  if (!checkpoint_.contains(scale_name)) scale_name = module + ".weight_scale";
  if (!checkpoint_.contains(scale_name))
    return error("{}: tensor '{}' is F8_E4M3 but neither '{}.weight_scale_inv' nor '{}.weight_scale' is there (FP8 "
                 "weights need their scales)", file, name, module, module);
  const std::string scale_file = checkpoint_.file_of(scale_name);
  // codes: [N, K] e4m3;  scales: [1] | [N, 1] | [ceil(N/bn), ceil(K/bk)] f32 | bf16 | f16
  KAPITSA_TRY(const Tensor w, checkpoint_.get(name, shape, {DType::f8_e4m3}));
  const auto scale = checkpoint_.get_any_shape(scale_name);
  if (!scale.ok()) return scale.error();
  const std::array<int64_t, 2> block = quantization_.fp8 ? quantization_.fp8->block : std::array<int64_t, 2>{128, 128};
  auto layout = fp8_layout(checkpoint_.find(scale_name)->shape, shape[0], shape[1], block);
  if (!layout.ok()) return error("{}: tensor '{}' {}", scale_file, scale_name, layout.error().message);
  KAPITSA_RETURN_IF_ERROR(check_finite(*scale, scale_file, scale_name));
  std::vector<float> scales(static_cast<size_t>(scale->numel()));
  weights::convert_to_f32(*scale, scales.data());
  if (const int64_t i = first_nan_e4m3(w.data_as<const uint8_t>(), w.numel()); i >= 0)
    return error("{}: tensor '{}' has a NaN code (E4M3 0x{:02X}) at row {}, input {}", file, name,
                 w.data_as<const uint8_t>()[i], i / shape[1], i % shape[1]);
  // On the cpu the codes stay 1 byte (+ an f32 scale per 32). The GPU decodes these blocks to f32 in its
  // GEMV (ggml.cu), slower than its bf16 GEMV: bf16 there, at twice the memory.
  const bool blocks = device_ == Device::cpu && fp8_blocks_fit(*layout, shape[1]);
  const Linear l = blocks ? Linear::ggml(own(fp8_to_blocks(w, scales, *layout)), GgmlType::f8_e4m3_32, shape[1])
                          : Linear(own(dequantize_fp8(w, scales, *layout)));  // bf16 [N, K]
  count(l);
  return l;
}

Expected<Linear> WeightLoader::mlx_block_float(const std::string& name, const std::string& module, const Shape& shape,
                                               const Quantization::Params& p) {
  const BlockFloat f = *block_float_from_mode(p.mode);  // parse_quantization checked the mode
  const BlockFloatInfo info = block_float_info(f);
  const std::string scales_name = module + ".scales";
  const std::string file = checkpoint_.file_of(scales_name);
  const int64_t K = shape[-1], rows = shape.numel() / std::max<int64_t>(K, 1);
  if (K % info.group != 0)
    return error("{}: '{}' has {} inputs, not a multiple of mode {}'s group size {}", file, name, K, info.name, info.group);
  if (checkpoint_.contains(module + ".biases"))
    return error("{}: tensor '{}.biases' is there, but mode \"{}\" has no biases (is the config's mode the one the "
                 "weights were quantized with?)", checkpoint_.file_of(module + ".biases"), module, info.name);
  // codes: [.., N, K·bits/32] u32;  scales: [.., N, K/group] u8 (E8M0, or E4M3 for nvfp4)
  KAPITSA_TRY(const Tensor packed, checkpoint_.get(name, with_last(shape, K * info.bits / 32), {DType::u32}));
  KAPITSA_TRY(const Tensor scales, checkpoint_.get(scales_name, with_last(shape, K / info.group), {DType::u8}));
  const auto* s = scales.data_as<const uint8_t>();
  if (const int64_t i = first_nonfinite_scale(f, s, scales.numel()); i >= 0)
    return error("{}: tensor '{}' has a scale that is not finite ({} code 0x{:02X}) at flat index {}", file, scales_name,
                 f == BlockFloat::nvfp4 ? "E4M3" : "E8M0", s[i], i);
  const auto* codes = packed.data_as<const uint8_t>();
  if (f == BlockFloat::mxfp4) {
    Buffer blocks = mxfp4_to_ggml_blocks(codes, s, rows, K);  // u8 [rows, K/32 · 17]
    blocks.tensor() = blocks.tensor().reshape(with_last(shape, K / 32 * 17));
    const Linear l = Linear::ggml(own(std::move(blocks)), GgmlType::mxfp4, K);
    count(l);
    return l;
  }
  if (f == BlockFloat::mxfp8)
    if (const int64_t i = first_nan_e4m3(codes, rows * K); i >= 0)
      return error("{}: tensor '{}' has a NaN code (E4M3 0x{:02X}) at flat index {}", checkpoint_.file_of(name), name,
                   codes[i], i);
  if (device_ == Device::cpu && K % 32 == 0) {  // codes as stored, f32 scales (the GPU: bf16, as for FP8 above)
    Buffer blocks = block_float_to_blocks(f, codes, s, rows, K, 1.0f);
    const GgmlType type = f == BlockFloat::nvfp4 ? GgmlType::fp4_e2m1_32 : GgmlType::f8_e4m3_32;
    blocks.tensor() = blocks.tensor().reshape(with_last(shape, blocks.tensor().dim(-1)));
    const Linear l = Linear::ggml(own(std::move(blocks)), type, K);
    count(l);
    return l;
  }
  Buffer dense = dequantize_block_float(f, codes, s, rows, K, 1.0f);  // bf16 [rows, K]
  dense.tensor() = dense.tensor().reshape(shape);
  const Linear l(own(std::move(dense)));
  count(l);
  return l;
}

Expected<Linear> WeightLoader::nvfp4(const std::string& name, const std::string& module, const Shape& shape) {
  const std::string file = checkpoint_.file_of(name);
  if (shape.rank != 2)
    return error("{}: tensor '{}' is NVFP4 (U8 codes) with logical shape {}: NVFP4 weights load as 2-D matrices only "
                 "(per-expert tensors, not fused expert stacks)", file, name, shape.str());
  const int64_t N = shape[0], K = shape[1];
  if (K % 16 != 0) return error("{}: '{}' has {} inputs, not a multiple of NVFP4's group size 16", file, name, K);
  if (quantization_.nvfp4)
    for (const std::string& pattern : quantization_.nvfp4->exclude)
      if (fnmatch(pattern.c_str(), module.c_str(), 0) == 0)
        return error("{}: tensor '{}' is stored as NVFP4, but {} excludes '{}' from quantization (pattern '{}')", file,
                     name, quantization_.nvfp4->where, module, pattern);
  const std::string scale_name = module + ".weight_scale", global_name = module + ".weight_scale_2";
  for (const std::string& n : {scale_name, global_name})
    if (!checkpoint_.contains(n))
      return error("{}: tensor '{}' is NVFP4 (U8 codes) but '{}' is missing (NVFP4 weights need weight_scale and "
                   "weight_scale_2)", file, name, n);
  // codes: [N, K/2] u8, two E2M1 per byte;  weight_scale: [N, K/16] e4m3;  weight_scale_2: [] | [1] f32
  KAPITSA_TRY(const Tensor codes, checkpoint_.get(name, {N, K / 2}, {DType::u8}));
  KAPITSA_TRY(const Tensor scales, checkpoint_.get(scale_name, {N, K / 16}, {DType::f8_e4m3}));
  KAPITSA_TRY(const Tensor global, checkpoint_.get_any_shape(global_name, {DType::f32, DType::bf16, DType::f16}));
  const std::string scale_file = checkpoint_.file_of(scale_name), global_file = checkpoint_.file_of(global_name);
  if (global.numel() != 1)
    return error("{}: tensor '{}' has shape {}; expected one value (the per-tensor second scale)", global_file,
                 global_name, global.shape().str());
  KAPITSA_RETURN_IF_ERROR(check_finite(scales, scale_file, scale_name));
  KAPITSA_RETURN_IF_ERROR(check_finite(global, global_file, global_name));
  float g = 0;
  weights::convert_to_f32(global, &g);
  const auto* c = codes.data_as<const uint8_t>();
  const auto* sc = scales.data_as<const uint8_t>();
  // On the cpu 4-bit codes as stored + two f32 scales per 32 inputs (the GPU: bf16, as for FP8 above).
  const Linear l = device_ == Device::cpu && K % 32 == 0
                       ? Linear::ggml(own(block_float_to_blocks(BlockFloat::nvfp4, c, sc, N, K, g)), GgmlType::fp4_e2m1_32, K)
                       : Linear(own(dequantize_block_float(BlockFloat::nvfp4, c, sc, N, K, g)));  // bf16 [N, K]
  count(l);
  return l;
}

Tensor WeightLoader::own(Buffer made) {
  if (device_ != Device::cpu) return on_device(made.tensor());
  device_weights_.push_back(std::move(made));  // the model keeps it (take_device_weights)
  return device_weights_.back().tensor();
}

Expected<Buffer> WeightLoader::conv_weight(const std::string& name, int64_t channels, int64_t kernel) const {
  const Shape stored = is_mlx_conv(name) ? Shape{channels, kernel, 1} : Shape{channels, 1, kernel};
  KAPITSA_TRY(Buffer conv, checkpoint_.get_f32(name, stored));
  conv.tensor() = conv.tensor().reshape({channels, kernel});
  if (device_ == Device::cpu) return conv;
  device_bytes_ += conv.tensor().nbytes();
  return ops::copy_to(device_, conv.tensor(), "the model's weights");
}

bool WeightLoader::is_mlx_conv(const std::string& name) const {
  const weights::TensorEntry* entry = checkpoint_.find(name);  // null for synthesized checkpoints
  return entry != nullptr && entry->shape.size() == 3 && entry->shape[2] == 1 && entry->shape[1] != 1;
}

Tensor WeightLoader::on_device(const Tensor& t) {
  if (device_ == Device::cpu) return t;
  device_weights_.push_back(ops::copy_to(device_, t, "the model's weights"));
  device_bytes_ += t.nbytes();
  return device_weights_.back().tensor();
}

Expected<Buffer> WeightLoader::get_f32(const std::string& name, const Shape& shape) {
  KAPITSA_TRY(Buffer host, checkpoint_.get_f32(name, shape));
  if (device_ == Device::cpu) return host;
  device_bytes_ += host.tensor().nbytes();
  return ops::copy_to(device_, host.tensor(), "the model's weights");
}

Buffer WeightLoader::zeros_f32(const Shape& shape) const { return ops::zeros(device_, DType::f32, shape, "the model's weights"); }

void WeightLoader::count(const Linear& linear) {
  if (linear.empty()) return;
  if (share_ > 0.0) limit_invariant_rows(ops::matmul_invariant_rows(device_, linear));
  const void* data = linear.weight().data();
  const size_t bytes = linear.nbytes();
  for (Entry& e : entries_)
    if (e.data == data && e.bytes == bytes) {
      e.share = std::max(e.share, share_);
      return;
    }
  entries_.push_back({data, bytes, share_});
}

Status WeightLoader::check_quantization_entries_used() const {
  for (const auto& [module, params] : quantization_.modules)
    if (!modules_.contains(module))
      return error("{} has an entry for '{}', but the model loads no weight '{}.weight' or '{}'", quantization_.where,
                   module, module, module);
  return ok_status();
}

size_t WeightLoader::bytes_per_token() const {
  double total = 0;
  for (const Entry& e : entries_) total += static_cast<double>(e.bytes) * e.share;
  return static_cast<size_t>(total + 0.5);
}

size_t WeightLoader::resident_bytes() const {
  size_t total = 0;
  for (const Entry& e : entries_) total += e.bytes;
  return total;
}

}  // namespace kapitsa::models
