// Causal grouped-query attention, written once for both families: Qwen3.5/Qwen3-Next (per-head
// q/k RMSNorm, partial NeoX RoPE, sigmoid output gate packed into q_proj as [q_h | gate_h] per head)
// and Nemotron-H (none of those). K/V are written into and read from a sequence's KV pages (a block
// table into a KvPagePool's per-layer arrays; models/kv_pages.h).
#pragma once

#include "base/status.h"
#include "models/layers/step.h"
#include "models/workspace.h"
#include "tensor/linear.h"
#include "tensor/tensor.h"
#include "models/weight_list.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kapitsa::models {

struct AttentionConfig {
  int64_t hidden_size = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  bool output_gate = false;  // q_proj emits [q_h | gate_h] per head; output *= sigmoid(gate)
  bool qk_norm = false;      // RMSNorm per head on q and k before RoPE
  float norm_eps = 1e-6f;
  float norm_weight_offset = 0;  // 1 for Qwen's zero-centred norms
  int rotary_dim = 0;            // 0: no RoPE (Nemotron)
  float rope_theta = 10000;
  bool rope_bf16_frequencies = false;  // see layers/rope.h
};

struct AttentionWeights {
  Linear q_proj;  // [Hq·D·(gate ? 2 : 1), H]
  Linear k_proj;  // [Hkv·D, H]
  Linear v_proj;  // [Hkv·D, H]
  Linear o_proj;  // [H, Hq·D]
  Buffer q_norm;  // [D] f32 (qk_norm only)
  Buffer k_norm;  // [D] f32
  std::vector<float> rope_inv_freq;  // [rotary_dim / 2]

  // Reads PREFIX{q,k,v,o}_proj.weight (+ q_norm/k_norm) and checks their shapes.
  static Expected<AttentionWeights> load(WeightLoader& loader, const std::string& prefix,
                                         const AttentionConfig& c);
};

// out = Attention(x) for every sequence of the step: projections and RoPE over all rows (weights read
// once per step), then per sequence its new K/V rows into its pages (which must already be allocated
// and unshared) and attention over its history. kv_layer: this layer's index among the pool's layers.
// x: [n_tokens, H];  out: [n_tokens, H].
void attention_forward(const AttentionConfig& c, const AttentionWeights& w, int64_t kv_layer, const StepBatch& step,
                       const Tensor& x, const Tensor& out, ForwardContext& ctx);

}  // namespace kapitsa::models
