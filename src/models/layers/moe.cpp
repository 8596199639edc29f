// Softmax-routed MoE with a sigmoid-gated shared expert (Qwen3-Next / Qwen3.5-MoE).
#include "models/layers/moe.h"

#include "ops/ops.h"

namespace kapitsa::models {

bool route_on_device(const Tensor& expert_ids, std::initializer_list<std::span<const Linear>> experts) {
  if (expert_ids.device() == Device::cpu || expert_ids.dim(0) > kDeviceRoutedMaxTokens) return false;
  for (std::span<const Linear> list : experts)
    for (const Linear& l : list)
      if (!l.is_dense() && l.format() != WeightFormat::affine) return false;
  return true;
}

Expected<SoftmaxMoeWeights> SoftmaxMoeWeights::load(WeightLoader& loader, const std::string& prefix,
                                                    const SoftmaxMoeConfig& c) {
  SoftmaxMoeWeights w;
  const int64_t E = c.n_experts, H = c.hidden_size, I = c.expert_dim;
  KAPITSA_TRY(w.router, loader.linear(prefix + "gate.weight", {E, H}));
  WeightLoader::Share routed(loader, static_cast<double>(c.top_k) / static_cast<double>(E));  // k of E per token
  const std::string fused = prefix + "experts.gate_up_proj", stacked = prefix + "switch_mlp.";
  if (loader.contains(stacked + "gate_proj.weight")) {  // mlx-lm: experts stacked, gate and up apart
    KAPITSA_TRY(const Linear gate, loader.linear(stacked + "gate_proj.weight", {E, I, H}));
    KAPITSA_TRY(const Linear up, loader.linear(stacked + "up_proj.weight", {E, I, H}));
    KAPITSA_TRY(const Linear down, loader.linear(stacked + "down_proj.weight", {E, H, I}));
    for (int64_t e = 0; e < E; ++e) w.experts.push_back(SwiGluWeights{gate.expert(e), up.expert(e), down.expert(e)});
  } else if (loader.contains(fused)) {
    KAPITSA_TRY(const Linear gate_up, loader.linear(fused, {E, 2 * I, H}));
    KAPITSA_TRY(const Linear down, loader.linear(prefix + "experts.down_proj", {E, H, I}));
    for (int64_t e = 0; e < E; ++e) {
      const Linear gu = gate_up.expert(e);  // [2I, H]: gate rows then up rows, no transpose
      w.experts.push_back(SwiGluWeights{gu.row_range(0, I), gu.row_range(I, 2 * I), down.expert(e)});
    }
  } else {
    for (int64_t e = 0; e < E; ++e) {
      KAPITSA_TRY(SwiGluWeights expert, SwiGluWeights::load(loader, fmt::format("{}experts.{}.", prefix, e), H, I));
      w.experts.push_back(expert);
    }
  }
  for (const SwiGluWeights& e : w.experts) w.gates.push_back(e.gate), w.ups.push_back(e.up), w.downs.push_back(e.down);
  if (loader.device() != Device::cpu) loader.limit_invariant_rows(kDeviceRoutedMaxTokens);  // route_on_device
  WeightLoader::Share every_token(loader, 1.0);
  if (c.shared_expert_dim > 0) {
    KAPITSA_TRY(SwiGluWeights shared, SwiGluWeights::load(loader, prefix + "shared_expert.", H, c.shared_expert_dim));
    w.shared = shared;
    KAPITSA_TRY(w.shared_gate, loader.linear(prefix + "shared_expert_gate.weight", {1, H}));
  }
  return w;
}

void softmax_moe_forward(const SoftmaxMoeConfig& c, const SoftmaxMoeWeights& w, const Tensor& x, const Tensor& out,
                         ForwardContext& ctx) {
  Workspace& ws = ctx.workspace;
  Workspace::Scope scope(ws);
  const int64_t T = x.dim(0), E = c.n_experts, k = c.top_k, H = c.hidden_size;
  Tensor logits = ws.take(DType::f32, {T, E});
  ops::matmul(x, w.router, logits);
  Tensor ids = ws.take(DType::i32, {T, k});
  Tensor weights = ws.take(DType::f32, {T, k});
  ops::moe_route_softmax(logits, static_cast<int>(k), c.renormalize, ids, weights);
  // The shared expert first, so that the routed experts' weighted sum adds it in the same pass.
  Tensor shared;
  if (w.shared) {
    shared = ws.take(DType::f32, {T, H});
    swiglu_forward(*w.shared, x, shared, ctx);
    Tensor gate = ws.take(DType::f32, {T, 1});
    ops::matmul(x, w.shared_gate, gate);
    ops::mul_sigmoid(shared, gate, shared);
  }
  if (route_on_device(ids, {w.gates, w.ups, w.downs})) {
    const int64_t I = c.expert_dim;
    Tensor gate = ws.take(DType::f32, {T * k, I});  // row t·k + j: token t through its j-th expert
    Tensor up = ws.take(DType::f32, {T * k, I});
    Tensor routed = ws.take(DType::f32, {T * k, H});
    ops::matmul_experts(x, w.gates, ids, gate);
    ops::matmul_experts(x, w.ups, ids, up);
    ops::silu_mul(gate, up, gate);
    ops::matmul_experts(gate, w.downs, ids.reshape({T * k, 1}), routed);
    ops::moe_combine(routed, weights, shared, out);
  } else {
    run_routed_experts(E, ids, weights, x, out, ws, [&](int64_t e, const Tensor& xe, const Tensor& ye) {
      swiglu_forward(w.experts[static_cast<size_t>(e)], xe, ye, ctx);
    });
    if (!shared.empty()) ops::add(out, shared, out);
  }
}

}  // namespace kapitsa::models
