// Gated DeltaNet mixer (Qwen3.5 / Qwen3-Next linear attention), written once for both projection
// layouts: Qwen3.5's flat in_proj_qkv / in_proj_z / in_proj_b / in_proj_a and Qwen3-Next's packed
// in_proj_qkvz / in_proj_ba grouped per key head (un-grouped on the activations, not the weights).
// Recurrent state per sequence (a StateSlotPool slot): conv window [K-1, conv_dim] and the f32 delta-rule
// state [Hv, Dk, Dv].
#pragma once

#include "base/status.h"
#include "models/layers/step.h"
#include "models/workspace.h"
#include "tensor/linear.h"
#include "tensor/tensor.h"
#include "models/weight_list.h"

#include <span>
#include <string>

namespace kapitsa::models {

struct GdnConfig {
  int64_t hidden_size = 0;
  int64_t n_k_heads = 0;   // Hk
  int64_t n_v_heads = 0;   // Hv (a multiple of Hk)
  int64_t k_head_dim = 0;  // Dk
  int64_t v_head_dim = 0;  // Dv
  int64_t conv_kernel = 4;
  float norm_eps = 1e-6f;
  bool packed_projections = false;  // Qwen3-Next in_proj_qkvz / in_proj_ba
  // out_proj's input columns in tiled V-head order (head k·r + j at j·Hk + k, r = Hv / Hk), as llama.cpp's
  // converter writes a Qwen3.5 GGUF: its blocks may span two heads, so the weight stays as stored and
  // the layer permutes its input instead.
  bool out_proj_tiled = false;

  int64_t key_dim() const { return n_k_heads * k_head_dim; }
  int64_t value_dim() const { return n_v_heads * v_head_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  Shape conv_window_shape() const { return {conv_kernel - 1, conv_dim()}; }
  Shape state_shape() const { return {n_v_heads, k_head_dim, v_head_dim}; }
};

struct GdnWeights {
  // flat (Qwen3.5)
  Linear in_proj_qkv;   // [2·key_dim + value_dim, H]
  Linear in_proj_z;     // [value_dim, H]
  Linear in_proj_b;     // [Hv, H]
  Linear in_proj_a;     // [Hv, H]
  // packed (Qwen3-Next), grouped per key head
  Linear in_proj_qkvz;  // [Hk · (2·Dk + 2·r·Dv), H]
  Linear in_proj_ba;    // [Hk · 2r, H]
  Buffer conv;          // [conv_dim, K] f32 (the checkpoint's [conv_dim, 1, K])
  Buffer A_log;         // [Hv] f32
  Buffer dt_bias;       // [Hv] f32
  Buffer norm;          // [Dv] f32
  Linear out_proj;      // [H, value_dim]

  static Expected<GdnWeights> load(WeightLoader& loader, const std::string& prefix, const GdnConfig& c);
};

// Several sequences at once: projections and the output over all rows (weights read once per step),
// conv and the delta rule per sequence on its state slot (and checkpoint slots). layer: this layer's
// index among the slot pool's layers.  x: [n_tokens, H];  out: [n_tokens, H].
void gdn_forward(const GdnConfig& c, const GdnWeights& w, int64_t layer, const StepBatch& step, const Tensor& x,
                 const Tensor& out, ForwardContext& ctx);

}  // namespace kapitsa::models
