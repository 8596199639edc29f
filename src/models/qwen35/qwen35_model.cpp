// Qwen3.5 family: weights by name, per-sequence state and the forward pass.
#include "models/qwen35/qwen35_model.h"

#include "base/log.h"
#include "models/batch.h"
#include "models/hybrid_state.h"
#include "models/layers/attention.h"
#include "models/layers/gated_deltanet.h"
#include "models/layers/mlp.h"
#include "models/layers/moe.h"
#include "models/qwen35/config.h"
#include "ops/ops.h"
#include "weights/safetensors.h"

#include <cstring>
#include <optional>

namespace kapitsa::models::qwen35 {
namespace {

struct Layer {
  LayerKind kind;
  Buffer input_norm;  // [H] f32
  Buffer post_norm;   // [H] f32
  std::optional<GdnWeights> gdn;
  std::optional<AttentionWeights> attention;
  std::optional<SwiGluWeights> mlp;
  std::optional<SoftmaxMoeWeights> moe;
};

using Qwen35State = HybridState<GdnState>;

class Qwen35Model final : public Model {
 public:
  Qwen35Model(Qwen35Config config, weights::Checkpoint checkpoint)
      : config_(std::move(config)), checkpoint_(std::move(checkpoint)) {}

  Status load_weights();
  size_t decode_weight_bytes() const;
  // forward / forward_batch: hidden only for a single item.
  Status run(std::span<const BatchItem> items, const Tensor& hidden) const;
  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_state(int64_t max_tokens, std::shared_ptr<KvPagePool> pool) const override;
  KvLayout kv_layout() const override;
  Status forward(std::span<const int32_t> ids, SequenceState& state, const Tensor& logits,
                 const Tensor& hidden) const override;
  Status forward_batch(std::span<const BatchItem> items) const override;

 private:
  Qwen35Config config_;
  weights::Checkpoint checkpoint_;
  ModelInfo info_;
  AttentionConfig attention_config_;
  GdnConfig gdn_config_;
  SoftmaxMoeConfig moe_config_;
  Tensor embed_tokens_;  // [V, H]
  Tensor lm_head_;       // [V, H] (the embedding when tied)
  Buffer final_norm_;    // [H] f32
  std::vector<Layer> layers_;
};

Status Qwen35Model::load_weights() {
  const Qwen35Config& c = config_;
  const int64_t H = c.hidden_size;
  attention_config_ = AttentionConfig{H,          c.n_heads,       c.n_kv_heads, c.head_dim,
                                      c.attn_output_gate, /*qk_norm=*/true, c.rms_norm_eps,
                                      /*norm_weight_offset=*/1.0f, c.rotary_dim(), c.rope_theta,
                                      c.rope_bf16_frequencies};
  gdn_config_ = GdnConfig{H, c.linear_k_heads, c.linear_v_heads, c.linear_k_head_dim, c.linear_v_head_dim,
                          c.conv_kernel, c.rms_norm_eps, c.packed_gdn_projections};
  moe_config_ = SoftmaxMoeConfig{H, c.n_experts, c.top_k, c.moe_intermediate_size, c.shared_expert_intermediate_size,
                                 c.norm_topk_prob};

  const std::string prefix =
      checkpoint_.contains("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
  KAPITSA_TRY(embed_tokens_, checkpoint_.get(prefix + "embed_tokens.weight", {c.vocab_size, H}));
  if (c.tie_word_embeddings && !checkpoint_.contains("lm_head.weight")) {
    lm_head_ = embed_tokens_;
  } else {
    KAPITSA_TRY(lm_head_, checkpoint_.get("lm_head.weight", {c.vocab_size, H}));
  }
  KAPITSA_TRY(final_norm_, checkpoint_.get_f32(prefix + "norm.weight", {H}));

  for (int64_t i = 0; i < c.n_layers; ++i) {
    log::progress("loading layers", static_cast<size_t>(i + 1), static_cast<size_t>(c.n_layers));
    const std::string p = fmt::format("{}layers.{}.", prefix, i);
    Layer layer;
    layer.kind = c.layer_kinds[static_cast<size_t>(i)];
    KAPITSA_TRY(layer.input_norm, checkpoint_.get_f32(p + "input_layernorm.weight", {H}));
    KAPITSA_TRY(layer.post_norm, checkpoint_.get_f32(p + "post_attention_layernorm.weight", {H}));
    if (layer.kind == LayerKind::linear_attention) {
      KAPITSA_TRY(GdnWeights gdn, GdnWeights::load(checkpoint_, p + "linear_attn.", gdn_config_));
      layer.gdn = std::move(gdn);
    } else {
      KAPITSA_TRY(AttentionWeights attention, AttentionWeights::load(checkpoint_, p + "self_attn.", attention_config_));
      layer.attention = std::move(attention);
    }
    if (c.layer_is_moe[static_cast<size_t>(i)]) {
      KAPITSA_TRY(SoftmaxMoeWeights moe, SoftmaxMoeWeights::load(checkpoint_, p + "mlp.", moe_config_));
      layer.moe = std::move(moe);
    } else {
      KAPITSA_TRY(SwiGluWeights mlp, SwiGluWeights::load(checkpoint_, p + "mlp.", H, c.intermediate_size));
      layer.mlp = mlp;
    }
    layers_.push_back(std::move(layer));
  }

  int64_t n_attention = 0, n_moe = 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    n_attention += layers_[i].kind == LayerKind::full_attention;
    n_moe += c.layer_is_moe[i];
  }
  info_ = ModelInfo{c.model_type, c.vocab_size, H, c.n_layers, c.max_position_embeddings, c.eos_token_ids,
                    fmt::format("{}: {} layers ({} DeltaNet, {} attention), hidden {}, vocab {}{}", c.model_type,
                                c.n_layers, c.n_layers - n_attention, n_attention, H, c.vocab_size,
                                n_moe ? fmt::format(", {} experts top-{} on {} layers", c.n_experts, c.top_k, n_moe)
                                      : std::string())};
  info_.weight_bytes_per_token = static_cast<int64_t>(decode_weight_bytes());
  return ok_status();
}

size_t Qwen35Model::decode_weight_bytes() const {
  auto swiglu = [](const SwiGluWeights& w) { return w.gate.nbytes() + w.up.nbytes() + w.down.nbytes(); };
  size_t total = lm_head_.nbytes();
  for (const Layer& layer : layers_) {
    if (layer.gdn) {
      const GdnWeights& g = *layer.gdn;
      total += g.in_proj_qkv.nbytes() + g.in_proj_z.nbytes() + g.in_proj_a.nbytes() + g.in_proj_b.nbytes() +
               g.in_proj_qkvz.nbytes() + g.in_proj_ba.nbytes() + g.out_proj.nbytes();
    }
    if (layer.attention) {
      const AttentionWeights& a = *layer.attention;
      total += a.q_proj.nbytes() + a.k_proj.nbytes() + a.v_proj.nbytes() + a.o_proj.nbytes();
    }
    if (layer.mlp) total += swiglu(*layer.mlp);
    if (layer.moe) {
      total += layer.moe->router.nbytes() + layer.moe->shared_gate.nbytes();
      if (layer.moe->shared) total += swiglu(*layer.moe->shared);
      total += static_cast<size_t>(config_.top_k) * swiglu(layer.moe->experts.front());  // k experts per token
    }
  }
  return total;
}

KvLayout Qwen35Model::kv_layout() const {
  int64_t n = 0;
  for (const Layer& layer : layers_) n += layer.kind == LayerKind::full_attention;
  return KvLayout{n, attention_config_.n_kv_heads, attention_config_.head_dim};
}

std::unique_ptr<SequenceState> Qwen35Model::new_state(int64_t max_tokens, std::shared_ptr<KvPagePool> pool) const {
  auto state = std::make_unique<Qwen35State>(max_tokens, pool ? std::move(pool) : default_kv_pool());
  int attention_layers = 0;
  for (const Layer& layer : layers_) {
    if (layer.kind == LayerKind::full_attention) {
      state->kv_layer.push_back(attention_layers++);
      state->recurrent.push_back(std::nullopt);
    } else {
      state->kv_layer.push_back(-1);
      state->recurrent.push_back(GdnState::allocate(gdn_config_));
    }
  }
  KAPITSA_CHECK(attention_layers == state->pool().layout().n_layers, "KV pool made for {} attention layers, model has {}",
                state->pool().layout().n_layers, attention_layers);
  return state;
}

Status Qwen35Model::forward(std::span<const int32_t> ids, SequenceState& state, const Tensor& logits,
                            const Tensor& hidden) const {
  const BatchItem item{ids, &state, logits};
  return run(std::span<const BatchItem>(&item, 1), hidden);
}

Status Qwen35Model::forward_batch(std::span<const BatchItem> items) const { return run(items, Tensor()); }

Status Qwen35Model::run(std::span<const BatchItem> items, const Tensor& hidden) const {
  const int64_t H = config_.hidden_size, L = config_.n_layers;
  KAPITSA_TRY(BatchLayout batch, layout_batch(items, config_.vocab_size));
  KAPITSA_RETURN_IF_ERROR(prepare_kv_pages<Qwen35State>(items));
  const int64_t T = batch.total_tokens;
  KAPITSA_CHECK(hidden.empty() || (items.size() == 1 && hidden.shape() == Shape({L + 1, T, H})), "hidden {}",
                hidden.shape().str());
  const std::vector<int64_t>& begins = batch.begins;
  std::vector<AttentionSegment> attention_segments(items.size());
  std::vector<GdnSegment> gdn_segments(items.size());

  Buffer x = Buffer::allocate(DType::f32, {T, H});  // residual stream
  Buffer normed = Buffer::allocate(DType::f32, {T, H});
  Buffer mixed = Buffer::allocate(DType::f32, {T, H});
  ops::embedding(embed_tokens_, batch.ids, x);
  if (!hidden.empty()) ops::copy(x, hidden.index(0));

  for (int64_t i = 0; i < L; ++i) {
    const Layer& layer = layers_[static_cast<size_t>(i)];
    ops::rms_norm(x, layer.input_norm, config_.rms_norm_eps, 1.0f, normed);
    for (size_t j = 0; j < items.size(); ++j) {
      auto& state = static_cast<Qwen35State&>(*items[j].state);
      const int64_t n = static_cast<int64_t>(items[j].ids.size());
      if (layer.gdn) gdn_segments[j] = GdnSegment{begins[j], n, &*state.recurrent[static_cast<size_t>(i)]};
      else attention_segments[j] = AttentionSegment{begins[j], n, state.n_past(), state.kv(static_cast<size_t>(i))};
    }
    if (layer.gdn) {
      gdn_forward(gdn_config_, *layer.gdn, normed, gdn_segments, mixed);
    } else {
      attention_forward(attention_config_, *layer.attention, normed, attention_segments, mixed);
    }
    ops::add(x, mixed, x);
    ops::rms_norm(x, layer.post_norm, config_.rms_norm_eps, 1.0f, normed);
    if (layer.moe) {
      softmax_moe_forward(moe_config_, *layer.moe, normed, mixed);
    } else {
      swiglu_forward(*layer.mlp, normed, mixed);
    }
    ops::add(x, mixed, x);
    if (!hidden.empty() && i + 1 < L) ops::copy(x, hidden.index(i + 1));
  }
  ops::rms_norm(x, final_norm_, config_.rms_norm_eps, 1.0f, normed);
  if (!hidden.empty()) ops::copy(normed, hidden.index(L));

  write_batch_logits(items, batch, normed, lm_head_);
  for (const BatchItem& item : items) static_cast<Qwen35State&>(*item.state).advance(static_cast<int64_t>(item.ids.size()));
  return ok_status();
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
  KAPITSA_RETURN_IF_ERROR(model->load_weights());
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace kapitsa::models::qwen35
