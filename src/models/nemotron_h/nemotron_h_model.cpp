// Nemotron-H family: weights by name, per-sequence state and the forward pass.
#include "models/nemotron_h/nemotron_h_model.h"

#include "base/log.h"
#include "models/batch.h"
#include "models/hybrid_state.h"
#include "models/layers/attention.h"
#include "models/layers/mamba2.h"
#include "models/layers/mlp.h"
#include "models/layers/moe_sigmoid.h"
#include "models/nemotron_h/config.h"
#include "ops/ops.h"
#include "weights/safetensors.h"

#include <cstring>
#include <optional>

namespace kapitsa::models::nemotron_h {
namespace {

struct Layer {
  LayerKind kind;
  Buffer norm;  // [H] f32
  std::optional<Mamba2Weights> mamba;
  std::optional<AttentionWeights> attention;
  std::optional<Relu2MlpWeights> mlp;
  std::optional<SigmoidMoeWeights> moe;
};

using NemotronHState = HybridState<Mamba2State>;

class NemotronHModel final : public Model {
 public:
  NemotronHModel(NemotronHConfig config, weights::Checkpoint checkpoint)
      : config_(std::move(config)), checkpoint_(std::move(checkpoint)) {}

  Status load_weights();
  size_t decode_weight_bytes() const;
  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_state(int64_t max_tokens, std::shared_ptr<KvPagePool> pool) const override;
  KvLayout kv_layout() const override;
  Status forward(std::span<const int32_t> ids, SequenceState& state, const Tensor& logits,
                 const Tensor& hidden) const override;
  Status forward_batch(std::span<const BatchItem> items) const override;
  // forward / forward_batch: hidden only for a single item.
  Status run(std::span<const BatchItem> items, const Tensor& hidden) const;

 private:
  NemotronHConfig config_;
  weights::Checkpoint checkpoint_;
  ModelInfo info_;
  AttentionConfig attention_config_;
  Mamba2Config mamba_config_;
  SigmoidMoeConfig moe_config_;
  Tensor embeddings_;  // [V, H]
  Tensor lm_head_;     // [V, H] (the embedding when tied)
  Buffer norm_f_;      // [H] f32
  std::vector<Layer> layers_;
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
  KAPITSA_TRY(embeddings_, checkpoint_.get(prefix + "embeddings.weight", {c.vocab_size, H}));
  if (c.tie_word_embeddings && !checkpoint_.contains(head_prefix + "lm_head.weight")) {
    lm_head_ = embeddings_;
  } else {
    KAPITSA_TRY(lm_head_, checkpoint_.get(head_prefix + "lm_head.weight", {c.vocab_size, H}));
  }
  KAPITSA_TRY(norm_f_, checkpoint_.get_f32(prefix + "norm_f.weight", {H}));

  for (int64_t i = 0; i < c.n_layers; ++i) {
    log::progress("loading layers", static_cast<size_t>(i + 1), static_cast<size_t>(c.n_layers));
    const std::string p = fmt::format("{}layers.{}.", prefix, i);
    const std::string m = p + "mixer.";
    Layer layer;
    layer.kind = c.layer_kinds[static_cast<size_t>(i)];
    KAPITSA_TRY(layer.norm, checkpoint_.get_f32(p + "norm.weight", {H}));
    switch (layer.kind) {
      case LayerKind::mamba: {
        KAPITSA_TRY(Mamba2Weights w, Mamba2Weights::load(checkpoint_, m, mamba_config_));
        layer.mamba = std::move(w);
        break;
      }
      case LayerKind::attention: {
        KAPITSA_TRY(AttentionWeights w, AttentionWeights::load(checkpoint_, m, attention_config_));
        layer.attention = std::move(w);
        break;
      }
      case LayerKind::mlp: {
        KAPITSA_TRY(Relu2MlpWeights w, Relu2MlpWeights::load(checkpoint_, m, H, c.intermediate_size));
        layer.mlp = w;
        break;
      }
      case LayerKind::moe: {
        KAPITSA_TRY(SigmoidMoeWeights w, SigmoidMoeWeights::load(checkpoint_, m, moe_config_));
        layer.moe = std::move(w);
        break;
      }
    }
    layers_.push_back(std::move(layer));
  }

  std::string experts;
  if (c.count(LayerKind::moe) > 0)
    experts = fmt::format(", {} experts top-{}{}", c.n_experts, c.top_k,
                          c.moe_latent_size > 0 ? fmt::format(" (latent {})", c.moe_latent_size) : std::string());
  info_ = ModelInfo{c.model_type, c.vocab_size, H, c.n_layers, c.max_position_embeddings, c.eos_token_ids,
                    fmt::format("{}: {} layers ({} Mamba-2, {} attention, {} MLP, {} MoE), hidden {}, vocab {}{}",
                                c.model_type, c.n_layers, c.count(LayerKind::mamba), c.count(LayerKind::attention),
                                c.count(LayerKind::mlp), c.count(LayerKind::moe), H, c.vocab_size, experts)};
  info_.weight_bytes_per_token = static_cast<int64_t>(decode_weight_bytes());
  return ok_status();
}

size_t NemotronHModel::decode_weight_bytes() const {
  auto bytes = [](const Tensor& t) { return t.empty() ? size_t{0} : t.nbytes(); };  // absent (non-latent) → 0
  auto relu2 = [](const Relu2MlpWeights& w) { return w.up.nbytes() + w.down.nbytes(); };
  size_t total = lm_head_.nbytes();
  for (const Layer& layer : layers_) {
    if (layer.mamba) total += layer.mamba->in_proj.nbytes() + layer.mamba->out_proj.nbytes();
    if (layer.attention) {
      const AttentionWeights& a = *layer.attention;
      total += a.q_proj.nbytes() + a.k_proj.nbytes() + a.v_proj.nbytes() + a.o_proj.nbytes();
    }
    if (layer.mlp) total += relu2(*layer.mlp);
    if (layer.moe) {
      const SigmoidMoeWeights& m = *layer.moe;
      total += m.router.nbytes() + bytes(m.fc1_latent) + bytes(m.fc2_latent);
      if (m.shared) total += relu2(*m.shared);
      total += static_cast<size_t>(config_.top_k) * relu2(m.experts.front());  // k experts per token
    }
  }
  return total;
}

KvLayout NemotronHModel::kv_layout() const {
  int64_t n = 0;
  for (const Layer& layer : layers_) n += layer.attention.has_value();
  return KvLayout{n, attention_config_.n_kv_heads, attention_config_.head_dim};
}

std::unique_ptr<SequenceState> NemotronHModel::new_state(int64_t max_tokens, std::shared_ptr<KvPagePool> pool) const {
  auto state = std::make_unique<NemotronHState>(max_tokens, pool ? std::move(pool) : default_kv_pool());
  int attention_layers = 0;
  for (const Layer& layer : layers_) {
    state->kv_layer.push_back(layer.attention ? attention_layers++ : -1);
    state->recurrent.push_back(layer.mamba ? std::optional<Mamba2State>(Mamba2State::allocate(mamba_config_))
                                       : std::nullopt);
  }
  KAPITSA_CHECK(attention_layers == state->pool().layout().n_layers, "KV pool made for {} attention layers, model has {}",
                state->pool().layout().n_layers, attention_layers);
  return state;
}

Status NemotronHModel::forward(std::span<const int32_t> ids, SequenceState& state, const Tensor& logits,
                               const Tensor& hidden) const {
  const BatchItem item{ids, &state, logits};
  return run(std::span<const BatchItem>(&item, 1), hidden);
}

Status NemotronHModel::forward_batch(std::span<const BatchItem> items) const { return run(items, Tensor()); }

Status NemotronHModel::run(std::span<const BatchItem> items, const Tensor& hidden) const {
  const int64_t H = config_.hidden_size, L = config_.n_layers;
  KAPITSA_TRY(BatchLayout batch, layout_batch(items, config_.vocab_size));
  KAPITSA_RETURN_IF_ERROR(prepare_kv_pages<NemotronHState>(items));
  const int64_t T = batch.total_tokens;
  KAPITSA_CHECK(hidden.empty() || (items.size() == 1 && hidden.shape() == Shape({L + 1, T, H})), "hidden {}",
                hidden.shape().str());
  std::vector<AttentionSegment> attention_segments(items.size());
  std::vector<Mamba2Segment> mamba_segments(items.size());

  Buffer x = Buffer::allocate(DType::f32, {T, H});  // residual stream
  Buffer normed = Buffer::allocate(DType::f32, {T, H});
  Buffer mixed = Buffer::allocate(DType::f32, {T, H});
  ops::embedding(embeddings_, batch.ids, x);
  if (!hidden.empty()) ops::copy(x, hidden.index(0));

  for (int64_t i = 0; i < L; ++i) {
    const Layer& layer = layers_[static_cast<size_t>(i)];
    ops::rms_norm(x, layer.norm, config_.norm_eps, 0.0f, normed);
    for (size_t j = 0; j < items.size(); ++j) {
      auto& state = static_cast<NemotronHState&>(*items[j].state);
      const int64_t n = static_cast<int64_t>(items[j].ids.size());
      if (layer.kind == LayerKind::mamba) mamba_segments[j] = {batch.begins[j], n, &*state.recurrent[static_cast<size_t>(i)]};
      if (layer.kind == LayerKind::attention)
        attention_segments[j] = {batch.begins[j], n, state.n_past(), state.kv(static_cast<size_t>(i))};
    }
    switch (layer.kind) {
      case LayerKind::mamba: mamba2_forward(mamba_config_, *layer.mamba, normed, mamba_segments, mixed); break;
      case LayerKind::attention:
        attention_forward(attention_config_, *layer.attention, normed, attention_segments, mixed);
        break;
      case LayerKind::mlp: relu2_mlp_forward(*layer.mlp, normed, mixed); break;
      case LayerKind::moe: sigmoid_moe_forward(moe_config_, *layer.moe, normed, mixed); break;
    }
    ops::add(x, mixed, x);
    if (!hidden.empty() && i + 1 < L) ops::copy(x, hidden.index(i + 1));
  }

  ops::rms_norm(x, norm_f_, config_.norm_eps, 0.0f, normed);
  if (!hidden.empty()) ops::copy(normed, hidden.index(L));
  write_batch_logits(items, batch, normed, lm_head_);
  for (const BatchItem& item : items)
    static_cast<NemotronHState&>(*item.state).advance(static_cast<int64_t>(item.ids.size()));
  return ok_status();
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

Expected<std::unique_ptr<Model>> load(const weights::HfConfig& config, weights::Checkpoint checkpoint) {
  KAPITSA_TRY(NemotronHConfig parsed, parse_config(config));
  auto model = std::make_unique<NemotronHModel>(std::move(parsed), std::move(checkpoint));
  KAPITSA_RETURN_IF_ERROR(model->load_weights());
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace kapitsa::models::nemotron_h
