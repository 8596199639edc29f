// WeightLoader: how layers load their weights from a checkpoint — every matrix through linear(), which
// returns a Linear (tensor/linear.h) and keeps the one list of loaded Linears that the model's byte
// figures come from: weight bytes one decode token reads (each Linear's nbytes — scales included —
// times the share of tokens that read it: 1, k/E for routed experts, 0 for an embedding table) and
// resident bytes (each distinct Linear once; a tied head is the embedding). Small f32 vectors (norms,
// biases, A_log) come from get_f32 and are not counted. Nothing per family: a new format or layer is
// counted by loading through it. Formats: a weight NAME (module NAME without ".weight") is MLX affine
// when the checkpoint has MODULE.scales — codes in NAME (U32), MODULE.scales / MODULE.biases, bits and
// group size from config.json's quantization (models/quantization.h) — else llama.cpp blocks when the
// checkpoint entry carries a ggml type (GGUF, models/gguf_checkpoint.h), else FP8 when it is F8_E4M3
// (with MODULE.weight_scale_inv or MODULE.weight_scale: dequantized to bf16 at load, models/fp8_weights.h),
// else ModelOpt NVFP4 when it is U8 with MODULE.weight_scale / weight_scale_2 (or the config says NVFP4:
// dequantized to bf16 at load, models/block_float.h), else dense. MLX's block-float modes (mxfp4, nvfp4,
// mxfp8) are MODULE.scales without biases: mxfp4 repacked into llama.cpp MXFP4 blocks, the others
// dequantized to bf16.
// Device: for a model on the GPU every weight is copied there once as it is loaded (from the mmapped
// file); the loader owns those copies until the model takes them (take_device_weights).
#pragma once

#include "base/status.h"
#include "models/quantization.h"
#include "tensor/linear.h"
#include "tensor/tensor.h"
#include "weights/safetensors.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kapitsa::models {

class WeightLoader {
 public:
  explicit WeightLoader(const weights::Checkpoint& checkpoint, Quantization quantization = {},
                        Device device = Device::cpu)
      : checkpoint_(checkpoint), quantization_(std::move(quantization)), device_(device) {}

  // The weight `name` for matmul / embedding, of logical shape [N, K] (or [E, N, K] for stacked experts,
  // viewed per expert with Linear::expert), checked against `shape` and counted with the current share.
  // Errors name the file, the tensor and the problem (missing scales or biases, shapes that do not
  // match the logical shape at the configured bits and group size, NaN/Inf scales or biases).
  Expected<Linear> linear(const std::string& name, const Shape& shape);
  // Counts a Linear loaded elsewhere (a view of one already counted is counted once: the larger share).
  void count(const Linear& linear);
  // A small parameter vector converted to f32 (norms, biases, A_log), on the loader's device: not counted.
  Expected<Buffer> get_f32(const std::string& name, const Shape& shape);
  // A zero f32 vector on the loader's device (a parameter the checkpoint may leave out).
  Buffer zeros_f32(const Shape& shape) const;
  Device device() const { return device_; }
  // The device copies of every Linear loaded so far, and on cpu the weights made at load (FP8, NVFP4, mlx's
  // block-float modes):
  // the model keeps them alive.
  std::vector<Buffer> take_device_weights() { return std::move(device_weights_); }
  size_t device_bytes() const { return device_bytes_; }
  bool contains(const std::string& name) const { return checkpoint_.contains(name); }
  // A depthwise conv1d weight as f32 [C, K]. Hugging Face stores it [C, 1, K]; mlx-lm's sanitize moves
  // the axis to [C, K, 1] (same order of values). Either is accepted.
  Expected<Buffer> conv_weight(const std::string& name, int64_t channels, int64_t kernel) const;
  // Whether tensor `name` is stored in mlx-lm's sanitized layout ([C, K, 1] conv weights): the sign that
  // a Qwen3.5 / Qwen3-Next folder was written by mlx-lm, whose RMSNorm weights are then stored as 1 + w.
  bool is_mlx_conv(const std::string& name) const;

  // Linears loaded while a Share lives are read by `per_token` of the tokens (routed experts: k/E;
  // an embedding table: 0, it is gathered from).
  class Share {
   public:
    Share(WeightLoader& loader, double per_token) : loader_(loader), outer_(loader.share_) { loader.share_ = per_token; }
    ~Share() { loader_.share_ = outer_; }
    Share(const Share&) = delete;
    Share& operator=(const Share&) = delete;

   private:
    WeightLoader& loader_;
    double outer_;
  };

  // After loading: an error when config.json's quantization has an entry for a module no weight was
  // loaded from (a typo, or a name layout this loader does not read).
  Status check_quantization_entries_used() const;

  // Σ nbytes × share over distinct Linears: the denominator of the decode roofline.
  size_t bytes_per_token() const;
  // Σ nbytes over distinct Linears.
  size_t resident_bytes() const;
  // The least ops::matmul_invariant_rows over the Linears a token multiplies with (every one counted
  // with a share above 0: not the embedding table, which is gathered from), and any limit below; 0 before
  // any Linear.
  int64_t invariant_rows() const { return invariant_rows_ == kNoLinear ? 0 : invariant_rows_; }
  // A layer whose kernels switch at `rows` (routed experts on a device: per token up to
  // kDeviceRoutedMaxTokens, grouped by expert above, summed in another order).
  void limit_invariant_rows(int64_t rows) { invariant_rows_ = invariant_rows_ == kNoLinear ? rows : std::min(invariant_rows_, rows); }

 private:
  struct Entry {
    const void* data;
    size_t bytes;
    double share;
  };
  Expected<Linear> affine(const std::string& name, const std::string& module, const Shape& shape);
  Expected<Linear> ggml(const std::string& name, const weights::TensorEntry& entry, const Shape& shape);
  // F8_E4M3 codes with weight_scale(_inv): dequantized once to bf16 (models/fp8_weights.h).
  Expected<Linear> fp8(const std::string& name, const std::string& module, const Shape& shape);
  // mlx's mxfp4 / nvfp4 / mxfp8 modes: U32 codes and U8 scales (models/block_float.h).
  Expected<Linear> mlx_block_float(const std::string& name, const std::string& module, const Shape& shape,
                                   const Quantization::Params& p);
  // ModelOpt NVFP4: U8 codes, F8_E4M3 weight_scale, F32 weight_scale_2; dequantized once to bf16.
  Expected<Linear> nvfp4(const std::string& name, const std::string& module, const Shape& shape);
  // A weight made at load (dequantized or repacked): kept by the loader on cpu (the model takes it with
  // take_device_weights), else copied to the device; returns the tensor to use.
  Tensor own(Buffer made);
  // `t` itself on cpu; else its copy on device_, kept in device_weights_.
  Tensor on_device(const Tensor& t);

  const weights::Checkpoint& checkpoint_;
  Quantization quantization_;
  std::set<std::string> modules_;  // every module a Linear was asked for
  std::vector<Entry> entries_;
  double share_ = 1.0;
  static constexpr int64_t kNoLinear = -1;
  int64_t invariant_rows_ = kNoLinear;
  Device device_ = Device::cpu;
  std::vector<Buffer> device_weights_;  // device copies; on cpu, weights made at load (own)
  mutable size_t device_bytes_ = 0;  // conv_weight (const) counts too
};

}  // namespace kapitsa::models
