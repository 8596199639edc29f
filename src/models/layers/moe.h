// Sparse mixture-of-experts blocks. SoftmaxMoe is Qwen's: softmax router, top-k, renormalised
// weights, SwiGLU experts, plus a shared expert scaled by sigmoid(shared_expert_gate(x)).
// Expert weights load from either layout real checkpoints use: one tensor per expert
// (experts.{e}.gate_proj.weight …) or the fused 3-D layout (experts.gate_up_proj [E, 2I, H],
// experts.down_proj [E, H, I], no ".weight"); both end up as per-expert views, no copies.
// Routing on a device: for decode-sized batches the tokens' experts run with the router's choices left
// on the device (ops::matmul_experts / moe_combine), so a step waits for the GPU once, not per MoE layer;
// larger batches (prefill) group tokens by expert on the host (run_routed_experts).
#pragma once

#include "base/status.h"
#include "models/layers/mlp.h"
#include "tensor/linear.h"
#include "tensor/tensor.h"
#include "models/weight_list.h"

#include <initializer_list>
#include <optional>
#include <span>
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
  std::vector<Linear> gates, ups, downs;  // the experts' projections as lists (ops::matmul_experts)

  // PREFIX is the block, e.g. "model.layers.0.mlp.".
  static Expected<SoftmaxMoeWeights> load(WeightLoader& loader, const std::string& prefix,
                                          const SoftmaxMoeConfig& c);
};

// x: [T, H];  out: [T, H].
void softmax_moe_forward(const SoftmaxMoeConfig& c, const SoftmaxMoeWeights& w, const Tensor& x, const Tensor& out,
                         ForwardContext& ctx);

// Decode batches of at most this many tokens route on the device (each (token, choice) reads its
// expert's weights; host grouping reads each chosen expert once but waits for the router).
constexpr int64_t kDeviceRoutedMaxTokens = 16;
// Whether the routed experts of T = expert_ids.dim(0) tokens run through ops::matmul_experts: the ids
// are on a device, T ≤ kDeviceRoutedMaxTokens, and every list holds dense or MLX affine weights (other
// quantized experts take the host-grouped path).
bool route_on_device(const Tensor& expert_ids, std::initializer_list<std::span<const Linear>> experts);

// Shared by every routed-MoE flavour: runs each token's chosen experts and sums their outputs,
// weighted, into out (which it zeroes first). expert(e, xe, ye) computes expert e on the rows
// xe: [n, in] into ye: [n, out].   expert_ids, expert_weights: [T, k];  x: [T, in];  out: [T, out].
template <typename ExpertFn>
void run_routed_experts(int64_t n_experts, const Tensor& expert_ids, const Tensor& expert_weights, const Tensor& x,
                        const Tensor& out, Workspace& ws, ExpertFn&& expert);

}  // namespace kapitsa::models

#include "models/layers/moe_routed.inl"
