// GGUF → config + Hugging Face-named checkpoint (see gguf_checkpoint.h). The names, reorderings and
// stored forms are those of llama.cpp's conversion/qwen.py (Qwen3NextModel.modify_tensors and
// _LinearAttentionVReorderBase) and gguf-py's tensor_mapping.py.
#include "models/gguf_checkpoint.h"

#include "base/json.h"
#include "ops/ref/ref.h"

#include <cmath>
#include <cstring>
#include <map>

namespace kapitsa::models {
namespace {

using weights::GgufFile;
using weights::GgufTensor;

// How a tensor's values must move to be in Hugging Face order (GDN V heads, see the header).
enum class Fix {
  none,
  v_rows,       // rows are V heads of head_v_dim rows each (in_proj_z)
  v_rows_1,     // rows are V heads of one row each (in_proj_a / in_proj_b, 2-D)
  v_rows_tail,  // the rows after the q and k rows are V heads (in_proj_qkv; conv1d's channels)
  v_vector,     // a vector of one value per V head (dt_bias)
  a_log,        // -exp(A_log) per V head → A_log
  v_cols,       // columns are V heads (out_proj)
};

struct Mapping {
  const char* gguf;  // name after "blk.N." (or the whole name for global tensors)
  const char* hf;    // name after "model.layers.N." (or the whole name)
  Fix fix = Fix::none;
};

constexpr Mapping kGlobal[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output.weight", "lm_head.weight"},
    {"output_norm.weight", "model.norm.weight"},
};

constexpr Mapping kQwen35Layer[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"post_attention_norm.weight", "post_attention_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"attn_qkv.weight", "linear_attn.in_proj_qkv.weight", Fix::v_rows_tail},
    {"attn_gate.weight", "linear_attn.in_proj_z.weight", Fix::v_rows},
    {"ssm_alpha.weight", "linear_attn.in_proj_a.weight", Fix::v_rows_1},
    {"ssm_beta.weight", "linear_attn.in_proj_b.weight", Fix::v_rows_1},
    {"ssm_a", "linear_attn.A_log", Fix::a_log},
    {"ssm_dt.bias", "linear_attn.dt_bias", Fix::v_vector},
    {"ssm_conv1d.weight", "linear_attn.conv1d.weight", Fix::v_rows_tail},
    {"ssm_norm.weight", "linear_attn.norm.weight"},
    {"ssm_out.weight", "linear_attn.out_proj.weight", Fix::v_cols},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"ffn_gate_inp.weight", "mlp.gate.weight"},
    {"ffn_gate_exps.weight", "mlp.switch_mlp.gate_proj.weight"},
    {"ffn_up_exps.weight", "mlp.switch_mlp.up_proj.weight"},
    {"ffn_down_exps.weight", "mlp.switch_mlp.down_proj.weight"},
    {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
    {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
    {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
    {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"},
};

// The GDN head geometry the V reordering needs.
struct Heads {
  int64_t k_heads = 0, v_per_k = 1, k_dim = 0, v_dim = 0;
  bool reordered() const { return v_per_k > 1; }
  // HF V head h = k·v_per_k + j sits at GGUF position j·k_heads + k (tiled order).
  int64_t gguf_head(int64_t h) const { return (h % v_per_k) * k_heads + h / v_per_k; }
};

DType dense_dtype(GgmlType t) {
  return t == GgmlType::f32 ? DType::f32 : t == GgmlType::f16 ? DType::f16 : DType::bf16;
}
bool is_dense(GgmlType t) { return t == GgmlType::f32 || t == GgmlType::f16 || t == GgmlType::bf16; }

// The entry for a GGUF tensor: float types as themselves, block types as u8 rows of blocks.
weights::TensorEntry entry_of(const GgufTensor& t, const std::string& hf_name) {
  weights::TensorEntry e;
  e.name = hf_name;
  e.nbytes = t.nbytes;
  e.shape = t.shape;
  if (is_dense(t.type)) {
    e.dtype = dense_dtype(t.type);
  } else {
    const auto info = *ggml_type_info(static_cast<uint32_t>(t.type));
    e.dtype = DType::u8;
    e.ggml = t.type;
    e.ggml_cols = t.shape.back();
    e.shape.back() = t.shape.back() / info.block_size * info.block_bytes;
  }
  return e;
}

std::shared_ptr<Buffer> owned_bytes(size_t n) {
  return std::make_shared<Buffer>(Buffer::allocate(DType::u8, {static_cast<int64_t>(n)}));
}

class Builder {
 public:
  Builder(weights::Checkpoint& out, const Heads& heads) : out_(out), heads_(heads) {}

  Status add(const std::shared_ptr<GgufFile>& file, const GgufTensor& t, const std::string& hf, Fix fix) {
    const uint8_t* src = file->data(t);
    weights::TensorEntry e = entry_of(t, hf);
    if (!heads_.reordered() || fix == Fix::none) {
      if (fix == Fix::a_log) return add_a_log(file, t, hf);
      if (hf.ends_with("conv1d.weight")) e.shape.push_back(1);  // [C, K] presented as mlx-lm's [C, K, 1]
      return out_.add(hf, std::move(e), src, file->path(), file);
    }
    const int64_t rows = t.shape.size() == 1 ? t.shape[0] : t.shape[t.shape.size() - 2];
    const size_t row_bytes = t.shape.size() == 1 ? e.nbytes / static_cast<size_t>(rows) : e.nbytes / static_cast<size_t>(t.numel() / t.shape.back());
    const int64_t v_rows = heads_.k_heads * heads_.v_per_k * heads_.v_dim;
    switch (fix) {
      case Fix::v_rows: return rows_fixed(file, t, std::move(e), hf, src, row_bytes, 0, heads_.v_dim, rows, v_rows);
      case Fix::v_rows_1: case Fix::v_vector:
        return rows_fixed(file, t, std::move(e), hf, src, row_bytes, 0, 1, rows, heads_.k_heads * heads_.v_per_k);
      case Fix::v_rows_tail: {
        const int64_t qk = 2 * heads_.k_heads * heads_.k_dim;
        if (hf.ends_with("conv1d.weight")) e.shape.push_back(1);
        return rows_fixed(file, t, std::move(e), hf, src, row_bytes, qk, heads_.v_dim, rows, qk + v_rows);
      }
      case Fix::a_log: return add_a_log(file, t, hf);
      case Fix::v_cols: return cols_fixed(file, t, hf);
      case Fix::none: break;
    }
    return ok_status();
  }

 private:
  // Rows [first, first + heads·per_head) hold V heads of per_head rows in GGUF order; the copy has them in
  // HF order (other rows as they are).
  Status rows_fixed(const std::shared_ptr<GgufFile>& file, const GgufTensor& t, weights::TensorEntry e,
                    const std::string& hf, const uint8_t* src, size_t row_bytes, int64_t first, int64_t per_head,
                    int64_t rows, int64_t expected_rows) {
    if (rows != expected_rows)
      return error("{}: tensor '{}' has {} rows, expected {} from the GDN head counts in the metadata", file->path(),
                   t.name, rows, expected_rows);
    auto buf = owned_bytes(e.nbytes);
    uint8_t* dst = buf->tensor().data_as<uint8_t>();
    std::memcpy(dst, src, static_cast<size_t>(first) * row_bytes);
    const int64_t heads = heads_.k_heads * heads_.v_per_k;
    for (int64_t h = 0; h < heads; ++h)
      std::memcpy(dst + static_cast<size_t>(first + h * per_head) * row_bytes,
                  src + static_cast<size_t>(first + heads_.gguf_head(h) * per_head) * row_bytes,
                  static_cast<size_t>(per_head) * row_bytes);
    return out_.add(hf, std::move(e), dst, file->path(), buf);
  }

  // A_log = log(−a) per V head, in HF order (f32).
  Status add_a_log(const std::shared_ptr<GgufFile>& file, const GgufTensor& t, const std::string& hf) {
    if (t.type != GgmlType::f32 || t.shape.size() != 1)
      return error("{}: tensor '{}' must be a F32 vector, got {}", file->path(), t.name, ggml_type_name(t.type));
    const int64_t n = t.shape[0];
    if (heads_.reordered() && n != heads_.k_heads * heads_.v_per_k)
      return error("{}: tensor '{}' has {} values, expected one per V head ({})", file->path(), t.name, n,
                   heads_.k_heads * heads_.v_per_k);
    auto buf = std::make_shared<Buffer>(Buffer::allocate(DType::f32, {n}));
    const uint8_t* src = file->data(t);
    for (int64_t h = 0; h < n; ++h) {
      float a;
      std::memcpy(&a, src + 4 * (heads_.reordered() ? heads_.gguf_head(h) : h), 4);
      if (!(a < 0)) return error("{}: tensor '{}' value {} is {}: -exp(A_log) must be negative", file->path(), t.name, h, a);
      buf->f32()[h] = std::log(-a);
    }
    weights::TensorEntry e = entry_of(t, hf);
    return out_.add(hf, std::move(e), buf->tensor().data_as<uint8_t>(), file->path(), buf);
  }

  // out_proj [H, value_dim]: each row's V-head column blocks back in HF order — moved as bytes when a head
  // is whole blocks of the type, else the matrix is dequantized to f32 first.
  Status cols_fixed(const std::shared_ptr<GgufFile>& file, const GgufTensor& t, const std::string& hf) {
    const int64_t heads = heads_.k_heads * heads_.v_per_k, hd = heads_.v_dim;
    if (t.shape.size() != 2 || t.shape[1] != heads * hd)
      return error("{}: tensor '{}' has {} columns, expected {} V heads of {}", file->path(), t.name, t.shape.back(),
                   heads, hd);
    const auto info = *ggml_type_info(static_cast<uint32_t>(t.type));
    const int64_t N = t.shape[0], K = t.shape[1];
    const uint8_t* src = file->data(t);
    weights::TensorEntry e = entry_of(t, hf);
    if (hd % info.block_size == 0) {
      const size_t head_bytes = static_cast<size_t>(hd / info.block_size * info.block_bytes);
      const size_t row_bytes = head_bytes * static_cast<size_t>(heads);
      auto buf = owned_bytes(e.nbytes);
      uint8_t* dst = buf->tensor().data_as<uint8_t>();
      for (int64_t n = 0; n < N; ++n)
        for (int64_t h = 0; h < heads; ++h)
          std::memcpy(dst + n * row_bytes + h * head_bytes, src + n * row_bytes + heads_.gguf_head(h) * head_bytes,
                      head_bytes);
      return out_.add(hf, std::move(e), dst, file->path(), buf);
    }
    if (!ggml_type_supported(t.type))
      return error("{}: tensor '{}' has ggml type {}, which Kapitsa does not decode yet", file->path(), t.name, info.name);
    auto buf = std::make_shared<Buffer>(Buffer::allocate(DType::f32, {N, K}));
    const size_t row_bytes = static_cast<size_t>(K / info.block_size * info.block_bytes);
    std::vector<float> row(static_cast<size_t>(K));
    for (int64_t n = 0; n < N; ++n) {
      ops::ref::dequantize_ggml(t.type, src + n * row_bytes, K, row.data());
      for (int64_t h = 0; h < heads; ++h)
        std::memcpy(buf->f32() + n * K + h * hd, row.data() + heads_.gguf_head(h) * hd, static_cast<size_t>(hd) * 4);
    }
    weights::TensorEntry dense;
    dense.name = hf, dense.dtype = DType::f32, dense.shape = {N, K}, dense.nbytes = static_cast<size_t>(N * K * 4);
    return out_.add(hf, std::move(dense), buf->tensor().data_as<uint8_t>(), file->path(), buf);
  }

  weights::Checkpoint& out_;
  Heads heads_;
};

// A head count that may be stored per layer (an array): the largest.
Expected<int64_t> int_or_max(const GgufFile& f, const std::string& key) {
  const weights::GgufValue* v = f.find(key);
  if (v != nullptr && v->type == weights::GgufValueType::array && !v->ints.empty()) {
    int64_t m = 0;
    for (int64_t x : v->ints) m = std::max(m, x);
    return m;
  }
  return f.get_int(key);
}

Expected<Json> qwen35_config(const GgufFile& f, const std::string& arch, const std::map<std::string, const GgufTensor*>& tensors,
                             Heads& heads) {
  const std::string a = arch + ".";
  Json c = Json::object();
  c["model_type"] = arch == "qwen35" ? "qwen3_5_text" : "qwen3_5_moe_text";
  const auto embd = tensors.find("token_embd.weight");
  if (embd == tensors.end()) return error("{}: tensor 'token_embd.weight' is missing", f.path());
  c["vocab_size"] = embd->second->shape[0];
  KAPITSA_TRY(const int64_t hidden, f.get_int(a + "embedding_length"));
  KAPITSA_TRY(const int64_t layers, f.get_int(a + "block_count"));
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
  heads = Heads{k_heads, v_heads / k_heads, k_dim, inner / v_heads};
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
  if (arch == "qwen35moe") {
    KAPITSA_TRY(c["num_experts"], f.get_int(a + "expert_count"));
    KAPITSA_TRY(c["num_experts_per_tok"], f.get_int(a + "expert_used_count"));
    KAPITSA_TRY(c["moe_intermediate_size"], f.get_int(a + "expert_feed_forward_length"));
    if (f.find(a + "expert_shared_feed_forward_length")) {
      KAPITSA_TRY(c["shared_expert_intermediate_size"], f.get_int(a + "expert_shared_feed_forward_length"));
    }
  }
  c["tie_word_embeddings"] = !tensors.contains("output.weight");
  if (f.find("tokenizer.ggml.eos_token_id")) {
    KAPITSA_TRY(c["eos_token_id"], f.get_int("tokenizer.ggml.eos_token_id"));
  }
  return c;
}

}  // namespace

Expected<GgufCheckpoint> open_gguf_checkpoint(const std::string& path) {
  KAPITSA_TRY(auto parts, weights::open_gguf_parts(path));
  const GgufFile& meta = *parts[0];
  KAPITSA_TRY(const std::string arch, meta.get_string("general.architecture"));
  std::map<std::string, const GgufTensor*> tensors;
  std::map<std::string, std::shared_ptr<GgufFile>> file_of;
  for (const auto& part : parts)
    for (const auto& [name, t] : part->tensors()) tensors[name] = &t, file_of[name] = part;

  if (arch != "qwen35" && arch != "qwen35moe")
    return error("{}: GGUF architecture '{}' is not loaded yet (Kapitsa reads qwen35 and qwen35moe GGUF files, as "
                 "llama.cpp's converter writes Qwen3.5; other models as Hugging Face folders)",
                 path, arch);
  Heads heads;
  KAPITSA_TRY(Json json, qwen35_config(meta, arch, tensors, heads));
  GgufCheckpoint out{weights::HfConfig::from_json(json, path + " (GGUF metadata)"), weights::Checkpoint{}, parts};
  Builder builder(out.checkpoint, heads);

  for (const auto& [name, t] : tensors) {
    std::string hf;
    Fix fix = Fix::none;
    for (const Mapping& m : kGlobal)
      if (name == m.gguf) hf = m.hf;
    if (hf.empty() && name.starts_with("blk.")) {
      const size_t dot = name.find('.', 4);
      const std::string layer = name.substr(4, dot - 4), rest = dot == std::string::npos ? "" : name.substr(dot + 1);
      for (const Mapping& m : kQwen35Layer)
        if (rest == m.gguf) hf = fmt::format("model.layers.{}.{}", layer, m.hf), fix = m.fix;
    }
    if (hf.empty()) continue;  // tensors the models do not read (e.g. MTP layers)
    KAPITSA_RETURN_IF_ERROR(builder.add(file_of[name], *t, hf, fix));
  }
  return out;
}

}  // namespace kapitsa::models
