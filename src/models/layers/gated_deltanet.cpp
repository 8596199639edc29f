// Gated DeltaNet forward: projections → causal conv + SiLU → split q/k/v → L2 norms and gates →
// delta rule (chunked for prompts, recurrent for single tokens) → gated RMSNorm → out_proj. A decode
// step runs the part from the norms to the gated RMSNorm as one op (gdn_core_varlen).
#include "models/layers/gated_deltanet.h"

#include "ops/ops.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace kapitsa::models {

Expected<GdnWeights> GdnWeights::load(WeightLoader& loader, const std::string& prefix, const GdnConfig& c) {
  GdnWeights w;
  const int64_t H = c.hidden_size, Hk = c.n_k_heads, Hv = c.n_v_heads, r = Hv / Hk;
  if (c.packed_projections) {
    KAPITSA_TRY(w.in_proj_qkvz, loader.linear(prefix + "in_proj_qkvz.weight", {2 * c.key_dim() + 2 * c.value_dim(), H}));
    KAPITSA_TRY(w.in_proj_ba, loader.linear(prefix + "in_proj_ba.weight", {Hk * 2 * r, H}));
  } else {
    KAPITSA_TRY(w.in_proj_qkv, loader.linear(prefix + "in_proj_qkv.weight", {c.conv_dim(), H}));
    KAPITSA_TRY(w.in_proj_z, loader.linear(prefix + "in_proj_z.weight", {c.value_dim(), H}));
    KAPITSA_TRY(w.in_proj_b, loader.linear(prefix + "in_proj_b.weight", {Hv, H}));
    KAPITSA_TRY(w.in_proj_a, loader.linear(prefix + "in_proj_a.weight", {Hv, H}));
  }
  KAPITSA_TRY(w.conv, loader.conv_weight(prefix + "conv1d.weight", c.conv_dim(), c.conv_kernel));
  KAPITSA_TRY(w.A_log, loader.get_f32(prefix + "A_log", {Hv}));
  KAPITSA_TRY(w.dt_bias, loader.get_f32(prefix + "dt_bias", {Hv}));
  KAPITSA_TRY(w.norm, loader.get_f32(prefix + "norm.weight", {c.v_head_dim}));
  KAPITSA_TRY(w.out_proj, loader.linear(prefix + "out_proj.weight", {H, c.value_dim()}));
  return w;
}

namespace {
// Sequences of at most this many rows in a step take the fused gdn_core_varlen (see forward).
constexpr int64_t kFusedCoreMaxRows = 16;

// o: [T, Hv, Dv] in Hugging Face head order → out_proj's input [T, Hv·Dv]: o itself, or with c.out_proj_tiled
// its heads in tiled order: viewed as [T·Hk, r·Dv] (key head k's r value heads in a row), its r column
// blocks split out and joined as [T, r·Hk·Dv] (head k·r + j lands at j·Hk + k). Two copies of a row of
// activations, against reading out_proj dequantized (4–8× its blocks' bytes).
Tensor out_proj_input(const GdnConfig& c, const Tensor& o, Workspace& ws) {
  const int64_t T = o.dim(0), Hk = c.n_k_heads, Hv = c.n_v_heads, Dv = c.v_head_dim, r = Hv / Hk;
  if (!c.out_proj_tiled || r == 1) return o.reshape({T, Hv * Dv});
  constexpr int64_t kMaxR = 8;
  KAPITSA_CHECK(r <= kMaxR, "gated deltanet: {} value heads per key head in a tiled out_proj (at most {})", r, kMaxR);
  std::array<Tensor, kMaxR> split, joined;
  for (int64_t j = 0; j < r; ++j) {
    split[static_cast<size_t>(j)] = ws.take(DType::f32, {T * Hk, Dv});
    joined[static_cast<size_t>(j)] = split[static_cast<size_t>(j)].reshape({T, Hk * Dv});
  }
  ops::split_columns(o.reshape({T * Hk, r * Dv}), std::span<const Tensor>(split.data(), static_cast<size_t>(r)));
  Tensor tiled = ws.take(DType::f32, {T, Hv * Dv});
  ops::concat_columns(std::span<const Tensor>(joined.data(), static_cast<size_t>(r)), tiled);
  return tiled;
}
}  // namespace

void gdn_forward(const GdnConfig& c, const GdnWeights& w, int64_t layer, const StepBatch& step, const Tensor& x,
                 const Tensor& out, ForwardContext& ctx) {
  Workspace& ws = ctx.workspace;
  Workspace::Scope scope(ws);
  const int64_t T = x.dim(0), Hk = c.n_k_heads, Hv = c.n_v_heads, Dk = c.k_head_dim, Dv = c.v_head_dim;
  const int64_t r = Hv / Hk;

  Tensor qkv = ws.take(DType::f32, {T, c.conv_dim()});  // [Q all heads | K all heads | V all heads]
  Tensor z = ws.take(DType::f32, {T, Hv, Dv});
  Tensor a = ws.take(DType::f32, {T, Hv});
  Tensor b = ws.take(DType::f32, {T, Hv});
  if (c.packed_projections) {
    // Per key head g the packed rows are [q_g (Dk) | k_g (Dk) | v_g (r·Dv) | z_g (r·Dv)] and [b_g (r) | a_g (r)].
    // Splitting the [T·Hk, …] view by columns yields q/k/v/z already in flat head order.
    Tensor packed = ws.take(DType::f32, {T, Hk, 2 * Dk + 2 * r * Dv});
    ops::matmul(x, w.in_proj_qkvz, packed.reshape({T, Hk * (2 * Dk + 2 * r * Dv)}));
    Tensor q = ws.take(DType::f32, {T, Hk * Dk}), k = ws.take(DType::f32, {T, Hk * Dk});
    Tensor v = ws.take(DType::f32, {T, Hv * Dv});
    const Tensor parts[] = {q.reshape({T * Hk, Dk}), k.reshape({T * Hk, Dk}),
                            v.reshape({T * Hk, r * Dv}), z.reshape({T * Hk, r * Dv})};
    ops::split_columns(packed.reshape({T * Hk, 2 * Dk + 2 * r * Dv}), parts);
    const Tensor flat[] = {q, k, v};
    ops::concat_columns(flat, qkv);

    Tensor ba = ws.take(DType::f32, {T, Hk, 2 * r});
    ops::matmul(x, w.in_proj_ba, ba.reshape({T, Hk * 2 * r}));
    const Tensor ba_parts[] = {b.reshape({T * Hk, r}), a.reshape({T * Hk, r})};
    ops::split_columns(ba.reshape({T * Hk, 2 * r}), ba_parts);
  } else {
    const Linear weights[] = {w.in_proj_qkv, w.in_proj_z, w.in_proj_b, w.in_proj_a};
    const Tensor outs[] = {qkv, z.reshape({T, Hv * Dv}), b, a};
    ops::matmul_many(x, weights, outs);
  }

  // Causal depthwise conv + SiLU over the concatenated channels, carrying the window.
  Tensor mixed = ws.take(DType::f32, {T, c.conv_dim()});
  const Tensor windows = step.slots->conv(layer), states = step.slots->ssm(layer);  // [n_slots, …]
  ops::conv1d_causal_varlen(qkv, w.conv, Tensor(), windows, /*silu=*/true, step.seqs, mixed);

  Tensor o = ws.take(DType::f32, {T, Hv, Dv});
  int64_t longest = 0;  // rows of the step's longest sequence
  for (int64_t i = 0; i < step.seqs.n_seqs(); ++i) longest = std::max(longest, step.seqs.rows(i));
  if (longest <= kFusedCoreMaxRows) {
    // Decode and speculative verification (a few rows a sequence): norms, gates, delta rule and output
    // norm in one op (one kernel on a GPU, where the separate ops take five; a 5-row verification of the
    // demo model on an H200 spent 182 µs in them against 63 for one-row decode), reading q/k/v straight
    // from mixed's rows. Longer sequences (prefill) keep the separate ops: the fused kernel's block per
    // head would walk their tokens with a quarter of the blocks. (On the cpu the op is those same ops.)
    ops::gdn_core_varlen(mixed, a, b, w.A_log, w.dt_bias, z, w.norm, c.norm_eps, states, step.seqs, o);
    ops::matmul(out_proj_input(c, o, ws), w.out_proj, out);
    return;
  }
  Tensor q = ws.take(DType::f32, {T, Hk, Dk});
  Tensor k = ws.take(DType::f32, {T, Hk, Dk});
  Tensor v = ws.take(DType::f32, {T, Hv, Dv});
  const Tensor qkv_parts[] = {q.reshape({T, Hk * Dk}), k.reshape({T, Hk * Dk}), v.reshape({T, Hv * Dv})};
  ops::split_columns(mixed, qkv_parts);
  ops::l2_norm(q.reshape({T * Hk, Dk}), 1e-6f, 1.0f / std::sqrt(static_cast<float>(Dk)),
               q.reshape({T * Hk, Dk}));
  ops::l2_norm(k.reshape({T * Hk, Dk}), 1e-6f, 1.0f, k.reshape({T * Hk, Dk}));

  Tensor g = ws.take(DType::f32, {T, Hv});
  Tensor beta = ws.take(DType::f32, {T, Hv});
  ops::gdn_gates(a, b, w.A_log, w.dt_bias, g, beta);

  ops::gated_delta_rule_varlen(q, k, v, g, beta, states, step.seqs, o);

  const Tensor o_rows = o.reshape({T * Hv, Dv});
  ops::rms_norm_gated(o_rows, z.reshape({T * Hv, Dv}), w.norm, c.norm_eps, o_rows);
  ops::matmul(out_proj_input(c, o, ws), w.out_proj, out);
}

}  // namespace kapitsa::models
