// TEMPORARY: forwards to ops/ref until the fast path lands.
#include "ops/cpu/cpu.h"
#include "ops/ref/ref.h"

namespace kapitsa::ops::cpu {
void conv1d_causal(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& win, bool silu, const Tensor& y) { ref::conv1d_causal(x, w, b, win, silu, y); }
}  // namespace kapitsa::ops::cpu
