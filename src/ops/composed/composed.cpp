// The fused ops' compositions over a backend's table (composed.h): each step is the backend's own op,
// called through its table entry (arguments already checked by the fused op's front, ops.cpp).
#include "ops/composed/composed.h"

#include <cmath>
#include <vector>

namespace kapitsa::ops::composed {

// q, k, v copied out of qkv's rows, q and k normalised in place, the gates, the delta rule, then the
// gated norm of o in place.
void gdn_core_varlen(const BackendTable& b, const Tensor& qkv, const Tensor& a, const Tensor& b_, const Tensor& A_log,
                     const Tensor& dt_bias, const Tensor& z, const Tensor& norm_w, float norm_eps,
                     const Tensor& states, const SeqBatch& batch, const Tensor& o) {
  const int64_t T = qkv.dim(0), Hv = states.dim(1), Dk = states.dim(2), Dv = states.dim(3);
  const int64_t Hk = (qkv.dim(1) - Hv * Dv) / (2 * Dk);
  std::vector<float> scratch(static_cast<size_t>(qkv.numel() + 2 * T * Hv));
  float* p = scratch.data();
  const Tensor q(DType::f32, {T, Hk, Dk}, p), k(DType::f32, {T, Hk, Dk}, p + T * Hk * Dk);
  const Tensor v(DType::f32, {T, Hv, Dv}, p + 2 * T * Hk * Dk);
  const Tensor g(DType::f32, {T, Hv}, p + qkv.numel()), beta(DType::f32, {T, Hv}, p + qkv.numel() + T * Hv);
  const Tensor parts[] = {q.reshape({T, Hk * Dk}), k.reshape({T, Hk * Dk}), v.reshape({T, Hv * Dv})};
  b.split_columns(qkv, std::span<const Tensor>(parts));
  const Tensor qr = q.reshape({T * Hk, Dk}), kr = k.reshape({T * Hk, Dk});
  b.l2_norm(qr, 1e-6f, 1.0f / std::sqrt(static_cast<float>(Dk)), qr);
  b.l2_norm(kr, 1e-6f, 1.0f, kr);
  b.gdn_gates(a, b_, A_log, dt_bias, g, beta);
  b.gated_delta_rule_varlen(q, k, v, g, beta, states, batch, o);
  const Tensor rows = o.reshape({T * Hv, Dv});
  b.rms_norm_gated(rows, z.reshape({T * Hv, Dv}), norm_w, norm_eps, rows);
}

// q and gate split out of qg, q normalised and rotated in place, k into a normalised, rotated copy, then
// both stores.
void attention_prep_varlen(const BackendTable& b, const Tensor& qg, const Tensor& k, const Tensor& v,
                           const Tensor& q_norm, const Tensor& k_norm, float eps, float weight_offset,
                           std::span<const int32_t> positions, std::span<const float> inv_freq, const Tensor& k_pages,
                           const Tensor& v_pages, const SeqBatch& batch, const Tensor& q, const Tensor& gate) {
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2), Hkv = k.dim(1);
  const Tensor parts[] = {q.reshape({T * Hq, D}), gate.reshape({T * Hq, D})};
  b.split_columns(qg.reshape({T * Hq, 2 * D}), std::span<const Tensor>(parts));
  b.rms_norm(q, q_norm, eps, weight_offset, q);
  b.rope_neox(q, positions, inv_freq);
  std::vector<float> kn_data(static_cast<size_t>(k.numel()));
  const Tensor kn(DType::f32, {T, Hkv, D}, kn_data.data());
  b.rms_norm(k, k_norm, eps, weight_offset, kn);
  b.rope_neox(kn, positions, inv_freq);
  b.write_paged_rows_varlen(kn, k_pages, batch);
  b.write_paged_rows_varlen(v, v_pages, batch);
}

void matmul_swiglu(const BackendTable& b, const Tensor& x, const Linear& w_gate, const Linear& w_up, const Tensor& up,
                   const Tensor& y) {
  const Linear w[] = {w_gate, w_up};
  const Tensor outs[] = {y, up};
  b.matmul_many(x, std::span<const Linear>(w), std::span<const Tensor>(outs));
  b.silu_mul(y, up, y);
}

void matmul_relu_squared(const BackendTable& b, const Tensor& x, const Linear& w, const Tensor& y) {
  b.matmul(x, w, y);
  b.relu_squared(y, y);
}

void matmul_experts_relu_squared(const BackendTable& b, const Tensor& x, std::span<const Linear> experts,
                                 const Tensor& expert_ids, const Tensor& y) {
  b.matmul_experts(x, experts, expert_ids, y);
  b.relu_squared(y, y);
}

}  // namespace kapitsa::ops::composed
