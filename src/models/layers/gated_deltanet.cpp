// Gated DeltaNet forward: projections → causal conv + SiLU → split q/k/v → L2 norms and gates →
// delta rule (chunked for prompts, recurrent for single tokens) → gated RMSNorm → out_proj.
#include "models/layers/gated_deltanet.h"

#include "ops/ops.h"

#include <cmath>

namespace kapitsa::models {

Expected<GdnWeights> GdnWeights::load(const weights::Checkpoint& ckpt, const std::string& prefix, const GdnConfig& c) {
  GdnWeights w;
  const int64_t H = c.hidden_size, Hk = c.n_k_heads, Hv = c.n_v_heads, r = Hv / Hk;
  if (c.packed_projections) {
    KAPITSA_TRY(w.in_proj_qkvz, ckpt.get(prefix + "in_proj_qkvz.weight", {2 * c.key_dim() + 2 * c.value_dim(), H}));
    KAPITSA_TRY(w.in_proj_ba, ckpt.get(prefix + "in_proj_ba.weight", {Hk * 2 * r, H}));
  } else {
    KAPITSA_TRY(w.in_proj_qkv, ckpt.get(prefix + "in_proj_qkv.weight", {c.conv_dim(), H}));
    KAPITSA_TRY(w.in_proj_z, ckpt.get(prefix + "in_proj_z.weight", {c.value_dim(), H}));
    KAPITSA_TRY(w.in_proj_b, ckpt.get(prefix + "in_proj_b.weight", {Hv, H}));
    KAPITSA_TRY(w.in_proj_a, ckpt.get(prefix + "in_proj_a.weight", {Hv, H}));
  }
  KAPITSA_TRY(Buffer conv, ckpt.get_f32(prefix + "conv1d.weight", {c.conv_dim(), 1, c.conv_kernel}));
  w.conv = std::move(conv);
  w.conv.tensor() = w.conv.tensor().reshape({c.conv_dim(), c.conv_kernel});
  KAPITSA_TRY(w.A_log, ckpt.get_f32(prefix + "A_log", {Hv}));
  KAPITSA_TRY(w.dt_bias, ckpt.get_f32(prefix + "dt_bias", {Hv}));
  KAPITSA_TRY(w.norm, ckpt.get_f32(prefix + "norm.weight", {c.v_head_dim}));
  KAPITSA_TRY(w.out_proj, ckpt.get(prefix + "out_proj.weight", {H, c.value_dim()}));
  return w;
}

GdnState GdnState::allocate(const GdnConfig& c) {
  return GdnState{Buffer::zeros(DType::f32, {c.conv_kernel - 1, c.conv_dim()}),
                  Buffer::zeros(DType::f32, {c.n_v_heads, c.k_head_dim, c.v_head_dim})};
}

void gdn_forward(const GdnConfig& c, const GdnWeights& w, const Tensor& x, std::span<const GdnSegment> segments,
                 const Tensor& out) {
  const int64_t T = x.dim(0), Hk = c.n_k_heads, Hv = c.n_v_heads, Dk = c.k_head_dim, Dv = c.v_head_dim;
  const int64_t r = Hv / Hk;

  Buffer qkv = Buffer::allocate(DType::f32, {T, c.conv_dim()});  // [Q all heads | K all heads | V all heads]
  Buffer z = Buffer::allocate(DType::f32, {T, Hv, Dv});
  Buffer a = Buffer::allocate(DType::f32, {T, Hv});
  Buffer b = Buffer::allocate(DType::f32, {T, Hv});
  if (c.packed_projections) {
    // Per key head g the packed rows are [q_g (Dk) | k_g (Dk) | v_g (r·Dv) | z_g (r·Dv)] and [b_g (r) | a_g (r)].
    // Splitting the [T·Hk, …] view by columns yields q/k/v/z already in flat head order.
    Buffer packed = Buffer::allocate(DType::f32, {T, Hk, 2 * Dk + 2 * r * Dv});
    ops::matmul(x, w.in_proj_qkvz, packed.tensor().reshape({T, Hk * (2 * Dk + 2 * r * Dv)}));
    Buffer q = Buffer::allocate(DType::f32, {T, Hk * Dk}), k = Buffer::allocate(DType::f32, {T, Hk * Dk});
    Buffer v = Buffer::allocate(DType::f32, {T, Hv * Dv});
    const Tensor parts[] = {q.tensor().reshape({T * Hk, Dk}), k.tensor().reshape({T * Hk, Dk}),
                            v.tensor().reshape({T * Hk, r * Dv}), z.tensor().reshape({T * Hk, r * Dv})};
    ops::split_columns(packed.tensor().reshape({T * Hk, 2 * Dk + 2 * r * Dv}), parts);
    const Tensor flat[] = {q, k, v};
    ops::concat_columns(flat, qkv);

    Buffer ba = Buffer::allocate(DType::f32, {T, Hk, 2 * r});
    ops::matmul(x, w.in_proj_ba, ba.tensor().reshape({T, Hk * 2 * r}));
    const Tensor ba_parts[] = {b.tensor().reshape({T * Hk, r}), a.tensor().reshape({T * Hk, r})};
    ops::split_columns(ba.tensor().reshape({T * Hk, 2 * r}), ba_parts);
  } else {
    ops::matmul(x, w.in_proj_qkv, qkv);
    ops::matmul(x, w.in_proj_z, z.tensor().reshape({T, Hv * Dv}));
    ops::matmul(x, w.in_proj_b, b);
    ops::matmul(x, w.in_proj_a, a);
  }

  // Causal depthwise conv + SiLU over the concatenated channels, carrying the window.
  Buffer mixed = Buffer::allocate(DType::f32, {T, c.conv_dim()});
  for (const GdnSegment& s : segments)
    ops::conv1d_causal(qkv.tensor().rows(s.begin, s.begin + s.length), w.conv, Tensor(), s.state->conv_window,
                       /*silu=*/true, mixed.tensor().rows(s.begin, s.begin + s.length));

  Buffer q = Buffer::allocate(DType::f32, {T, Hk, Dk});
  Buffer k = Buffer::allocate(DType::f32, {T, Hk, Dk});
  Buffer v = Buffer::allocate(DType::f32, {T, Hv, Dv});
  const Tensor qkv_parts[] = {q.tensor().reshape({T, Hk * Dk}), k.tensor().reshape({T, Hk * Dk}),
                              v.tensor().reshape({T, Hv * Dv})};
  ops::split_columns(mixed, qkv_parts);
  ops::l2_norm(q.tensor().reshape({T * Hk, Dk}), 1e-6f, 1.0f / std::sqrt(static_cast<float>(Dk)),
               q.tensor().reshape({T * Hk, Dk}));
  ops::l2_norm(k.tensor().reshape({T * Hk, Dk}), 1e-6f, 1.0f, k.tensor().reshape({T * Hk, Dk}));

  Buffer g = Buffer::allocate(DType::f32, {T, Hv});
  Buffer beta = Buffer::allocate(DType::f32, {T, Hv});
  ops::gdn_gates(a, b, w.A_log, w.dt_bias, g, beta);

  Buffer o = Buffer::allocate(DType::f32, {T, Hv, Dv});
  for (const GdnSegment& s : segments) {
    auto rows = [&](const Buffer& b) { return b.tensor().rows(s.begin, s.begin + s.length); };
    if (s.length == 1) {
      ops::gated_delta_rule_recurrent(rows(q), rows(k), rows(v), rows(g), rows(beta), s.state->ssm, rows(o));
    } else {
      ops::gated_delta_rule_chunked(rows(q), rows(k), rows(v), rows(g), rows(beta), s.state->ssm, rows(o));
    }
  }

  const Tensor o_rows = o.tensor().reshape({T * Hv, Dv});
  ops::rms_norm_gated(o_rows, z.tensor().reshape({T * Hv, Dv}), w.norm, c.norm_eps, o_rows);
  ops::matmul(o.tensor().reshape({T, Hv * Dv}), w.out_proj, out);
}

void gdn_forward(const GdnConfig& c, const GdnWeights& w, const Tensor& x, GdnState& state, const Tensor& out) {
  const GdnSegment segment{0, x.dim(0), &state};
  gdn_forward(c, w, x, std::span<const GdnSegment>(&segment, 1), out);
}

}  // namespace kapitsa::models
