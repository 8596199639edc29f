// `kapitsa quantize`: writes an MLX affine-quantized copy of a bf16/f16/f32 checkpoint folder, in the
// layout mlx-lm's `convert -q` writes (read in mlx-lm's convert.py / utils.py quantize_model and
// save_model, and mlx's nn.quantize; not copied):
//   - which modules: those mlx-lm would turn into QuantizedLinear / QuantizedEmbedding /
//     QuantizedSwitchLinear — every 2-D "M.weight" that is not a norm (projections, routers, the
//     embedding, the head), stacked experts (3-D "switch_mlp.*.weight", fused "experts.gate_up_proj" /
//     "experts.down_proj") — whose input width is a multiple of the group size. Norms, biases, conv1d,
//     A_log, dt_bias, Nemotron-H's router ("mixer.gate", not an nn.Linear in mlx-lm) stay as they are.
//     The vision tower is dropped, as mlx-lm's sanitize does. A multi-token-prediction head ("mtp.*") is
//     quantized by the same rules (a recipe counts its layer as layer 0) and written last, to
//     "model-mtp.safetensors" (listed in the index): mlx-lm's sanitize drops it on load, Kapitsa reads it;
//   - bits per module: --bits for all, except Qwen MoE routers ("mlp.gate", "shared_expert_gate") at
//     8 bits, group 64 (the models' own quant_predicate in mlx-lm); or a mixed recipe (mixed_2_6,
//     mixed_3_4, mixed_3_6, mixed_4_6) that gives v_proj and down_proj of the first and last eighth of
//     the layers and every third layer in between, and lm_head, the high bits, every other module the
//     low bits (mlx-lm's mixed_quant_predicate_builder; it replaces the routers' rule, as in mlx-lm);
//   - tensors: "M.weight" (or the fused-expert name) U32 codes, "M.scales", "M.biases" in the
//     weight's dtype (models/affine_quantize.h); other tensors copied; names kept as in the input
//     (Kapitsa reads both Hugging Face and mlx-lm names); shards of at most 5 GiB ("model.safetensors"
//     or "model-0000i-of-0000n.safetensors", metadata format "mlx") and model.safetensors.index.json;
//   - config.json: the input's, plus "quantization" and "quantization_config" (the same object):
//     {"group_size", "bits", "mode": "affine", MODULE: {"group_size", "bits"[, "mode"]} per module
//     that a rule gave its own parameters};
//   - every other file of the folder (tokenizer, generation config, chat template) copied.
#pragma once

#include "base/status.h"

#include <cstdint>
#include <functional>
#include <string>

namespace kapitsa::models {

struct QuantizeOptions {
  int bits = 0;          // 2, 3, 4, 5, 6, 8; 0 with a recipe: the recipe's low bits
  int group_size = 64;   // 32, 64, 128
  std::string mixed;     // "" or mixed_2_6 | mixed_3_4 | mixed_3_6 | mixed_4_6
  // Called after each input tensor is done with the bytes it had in the input, and after each shard is
  // written with its file name (for a progress bar).
  std::function<void(int64_t bytes)> on_tensor;
  std::function<void(const std::string& file, int64_t bytes)> on_shard;
};

struct QuantizeSummary {
  int64_t input_bytes = 0;     // the tensors read
  int64_t output_bytes = 0;    // the tensors written
  int quantized = 0;           // modules quantized
  int kept = 0;                // tensors copied as they are
  int dropped = 0;             // vision tower tensors left out
  int shards = 0;              // of the trunk (model-mtp.safetensors not counted)
  double bits_per_weight = 0;  // over the quantized modules, scales and biases included
};

// The bytes every input tensor will need, to size a progress bar before quantize_checkpoint runs.
Expected<int64_t> checkpoint_tensor_bytes(const std::string& in);

// Writes OUT (which must not exist) from the folder IN. Errors name the folder, file or tensor: IN
// missing or not a checkpoint, IN already quantized (a "quantization" config or packed tensors),
// unsupported bits / group size / recipe, OUT existing, write failures.
Expected<QuantizeSummary> quantize_checkpoint(const std::string& in, const std::string& out, const QuantizeOptions& options);

}  // namespace kapitsa::models
