// CPU Gated DeltaNet (temporary: forwards to the reference until the SIMD + threaded paths land).
#include "ops/cpu/cpu.h"
#include "ops/ref/ref.h"

namespace kapitsa::ops::cpu {

void gdn_gates(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, const Tensor& g,
               const Tensor& beta) {
  ref::gdn_gates(a, b, A_log, dt_bias, g, beta);
}
void gated_delta_rule_recurrent(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                const Tensor& beta, const Tensor& state, const Tensor& o) {
  ref::gated_delta_rule_recurrent(q, k, v, g, beta, state, o);
}
void gated_delta_rule_chunked(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                              const Tensor& beta, const Tensor& state, const Tensor& o) {
  ref::gated_delta_rule_chunked(q, k, v, g, beta, state, o);
}

}  // namespace kapitsa::ops::cpu
