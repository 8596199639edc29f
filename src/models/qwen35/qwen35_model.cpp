// Qwen3.5 family: weights by name, per-sequence state and the forward pass.
#include "models/qwen35/qwen35_model.h"

#include "base/log.h"
#include "models/hybrid_decoder.h"
#include "models/hybrid_state.h"
#include "models/layers/attention.h"
#include "models/layers/gated_deltanet.h"
#include "models/layers/mlp.h"
#include "models/layers/moe.h"
#include "models/qwen35/config.h"
#include "ops/ops.h"
#include "weights/safetensors.h"

#include <algorithm>
#include <cstring>
#include <optional>

namespace kapitsa::models::qwen35 {
namespace {

// A decoder layer: block 0 the mixer (DeltaNet or attention), block 1 the MLP or MoE.
struct Layer {
  LayerKind kind;
  int64_t memory_index = 0;  // among the recurrent layers (DeltaNet) or the attention layers
  std::optional<GdnWeights> gdn;
  std::optional<AttentionWeights> attention;
  std::optional<SwiGluWeights> mlp;
  std::optional<SoftmaxMoeWeights> moe;
};

// The multi-token-prediction head (mtp.*): pre-norms of the embedding and of the target's hidden
// state, fc over their concatenation (embedding half first), one full-attention decoder layer whose
// KV is the last layer of the sequence's KV layout, a final norm; embedding and head are the target's.
struct MtpHead {
  Buffer norm_embedding, norm_hidden, norm;  // [H] f32
  Linear fc;                                 // [H, 2H]
  Buffer input_norm, post_attention_norm;    // [H] f32
  Layer layer;                               // full attention + the target's MLP kind
};

class Qwen35Model final : public HybridDecoder {
 public:
  Qwen35Model(Qwen35Config config, weights::Checkpoint checkpoint)
      : config_(std::move(config)), checkpoint_(std::move(checkpoint)) {}

  Status load_weights();

 private:
  Status load_mtp(WeightLoader& loader, int64_t kv_layer);
  void mtp_head(const StepBatch& step, const Tensor& e, const Tensor& h, const Tensor& out,
                ForwardContext& ctx) const override;
  void block_forward(size_t layer, size_t block, const StepBatch& step, const Tensor& normed, const Tensor& out,
                     ForwardContext& ctx) const override;

  Qwen35Config config_;
  weights::Checkpoint checkpoint_;
  AttentionConfig attention_config_;
  GdnConfig gdn_config_;
  SoftmaxMoeConfig moe_config_;
  std::vector<Layer> layers_;
  std::optional<MtpHead> mtp_;
};

Status Qwen35Model::load_mtp(WeightLoader& loader, int64_t kv_layer) {
  const Qwen35Config& c = config_;
  const int64_t H = c.hidden_size;
  MtpHead m;
  KAPITSA_TRY(m.norm_embedding, loader.get_f32("mtp.pre_fc_norm_embedding.weight", {H}));
  KAPITSA_TRY(m.norm_hidden, loader.get_f32("mtp.pre_fc_norm_hidden.weight", {H}));
  KAPITSA_TRY(m.fc, loader.linear("mtp.fc.weight", {H, 2 * H}));
  KAPITSA_TRY(m.norm, loader.get_f32("mtp.norm.weight", {H}));
  const std::string p = "mtp.layers.0.";
  KAPITSA_TRY(m.input_norm, loader.get_f32(p + "input_layernorm.weight", {H}));
  KAPITSA_TRY(m.post_attention_norm, loader.get_f32(p + "post_attention_layernorm.weight", {H}));
  m.layer.kind = LayerKind::full_attention;
  m.layer.memory_index = kv_layer;
  KAPITSA_TRY(AttentionWeights attention, AttentionWeights::load(loader, p + "self_attn.", attention_config_));
  m.layer.attention = std::move(attention);
  if (c.n_experts > 0) {  // the MoE checkpoints' head has the routed experts + shared expert
    KAPITSA_TRY(SoftmaxMoeWeights moe, SoftmaxMoeWeights::load(loader, p + "mlp.", moe_config_));
    m.layer.moe = std::move(moe);
  } else {
    KAPITSA_TRY(SwiGluWeights mlp, SwiGluWeights::load(loader, p + "mlp.", H, c.intermediate_size));
    m.layer.mlp = mlp;
  }
  mtp_ = std::move(m);
  return ok_status();
}

void Qwen35Model::mtp_head(const StepBatch& step, const Tensor& e, const Tensor& h, const Tensor& out,
                           ForwardContext& ctx) const {
  const MtpHead& m = *mtp_;
  Workspace& ws = ctx.workspace;
  const int64_t T = step.n_tokens, H = info_.hidden_size;
  const Tensor x = mtp_fuse(e, h, m.norm_embedding, m.norm_hidden, m.fc, ws);
  const Tensor normed = ws.take(DType::f32, {T, H}), mixed = ws.take(DType::f32, {T, H});
  ops::rms_norm(x, m.input_norm, norm_eps_, norm_weight_offset_, normed);
  attention_forward(attention_config_, *m.layer.attention, m.layer.memory_index, step, normed, mixed, ctx);
  ops::add_rms_norm(x, mixed, m.post_attention_norm, norm_eps_, norm_weight_offset_, normed);
  if (m.layer.moe) softmax_moe_forward(moe_config_, *m.layer.moe, normed, mixed, ctx);
  else swiglu_forward(*m.layer.mlp, normed, mixed, ctx);
  ops::add_rms_norm(x, mixed, m.norm, norm_eps_, norm_weight_offset_, out);
}

Status Qwen35Model::load_weights() {
  const Qwen35Config& c = config_;
  const int64_t H = c.hidden_size;
  attention_config_ = AttentionConfig{H,          c.n_heads,       c.n_kv_heads, c.head_dim,
                                      c.attn_output_gate, /*qk_norm=*/true, c.rms_norm_eps,
                                      /*norm_weight_offset=*/1.0f, c.rotary_dim(), c.rope_theta,
                                      c.rope_bf16_frequencies};
  gdn_config_ = GdnConfig{H, c.linear_k_heads, c.linear_v_heads, c.linear_k_head_dim, c.linear_v_head_dim,
                          c.conv_kernel, c.rms_norm_eps, c.packed_gdn_projections, c.gdn_out_proj_tiled};
  moe_config_ = SoftmaxMoeConfig{H, c.n_experts, c.top_k, c.moe_intermediate_size, c.shared_expert_intermediate_size,
                                 c.norm_topk_prob};

  WeightLoader loader(checkpoint_, c.quantization, device_);
  // Hugging Face names the text model "model.language_model." (Qwen3.5, with a vision tower) or "model."
  // (Qwen3-Next, text-only checkpoints); mlx-lm's sanitize renames the former "language_model.model."
  // and the head "language_model.lm_head".
  std::string prefix = "model.", head = "lm_head.weight";
  if (checkpoint_.contains("model.language_model.embed_tokens.weight")) prefix = "model.language_model.";
  if (checkpoint_.contains("language_model.model.embed_tokens.weight"))
    prefix = "language_model.model.", head = "language_model.lm_head.weight";
  // mlx-lm also stores the zero-centred RMSNorm weights (block, final, q/k norms) as 1 + w, and marks
  // its folders by conv1d weights stored [C, K, 1]; the norms then multiply by the stored weight as is.
  const auto first_gdn = std::find(c.layer_kinds.begin(), c.layer_kinds.end(), LayerKind::linear_attention);
  const bool mlx_norms =
      first_gdn != c.layer_kinds.end() &&
      loader.is_mlx_conv(fmt::format("{}layers.{}.linear_attn.conv1d.weight", prefix, first_gdn - c.layer_kinds.begin()));
  norm_weight_offset_ = mlx_norms ? 0.0f : 1.0f;
  // llama.cpp's converter splits Qwen3-Next's packed in_proj_qkvz / in_proj_ba into Qwen3.5's four
  // projections (models/gguf_checkpoint.cpp): read whichever the checkpoint has.
  if (gdn_config_.packed_projections && first_gdn != c.layer_kinds.end() &&
      checkpoint_.contains(fmt::format("{}layers.{}.linear_attn.in_proj_qkv.weight", prefix, first_gdn - c.layer_kinds.begin())))
    gdn_config_.packed_projections = false;
  attention_config_.norm_weight_offset = norm_weight_offset_;
  info_.vocab_size = c.vocab_size;
  info_.hidden_size = H;
  KAPITSA_RETURN_IF_ERROR(
      load_embedding_and_head(loader, prefix + "embed_tokens.weight", head, c.tie_word_embeddings));
  KAPITSA_TRY(final_norm_, loader.get_f32(prefix + "norm.weight", {H}));
  norm_eps_ = c.rms_norm_eps;
  int64_t n_recurrent = 0, n_attention = 0;

  for (int64_t i = 0; i < c.n_layers; ++i) {
    log::progress("loading layers", static_cast<size_t>(i + 1), static_cast<size_t>(c.n_layers));
    const std::string p = fmt::format("{}layers.{}.", prefix, i);
    Layer layer;
    layer.kind = c.layer_kinds[static_cast<size_t>(i)];
    std::vector<Buffer> norms(2);
    KAPITSA_TRY(norms[0], loader.get_f32(p + "input_layernorm.weight", {H}));
    KAPITSA_TRY(norms[1], loader.get_f32(p + "post_attention_layernorm.weight", {H}));
    block_norms_.push_back(std::move(norms));
    layer.memory_index = layer.kind == LayerKind::linear_attention ? n_recurrent++ : n_attention++;
    if (layer.kind == LayerKind::linear_attention) {
      KAPITSA_TRY(GdnWeights gdn, GdnWeights::load(loader, p + "linear_attn.", gdn_config_));
      layer.gdn = std::move(gdn);
    } else {
      KAPITSA_TRY(AttentionWeights attention, AttentionWeights::load(loader, p + "self_attn.", attention_config_));
      layer.attention = std::move(attention);
    }
    if (c.layer_is_moe[static_cast<size_t>(i)]) {
      KAPITSA_TRY(SoftmaxMoeWeights moe, SoftmaxMoeWeights::load(loader, p + "mlp.", moe_config_));
      layer.moe = std::move(moe);
    } else {
      KAPITSA_TRY(SwiGluWeights mlp, SwiGluWeights::load(loader, p + "mlp.", H, c.intermediate_size));
      layer.mlp = mlp;
    }
    layers_.push_back(std::move(layer));
  }

  int64_t n_moe = 0;
  for (size_t i = 0; i < layers_.size(); ++i) n_moe += c.layer_is_moe[i];
  // The roofline counts the trunk only: the MTP head is read by proposals, not by every decode step.
  const int64_t trunk_bytes_per_token = static_cast<int64_t>(loader.bytes_per_token());
  // The MTP head when the checkpoint has one: absent mtp.* (transformers drops them on save) means no
  // head; a partial or misshaped set is an error naming the tensor.
  const bool has_mtp = checkpoint_.contains("mtp.fc.weight") || checkpoint_.contains("mtp.norm.weight") ||
                       checkpoint_.contains("mtp.pre_fc_norm_hidden.weight");
  if (has_mtp) {
    if (c.mtp_layers > 1) log::info("{}: {} MTP layers declared; the first is used", c.model_type, c.mtp_layers);
    KAPITSA_RETURN_IF_ERROR(load_mtp(loader, n_attention));
  } else if (c.mtp_layers > 0) {
    log::debug("{}: config declares {} MTP layer(s) but the checkpoint has no mtp.* tensors", c.model_type, c.mtp_layers);
  }
  kv_layout_ = KvLayout{n_attention + (mtp_ ? 1 : 0), attention_config_.n_kv_heads, attention_config_.head_dim};
  recurrent_layout_ = RecurrentLayout{n_recurrent, gdn_config_.conv_window_shape(), gdn_config_.state_shape()};
  info_ = ModelInfo{c.model_type, c.vocab_size, H, c.n_layers, c.max_position_embeddings, c.eos_token_ids,
                    fmt::format("{}: {} layers ({} DeltaNet, {} attention), hidden {}, vocab {}{}", c.model_type,
                                c.n_layers, c.n_layers - n_attention, n_attention, H, c.vocab_size,
                                n_moe ? fmt::format(", {} experts top-{} on {} layers", c.n_experts, c.top_k, n_moe)
                                      : std::string())};
  if (mtp_) info_.summary += ", MTP head";
  info_.mtp_layers = mtp_ ? 1 : 0;
  KAPITSA_RETURN_IF_ERROR(loader.check_quantization_entries_used());
  info_.weight_bytes_per_token = trunk_bytes_per_token;
  info_.resident_weight_bytes = static_cast<int64_t>(loader.resident_bytes());
  keep_device_weights(loader);
  return ok_status();
}

void Qwen35Model::block_forward(size_t i, size_t block, const StepBatch& step, const Tensor& normed, const Tensor& out,
                                ForwardContext& ctx) const {
  const Layer& layer = layers_[i];
  if (block == 0 && layer.gdn) gdn_forward(gdn_config_, *layer.gdn, layer.memory_index, step, normed, out, ctx);
  else if (block == 0) attention_forward(attention_config_, *layer.attention, layer.memory_index, step, normed, out, ctx);
  else if (layer.moe) softmax_moe_forward(moe_config_, *layer.moe, normed, out, ctx);
  else swiglu_forward(*layer.mlp, normed, out, ctx);
}

}  // namespace

bool release_layout(const std::string& model_type, const std::string& tensor_name) {
  if (model_type != "qwen3_5" && model_type != "qwen3_5_moe") return false;
  auto ends_with = [&](std::string_view suffix) {
    return tensor_name.size() >= suffix.size() &&
           tensor_name.compare(tensor_name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return tensor_name == "model.language_model.embed_tokens.weight" || ends_with(".experts.gate_up_proj");
}

Expected<std::unique_ptr<Model>> load(const weights::HfConfig& config, weights::Checkpoint checkpoint,
                                      const LoadOptions& options) {
  KAPITSA_TRY(Qwen35Config parsed, parse_config(config));
  parsed.rope_bf16_frequencies = options.rope_bf16_frequencies;
  auto model = std::make_unique<Qwen35Model>(std::move(parsed), std::move(checkpoint));
  model->set_device(options.device);
  KAPITSA_RETURN_IF_ERROR(model->load_weights());
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace kapitsa::models::qwen35
