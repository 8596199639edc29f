// Parsing of Qwen3.5 / Qwen3-Next config.json files.
#include "models/qwen35/config.h"

#include <algorithm>

namespace kapitsa::models::qwen35 {

Expected<Qwen35Config> parse_config(const weights::HfConfig& top) {
  Qwen35Config c;
  KAPITSA_TRY(c.model_type, top.get_string("model_type"));
  // Qwen3.5 is published as a VLM: the language model's fields live in text_config.
  const bool nested = c.model_type == "qwen3_5" || c.model_type == "qwen3_5_moe";
  weights::HfConfig text = top;
  if (nested) {
    KAPITSA_TRY(text, top.section("text_config"));
  }
  const bool is_moe_family = c.model_type == "qwen3_5_moe" || c.model_type == "qwen3_5_moe_text" ||
                             c.model_type == "qwen3_next";
  c.packed_gdn_projections = c.model_type == "qwen3_next";

  KAPITSA_TRY(c.vocab_size, text.get_int("vocab_size"));
  KAPITSA_TRY(c.hidden_size, text.get_int("hidden_size"));
  KAPITSA_TRY(c.n_layers, text.get_int("num_hidden_layers"));
  KAPITSA_TRY(c.n_heads, text.get_int("num_attention_heads"));
  KAPITSA_TRY(c.n_kv_heads, text.get_int("num_key_value_heads"));
  if (c.n_heads <= 0 || c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0)
    return error("{}: num_attention_heads ({}) must be a positive multiple of num_key_value_heads ({})",
                 text.path(), c.n_heads, c.n_kv_heads);
  KAPITSA_TRY(c.head_dim, text.get_int("head_dim", c.hidden_size / c.n_heads));
  KAPITSA_TRY(c.linear_k_heads, text.get_int("linear_num_key_heads"));
  KAPITSA_TRY(c.linear_v_heads, text.get_int("linear_num_value_heads"));
  KAPITSA_TRY(c.linear_k_head_dim, text.get_int("linear_key_head_dim"));
  KAPITSA_TRY(c.linear_v_head_dim, text.get_int("linear_value_head_dim"));
  KAPITSA_TRY(c.conv_kernel, text.get_int("linear_conv_kernel_dim", 4));
  if (c.linear_k_heads <= 0 || c.linear_v_heads % c.linear_k_heads != 0)
    return error("{}: linear_num_value_heads ({}) must be a multiple of linear_num_key_heads ({})", text.path(),
                 c.linear_v_heads, c.linear_k_heads);
  if (c.conv_kernel < 1) return error("{} must be at least 1", text.where("linear_conv_kernel_dim"));
  KAPITSA_TRY(double eps, text.get_float("rms_norm_eps", 1e-6));
  c.rms_norm_eps = static_cast<float>(eps);
  KAPITSA_TRY(c.max_position_embeddings, text.get_int("max_position_embeddings", 32768));
  KAPITSA_TRY(c.attn_output_gate, text.get_bool("attn_output_gate", true));
  KAPITSA_TRY(c.gdn_out_proj_tiled, text.get_bool("kapitsa_gguf_out_proj_tiled", false));  // set by gguf_config.cpp

  // RoPE: transformers 5 nests it in rope_parameters; older configs keep rope_theta at the top.
  double theta = 10000000.0, partial = 0.25;
  KAPITSA_TRY(partial, text.get_float("partial_rotary_factor", partial));
  KAPITSA_TRY(theta, text.get_float("rope_theta", theta));
  if (text.has("rope_parameters")) {
    KAPITSA_TRY(weights::HfConfig rope, text.section("rope_parameters"));
    KAPITSA_TRY(theta, rope.get_float("rope_theta", theta));
    KAPITSA_TRY(partial, rope.get_float("partial_rotary_factor", partial));
  }
  c.rope_theta = static_cast<float>(theta);
  c.partial_rotary_factor = static_cast<float>(partial);
  if (c.rotary_dim() % 2 != 0 || c.rotary_dim() > c.head_dim)
    return error("{}: head_dim {} × partial_rotary_factor {} gives an invalid rotary dimension", text.path(),
                 c.head_dim, partial);

  // Layer pattern: explicit layer_types, else every full_attention_interval-th layer is attention.
  if (text.has("layer_types")) {
    KAPITSA_TRY(std::vector<std::string> types, text.get_string_list("layer_types"));
    if (static_cast<int64_t>(types.size()) != c.n_layers)
      return error("{} has {} entries but num_hidden_layers is {}", text.where("layer_types"), types.size(), c.n_layers);
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] == "linear_attention") c.layer_kinds.push_back(LayerKind::linear_attention);
      else if (types[i] == "full_attention") c.layer_kinds.push_back(LayerKind::full_attention);
      else return error("{}[{}] is '{}': expected linear_attention or full_attention", text.where("layer_types"), i, types[i]);
    }
  } else {
    KAPITSA_TRY(int64_t interval, text.get_int("full_attention_interval", 4));
    if (interval < 1) return error("{} must be at least 1", text.where("full_attention_interval"));
    for (int64_t i = 0; i < c.n_layers; ++i)
      c.layer_kinds.push_back((i + 1) % interval == 0 ? LayerKind::full_attention : LayerKind::linear_attention);
  }

  // Feed-forward: MoE families route on every `decoder_sparse_step`-th layer not in mlp_only_layers.
  KAPITSA_TRY(c.intermediate_size, text.get_int("intermediate_size", 0));
  if (is_moe_family) {
    KAPITSA_TRY(c.n_experts, text.get_int("num_experts"));
    KAPITSA_TRY(c.top_k, text.get_int("num_experts_per_tok"));
    KAPITSA_TRY(c.moe_intermediate_size, text.get_int("moe_intermediate_size"));
    KAPITSA_TRY(c.shared_expert_intermediate_size, text.get_int("shared_expert_intermediate_size", 0));
    // Qwen3.5-MoE's router always renormalises; Qwen3-Next follows norm_topk_prob.
    if (c.model_type == "qwen3_next") {
      KAPITSA_TRY(c.norm_topk_prob, text.get_bool("norm_topk_prob", true));
    }
    if (c.top_k < 1 || c.top_k > c.n_experts)
      return error("{} is {} but there are {} experts", text.where("num_experts_per_tok"), c.top_k, c.n_experts);
  }
  KAPITSA_TRY(int64_t sparse_step, text.get_int("decoder_sparse_step", 1));
  std::vector<int64_t> mlp_only;
  if (text.has("mlp_only_layers")) {
    KAPITSA_TRY(mlp_only, text.get_int_list("mlp_only_layers"));
  }
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const bool dense_only = std::find(mlp_only.begin(), mlp_only.end(), i) != mlp_only.end();
    c.layer_is_moe.push_back(is_moe_family && c.n_experts > 0 && !dense_only && sparse_step > 0 &&
                             (i + 1) % sparse_step == 0);
    if (!c.layer_is_moe.back() && c.intermediate_size <= 0)
      return error("{} is required: layer {} has a dense MLP", text.where("intermediate_size"), i);
  }

  const char* mtp_key = text.has("num_nextn_predict_layers") ? "num_nextn_predict_layers" : "mtp_num_hidden_layers";
  KAPITSA_TRY(c.mtp_layers, text.get_int(mtp_key, 0));
  if (c.mtp_layers < 0) return error("{} is {}: expected 0 or more", text.where(mtp_key), c.mtp_layers);

  // tie_word_embeddings may sit at either level; the top-level one wins for nested configs.
  KAPITSA_TRY(c.tie_word_embeddings, text.get_bool("tie_word_embeddings", false));
  if (nested) {
    KAPITSA_TRY(c.tie_word_embeddings, top.get_bool("tie_word_embeddings", c.tie_word_embeddings));
  }

  for (const weights::HfConfig* cfg : std::initializer_list<const weights::HfConfig*>{&text, &top}) {
    if (!cfg->has("eos_token_id") || !c.eos_token_ids.empty()) continue;
    const Json& eos = cfg->json()["eos_token_id"];
    if (eos.is_number_integer()) c.eos_token_ids.push_back(eos.get<int32_t>());
    else if (eos.is_array())
      for (const auto& id : eos)
        if (id.is_number_integer()) c.eos_token_ids.push_back(id.get<int32_t>());
  }
  KAPITSA_TRY(c.quantization, parse_quantization(top));
  return c;
}

}  // namespace kapitsa::models::qwen35
