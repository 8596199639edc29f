// Attention layer forward: projections straight into the KV cache, norms, RoPE, the attention op,
// output gate, output projection. A gated layer with q/k norms and RoPE (Qwen3.5) runs the steps from
// the projections to the KV stores as one op (attention_prep_varlen).
#include "models/layers/attention.h"

#include "models/layers/rope.h"
#include "ops/ops.h"

#include <cmath>

namespace kapitsa::models {

Expected<AttentionWeights> AttentionWeights::load(WeightLoader& loader, const std::string& prefix,
                                                  const AttentionConfig& c) {
  AttentionWeights w;
  const int64_t q_rows = c.n_heads * c.head_dim * (c.output_gate ? 2 : 1);
  KAPITSA_TRY(w.q_proj, loader.linear(prefix + "q_proj.weight", {q_rows, c.hidden_size}));
  KAPITSA_TRY(w.k_proj, loader.linear(prefix + "k_proj.weight", {c.n_kv_heads * c.head_dim, c.hidden_size}));
  KAPITSA_TRY(w.v_proj, loader.linear(prefix + "v_proj.weight", {c.n_kv_heads * c.head_dim, c.hidden_size}));
  KAPITSA_TRY(w.o_proj, loader.linear(prefix + "o_proj.weight", {c.hidden_size, c.n_heads * c.head_dim}));
  if (c.qk_norm) {
    KAPITSA_TRY(w.q_norm, loader.get_f32(prefix + "q_norm.weight", {c.head_dim}));
    KAPITSA_TRY(w.k_norm, loader.get_f32(prefix + "k_norm.weight", {c.head_dim}));
  }
  if (c.rotary_dim > 0) w.rope_inv_freq = models::rope_inv_freq(c.rotary_dim, c.rope_theta, c.rope_bf16_frequencies);
  return w;
}

namespace {
// The separate ops attention_prep_varlen fuses, for layers without all of its parts.
void prepare_separately(const AttentionConfig& c, const AttentionWeights& w, const StepBatch& step, const Tensor& qg,
                        const Tensor& k, const Tensor& v, const Tensor& k_pages, const Tensor& v_pages, const Tensor& q,
                        Tensor& gate, Workspace& ws) {
  const int64_t T = q.dim(0), Hq = q.dim(1), Hkv = k.dim(1), D = q.dim(2);
  if (c.output_gate) {
    gate = ws.take(DType::f32, {T, Hq, D});
    const Tensor parts[] = {q.reshape({T * Hq, D}), gate.reshape({T * Hq, D})};
    ops::split_columns(qg.reshape({T * Hq, 2 * D}), parts);
  }

  if (c.qk_norm) {
    ops::rms_norm(q.reshape({T * Hq, D}), w.q_norm, c.norm_eps, c.norm_weight_offset,
                  q.reshape({T * Hq, D}));
    ops::rms_norm(k.reshape({T * Hkv, D}), w.k_norm, c.norm_eps, c.norm_weight_offset,
                  k.reshape({T * Hkv, D}));
  }
  if (c.rotary_dim > 0) {
    ops::rope_neox(q, step.positions, w.rope_inv_freq);
    ops::rope_neox(k, step.positions, w.rope_inv_freq);
  }

  ops::write_paged_rows_varlen(k, k_pages, step.seqs);
  ops::write_paged_rows_varlen(v, v_pages, step.seqs);
}
}  // namespace

void attention_forward(const AttentionConfig& c, const AttentionWeights& w, int64_t kv_layer, const StepBatch& step,
                       const Tensor& x, const Tensor& out, ForwardContext& ctx) {
  Workspace& ws = ctx.workspace;
  Workspace::Scope scope(ws);
  const int64_t T = x.dim(0), Hq = c.n_heads, Hkv = c.n_kv_heads, D = c.head_dim;

  // q (and the gate) — q_proj rows are laid out per head as [q_h | gate_h] when gated — k and v: the
  // three projections of x in one matmul_many.
  Tensor q = ws.take(DType::f32, {T, Hq, D});
  Tensor gate;
  Tensor qg = c.output_gate ? ws.take(DType::f32, {T, Hq * 2 * D}) : q.reshape({T, Hq * D});
  Tensor k = ws.take(DType::f32, {T, Hkv, D});
  Tensor v = ws.take(DType::f32, {T, Hkv, D});
  {
    const Linear weights[] = {w.q_proj, w.k_proj, w.v_proj};
    const Tensor outs[] = {qg, k.reshape({T, Hkv * D}), v.reshape({T, Hkv * D})};
    ops::matmul_many(x, weights, outs);
  }
  const Tensor k_pages = step.kv->k(kv_layer), v_pages = step.kv->v(kv_layer);  // [n_pages, P, Hkv, D]
  if (c.output_gate && c.qk_norm && c.rotary_dim > 0) {
    // Qwen3.5: the split, both norms, both rotations and both KV stores as one op (one kernel on a GPU).
    gate = ws.take(DType::f32, {T, Hq, D});
    ops::attention_prep_varlen(qg, k, v, w.q_norm, w.k_norm, c.norm_eps, c.norm_weight_offset, step.positions,
                               w.rope_inv_freq, k_pages, v_pages, step.seqs, q, gate);
  } else {
    prepare_separately(c, w, step, qg, k, v, k_pages, v_pages, q, gate, ws);
  }

  Tensor o = ws.take(DType::f32, {T, Hq, D});
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  ops::attention_paged_varlen(q, k_pages, v_pages, step.seqs, scale, o);
  const Tensor o_flat = o.reshape({T, Hq * D});
  if (c.output_gate) ops::mul_sigmoid(o_flat, gate.reshape({T, Hq * D}), o_flat);
  ops::matmul(o_flat, w.o_proj, out);
}

}  // namespace kapitsa::models
