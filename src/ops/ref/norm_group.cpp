// Reference gated group RMSNorm, gate first (Mamba-2 output norm): u = x·silu(z), then RMSNorm of u
// within each group of group_size columns, times w. Statistics in double; each row is gated into a
// scratch copy first, so y may alias x.
#include "ops/ref/ref.h"
#include "ops/ref/ref_util.h"

#include <cmath>
#include <vector>

namespace kapitsa::ops::ref {

// x, z, y: [R, D];  w: [D] f32.
void rms_norm_group_gated(const Tensor& x, const Tensor& z, const Tensor& w, int64_t group_size, float eps,
                          const Tensor& y) {
  const int64_t D = x.dim(-1), R = detail::rows_of(x);
  const float *px = x.f32(), *pz = z.f32(), *pw = w.f32();
  float* py = y.f32();
  std::vector<double> u(static_cast<size_t>(D));
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t d = 0; d < D; ++d) {
      const double zz = pz[r * D + d];
      u[static_cast<size_t>(d)] = px[r * D + d] * (zz / (1.0 + std::exp(-zz)));
    }
    for (int64_t g0 = 0; g0 < D; g0 += group_size) {
      double ss = 0;
      for (int64_t d = g0; d < g0 + group_size; ++d) ss += u[static_cast<size_t>(d)] * u[static_cast<size_t>(d)];
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(group_size) + eps);
      for (int64_t d = g0; d < g0 + group_size; ++d)
        py[r * D + d] = static_cast<float>(u[static_cast<size_t>(d)] * inv * pw[d]);
    }
  }
}

}  // namespace kapitsa::ops::ref
