// Parsing of Nemotron-H config.json files (transformers' NemotronHConfig, incl. its backward-
// compatible field names).
#include "models/nemotron_h/config.h"

#include <algorithm>
#include <optional>
#include <cmath>

namespace kapitsa::models::nemotron_h {
namespace {

// transformers accepts the legacy mamba_* spelling and lets it win when present.
Expected<int64_t> int_field(const weights::HfConfig& c, const char* legacy, const char* name, int64_t fallback) {
  return c.has(legacy) ? c.get_int(legacy) : c.get_int(name, fallback);
}

Expected<LayerKind> kind_from_name(const weights::HfConfig& c, const std::string& field, size_t i,
                                   const std::string& name) {
  if (name == "linear_attention" || name == "mamba") return LayerKind::mamba;
  if (name == "full_attention" || name == "attention") return LayerKind::attention;
  if (name == "mlp") return LayerKind::mlp;
  if (name == "moe") return LayerKind::moe;
  return error("{}[{}] is '{}': expected linear_attention (mamba), full_attention (attention), mlp or moe",
               c.where(field), i, name);
}

// The layer kind of a pattern letter (M, *, - or E).
std::optional<LayerKind> kind_of_letter(char letter) {
  for (LayerKind k : {LayerKind::mamba, LayerKind::attention, LayerKind::mlp, LayerKind::moe})
    if (pattern_letter(k) == letter) return k;
  return std::nullopt;
}

Status parse_pattern(const weights::HfConfig& c, NemotronHConfig& out) {
  // transformers prefers the explicit list (layer_types is its alias) over the legacy string.
  for (const char* list_field : {"layers_block_type", "layer_types"}) {
    if (!c.has(list_field)) continue;
    KAPITSA_TRY(std::vector<std::string> names, c.get_string_list(list_field));
    for (size_t i = 0; i < names.size(); ++i) {
      KAPITSA_TRY(LayerKind kind, kind_from_name(c, list_field, i, names[i]));
      out.layer_kinds.push_back(kind);
    }
    if (out.layer_kinds.empty()) return error("{} is empty", c.where(list_field));
    return ok_status();
  }
  if (!c.has("hybrid_override_pattern"))
    return error("{}: the layer pattern is missing (hybrid_override_pattern or layers_block_type)", c.path());
  KAPITSA_TRY(std::string pattern, c.get_string("hybrid_override_pattern"));
  for (size_t i = 0; i < pattern.size(); ++i) {
    const std::optional<LayerKind> kind = kind_of_letter(pattern[i]);
    if (!kind)
      return error("{} has unknown layer letter '{}' at position {} (expected M, *, - or E)",
                   c.where("hybrid_override_pattern"), pattern[i], i);
    out.layer_kinds.push_back(*kind);
  }
  if (out.layer_kinds.empty()) return error("{} is empty", c.where("hybrid_override_pattern"));
  return ok_status();
}

// The multi-token-prediction head's layers (Nemotron 3): num_nextn_predict_layers (at most one head;
// vLLM's limit too) of mtp_hybrid_override_pattern's letters, attention (*), MoE (E) or MLP (-).
Status parse_mtp_pattern(const weights::HfConfig& c, NemotronHConfig& out) {
  KAPITSA_TRY(int64_t heads, c.get_int("num_nextn_predict_layers", 0));
  if (heads <= 0) return ok_status();
  if (!c.has("mtp_hybrid_override_pattern"))
    return error("{} is {} but mtp_hybrid_override_pattern (the head's layers) is missing",
                 c.where("num_nextn_predict_layers"), heads);
  KAPITSA_TRY(std::string pattern, c.get_string("mtp_hybrid_override_pattern"));
  for (size_t i = 0; i < pattern.size(); ++i) {
    const std::optional<LayerKind> kind = kind_of_letter(pattern[i]);
    if (!kind || *kind == LayerKind::mamba)
      return error("{} has layer letter '{}' at position {} (an MTP head runs *, - or E layers)",
                   c.where("mtp_hybrid_override_pattern"), pattern[i], i);
    out.mtp_kinds.push_back(*kind);
  }
  if (out.mtp_kinds.empty()) return error("{} is empty", c.where("mtp_hybrid_override_pattern"));
  return ok_status();
}

}  // namespace

char pattern_letter(LayerKind kind) {
  switch (kind) {
    case LayerKind::mamba: return 'M';
    case LayerKind::attention: return '*';
    case LayerKind::mlp: return '-';
    case LayerKind::moe: return 'E';
  }
  return '?';
}

int64_t NemotronHConfig::count(LayerKind kind) const {
  return std::count(layer_kinds.begin(), layer_kinds.end(), kind);
}

bool NemotronHConfig::uses(LayerKind kind) const {
  return count(kind) > 0 || std::find(mtp_kinds.begin(), mtp_kinds.end(), kind) != mtp_kinds.end();
}

std::string NemotronHConfig::pattern() const {
  std::string s;
  for (LayerKind k : layer_kinds) s += pattern_letter(k);
  return s;
}

Expected<NemotronHConfig> parse_config(const weights::HfConfig& cfg) {
  NemotronHConfig c;
  KAPITSA_TRY(c.model_type, cfg.get_string("model_type"));
  KAPITSA_TRY(c.vocab_size, cfg.get_int("vocab_size"));
  KAPITSA_TRY(c.hidden_size, cfg.get_int("hidden_size"));
  if (c.vocab_size <= 0 || c.hidden_size <= 0)
    return error("{}: vocab_size and hidden_size must be positive", cfg.path());
  KAPITSA_RETURN_IF_ERROR(parse_pattern(cfg, c));
  KAPITSA_RETURN_IF_ERROR(parse_mtp_pattern(cfg, c));
  c.n_layers = static_cast<int64_t>(c.layer_kinds.size());
  if (cfg.has("num_hidden_layers")) {
    KAPITSA_TRY(int64_t declared, cfg.get_int("num_hidden_layers"));
    if (declared != c.n_layers)
      return error("{} is {} but the layer pattern '{}' has {} layers", cfg.where("num_hidden_layers"), declared,
                   c.pattern(), c.n_layers);
  }

  KAPITSA_TRY(double eps, cfg.get_float("layer_norm_epsilon", 1e-5));
  c.norm_eps = static_cast<float>(eps);
  KAPITSA_TRY(c.max_position_embeddings, cfg.get_int("max_position_embeddings", 4096));
  KAPITSA_TRY(c.tie_word_embeddings, cfg.get_bool("tie_word_embeddings", false));

  if (c.uses(LayerKind::attention)) {
    KAPITSA_TRY(c.n_heads, cfg.get_int("num_attention_heads"));
    KAPITSA_TRY(c.n_kv_heads, cfg.get_int("num_key_value_heads", c.n_heads));
    if (c.n_heads <= 0 || c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0)
      return error("{}: num_attention_heads ({}) must be a positive multiple of num_key_value_heads ({})", cfg.path(),
                   c.n_heads, c.n_kv_heads);
    KAPITSA_TRY(c.head_dim, cfg.get_int("head_dim", c.hidden_size / c.n_heads));
    KAPITSA_TRY(bool attention_bias, cfg.get_bool("attention_bias", false));
    if (attention_bias) return error("{} is true: attention biases are not supported", cfg.where("attention_bias"));
  }

  if (c.uses(LayerKind::mamba)) {
    KAPITSA_TRY(c.mamba_heads, cfg.get_int("mamba_num_heads"));
    KAPITSA_TRY(c.mamba_head_dim, cfg.get_int("mamba_head_dim"));
    KAPITSA_TRY(c.d_state, cfg.get_int("ssm_state_size"));
    KAPITSA_TRY(c.n_groups, int_field(cfg, "mamba_n_groups", "n_groups", 8));
    KAPITSA_TRY(c.d_conv, int_field(cfg, "mamba_d_conv", "conv_kernel", 4));
    KAPITSA_TRY(c.chunk_size, int_field(cfg, "mamba_chunk_size", "chunk_size", 128));
    const char* conv_bias_field = cfg.has("mamba_conv_bias") ? "mamba_conv_bias" : "use_conv_bias";
    KAPITSA_TRY(c.conv_bias, cfg.get_bool(conv_bias_field, true));
    KAPITSA_TRY(c.proj_bias, cfg.get_bool("use_bias", false));
    if (c.mamba_heads <= 0 || c.mamba_head_dim <= 0 || c.d_state <= 0)
      return error("{}: mamba_num_heads, mamba_head_dim and ssm_state_size must be positive", cfg.path());
    if (c.n_groups <= 0 || c.mamba_heads % c.n_groups != 0)
      return error("{}: mamba_num_heads ({}) must be a multiple of n_groups ({})", cfg.path(), c.mamba_heads,
                   c.n_groups);
    if (c.d_conv < 1 || c.chunk_size < 1)
      return error("{}: conv_kernel ({}) and chunk_size ({}) must be at least 1", cfg.path(), c.d_conv, c.chunk_size);
    if (cfg.has("mamba_hidden_act")) {
      KAPITSA_TRY(std::string act, cfg.get_string("mamba_hidden_act"));
      if (act != "silu" && act != "swish")
        return error("{} is '{}': only silu is supported", cfg.where("mamba_hidden_act"), act);
    }
    c.time_step_limit[0] = 0.0;
    c.time_step_limit[1] = INFINITY;
    const char* limit_field = cfg.has("mamba_dt_limit") ? "mamba_dt_limit" : "time_step_limit";
    if (cfg.has(limit_field)) {
      KAPITSA_TRY(std::vector<double> limit, cfg.get_float_list(limit_field));
      if (limit.size() != 2 || !(limit[0] <= limit[1]))
        return error("{} must be a pair [min, max] with min <= max", cfg.where(limit_field));
      c.time_step_limit[0] = limit[0];
      c.time_step_limit[1] = limit[1];
    }
    const char* min_field = cfg.has("mamba_dt_min") ? "mamba_dt_min" : "time_step_min";
    KAPITSA_TRY(c.time_step_min, cfg.get_float(min_field, 0.001));
  }

  const bool has_ffn = c.uses(LayerKind::mlp) || c.uses(LayerKind::moe);
  if (has_ffn && cfg.has("mlp_hidden_act")) {
    KAPITSA_TRY(std::string act, cfg.get_string("mlp_hidden_act"));
    if (act != "relu2") return error("{} is '{}': only relu2 is supported", cfg.where("mlp_hidden_act"), act);
  }
  if (has_ffn) {
    KAPITSA_TRY(bool mlp_bias, cfg.get_bool("mlp_bias", false));
    if (mlp_bias) return error("{} is true: MLP biases are not supported", cfg.where("mlp_bias"));
  }
  if (c.uses(LayerKind::mlp)) {
    KAPITSA_TRY(c.intermediate_size, cfg.get_int("intermediate_size"));
    if (c.intermediate_size <= 0) return error("{} must be positive", cfg.where("intermediate_size"));
  }
  if (c.uses(LayerKind::moe)) {
    KAPITSA_TRY(c.n_experts, cfg.get_int("n_routed_experts"));
    KAPITSA_TRY(c.top_k, cfg.get_int("num_experts_per_tok"));
    KAPITSA_TRY(c.moe_intermediate_size, cfg.get_int("moe_intermediate_size"));
    KAPITSA_TRY(int64_t n_shared, cfg.get_int("n_shared_experts", 1));
    if (n_shared > 0) {
      KAPITSA_TRY(c.shared_expert_intermediate_size, cfg.get_int("moe_shared_expert_intermediate_size"));
    }
    KAPITSA_TRY(c.moe_latent_size, cfg.get_int("moe_latent_size", 0));
    KAPITSA_TRY(c.n_group, cfg.get_int("n_group", 1));
    KAPITSA_TRY(c.topk_group, cfg.get_int("topk_group", 1));
    KAPITSA_TRY(c.norm_topk_prob, cfg.get_bool("norm_topk_prob", true));
    KAPITSA_TRY(c.routed_scaling_factor, cfg.get_float("routed_scaling_factor", 1.0));
    if (c.n_experts <= 0 || c.moe_intermediate_size <= 0 || c.moe_latent_size < 0)
      return error("{}: n_routed_experts and moe_intermediate_size must be positive", cfg.path());
    if (c.n_group < 1 || c.n_experts % c.n_group != 0 || c.topk_group < 1 || c.topk_group > c.n_group)
      return error("{}: n_group ({}) must divide n_routed_experts ({}) and topk_group ({}) must be in [1, n_group]",
                   cfg.path(), c.n_group, c.n_experts, c.topk_group);
    if (c.n_group > 1 && c.n_experts / c.n_group < 2)
      return error("{}: group-limited routing needs at least 2 experts per group ({} experts in {} groups)",
                   cfg.path(), c.n_experts, c.n_group);
    if (c.top_k < 1 || c.top_k > c.topk_group * (c.n_experts / c.n_group))
      return error("{} is {} but only {} experts can be chosen", cfg.where("num_experts_per_tok"), c.top_k,
                   c.topk_group * (c.n_experts / c.n_group));
  }

  if (cfg.has("eos_token_id")) {
    const Json& eos = cfg.json()["eos_token_id"];
    if (eos.is_number_integer()) c.eos_token_ids.push_back(eos.get<int32_t>());
    else if (eos.is_array())
      for (const auto& id : eos)
        if (id.is_number_integer()) c.eos_token_ids.push_back(id.get<int32_t>());
  }
  KAPITSA_TRY(c.quantization, parse_quantization(cfg));
  return c;
}

}  // namespace kapitsa::models::nemotron_h
