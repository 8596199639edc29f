// NemotronHConfig: the hyper-parameters of the Nemotron-H / Nemotron 3 family (model_type nemotron_h),
// read from config.json: the layer pattern from hybrid_override_pattern ("M*-E" letters, released
// configs) or layers_block_type (new or legacy names), legacy mamba_* field names, time_step_limit
// with Infinity, the MTP head's pattern (mtp_hybrid_override_pattern). Errors name the field; nothing is guessed where a wrong guess would run silently.
#pragma once

#include "base/status.h"
#include "models/quantization.h"
#include "weights/hf_config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kapitsa::models::nemotron_h {

enum class LayerKind { mamba, attention, mlp, moe };

// The pattern letter of a layer kind (M, *, -, E).
char pattern_letter(LayerKind kind);

struct NemotronHConfig {
  std::string model_type;
  int64_t vocab_size = 0, hidden_size = 0, n_layers = 0;
  std::vector<LayerKind> layer_kinds;
  // The multi-token-prediction head's layers (mtp_hybrid_override_pattern when num_nextn_predict_layers
  // is positive; empty otherwise).
  std::vector<LayerKind> mtp_kinds;
  // attention (`*`)
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  // Mamba-2 (`M`)
  int64_t mamba_heads = 0, mamba_head_dim = 0, n_groups = 1, d_state = 0, d_conv = 4, chunk_size = 128;
  bool conv_bias = true, proj_bias = false;
  double time_step_limit[2] = {0.0, 0.0};  // Δ clamp (time_step_limit); [0, inf) clamps nothing
  double time_step_min = 0.001;
  // dense MLP (`-`)
  int64_t intermediate_size = 0;
  // MoE (`E`)
  int64_t n_experts = 0, top_k = 0, moe_intermediate_size = 0, shared_expert_intermediate_size = 0;
  int64_t moe_latent_size = 0;  // 0: no LatentMoE
  int64_t n_group = 1, topk_group = 1;
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;

  float norm_eps = 1e-5f;
  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 0;
  std::vector<int32_t> eos_token_ids;
  Quantization quantization;  // config.json "quantization" (MLX affine checkpoints)

  int64_t count(LayerKind kind) const;  // in the trunk
  bool uses(LayerKind kind) const;       // in the trunk or the MTP head (its hyper-parameters are needed)
  std::string pattern() const;  // e.g. "M-M*EMEM*E"
};

Expected<NemotronHConfig> parse_config(const weights::HfConfig& config);

}  // namespace kapitsa::models::nemotron_h
