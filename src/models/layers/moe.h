// Sparse mixture-of-experts blocks. SoftmaxMoe is Qwen's: softmax router, top-k, renormalised
// weights, SwiGLU experts, plus a shared expert scaled by sigmoid(shared_expert_gate(x)).
// Expert weights load from either layout real checkpoints use: one tensor per expert
// (experts.{e}.gate_proj.weight …) or the fused 3-D layout (experts.gate_up_proj [E, 2I, H],
// experts.down_proj [E, H, I], no ".weight"); both end up as per-expert views, no copies.
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

struct SoftmaxMoeConfig {
  int64_t hidden_size = 0;
  int64_t n_experts = 0;
  int64_t top_k = 0;
  int64_t expert_dim = 0;         // I
  int64_t shared_expert_dim = 0;  // 0: no shared expert
  bool renormalize = true;
};

struct SoftmaxMoeWeights {
  Linear router;                         // [E, H]
  std::vector<SwiGluWeights> experts;    // E entries of gate/up [I, H], down [H, I]
  std::optional<SwiGluWeights> shared;   // shared expert
  Linear shared_gate;                    // [1, H]

  // PREFIX is the block, e.g. "model.layers.0.mlp.".
  static Expected<SoftmaxMoeWeights> load(WeightLoader& loader, const std::string& prefix,
                                          const SoftmaxMoeConfig& c);
};

// x: [T, H];  out: [T, H].
void softmax_moe_forward(const SoftmaxMoeConfig& c, const SoftmaxMoeWeights& w, const Tensor& x, const Tensor& out,
                         ForwardContext& ctx);

// Shared by every routed-MoE flavour: runs each token's chosen experts and sums their outputs,
// weighted, into out (which it zeroes first). expert(e, xe, ye) computes expert e on the rows
// xe: [n, in] into ye: [n, out].   expert_ids, expert_weights: [T, k];  x: [T, in];  out: [T, out].
template <typename ExpertFn>
void run_routed_experts(int64_t n_experts, const Tensor& expert_ids, const Tensor& expert_weights, const Tensor& x,
                        const Tensor& out, Workspace& ws, ExpertFn&& expert);

}  // namespace kapitsa::models

#include "models/layers/moe_routed.inl"
