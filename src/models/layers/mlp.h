// Dense feed-forward blocks written once: SwiGLU (Qwen: down(silu(gate(x)) · up(x))) and the
// non-gated relu² MLP (Nemotron: down(relu(up(x))²)).
#pragma once

#include "base/status.h"
#include "models/workspace.h"
#include "tensor/linear.h"
#include "tensor/tensor.h"
#include "models/weight_list.h"

#include <string>

namespace kapitsa::models {

struct SwiGluWeights {
  Linear gate;  // [I, H]
  Linear up;    // [I, H]
  Linear down;  // [H, I]
  int64_t intermediate() const { return gate.rows(); }

  // Reads PREFIX{gate,up,down}_proj.weight.
  static Expected<SwiGluWeights> load(WeightLoader& loader, const std::string& prefix, int64_t hidden,
                                      int64_t intermediate);
};

// x: [T, H];  out: [T, H].
void swiglu_forward(const SwiGluWeights& w, const Tensor& x, const Tensor& out, ForwardContext& ctx);

// Non-gated relu² MLP (Nemotron-H `-` layers, shared and routed experts).
struct Relu2MlpWeights {
  Linear up;    // [I, H]
  Linear down;  // [H, I]
  int64_t intermediate() const { return up.rows(); }

  // Reads PREFIX{up,down}_proj.weight.
  static Expected<Relu2MlpWeights> load(WeightLoader& loader, const std::string& prefix, int64_t hidden,
                                        int64_t intermediate);
};

// x: [T, H];  out: [T, H].
void relu2_mlp_forward(const Relu2MlpWeights& w, const Tensor& x, const Tensor& out, ForwardContext& ctx);

}  // namespace kapitsa::models
