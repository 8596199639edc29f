// Reference sampling helpers: argmax_rows as the scan the runtime's argmax is defined by.
#include "ops/ref/ref.h"

#include <cmath>

namespace kapitsa::ops::ref {

// x: [R, V];  out: [R].
void argmax_rows(const Tensor& x, int64_t columns, const Tensor& out) {
  const int64_t R = out.numel(), V = x.dim(-1);
  for (int64_t r = 0; r < R; ++r) {
    const float* row = x.f32() + r * V;
    int64_t best = 0;
    for (int64_t i = 1; i < columns; ++i)
      if (row[i] > row[best]) best = i;  // false for a NaN on either side: a NaN at 0 stays
    out.data_as<int32_t>()[r] = static_cast<int32_t>(best);
  }
}

}  // namespace kapitsa::ops::ref
