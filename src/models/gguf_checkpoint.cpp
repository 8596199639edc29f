// GGUF → config + Hugging Face-named checkpoint (see gguf_checkpoint.h). The names, reorderings and
// stored forms are those of llama.cpp's conversion/qwen.py (Qwen3NextModel.modify_tensors and
// _LinearAttentionVReorderBase), conversion/nemotron.py + mamba.py (NemotronHModel, Mamba2Model) and
// gguf-py's tensor_mapping.py.
#include "models/gguf_checkpoint.h"

#include "models/gguf_config.h"

#include "ops/ref/ref.h"

#include <fmt/ranges.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <span>

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
  a_log,        // -exp(A_log) per V head → A_log (any shape of that many values: Mamba-2's is [H, 1])
  v_cols,       // columns are V heads (out_proj): kept in tiled order, the layer permutes its input
  ba_b,         // Qwen3-Next's packed in_proj_ba [Hk·2r, H] (per key head r rows of b, then r of a): the b rows
  ba_a,         // … the a rows
  flatten,      // an f32 tensor stored [n, 1] or [groups, n / groups] (Mamba-2's D, norm): read as [n]
  one_row,      // a [1, n] matrix the converter stores as the vector [n] (shared_expert_gate): read as [1, n]
};

struct Mapping {
  const char* gguf;  // name after "blk.N." (or the whole name for global tensors)
  const char* hf;    // name after "model.layers.N." (or the whole name)
  Fix fix = Fix::none;
};

constexpr Mapping kQwenGlobal[] = {
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
    {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight", Fix::one_row},
    {"ssm_ba.weight", "linear_attn.in_proj_b.weight", Fix::ba_b},  // Qwen3-Next: in_proj_ba kept packed
    {"ssm_ba.weight", "linear_attn.in_proj_a.weight", Fix::ba_a},
};

constexpr Mapping kNemotronGlobal[] = {
    {"token_embd.weight", "backbone.embeddings.weight"},
    {"output.weight", "lm_head.weight"},
    {"output_norm.weight", "backbone.norm_f.weight"},
};

// The MTP head's own tensors in its block (conversion/qwen.py _QwenMtpMixin.filter_tensors): under "mtp.";
// its decoder layer's tensors take the layer mapping under "mtp.layers.{i}.".
constexpr Mapping kQwenMtp[] = {
    {"nextn.eh_proj.weight", "fc.weight"},
    {"nextn.enorm.weight", "pre_fc_norm_embedding.weight"},
    {"nextn.hnorm.weight", "pre_fc_norm_hidden.weight"},
    {"nextn.shared_head_norm.weight", "norm.weight"},
};

// Nemotron 3's head is vLLM's mtp.layers.0 (fusion + attention) and mtp.layers.1 (MoE + final norm),
// folded by the converter into one block (conversion/nemotron.py _MTP_SPECIAL_RENAMES): its attention
// tensors go back to layer 0, its MoE tensors to layer 1.
constexpr Mapping kNemotronMtp[] = {
    {"nextn.eh_proj.weight", "layers.0.eh_proj.weight"},
    {"nextn.enorm.weight", "layers.0.enorm.weight"},
    {"nextn.hnorm.weight", "layers.0.hnorm.weight"},
    {"attn_norm.weight", "layers.0.norm.weight"},
    {"post_attention_norm.weight", "layers.1.norm.weight"},
    {"nextn.shared_head_norm.weight", "layers.1.final_layernorm.weight"},
};

// Every Nemotron-H block has one norm (attn_norm in GGUF) and one mixer. Attention's q/k rows stay in the
// order the converter wrote them (LlamaModel.permute, for RoPE): the same permutation of each head's
// dimensions in q and k leaves q·k unchanged, and Nemotron-H's attention has no RoPE or q/k norms.
constexpr Mapping kNemotronLayer[] = {
    {"attn_norm.weight", "norm.weight"},
    {"ssm_in.weight", "mixer.in_proj.weight"},
    {"ssm_in.bias", "mixer.in_proj.bias"},
    {"ssm_conv1d.weight", "mixer.conv1d.weight"},
    {"ssm_conv1d.bias", "mixer.conv1d.bias"},
    {"ssm_a", "mixer.A_log", Fix::a_log},
    {"ssm_d", "mixer.D", Fix::flatten},
    {"ssm_dt.bias", "mixer.dt_bias"},
    {"ssm_norm.weight", "mixer.norm.weight", Fix::flatten},
    {"ssm_out.weight", "mixer.out_proj.weight"},
    {"ssm_out.bias", "mixer.out_proj.bias"},
    {"attn_q.weight", "mixer.q_proj.weight"},
    {"attn_k.weight", "mixer.k_proj.weight"},
    {"attn_v.weight", "mixer.v_proj.weight"},
    {"attn_output.weight", "mixer.o_proj.weight"},
    {"ffn_up.weight", "mixer.up_proj.weight"},
    {"ffn_down.weight", "mixer.down_proj.weight"},
    {"ffn_gate_inp.weight", "mixer.gate.weight"},
    {"exp_probs_b.bias", "mixer.gate.e_score_correction_bias"},
    {"ffn_up_exps.weight", "mixer.switch_mlp.fc1.weight"},  // [E, I, W]: the layout mlx-lm writes
    {"ffn_down_exps.weight", "mixer.switch_mlp.fc2.weight"},
    {"ffn_up_shexp.weight", "mixer.shared_experts.up_proj.weight"},
    {"ffn_down_shexp.weight", "mixer.shared_experts.down_proj.weight"},
    {"ffn_latent_down.weight", "mixer.fc1_latent_proj.weight"},
    {"ffn_latent_up.weight", "mixer.fc2_latent_proj.weight"},
};

using Heads = GgufGdnHeads;

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
    if (fix == Fix::ba_b || fix == Fix::ba_a) return ba_split(file, t, std::move(e), hf, src, fix == Fix::ba_a);
    if (fix == Fix::flatten) {
      if (t.type != GgmlType::f32)
        return error("{}: tensor '{}' must be F32, got {}", file->path(), t.name, ggml_type_name(t.type));
      e.shape = {t.numel()};
      return out_.add(hf, std::move(e), src, file->path(), file);
    }
    if (fix == Fix::one_row) {
      if (t.shape.size() == 1 && is_dense(t.type)) e.shape = {1, t.shape[0]};
      return out_.add(hf, std::move(e), src, file->path(), file);
    }
    if (!heads_.reordered() || fix == Fix::none) {
      if (fix == Fix::a_log) return add_a_log(file, t, hf);
      if (hf.ends_with("conv1d.weight")) e.shape.push_back(1);  // [C, K] presented as mlx-lm's [C, K, 1]
      return out_.add(hf, std::move(e), src, file->path(), file);
    }
    if (t.numel() == 0)  // the row arithmetic below divides by its dimensions
      return error("{}: tensor '{}' has a dimension of size 0 (shape {})", file->path(), t.name, fmt::join(t.shape, " x "));
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
      case Fix::v_cols: return out_.add(hf, std::move(e), src, file->path(), file);  // as stored: gated_deltanet.h
      case Fix::none: case Fix::ba_b: case Fix::ba_a: case Fix::flatten: case Fix::one_row: break;
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

  // Qwen3-Next's in_proj_ba rows: per key head, v_per_k rows of b then v_per_k of a → in_proj_b or
  // in_proj_a [Hv, H] (V head h = k·v_per_k + j).
  Status ba_split(const std::shared_ptr<GgufFile>& file, const GgufTensor& t, weights::TensorEntry e,
                  const std::string& hf, const uint8_t* src, bool a_rows) {
    const int64_t r = heads_.v_per_k, heads = heads_.k_heads * r;
    if (t.shape.size() != 2 || t.shape[0] != 2 * heads)
      return error("{}: tensor '{}' has {} rows, expected {} (b and a per V head) from the GDN head counts in the "
                   "metadata", file->path(), t.name, t.shape[0], 2 * heads);
    const size_t row_bytes = e.nbytes / static_cast<size_t>(t.shape[0]);
    e.shape[0] = heads;
    e.nbytes = row_bytes * static_cast<size_t>(heads);
    auto buf = owned_bytes(e.nbytes);
    uint8_t* dst = buf->tensor().data_as<uint8_t>();
    for (int64_t h = 0; h < heads; ++h)
      std::memcpy(dst + static_cast<size_t>(h) * row_bytes,
                  src + static_cast<size_t>(h / r * 2 * r + (a_rows ? r : 0) + h % r) * row_bytes, row_bytes);
    return out_.add(hf, std::move(e), dst, file->path(), buf);
  }

  // A_log = log(−a) per V head, in HF order (f32).
  Status add_a_log(const std::shared_ptr<GgufFile>& file, const GgufTensor& t, const std::string& hf) {
    if (t.type != GgmlType::f32 || t.shape.empty() || t.shape[0] != t.numel())
      return error("{}: tensor '{}' must be F32 [n] or [n, 1], got {} with {} dims", file->path(), t.name,
                   ggml_type_name(t.type), t.shape.size());
    const int64_t n = t.numel();
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
    e.shape = {n};
    return out_.add(hf, std::move(e), buf->tensor().data_as<uint8_t>(), file->path(), buf);
  }

  weights::Checkpoint& out_;
  Heads heads_;
};

// The Hugging Face name of tensor `rest` of MTP block `index` (blk.{trunk_layers + index}.rest) and its
// Fix, an empty name when it is none Kapitsa reads. The head's decoder layer has no GDN or Mamba tensors:
// of the trunk's fixes only one_row (the shared-expert gate) can apply.
std::pair<std::string, Fix> mtp_name(GgufFamily family, int64_t index, const std::string& rest,
                                     std::span<const Mapping> per_layer) {
  const bool nemotron = family == GgufFamily::nemotron_h;
  for (const Mapping& m : nemotron ? std::span<const Mapping>(kNemotronMtp) : kQwenMtp)
    if (rest == m.gguf) return {fmt::format("mtp.{}", m.hf), Fix::none};
  for (const Mapping& m : per_layer) {
    if (rest != m.gguf) continue;
    const Fix fix = m.fix == Fix::one_row ? Fix::one_row : Fix::none;
    if (!nemotron) return {fmt::format("mtp.layers.{}.{}", index, m.hf), fix};
    return {fmt::format("mtp.layers.{}.{}", rest.starts_with("attn_") ? 0 : 1, m.hf), fix};
  }
  return {};
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

  KAPITSA_TRY(GgufModelConfig config, gguf_model_config(meta, arch, tensors));
  GgufCheckpoint out{weights::HfConfig::from_json(config.json, path + " (GGUF metadata)"), weights::Checkpoint{}, parts};
  Builder builder(out.checkpoint, config.heads);
  const bool nemotron = config.family == GgufFamily::nemotron_h;
  const std::span<const Mapping> global = nemotron ? std::span<const Mapping>(kNemotronGlobal) : kQwenGlobal;
  const std::span<const Mapping> per_layer = nemotron ? std::span<const Mapping>(kNemotronLayer) : kQwen35Layer;
  const char* layer_prefix = nemotron ? "backbone.layers" : "model.layers";

  for (const auto& [name, t] : tensors) {
    for (const Mapping& m : global)
      if (name == m.gguf) KAPITSA_RETURN_IF_ERROR(builder.add(file_of[name], *t, m.hf, m.fix));
    if (!name.starts_with("blk.")) continue;
    const size_t dot = name.find('.', 4);
    int64_t layer = -1;
    if (dot == std::string::npos || std::from_chars(name.data() + 4, name.data() + dot, layer).ptr != name.data() + dot)
      continue;
    const std::string rest = name.substr(dot + 1);
    if (layer >= config.trunk_layers) {
      const auto [hf, fix] = mtp_name(config.family, layer - config.trunk_layers, rest, per_layer);
      if (hf.empty()) return error("{}: tensor '{}' of the MTP head is not one Kapitsa reads", file_of[name]->path(), name);
      KAPITSA_RETURN_IF_ERROR(builder.add(file_of[name], *t, hf, fix));
      continue;
    }
    for (const Mapping& m : per_layer)  // tensors the models do not read match nothing
      if (rest == m.gguf)
        KAPITSA_RETURN_IF_ERROR(builder.add(file_of[name], *t, fmt::format("{}.{}.{}", layer_prefix, layer, m.hf), m.fix));
  }
  return out;
}

}  // namespace kapitsa::models
