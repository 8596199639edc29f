// Mamba-2 mixer (Nemotron-H `M` layers): in_proj split z | xBC | dt, causal conv1d + bias + SiLU over
// xBC, split x / B / C, the selective scan (chunked SSD for prompts, the recurrence for single tokens),
// gate-first group RMSNorm, out_proj. Recurrent state per sequence (a StateSlotPool slot): the conv window [K-1, conv_dim]
// and the f32 SSM state [H, P, N]. d_inner = H·P (not expand·hidden).
#pragma once

#include "base/status.h"
#include "models/layers/step.h"
#include "models/workspace.h"
#include "tensor/linear.h"
#include "tensor/tensor.h"
#include "models/weight_list.h"

#include <limits>
#include <span>
#include <string>

namespace kapitsa::models {

struct Mamba2Config {
  int64_t hidden_size = 0;
  int64_t n_heads = 0;   // H (mamba_num_heads)
  int64_t head_dim = 0;  // P (mamba_head_dim)
  int64_t n_groups = 1;  // G
  int64_t d_state = 0;   // N (ssm_state_size)
  int64_t d_conv = 4;    // K (conv_kernel)
  int64_t chunk_size = 128;
  bool conv_bias = true;
  bool proj_bias = false;  // in_proj / out_proj biases (use_bias / mamba_proj_bias)
  float norm_eps = 1e-5f;
  float dt_min = 0;  // Δ clamp; [0, inf) is none
  float dt_max = std::numeric_limits<float>::infinity();

  int64_t d_inner() const { return n_heads * head_dim; }
  int64_t conv_dim() const { return d_inner() + 2 * n_groups * d_state; }
  int64_t in_proj_dim() const { return d_inner() + conv_dim() + n_heads; }
  Shape conv_window_shape() const { return {d_conv - 1, conv_dim()}; }
  Shape state_shape() const { return {n_heads, head_dim, d_state}; }
};

struct Mamba2Weights {
  Linear in_proj;       // [d_inner + conv_dim + H, hidden]
  Buffer in_proj_bias;  // [d_inner + conv_dim + H] f32 (proj_bias only)
  Buffer conv;          // [conv_dim, K] f32 (the checkpoint's [conv_dim, 1, K])
  Buffer conv_bias;     // [conv_dim] f32 (conv_bias only)
  Buffer A_log;         // [H] f32
  Buffer D;             // [H] f32
  Buffer dt_bias;       // [H] f32
  Buffer norm;          // [d_inner] f32
  Linear out_proj;      // [hidden, d_inner]
  Buffer out_proj_bias; // [hidden] f32 (proj_bias only)

  static Expected<Mamba2Weights> load(WeightLoader& loader, const std::string& prefix,
                                      const Mamba2Config& c);
};

// Several sequences at once: projections and norm over all rows (weights read once per step), conv
// and scan per sequence on its state slot (and checkpoint slots). layer: this layer's index among the
// slot pool's layers.  x: [n_tokens, hidden];  out: [n_tokens, hidden].
void mamba2_forward(const Mamba2Config& c, const Mamba2Weights& w, int64_t layer, const StepBatch& step,
                    const Tensor& x, const Tensor& out, ForwardContext& ctx);

}  // namespace kapitsa::models
