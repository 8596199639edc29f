// Dense feed-forward blocks.
#include "models/layers/mlp.h"

#include "ops/ops.h"

namespace kapitsa::models {

Expected<SwiGluWeights> SwiGluWeights::load(WeightLoader& loader, const std::string& prefix, int64_t hidden,
                                            int64_t intermediate) {
  SwiGluWeights w;
  KAPITSA_TRY(w.gate, loader.linear(prefix + "gate_proj.weight", {intermediate, hidden}));
  KAPITSA_TRY(w.up, loader.linear(prefix + "up_proj.weight", {intermediate, hidden}));
  KAPITSA_TRY(w.down, loader.linear(prefix + "down_proj.weight", {hidden, intermediate}));
  return w;
}

void swiglu_forward(const SwiGluWeights& w, const Tensor& x, const Tensor& out, ForwardContext& ctx) {
  Workspace& ws = ctx.workspace;
  Workspace::Scope scope(ws);
  const int64_t T = x.dim(0), I = w.intermediate();
  Tensor gate = ws.take(DType::f32, {T, I});
  Tensor up = ws.take(DType::f32, {T, I});
  ops::matmul_swiglu(x, w.gate, w.up, up, gate);  // gate ← silu(x·gateᵀ) ⊙ (x·upᵀ); up is scratch
  ops::matmul(gate, w.down, out);
}

Expected<Relu2MlpWeights> Relu2MlpWeights::load(WeightLoader& loader, const std::string& prefix,
                                                int64_t hidden, int64_t intermediate) {
  Relu2MlpWeights w;
  KAPITSA_TRY(w.up, loader.linear(prefix + "up_proj.weight", {intermediate, hidden}));
  KAPITSA_TRY(w.down, loader.linear(prefix + "down_proj.weight", {hidden, intermediate}));
  return w;
}

void relu2_mlp_forward(const Relu2MlpWeights& w, const Tensor& x, const Tensor& out, ForwardContext& ctx) {
  Workspace& ws = ctx.workspace;
  Workspace::Scope scope(ws);
  Tensor up = ws.take(DType::f32, {x.dim(0), w.intermediate()});
  ops::matmul_relu_squared(x, w.up, up);
  ops::matmul(up, w.down, out);
}

}  // namespace kapitsa::models
