// CPU sampling helpers: argmax_rows, a row per task (a step has a few rows of a large vocabulary).
#include "base/thread_pool.h"
#include "ops/cpu/level.h"

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {

// x: [R, V];  out: [R]. The scan of ops/ref (the first maximum; a NaN never wins, one at 0 stays).
void argmax_rows(const Tensor& x, int64_t columns, const Tensor& out) {
  const int64_t R = out.numel(), V = x.dim(-1);
  parallel_for(static_cast<size_t>(R), 1, [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) {
      const float* row = x.f32() + static_cast<int64_t>(r) * V;
      int64_t best = 0;
      for (int64_t i = 1; i < columns; ++i)
        if (row[i] > row[best]) best = i;
      out.data_as<int32_t>()[r] = static_cast<int32_t>(best);
    }
  });
}

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
