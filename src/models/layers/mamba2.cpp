// Mamba-2 mixer forward: in_proj → split z | xBC | dt → conv + bias + SiLU → split x | B | C → scan
// (chunked for prompts, recurrent for one token) → y·silu(z) group RMSNorm → out_proj.
#include "models/layers/mamba2.h"

#include "ops/ops.h"

namespace kapitsa::models {
namespace {

// y[r, :] += bias.   y: [R, C];  bias: [C] f32.
void add_bias(const Tensor& y, const Buffer& bias) {
  const int64_t R = y.dim(0), C = y.dim(1);
  for (int64_t r = 0; r < R; ++r) ops::add(y.rows(r, r + 1), bias.tensor().reshape({1, C}), y.rows(r, r + 1));
}

}  // namespace

Expected<Mamba2Weights> Mamba2Weights::load(const weights::Checkpoint& ckpt, const std::string& prefix,
                                            const Mamba2Config& c) {
  Mamba2Weights w;
  const int64_t H = c.hidden_size, Hm = c.n_heads;
  KAPITSA_TRY(w.in_proj, ckpt.get(prefix + "in_proj.weight", {c.in_proj_dim(), H}));
  KAPITSA_TRY(Buffer conv, ckpt.get_f32(prefix + "conv1d.weight", {c.conv_dim(), 1, c.d_conv}));
  w.conv = std::move(conv);
  w.conv.tensor() = w.conv.tensor().reshape({c.conv_dim(), c.d_conv});
  if (c.conv_bias) {
    KAPITSA_TRY(w.conv_bias, ckpt.get_f32(prefix + "conv1d.bias", {c.conv_dim()}));
  }
  KAPITSA_TRY(w.A_log, ckpt.get_f32(prefix + "A_log", {Hm}));
  KAPITSA_TRY(w.D, ckpt.get_f32(prefix + "D", {Hm}));
  KAPITSA_TRY(w.dt_bias, ckpt.get_f32(prefix + "dt_bias", {Hm}));
  KAPITSA_TRY(w.norm, ckpt.get_f32(prefix + "norm.weight", {c.d_inner()}));
  KAPITSA_TRY(w.out_proj, ckpt.get(prefix + "out_proj.weight", {H, c.d_inner()}));
  if (c.proj_bias) {
    KAPITSA_TRY(w.in_proj_bias, ckpt.get_f32(prefix + "in_proj.bias", {c.in_proj_dim()}));
    KAPITSA_TRY(w.out_proj_bias, ckpt.get_f32(prefix + "out_proj.bias", {H}));
  }
  return w;
}

Mamba2State Mamba2State::allocate(const Mamba2Config& c) {
  return Mamba2State{Buffer::zeros(DType::f32, {c.d_conv - 1, c.conv_dim()}),
                     Buffer::zeros(DType::f32, {c.n_heads, c.head_dim, c.d_state})};
}

void mamba2_forward(const Mamba2Config& c, const Mamba2Weights& w, const Tensor& x,
                    std::span<const Mamba2Segment> segments, const Tensor& out) {
  const int64_t T = x.dim(0), Hm = c.n_heads, P = c.head_dim, G = c.n_groups, N = c.d_state;
  const int64_t d_inner = c.d_inner(), conv_dim = c.conv_dim();

  Buffer proj = Buffer::allocate(DType::f32, {T, c.in_proj_dim()});
  ops::matmul(x, w.in_proj, proj);
  if (c.proj_bias) add_bias(proj, w.in_proj_bias);
  Buffer z = Buffer::allocate(DType::f32, {T, d_inner});
  Buffer xbc = Buffer::allocate(DType::f32, {T, conv_dim});
  Buffer dt = Buffer::allocate(DType::f32, {T, Hm});
  const Tensor parts[] = {z, xbc, dt};
  ops::split_columns(proj, parts);

  Buffer xbc_act = Buffer::allocate(DType::f32, {T, conv_dim});
  for (const Mamba2Segment& s : segments)
    ops::conv1d_causal(xbc.tensor().rows(s.begin, s.begin + s.length), w.conv,
                       c.conv_bias ? w.conv_bias.tensor() : Tensor(), s.state->conv_window, /*silu=*/true,
                       xbc_act.tensor().rows(s.begin, s.begin + s.length));

  Buffer xs = Buffer::allocate(DType::f32, {T, Hm, P});
  Buffer B = Buffer::allocate(DType::f32, {T, G, N});
  Buffer C = Buffer::allocate(DType::f32, {T, G, N});
  const Tensor xbc_parts[] = {xs.tensor().reshape({T, d_inner}), B.tensor().reshape({T, G * N}),
                              C.tensor().reshape({T, G * N})};
  ops::split_columns(xbc_act, xbc_parts);

  Buffer y = Buffer::allocate(DType::f32, {T, Hm, P});
  for (const Mamba2Segment& s : segments) {
    auto rows = [&](const Buffer& b) { return b.tensor().rows(s.begin, s.begin + s.length); };
    if (s.length == 1) {
      ops::ssd_scan_recurrent(rows(xs), rows(dt), rows(B), rows(C), w.A_log, w.D, w.dt_bias, c.dt_min, c.dt_max,
                              s.state->ssm, rows(y));
    } else {
      ops::ssd_scan_chunked(rows(xs), rows(dt), rows(B), rows(C), w.A_log, w.D, w.dt_bias, c.dt_min, c.dt_max,
                            c.chunk_size, s.state->ssm, rows(y));
    }
  }

  const Tensor y_flat = y.tensor().reshape({T, d_inner});
  ops::rms_norm_group_gated(y_flat, z, w.norm, d_inner / G, c.norm_eps, y_flat);
  ops::matmul(y_flat, w.out_proj, out);
  if (c.proj_bias) add_bias(out, w.out_proj_bias);
}

void mamba2_forward(const Mamba2Config& c, const Mamba2Weights& w, const Tensor& x, Mamba2State& state,
                    const Tensor& out) {
  const Mamba2Segment segment{0, x.dim(0), &state};
  mamba2_forward(c, w, x, std::span<const Mamba2Segment>(&segment, 1), out);
}

}  // namespace kapitsa::models
