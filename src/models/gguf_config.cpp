// GGUF metadata → config.json equivalent (see gguf_config.h). Keys as llama.cpp's converter writes
// them (conversion/qwen.py, nemotron.py, granite.py GraniteHybridModel, gguf-py's constants.py).
#include "models/gguf_config.h"

#include <algorithm>

namespace kapitsa::models {
namespace {

using weights::GgufFile;
using weights::GgufTensor;
using TensorMap = std::map<std::string, const GgufTensor*>;

// A count that may be stored per layer (an array, zeros for layers without it): the largest.
Expected<int64_t> int_or_max(const GgufFile& f, const std::string& key) {
  const weights::GgufValue* v = f.find(key);
  if (v != nullptr && v->type == weights::GgufValueType::array && !v->ints.empty()) {
    int64_t m = 0;
    for (int64_t x : v->ints) m = std::max(m, x);
    return m;
  }
  return f.get_int(key);
}

bool get_bool_or(const GgufFile& f, const std::string& key, bool fallback) {
  const weights::GgufValue* v = f.find(key);
  return v == nullptr || v->type == weights::GgufValueType::array ? fallback : v->i != 0;
}

Expected<int64_t> vocab_rows(const GgufFile& f, const TensorMap& tensors) {
  const auto embd = tensors.find("token_embd.weight");
  if (embd == tensors.end()) return error("{}: tensor 'token_embd.weight' is missing", f.path());
  return embd->second->shape[0];
}

void eos_of(const GgufFile& f, Json& c) {
  if (const weights::GgufValue* v = f.find("tokenizer.ggml.eos_token_id"); v != nullptr && v->is_integer()) c["eos_token_id"] = v->i;
}

// block_count less the MTP blocks the converter appended (0 when it wrote none, or ran with --no-mtp).
Expected<int64_t> trunk_block_count(const GgufFile& f, const std::string& a, GgufModelConfig& out) {
  KAPITSA_TRY(const int64_t blocks, f.get_int(a + "block_count"));
  if (f.find(a + "nextn_predict_layers")) {
    KAPITSA_TRY(out.mtp_layers, f.get_int(a + "nextn_predict_layers"));
  }
  if (out.mtp_layers < 0 || out.mtp_layers >= blocks)
    return error("{}: metadata '{}nextn_predict_layers' is {} of {} blocks: the model would have no layers left",
                 f.path(), a, out.mtp_layers, blocks);
  out.trunk_layers = blocks - out.mtp_layers;
  return out.trunk_layers;
}

bool layer_has(const TensorMap& tensors, int64_t layer, const char* name) {
  return tensors.contains(fmt::format("blk.{}.{}", layer, name));
}

Expected<GgufModelConfig> qwen_config(const GgufFile& f, const std::string& arch, const TensorMap& tensors) {
  const std::string a = arch + ".";
  GgufModelConfig out;
  out.family = arch == "qwen3next" ? GgufFamily::qwen3next : GgufFamily::qwen35;
  Json& c = out.json;
  c = Json::object();
  c["model_type"] = arch == "qwen35" ? "qwen3_5_text" : arch == "qwen35moe" ? "qwen3_5_moe_text" : "qwen3_next";
  KAPITSA_TRY(c["vocab_size"], vocab_rows(f, tensors));
  KAPITSA_TRY(const int64_t hidden, f.get_int(a + "embedding_length"));
  KAPITSA_TRY(const int64_t layers, trunk_block_count(f, a, out));
  if (out.mtp_layers > 0) c["mtp_num_hidden_layers"] = out.mtp_layers;
  KAPITSA_TRY(const int64_t n_heads, int_or_max(f, a + "attention.head_count"));
  KAPITSA_TRY(const int64_t n_kv, int_or_max(f, a + "attention.head_count_kv"));
  KAPITSA_TRY(const int64_t head_dim, f.get_int(a + "attention.key_length"));
  KAPITSA_TRY(const int64_t k_heads, f.get_int(a + "ssm.group_count"));
  KAPITSA_TRY(const int64_t v_heads, f.get_int(a + "ssm.time_step_rank"));
  KAPITSA_TRY(const int64_t k_dim, f.get_int(a + "ssm.state_size"));
  KAPITSA_TRY(const int64_t inner, f.get_int(a + "ssm.inner_size"));
  KAPITSA_TRY(const int64_t conv, f.get_int(a + "ssm.conv_kernel"));
  KAPITSA_TRY(const double eps, f.get_float(a + "attention.layer_norm_rms_epsilon"));
  KAPITSA_TRY(const double theta, f.get_float(a + "rope.freq_base"));
  KAPITSA_TRY(const int64_t rope_dim, f.get_int(a + "rope.dimension_count"));
  if (k_heads <= 0 || v_heads <= 0 || v_heads % k_heads != 0 || inner % v_heads != 0 || head_dim <= 0)
    return error("{}: metadata '{}ssm.*' gives {} key heads, {} value heads and inner size {}: not a valid GDN shape",
                 f.path(), a, k_heads, v_heads, inner);
  // Qwen3.5's converter tiles the V heads (_LinearAttentionVReorderBase); Qwen3-Next's keeps HF order.
  out.heads = GgufGdnHeads{k_heads, v_heads / k_heads, k_dim, inner / v_heads, out.family == GgufFamily::qwen35};
  // out_proj stays in the file's column order (its blocks may span two V heads): the model permutes its
  // input's heads to match (models/layers/gated_deltanet.cpp).
  if (out.heads.reordered()) c["kapitsa_gguf_out_proj_tiled"] = true;
  c["hidden_size"] = hidden, c["num_hidden_layers"] = layers;
  c["num_attention_heads"] = n_heads, c["num_key_value_heads"] = n_kv, c["head_dim"] = head_dim;
  c["linear_num_key_heads"] = k_heads, c["linear_num_value_heads"] = v_heads;
  c["linear_key_head_dim"] = k_dim, c["linear_value_head_dim"] = inner / v_heads;
  c["linear_conv_kernel_dim"] = conv;
  c["rms_norm_eps"] = eps, c["rope_theta"] = theta;
  c["partial_rotary_factor"] = static_cast<double>(rope_dim) / static_cast<double>(head_dim);
  if (f.find(a + "context_length")) {
    KAPITSA_TRY(c["max_position_embeddings"], f.get_int(a + "context_length"));
  }
  if (const weights::GgufValue* r = f.find(a + "attention.recurrent_layers"); r != nullptr && !r->ints.empty()) {
    if (static_cast<int64_t>(r->ints.size()) < layers)
      return error("{}: metadata '{}attention.recurrent_layers' has {} entries for {} layers", f.path(), a, r->ints.size(), layers);
    Json types = Json::array();
    for (int64_t i = 0; i < layers; ++i) types.push_back(r->ints[static_cast<size_t>(i)] ? "linear_attention" : "full_attention");
    c["layer_types"] = types;
  } else {
    KAPITSA_TRY(c["full_attention_interval"], f.get_int(a + "full_attention_interval"));
  }
  if (f.find(a + "feed_forward_length")) {
    KAPITSA_TRY(c["intermediate_size"], int_or_max(f, a + "feed_forward_length"));
  }
  if (arch != "qwen35") {
    KAPITSA_TRY(c["num_experts"], f.get_int(a + "expert_count"));
    KAPITSA_TRY(c["num_experts_per_tok"], f.get_int(a + "expert_used_count"));
    KAPITSA_TRY(c["moe_intermediate_size"], f.get_int(a + "expert_feed_forward_length"));
    if (f.find(a + "expert_shared_feed_forward_length")) {
      KAPITSA_TRY(c["shared_expert_intermediate_size"], f.get_int(a + "expert_shared_feed_forward_length"));
    }
    // Qwen3-Next's converter writes no norm_topk_prob; llama.cpp renormalises the top-k weights.
    if (arch == "qwen3next") c["norm_topk_prob"] = get_bool_or(f, a + "expert_weights_norm", true);
  }
  c["tie_word_embeddings"] = !tensors.contains("output.weight");
  eos_of(f, c);
  return out;
}

// Nemotron-H: the converter writes no layer pattern and per-layer sizes only in part (its
// feed_forward_length array holds the MoE width for every FFN layer), so each block's kind and the
// dense MLP width come from its tensors.
Expected<GgufModelConfig> nemotron_config(const GgufFile& f, const std::string& arch, const TensorMap& tensors) {
  const std::string a = arch + ".";
  GgufModelConfig out;
  out.family = GgufFamily::nemotron_h;
  Json& c = out.json;
  c = Json::object();
  c["model_type"] = "nemotron_h";
  KAPITSA_TRY(c["vocab_size"], vocab_rows(f, tensors));
  KAPITSA_TRY(c["hidden_size"], f.get_int(a + "embedding_length"));
  KAPITSA_TRY(const int64_t layers, trunk_block_count(f, a, out));
  KAPITSA_TRY(c["layer_norm_epsilon"], f.get_float(a + "attention.layer_norm_epsilon"));
  Json kinds = Json::array();
  int64_t first_mamba = -1, first_mlp = -1, n_attention = 0, n_moe = 0;
  for (int64_t i = 0; i < layers; ++i) {
    if (layer_has(tensors, i, "ssm_in.weight")) {
      kinds.push_back("mamba");
      if (first_mamba < 0) first_mamba = i;
    } else if (layer_has(tensors, i, "attn_q.weight")) {
      kinds.push_back("attention"), ++n_attention;
    } else if (layer_has(tensors, i, "ffn_up_exps.weight")) {
      kinds.push_back("moe"), ++n_moe;
    } else if (layer_has(tensors, i, "ffn_up.weight")) {
      kinds.push_back("mlp");
      if (first_mlp < 0) first_mlp = i;
    } else {
      return error("{}: block {} has none of ssm_in, attn_q, ffn_up_exps, ffn_up: cannot tell its kind", f.path(), i);
    }
  }
  c["layers_block_type"] = kinds;
  // The converter folds Nemotron 3's two-layer MTP head (attention, then MoE: vLLM's pattern "*E") into
  // one block with both sub-layers; no other head shape is written.
  if (out.mtp_layers > 1) return error("{}: {} MTP blocks; the converter writes one", f.path(), out.mtp_layers);
  if (out.mtp_layers == 1) {
    if (!layer_has(tensors, layers, "attn_q.weight") || !layer_has(tensors, layers, "ffn_up_exps.weight"))
      return error("{}: MTP block {} lacks attn_q or ffn_up_exps: not the attention + MoE head the converter folds",
                   f.path(), layers);
    c["num_nextn_predict_layers"] = 1, c["mtp_hybrid_override_pattern"] = "*E";
  }
  if (n_attention > 0 || out.mtp_layers > 0) {
    KAPITSA_TRY(c["num_attention_heads"], int_or_max(f, a + "attention.head_count"));
    KAPITSA_TRY(c["num_key_value_heads"], int_or_max(f, a + "attention.head_count_kv"));
    KAPITSA_TRY(c["head_dim"], f.get_int(a + "attention.key_length"));
  }
  if (first_mamba >= 0) {
    KAPITSA_TRY(const int64_t heads, f.get_int(a + "ssm.time_step_rank"));
    KAPITSA_TRY(const int64_t inner, f.get_int(a + "ssm.inner_size"));
    if (heads <= 0 || inner % heads != 0)
      return error("{}: metadata '{}ssm.inner_size' ({}) is not a multiple of '{}ssm.time_step_rank' ({})", f.path(), a,
                   inner, a, heads);
    c["mamba_num_heads"] = heads, c["mamba_head_dim"] = inner / heads;
    KAPITSA_TRY(c["ssm_state_size"], f.get_int(a + "ssm.state_size"));
    KAPITSA_TRY(c["n_groups"], f.get_int(a + "ssm.group_count"));
    KAPITSA_TRY(c["conv_kernel"], f.get_int(a + "ssm.conv_kernel"));
    c["use_conv_bias"] = layer_has(tensors, first_mamba, "ssm_conv1d.bias");
    c["use_bias"] = layer_has(tensors, first_mamba, "ssm_in.bias");
  }
  if (first_mlp >= 0) {
    const GgufTensor& up = *tensors.at(fmt::format("blk.{}.ffn_up.weight", first_mlp));
    c["intermediate_size"] = up.shape[0];
  }
  if (n_moe > 0) {
    KAPITSA_TRY(c["n_routed_experts"], f.get_int(a + "expert_count"));
    KAPITSA_TRY(c["num_experts_per_tok"], f.get_int(a + "expert_used_count"));
    KAPITSA_TRY(c["moe_intermediate_size"], f.get_int(a + "expert_feed_forward_length"));
    c["n_shared_experts"] = 0;
    if (f.find(a + "expert_shared_count")) {
      KAPITSA_TRY(c["n_shared_experts"], f.get_int(a + "expert_shared_count"));
    }
    if (c["n_shared_experts"].get<int64_t>() > 0) {
      KAPITSA_TRY(c["moe_shared_expert_intermediate_size"], f.get_int(a + "expert_shared_feed_forward_length"));
    }
    if (f.find(a + "moe_latent_size")) {
      KAPITSA_TRY(c["moe_latent_size"], f.get_int(a + "moe_latent_size"));
    }
    if (f.find(a + "expert_group_count")) {
      KAPITSA_TRY(c["n_group"], f.get_int(a + "expert_group_count"));
    }
    if (f.find(a + "expert_group_used_count")) {
      KAPITSA_TRY(c["topk_group"], f.get_int(a + "expert_group_used_count"));
    }
    c["norm_topk_prob"] = get_bool_or(f, a + "expert_weights_norm", true);
    if (f.find(a + "expert_weights_scale")) {
      KAPITSA_TRY(c["routed_scaling_factor"], f.get_float(a + "expert_weights_scale"));
    }
  }
  if (f.find(a + "context_length")) {
    KAPITSA_TRY(c["max_position_embeddings"], f.get_int(a + "context_length"));
  }
  c["tie_word_embeddings"] = !tensors.contains("output.weight");
  eos_of(f, c);
  return out;
}

}  // namespace

Expected<GgufModelConfig> gguf_model_config(const GgufFile& meta, const std::string& arch, const TensorMap& tensors) {
  if (arch == "qwen35" || arch == "qwen35moe" || arch == "qwen3next") return qwen_config(meta, arch, tensors);
  if (arch == "nemotron_h" || arch == "nemotron_h_moe") return nemotron_config(meta, arch, tensors);
  return error("{}: GGUF architecture '{}' is not loaded yet (Kapitsa reads qwen35, qwen35moe, qwen3next, nemotron_h "
               "and nemotron_h_moe GGUF files, as llama.cpp's converter writes Qwen3.5, Qwen3-Next and Nemotron-H; "
               "other models as Hugging Face folders)",
               meta.path(), arch);
}

}  // namespace kapitsa::models
