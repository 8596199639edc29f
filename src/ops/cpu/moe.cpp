// TEMPORARY: forwards to ops/ref until the fast path lands.
#include "ops/cpu/cpu.h"
#include "ops/ref/ref.h"

namespace kapitsa::ops::cpu {
void moe_route_softmax(const Tensor& l, int k, bool rn, const Tensor& ids, const Tensor& w) { ref::moe_route_softmax(l, k, rn, ids, w); }
void gather_rows(const Tensor& x, std::span<const int32_t> r, const Tensor& o) { ref::gather_rows(x, r, o); }
void scale_add_rows(const Tensor& s, std::span<const int32_t> r, std::span<const float> w, const Tensor& d) { ref::scale_add_rows(s, r, w, d); }
}  // namespace kapitsa::ops::cpu
