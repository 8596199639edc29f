// Backend selection and the dispatching definitions of every op in op_list.inc.
#include "ops/ops.h"

#include "ops/cpu/cpu.h"
#include "ops/ref/ref.h"

#include <cstdlib>
#include <cstring>

namespace kapitsa::ops {
namespace {
Backend initial_backend() {
  const char* env = std::getenv("KAPITSA_BACKEND");
  return (env != nullptr && std::strcmp(env, "ref") == 0) ? Backend::ref : Backend::cpu;
}
Backend g_backend = initial_backend();
}  // namespace

Backend backend() { return g_backend; }
void set_backend(Backend b) { g_backend = b; }

#define KAPITSA_DISPATCH(name, ...) \
  return g_backend == Backend::ref ? ref::name(__VA_ARGS__) : cpu::name(__VA_ARGS__)

void embedding(const Linear& table, std::span<const int32_t> ids, const Tensor& out) {
  KAPITSA_DISPATCH(embedding, table, ids, out);
}
void matmul(const Tensor& x, const Linear& w, const Tensor& y) { KAPITSA_DISPATCH(matmul, x, w, y); }
void add(const Tensor& a, const Tensor& b, const Tensor& y) { KAPITSA_DISPATCH(add, a, b, y); }
void silu_mul(const Tensor& gate, const Tensor& up, const Tensor& y) { KAPITSA_DISPATCH(silu_mul, gate, up, y); }
void mul_sigmoid(const Tensor& x, const Tensor& gate, const Tensor& y) { KAPITSA_DISPATCH(mul_sigmoid, x, gate, y); }
void relu_squared(const Tensor& x, const Tensor& y) { KAPITSA_DISPATCH(relu_squared, x, y); }
void copy(const Tensor& src, const Tensor& dst) { KAPITSA_DISPATCH(copy, src, dst); }
void split_columns(const Tensor& x, std::span<const Tensor> outs) { KAPITSA_DISPATCH(split_columns, x, outs); }
void concat_columns(std::span<const Tensor> ins, const Tensor& y) { KAPITSA_DISPATCH(concat_columns, ins, y); }
void rms_norm(const Tensor& x, const Tensor& w, float eps, float weight_offset, const Tensor& y) {
  KAPITSA_DISPATCH(rms_norm, x, w, eps, weight_offset, y);
}
void rms_norm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, const Tensor& y) {
  KAPITSA_DISPATCH(rms_norm_gated, x, z, w, eps, y);
}
void l2_norm(const Tensor& x, float eps, float scale, const Tensor& y) { KAPITSA_DISPATCH(l2_norm, x, eps, scale, y); }
void rope_neox(const Tensor& x, std::span<const int32_t> positions, std::span<const float> inv_freq) {
  KAPITSA_DISPATCH(rope_neox, x, positions, inv_freq);
}
void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_pos0, float scale, const Tensor& o) {
  KAPITSA_DISPATCH(attention, q, k, v, q_pos0, scale, o);
}
void attention_paged(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, std::span<const int32_t> block_table,
                     int64_t n_kv, int64_t q_pos0, float scale, const Tensor& o) {
  KAPITSA_DISPATCH(attention_paged, q, k_pages, v_pages, block_table, n_kv, q_pos0, scale, o);
}
void conv1d_causal(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& window, bool silu,
                   const Tensor& y) {
  KAPITSA_DISPATCH(conv1d_causal, x, w, bias, window, silu, y);
}
void gdn_gates(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, const Tensor& g,
               const Tensor& beta) {
  KAPITSA_DISPATCH(gdn_gates, a, b, A_log, dt_bias, g, beta);
}
void gated_delta_rule_recurrent(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                const Tensor& beta, const Tensor& state, const Tensor& o) {
  KAPITSA_DISPATCH(gated_delta_rule_recurrent, q, k, v, g, beta, state, o);
}
void gated_delta_rule_chunked(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                              const Tensor& beta, const Tensor& state, const Tensor& o) {
  KAPITSA_DISPATCH(gated_delta_rule_chunked, q, k, v, g, beta, state, o);
}
void moe_route_softmax(const Tensor& logits, int k, bool renormalize, const Tensor& expert_ids,
                       const Tensor& expert_weights) {
  KAPITSA_DISPATCH(moe_route_softmax, logits, k, renormalize, expert_ids, expert_weights);
}
void gather_rows(const Tensor& x, std::span<const int32_t> rows, const Tensor& out) {
  KAPITSA_DISPATCH(gather_rows, x, rows, out);
}
void scale_add_rows(const Tensor& src, std::span<const int32_t> rows, std::span<const float> weights,
                    const Tensor& dst) {
  KAPITSA_DISPATCH(scale_add_rows, src, rows, weights, dst);
}
void ssd_scan_recurrent(const Tensor& x, const Tensor& dt, const Tensor& B, const Tensor& C, const Tensor& A_log,
                        const Tensor& D, const Tensor& dt_bias, float dt_min, float dt_max, const Tensor& state,
                        const Tensor& y) {
  KAPITSA_DISPATCH(ssd_scan_recurrent, x, dt, B, C, A_log, D, dt_bias, dt_min, dt_max, state, y);
}
void ssd_scan_chunked(const Tensor& x, const Tensor& dt, const Tensor& B, const Tensor& C, const Tensor& A_log,
                      const Tensor& D, const Tensor& dt_bias, float dt_min, float dt_max, int64_t chunk_size,
                      const Tensor& state, const Tensor& y) {
  KAPITSA_DISPATCH(ssd_scan_chunked, x, dt, B, C, A_log, D, dt_bias, dt_min, dt_max, chunk_size, state, y);
}
void rms_norm_group_gated(const Tensor& x, const Tensor& z, const Tensor& w, int64_t group_size, float eps,
                          const Tensor& y) {
  KAPITSA_DISPATCH(rms_norm_group_gated, x, z, w, group_size, eps, y);
}
void moe_route_sigmoid(const Tensor& logits, const Tensor& bias, int k, int n_group, int topk_group, bool renormalize,
                       float scaling, const Tensor& expert_ids, const Tensor& expert_weights) {
  KAPITSA_DISPATCH(moe_route_sigmoid, logits, bias, k, n_group, topk_group, renormalize, scaling, expert_ids,
                   expert_weights);
}

}  // namespace kapitsa::ops
