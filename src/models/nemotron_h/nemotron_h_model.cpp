// Nemotron-H family: weights by name, per-sequence state and the forward pass.
#include "models/nemotron_h/nemotron_h_model.h"

#include "base/log.h"
#include "models/hybrid_decoder.h"
#include "models/layers/attention.h"
#include "models/layers/mamba2.h"
#include "models/layers/mlp.h"
#include "models/layers/moe_sigmoid.h"
#include "models/workspace.h"
#include "models/nemotron_h/config.h"
#include "ops/ops.h"
#include "weights/safetensors.h"

#include <cstring>
#include <optional>

namespace kapitsa::models::nemotron_h {
namespace {

// A decoder layer: one block (Mamba-2, attention, MLP or MoE).
struct Layer {
  LayerKind kind;
  int64_t memory_index = 0;  // among the recurrent (Mamba-2) or the attention layers
  std::optional<Mamba2Weights> mamba;
  std::optional<AttentionWeights> attention;
  std::optional<Relu2MlpWeights> mlp;
  std::optional<SigmoidMoeWeights> moe;
};

// The multi-token-prediction head (Nemotron 3, mtp.layers.{i}.*, one physical layer per letter of
// mtp_hybrid_override_pattern): layer 0 starts with x = eh_proj(concat(enorm(e), hnorm(h))) (embedding
// half first), every layer is a pre-norm residual block x += mixer(norm(x)) of the trunk's kinds, the
// last ends with final_layernorm; embedding and head are the target's. Its attention layers' KV are the
// layers after the trunk's in the KV layout.
struct MtpHead {
  Buffer enorm, hnorm, final_norm;  // [H] f32
  Linear eh_proj;                   // [H, 2H]
  std::vector<Buffer> norms;        // per layer: [H] f32
  std::vector<Layer> layers;
};

class NemotronHModel final : public HybridDecoder {
 public:
  NemotronHModel(NemotronHConfig config, weights::Checkpoint checkpoint)
      : config_(std::move(config)), checkpoint_(std::move(checkpoint)) {}

  Status load_weights();

 private:
  // layer.kind's weights under `mixer` (e.g. "backbone.layers.3.mixer.").
  Status load_mixer(WeightLoader& loader, const std::string& mixer, Layer& layer) const;
  Status load_mtp(WeightLoader& loader, const std::string& prefix, int64_t first_kv_layer);
  void run_mixer(const Layer& layer, const StepBatch& step, const Tensor& normed, const Tensor& out,
                 ForwardContext& ctx) const;
  void block_forward(size_t layer, size_t block, const StepBatch& step, const Tensor& normed, const Tensor& out,
                     ForwardContext& ctx) const override;
  void mtp_head(const StepBatch& step, const Tensor& e, const Tensor& h, const Tensor& out,
                ForwardContext& ctx) const override;

  NemotronHConfig config_;
  weights::Checkpoint checkpoint_;
  AttentionConfig attention_config_;
  Mamba2Config mamba_config_;
  SigmoidMoeConfig moe_config_;
  std::vector<Layer> layers_;
  std::optional<MtpHead> mtp_;
};

Status NemotronHModel::load_weights() {
  const NemotronHConfig& c = config_;
  const int64_t H = c.hidden_size;
  attention_config_ = AttentionConfig{H, c.n_heads, c.n_kv_heads, c.head_dim, /*output_gate=*/false,
                                      /*qk_norm=*/false, c.norm_eps, /*norm_weight_offset=*/0.0f,
                                      /*rotary_dim=*/0, /*rope_theta=*/0.0f, false};
  mamba_config_ = Mamba2Config{H,
                               c.mamba_heads,
                               c.mamba_head_dim,
                               c.n_groups,
                               c.d_state,
                               c.d_conv,
                               c.chunk_size,
                               c.conv_bias,
                               c.proj_bias,
                               c.norm_eps,
                               static_cast<float>(c.time_step_limit[0]),
                               static_cast<float>(c.time_step_limit[1])};
  moe_config_ = SigmoidMoeConfig{H,
                                 c.n_experts,
                                 c.top_k,
                                 c.moe_intermediate_size,
                                 c.shared_expert_intermediate_size,
                                 c.moe_latent_size,
                                 c.n_group,
                                 c.topk_group,
                                 c.norm_topk_prob,
                                 static_cast<float>(c.routed_scaling_factor)};

  // Released checkpoints name the trunk backbone.*, transformers' own module tree model.*;
  // multimodal releases put either behind language_model.
  WeightLoader loader(checkpoint_, c.quantization, device_);
  std::string prefix;
  for (const char* candidate : {"backbone.", "model.", "language_model.backbone.", "language_model.model."})
    if (checkpoint_.contains(std::string(candidate) + "embeddings.weight")) {
      prefix = candidate;
      break;
    }
  if (prefix.empty())
    return error("checkpoint has no backbone.embeddings.weight (nor model.embeddings.weight): not a Nemotron-H "
                 "checkpoint?");
  const std::string head_prefix = prefix.rfind("language_model.", 0) == 0 ? "language_model." : "";
  info_.vocab_size = c.vocab_size;
  info_.hidden_size = H;
  KAPITSA_RETURN_IF_ERROR(load_embedding_and_head(loader, prefix + "embeddings.weight", head_prefix + "lm_head.weight",
                                                  c.tie_word_embeddings));
  KAPITSA_TRY(final_norm_, loader.get_f32(prefix + "norm_f.weight", {H}));
  norm_eps_ = c.norm_eps;
  norm_weight_offset_ = 0.0f;
  int64_t n_recurrent = 0, n_attention = 0;

  for (int64_t i = 0; i < c.n_layers; ++i) {
    log::progress("loading layers", static_cast<size_t>(i + 1), static_cast<size_t>(c.n_layers));
    const std::string p = fmt::format("{}layers.{}.", prefix, i);
    const std::string m = p + "mixer.";
    Layer layer;
    layer.kind = c.layer_kinds[static_cast<size_t>(i)];
    std::vector<Buffer> norms(1);
    KAPITSA_TRY(norms[0], loader.get_f32(p + "norm.weight", {H}));
    block_norms_.push_back(std::move(norms));
    if (layer.kind == LayerKind::mamba) layer.memory_index = n_recurrent++;
    if (layer.kind == LayerKind::attention) layer.memory_index = n_attention++;
    KAPITSA_RETURN_IF_ERROR(load_mixer(loader, m, layer));
    layers_.push_back(std::move(layer));
  }
  const int64_t trunk_bytes_per_token = static_cast<int64_t>(loader.bytes_per_token());  // a decode step's reads

  // The MTP head when the checkpoint has one and the config gives its layers.
  const std::string mtp_prefix = head_prefix + "mtp.layers.";
  const bool has_mtp = checkpoint_.contains(mtp_prefix + "0.eh_proj.weight");
  if (has_mtp && !c.mtp_kinds.empty()) {
    KAPITSA_RETURN_IF_ERROR(load_mtp(loader, mtp_prefix, n_attention));
  } else if (has_mtp) {
    log::info("{}: the checkpoint has MTP tensors but config.json no mtp_hybrid_override_pattern: head not loaded",
              c.model_type);
  } else if (!c.mtp_kinds.empty()) {
    log::debug("{}: config declares an MTP head but the checkpoint has no {}* tensors", c.model_type, mtp_prefix);
  }
  int64_t mtp_attention = 0;
  if (mtp_)
    for (const Layer& l : mtp_->layers) mtp_attention += l.kind == LayerKind::attention ? 1 : 0;

  std::string experts;
  if (c.count(LayerKind::moe) > 0)
    experts = fmt::format(", {} experts top-{}{}", c.n_experts, c.top_k,
                          c.moe_latent_size > 0 ? fmt::format(" (latent {})", c.moe_latent_size) : std::string());
  kv_layout_ = KvLayout{n_attention + mtp_attention, attention_config_.n_kv_heads, attention_config_.head_dim};
  recurrent_layout_ = RecurrentLayout{n_recurrent, mamba_config_.conv_window_shape(), mamba_config_.state_shape()};
  info_ = ModelInfo{c.model_type, c.vocab_size, H, c.n_layers, c.max_position_embeddings, c.eos_token_ids,
                    fmt::format("{}: {} layers ({} Mamba-2, {} attention, {} MLP, {} MoE), hidden {}, vocab {}{}",
                                c.model_type, c.n_layers, c.count(LayerKind::mamba), c.count(LayerKind::attention),
                                c.count(LayerKind::mlp), c.count(LayerKind::moe), H, c.vocab_size, experts)};
  if (mtp_) {
    std::string letters;
    for (const Layer& l : mtp_->layers) letters += pattern_letter(l.kind);
    info_.summary += fmt::format(", MTP head ({})", letters);
    info_.mtp_layers = 1;
  }
  KAPITSA_RETURN_IF_ERROR(loader.check_quantization_entries_used());
  info_.weight_bytes_per_token = trunk_bytes_per_token;
  info_.resident_weight_bytes = static_cast<int64_t>(loader.resident_bytes());
  keep_device_weights(loader);
  return ok_status();
}

Status NemotronHModel::load_mixer(WeightLoader& loader, const std::string& m, Layer& layer) const {
  switch (layer.kind) {
    case LayerKind::mamba: {
      KAPITSA_TRY(Mamba2Weights w, Mamba2Weights::load(loader, m, mamba_config_));
      layer.mamba = std::move(w);
      break;
    }
    case LayerKind::attention: {
      KAPITSA_TRY(AttentionWeights w, AttentionWeights::load(loader, m, attention_config_));
      layer.attention = std::move(w);
      break;
    }
    case LayerKind::mlp: {
      KAPITSA_TRY(Relu2MlpWeights w, Relu2MlpWeights::load(loader, m, config_.hidden_size, config_.intermediate_size));
      layer.mlp = w;
      break;
    }
    case LayerKind::moe: {
      KAPITSA_TRY(SigmoidMoeWeights w, SigmoidMoeWeights::load(loader, m, moe_config_));
      layer.moe = std::move(w);
      break;
    }
  }
  return ok_status();
}

Status NemotronHModel::load_mtp(WeightLoader& loader, const std::string& prefix, int64_t first_kv_layer) {
  const int64_t H = config_.hidden_size;
  MtpHead m;
  KAPITSA_TRY(m.enorm, loader.get_f32(prefix + "0.enorm.weight", {H}));
  KAPITSA_TRY(m.hnorm, loader.get_f32(prefix + "0.hnorm.weight", {H}));
  KAPITSA_TRY(m.eh_proj, loader.linear(prefix + "0.eh_proj.weight", {H, 2 * H}));
  int64_t kv_layer = first_kv_layer;
  for (size_t i = 0; i < config_.mtp_kinds.size(); ++i) {
    const std::string p = fmt::format("{}{}.", prefix, i);
    Layer layer;
    layer.kind = config_.mtp_kinds[i];
    if (layer.kind == LayerKind::attention) layer.memory_index = kv_layer++;
    KAPITSA_TRY(Buffer norm, loader.get_f32(p + "norm.weight", {H}));
    m.norms.push_back(std::move(norm));
    KAPITSA_RETURN_IF_ERROR(load_mixer(loader, p + "mixer.", layer));
    m.layers.push_back(std::move(layer));
  }
  KAPITSA_TRY(m.final_norm, loader.get_f32(fmt::format("{}{}.final_layernorm.weight", prefix, m.layers.size() - 1), {H}));
  mtp_ = std::move(m);
  return ok_status();
}

void NemotronHModel::mtp_head(const StepBatch& step, const Tensor& e, const Tensor& h, const Tensor& out,
                              ForwardContext& ctx) const {
  const MtpHead& m = *mtp_;
  Workspace& ws = ctx.workspace;
  const int64_t T = step.n_tokens, H = info_.hidden_size;
  const Tensor x = mtp_fuse(e, h, m.enorm, m.hnorm, m.eh_proj, ws);
  const Tensor normed = ws.take(DType::f32, {T, H}), mixed = ws.take(DType::f32, {T, H});
  for (size_t i = 0; i < m.layers.size(); ++i) {
    if (i == 0) ops::rms_norm(x, m.norms[0], norm_eps_, 0.0f, normed);
    else ops::add_rms_norm(x, mixed, m.norms[i], norm_eps_, 0.0f, normed);  // x += the previous layer's output
    run_mixer(m.layers[i], step, normed, mixed, ctx);
  }
  ops::add_rms_norm(x, mixed, m.final_norm, norm_eps_, 0.0f, out);
}

void NemotronHModel::block_forward(size_t i, size_t, const StepBatch& step, const Tensor& normed, const Tensor& out,
                                   ForwardContext& ctx) const {
  run_mixer(layers_[i], step, normed, out, ctx);
}

void NemotronHModel::run_mixer(const Layer& layer, const StepBatch& step, const Tensor& normed, const Tensor& out,
                               ForwardContext& ctx) const {
  switch (layer.kind) {
    case LayerKind::mamba: mamba2_forward(mamba_config_, *layer.mamba, layer.memory_index, step, normed, out, ctx); break;
    case LayerKind::attention:
      attention_forward(attention_config_, *layer.attention, layer.memory_index, step, normed, out, ctx);
      break;
    case LayerKind::mlp: relu2_mlp_forward(*layer.mlp, normed, out, ctx); break;
    case LayerKind::moe: sigmoid_moe_forward(moe_config_, *layer.moe, normed, out, ctx); break;
  }
}

}  // namespace

bool release_layout(const std::string& model_type, const std::string& tensor_name) {
  auto ends_with = [&](std::string_view suffix) {
    return tensor_name.size() >= suffix.size() &&
           tensor_name.compare(tensor_name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return tensor_name == "backbone.embeddings.weight" || tensor_name == "lm_head.weight" ||
         ends_with(".gate.e_score_correction_bias");
}

Expected<std::unique_ptr<Model>> load(const weights::HfConfig& config, weights::Checkpoint checkpoint,
                                      const LoadOptions& options) {
  KAPITSA_TRY(NemotronHConfig parsed, parse_config(config));
  auto model = std::make_unique<NemotronHModel>(std::move(parsed), std::move(checkpoint));
  model->set_device(options.device);
  KAPITSA_RETURN_IF_ERROR(model->load_weights());
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace kapitsa::models::nemotron_h
