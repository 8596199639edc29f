// The compositions the fused ops of op_list.inc are defined as (gdn_core_varlen, attention_prep_varlen,
// matmul_swiglu, the relu² matmuls), written once over any backend's table: ref runs them over its own ops (the
// definition), cpu over its ops (no fused kernel pays on a CPU), a device backend for the cases its
// fused kernel does not take. Host backends only where a composition needs host scratch (noted).
#pragma once

#include "ops/backend.h"

namespace kapitsa::ops::composed {

// Host scratch (a vector, not a Buffer: decode steps are checked to allocate none): host backends only.
void gdn_core_varlen(const BackendTable& b, const Tensor& qkv, const Tensor& a, const Tensor& b_, const Tensor& A_log,
                     const Tensor& dt_bias, const Tensor& z, const Tensor& norm_w, float norm_eps,
                     const Tensor& states, const SeqBatch& batch, const Tensor& o);
// Host scratch: host backends only.
void attention_prep_varlen(const BackendTable& b, const Tensor& qg, const Tensor& k, const Tensor& v,
                           const Tensor& q_norm, const Tensor& k_norm, float eps, float weight_offset,
                           std::span<const int32_t> positions, std::span<const float> inv_freq, const Tensor& k_pages,
                           const Tensor& v_pages, const SeqBatch& batch, const Tensor& q, const Tensor& gate);
// Any backend (no scratch: up holds x · w_upᵀ).
void matmul_swiglu(const BackendTable& b, const Tensor& x, const Linear& w_gate, const Linear& w_up, const Tensor& up,
                   const Tensor& y);
// Any backend: the product, then relu² in place.
void matmul_relu_squared(const BackendTable& b, const Tensor& x, const Linear& w, const Tensor& y);
void matmul_experts_relu_squared(const BackendTable& b, const Tensor& x, std::span<const Linear> experts,
                                 const Tensor& expert_ids, const Tensor& y);

}  // namespace kapitsa::ops::composed
