// Qwen35Config: the hyper-parameters of the Qwen3.5 family (qwen3_5, qwen3_5_moe with nested
// text_config; their *_text forms; qwen3_next at the top level), read from config.json with
// errors naming the missing or malformed field.
#pragma once

#include "base/status.h"
#include "models/quantization.h"
#include "weights/hf_config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kapitsa::models::qwen35 {

enum class LayerKind { linear_attention, full_attention };

struct Qwen35Config {
  std::string model_type;
  int64_t vocab_size = 0, hidden_size = 0, n_layers = 0;
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t linear_k_heads = 0, linear_v_heads = 0, linear_k_head_dim = 0, linear_v_head_dim = 0, conv_kernel = 4;
  int64_t intermediate_size = 0;  // dense MLP
  int64_t n_experts = 0, top_k = 0, moe_intermediate_size = 0, shared_expert_intermediate_size = 0;
  bool norm_topk_prob = true;
  // MTP head layers the checkpoint declares (Qwen3.5 mtp_num_hidden_layers, Qwen3-Next
  // num_nextn_predict_layers); their mtp.* tensors may still be absent (transformers drops them).
  int64_t mtp_layers = 0;
  std::vector<bool> layer_is_moe;  // per layer: sparse MoE (true) or dense SwiGLU (false)
  std::vector<LayerKind> layer_kinds;
  float rms_norm_eps = 1e-6f;
  float partial_rotary_factor = 0.25f;
  float rope_theta = 10000000.0f;
  bool attn_output_gate = true;
  bool tie_word_embeddings = false;
  bool packed_gdn_projections = false;  // qwen3_next
  bool gdn_out_proj_tiled = false;      // a GGUF file's out_proj columns in the converter's tiled V-head order
  bool rope_bf16_frequencies = false;   // from LoadOptions, not config.json
  int64_t max_position_embeddings = 0;
  std::vector<int32_t> eos_token_ids;
  Quantization quantization;  // config.json "quantization" (MLX affine checkpoints)

  int rotary_dim() const { return static_cast<int>(static_cast<float>(head_dim) * partial_rotary_factor); }
};

Expected<Qwen35Config> parse_config(const weights::HfConfig& top);

}  // namespace kapitsa::models::qwen35
