// Mamba-2 mixer forward: in_proj (z | xBC | dt) → conv + bias + SiLU → split x | B | C → scan
// (chunked for prompts, recurrent for one token) → y·silu(z) group RMSNorm → out_proj.
#include "models/layers/mamba2.h"

#include "ops/ops.h"

namespace kapitsa::models {
namespace {

// y[r, :] += bias.   y: [R, C];  bias: [C] f32.
void add_bias(const Tensor& y, const Tensor& bias) {
  const int64_t R = y.dim(0), C = y.dim(1);
  for (int64_t r = 0; r < R; ++r) ops::add(y.rows(r, r + 1), bias.reshape({1, C}), y.rows(r, r + 1));
}

}  // namespace

Expected<Mamba2Weights> Mamba2Weights::load(WeightLoader& loader, const std::string& prefix,
                                            const Mamba2Config& c) {
  Mamba2Weights w;
  const int64_t H = c.hidden_size, Hm = c.n_heads;
  KAPITSA_TRY(w.in_proj, loader.linear(prefix + "in_proj.weight", {c.in_proj_dim(), H}));
  KAPITSA_TRY(w.conv, loader.conv_weight(prefix + "conv1d.weight", c.conv_dim(), c.d_conv));
  if (c.conv_bias) {
    KAPITSA_TRY(w.conv_bias, loader.get_f32(prefix + "conv1d.bias", {c.conv_dim()}));
  }
  KAPITSA_TRY(w.A_log, loader.get_f32(prefix + "A_log", {Hm}));
  KAPITSA_TRY(w.D, loader.get_f32(prefix + "D", {Hm}));
  KAPITSA_TRY(w.dt_bias, loader.get_f32(prefix + "dt_bias", {Hm}));
  KAPITSA_TRY(w.norm, loader.get_f32(prefix + "norm.weight", {c.d_inner()}));
  KAPITSA_TRY(w.out_proj, loader.linear(prefix + "out_proj.weight", {H, c.d_inner()}));
  if (c.proj_bias) {
    KAPITSA_TRY(w.in_proj_bias, loader.get_f32(prefix + "in_proj.bias", {c.in_proj_dim()}));
    KAPITSA_TRY(w.out_proj_bias, loader.get_f32(prefix + "out_proj.bias", {H}));
  }
  return w;
}

void mamba2_forward(const Mamba2Config& c, const Mamba2Weights& w, int64_t layer, const StepBatch& step,
                    const Tensor& x, const Tensor& out, ForwardContext& ctx) {
  Workspace& ws = ctx.workspace;
  Workspace::Scope scope(ws);
  const int64_t T = x.dim(0), Hm = c.n_heads, P = c.head_dim, G = c.n_groups;
  const int64_t d_inner = c.d_inner(), conv_dim = c.conv_dim();

  // z | xBC | dt: three row ranges of in_proj in one matmul_many (one launch on a GPU, no split's copy).
  Tensor z = ws.take(DType::f32, {T, d_inner});
  Tensor xbc = ws.take(DType::f32, {T, conv_dim});
  Tensor dt = ws.take(DType::f32, {T, Hm});
  const int64_t ends[] = {d_inner, d_inner + conv_dim, c.in_proj_dim()};
  const Linear projections[] = {w.in_proj.row_range(0, ends[0]), w.in_proj.row_range(ends[0], ends[1]),
                                w.in_proj.row_range(ends[1], ends[2])};
  const Tensor parts[] = {z, xbc, dt};
  ops::matmul_many(x, projections, parts);
  if (c.proj_bias) {
    const Tensor bias = w.in_proj_bias.tensor();
    for (int i = 0; i < 3; ++i) add_bias(parts[i], bias.rows(i == 0 ? 0 : ends[i - 1], ends[i]));
  }

  Tensor xbc_act = ws.take(DType::f32, {T, conv_dim});
  const Tensor windows = step.slots->conv(layer), states = step.slots->ssm(layer);  // [n_slots, …]
  ops::conv1d_causal_varlen(xbc, w.conv, c.conv_bias ? w.conv_bias.tensor() : Tensor(), windows, /*silu=*/true,
                            step.seqs, xbc_act);

  // The scan reads x | B | C in xbc_act's rows (no split).
  Tensor y = ws.take(DType::f32, {T, Hm, P});
  ops::ssd_scan_varlen(xbc_act, G, dt, w.A_log, w.D, w.dt_bias, c.dt_min, c.dt_max, c.chunk_size, states, step.seqs, y);

  const Tensor y_flat = y.reshape({T, d_inner});
  ops::rms_norm_group_gated(y_flat, z, w.norm, d_inner / G, c.norm_eps, y_flat);
  ops::matmul(y_flat, w.out_proj, out);
  if (c.proj_bias) add_bias(out, w.out_proj_bias.tensor());
}

}  // namespace kapitsa::models
