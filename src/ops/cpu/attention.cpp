// TEMPORARY: forwards to ops/ref until the fast path lands.
#include "ops/cpu/cpu.h"
#include "ops/ref/ref.h"

namespace kapitsa::ops::cpu {
void rope_neox(const Tensor& x, std::span<const int32_t> p, int rd, float theta) { ref::rope_neox(x, p, rd, theta); }
void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t p0, float s, const Tensor& o) { ref::attention(q, k, v, p0, s, o); }
}  // namespace kapitsa::ops::cpu
