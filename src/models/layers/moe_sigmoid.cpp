// Nemotron-H MoE: router → sigmoid top-k → (latent down-projection) → relu² experts → (latent
// up-projection) + shared expert.
#include "models/layers/moe_sigmoid.h"

#include "models/layers/moe.h"
#include "ops/ops.h"

namespace kapitsa::models {

Expected<SigmoidMoeWeights> SigmoidMoeWeights::load(WeightLoader& loader, const std::string& prefix,
                                                    const SigmoidMoeConfig& c) {
  SigmoidMoeWeights w;
  const int64_t E = c.n_experts, H = c.hidden_size, I = c.expert_dim, W = c.expert_width();
  KAPITSA_TRY(w.router, loader.linear(prefix + "gate.weight", {E, H}));
  const std::string bias_name = prefix + "gate.e_score_correction_bias";
  if (loader.contains(bias_name)) {
    KAPITSA_TRY(w.correction_bias, loader.get_f32(bias_name, {E}));
  } else {
    w.correction_bias = loader.zeros_f32({E});  // transformers' buffer starts at zero
  }
  WeightLoader::Share routed(loader, static_cast<double>(c.top_k) / static_cast<double>(E));  // k of E per token
  const std::string fused_up = prefix + "experts.up_proj", stacked = prefix + "switch_mlp.";
  if (loader.contains(stacked + "fc1.weight")) {  // mlx-lm: experts stacked, fc1 = up, fc2 = down
    KAPITSA_TRY(const Linear up, loader.linear(stacked + "fc1.weight", {E, I, W}));
    KAPITSA_TRY(const Linear down, loader.linear(stacked + "fc2.weight", {E, W, I}));
    for (int64_t e = 0; e < E; ++e) w.experts.push_back(Relu2MlpWeights{up.expert(e), down.expert(e)});
  } else if (loader.contains(fused_up)) {
    KAPITSA_TRY(const Linear up, loader.linear(fused_up, {E, I, W}));
    KAPITSA_TRY(const Linear down, loader.linear(prefix + "experts.down_proj", {E, W, I}));
    for (int64_t e = 0; e < E; ++e) w.experts.push_back(Relu2MlpWeights{up.expert(e), down.expert(e)});
  } else {
    for (int64_t e = 0; e < E; ++e) {
      KAPITSA_TRY(Relu2MlpWeights expert, Relu2MlpWeights::load(loader, fmt::format("{}experts.{}.", prefix, e), W, I));
      w.experts.push_back(expert);
    }
  }
  for (const Relu2MlpWeights& e : w.experts) w.ups.push_back(e.up), w.downs.push_back(e.down);
  if (loader.device() != Device::cpu) loader.limit_invariant_rows(kDeviceRoutedMaxTokens);  // route_on_device
  WeightLoader::Share every_token(loader, 1.0);
  if (c.shared_expert_dim > 0) {
    KAPITSA_TRY(Relu2MlpWeights shared, Relu2MlpWeights::load(loader, prefix + "shared_experts.", H, c.shared_expert_dim));
    w.shared = shared;
  }
  if (c.latent_dim > 0) {
    KAPITSA_TRY(w.fc1_latent, loader.linear(prefix + "fc1_latent_proj.weight", {c.latent_dim, H}));
    KAPITSA_TRY(w.fc2_latent, loader.linear(prefix + "fc2_latent_proj.weight", {H, c.latent_dim}));
  }
  return w;
}

void sigmoid_moe_forward(const SigmoidMoeConfig& c, const SigmoidMoeWeights& w, const Tensor& x, const Tensor& out,
                         ForwardContext& ctx) {
  Workspace& ws = ctx.workspace;
  Workspace::Scope scope(ws);
  const int64_t T = x.dim(0), E = c.n_experts, k = c.top_k, H = c.hidden_size;
  Tensor logits = ws.take(DType::f32, {T, E});
  ops::matmul(x, w.router, logits);  // f32 accumulation over the checkpoint's router weights
  Tensor ids = ws.take(DType::i32, {T, k});
  Tensor weights = ws.take(DType::f32, {T, k});
  ops::moe_route_sigmoid(logits, w.correction_bias, static_cast<int>(k), static_cast<int>(c.n_group),
                         static_cast<int>(c.topk_group), c.renormalize, c.routed_scaling_factor, ids, weights);
  auto expert = [&](int64_t e, const Tensor& xe, const Tensor& ye) {
    relu2_mlp_forward(w.experts[static_cast<size_t>(e)], xe, ye, ctx);
  };
  // The shared expert first: without a latent projection the routed experts' weighted sum adds it in
  // the same pass (moe_combine's addend).
  Tensor shared;
  if (w.shared) {
    shared = ws.take(DType::f32, {T, H});
    relu2_mlp_forward(*w.shared, x, shared, ctx);
  }
  // The routed experts on xr: [T, W] into yr: [T, W] (plus addend: [T, W] or empty), grouped on the host
  // or routed on the device.
  const bool on_device = route_on_device(ids, {w.ups, w.downs});
  auto routed_experts = [&](const Tensor& xr, const Tensor& addend, const Tensor& yr) {
    if (!on_device) {
      run_routed_experts(E, ids, weights, xr, yr, ws, expert);
      if (!addend.empty()) ops::add(yr, addend, yr);
      return;
    }
    Workspace::Scope pairs(ws);
    Tensor up = ws.take(DType::f32, {T * k, c.expert_dim});  // row t·k + j: token t through its j-th expert
    Tensor down = ws.take(DType::f32, {T * k, xr.dim(1)});
    ops::matmul_experts_relu_squared(xr, w.ups, ids, up);
    ops::matmul_experts(up, w.downs, ids.reshape({T * k, 1}), down);
    ops::moe_combine(down, weights, addend, yr);
  };
  if (c.latent_dim > 0) {
    Tensor latent = ws.take(DType::f32, {T, c.latent_dim});
    Tensor routed = ws.take(DType::f32, {T, c.latent_dim});
    ops::matmul(x, w.fc1_latent, latent);
    routed_experts(latent, Tensor(), routed);
    ops::matmul(routed, w.fc2_latent, out);
    if (!shared.empty()) ops::add(out, shared, out);
  } else {
    routed_experts(x, shared, out);
  }
}

}  // namespace kapitsa::models
