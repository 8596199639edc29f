// Nemotron-H MoE block (`E` layers), incl. LatentMoE: f32 sigmoid router with a selection-only
// correction bias and group-limited top-k, non-gated relu² experts, a relu² shared expert on the full
// width; with a latent size L the routed experts run on fc1_latent_proj(x) [T, L] and their weighted
// sum goes back through fc2_latent_proj. Experts load from one tensor per expert
// (experts.{e}.up_proj.weight, released checkpoints) or transformers' 3-D experts.up_proj [E, I, L|H]
// / experts.down_proj [E, L|H, I]; both end up as per-expert views, no copies.
#pragma once

#include "base/status.h"
#include "models/layers/mlp.h"
#include "tensor/linear.h"
#include "tensor/tensor.h"
#include "models/weight_list.h"

#include <optional>
#include <string>
#include <vector>

namespace kapitsa::models {

struct SigmoidMoeConfig {
  int64_t hidden_size = 0;
  int64_t n_experts = 0;
  int64_t top_k = 0;
  int64_t expert_dim = 0;         // I (moe_intermediate_size)
  int64_t shared_expert_dim = 0;  // 0: no shared expert
  int64_t latent_dim = 0;         // L (moe_latent_size); 0: experts on the hidden width
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool renormalize = true;        // norm_topk_prob
  float routed_scaling_factor = 1.0f;

  int64_t expert_width() const { return latent_dim > 0 ? latent_dim : hidden_size; }
};

struct SigmoidMoeWeights {
  Linear router;                          // [E, H]
  Buffer correction_bias;                 // [E] f32
  std::vector<Relu2MlpWeights> experts;   // E entries of up [I, L|H], down [L|H, I]
  std::optional<Relu2MlpWeights> shared;  // up [Is, H], down [H, Is]
  Linear fc1_latent;                      // [L, H] (latent only)
  Linear fc2_latent;                      // [H, L]
  std::vector<Linear> ups, downs;         // the experts' projections as lists (ops::matmul_experts)

  // PREFIX is the block, e.g. "backbone.layers.1.mixer.".
  static Expected<SigmoidMoeWeights> load(WeightLoader& loader, const std::string& prefix,
                                          const SigmoidMoeConfig& c);
};

// x: [T, H];  out: [T, H].
void sigmoid_moe_forward(const SigmoidMoeConfig& c, const SigmoidMoeWeights& w, const Tensor& x, const Tensor& out,
                         ForwardContext& ctx);

}  // namespace kapitsa::models
