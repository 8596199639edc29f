// CPU gated group RMSNorm, gate first (Mamba-2 output norm): u = x·silu(z) in SIMD, per-group sum of
// squares, scale by w; rows split across threads. Each row is gated into a scratch row first, so y
// may alias x.
#include "base/thread_pool.h"
#include "ops/cpu/level.h"
#include "ops/cpu/simd.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {

// x, z, y: [R, D];  w: [D] f32.
void rms_norm_group_gated(const Tensor& x, const Tensor& z, const Tensor& w, int64_t group_size, float eps,
                          const Tensor& y) {
  const int64_t D = x.dim(-1), R = D == 0 ? 0 : x.numel() / D;
  const float *px = x.f32(), *pz = z.f32(), *pw = w.f32();
  float* py = y.f32();
  const size_t grain = static_cast<size_t>(std::max<int64_t>(1, 16384 / std::max<int64_t>(D, 1)));
  parallel_for(static_cast<size_t>(R), grain, [&](size_t begin, size_t end) {
    using namespace simd;
    std::vector<float> u(static_cast<size_t>(D));
    for (size_t r = begin; r < end; ++r) {
      const float *xr = px + static_cast<int64_t>(r) * D, *zr = pz + static_cast<int64_t>(r) * D;
      float* yr = py + static_cast<int64_t>(r) * D;
      int64_t d = 0;
      for (; d + kW <= D; d += kW) store(u.data() + d, mul(load(xr + d), simd::silu(load(zr + d))));
      for (; d < D; ++d) u[static_cast<size_t>(d)] = xr[d] * (zr[d] / (1.0f + std::exp(-zr[d])));
      for (int64_t g0 = 0; g0 < D; g0 += group_size) {
        const float* ug = u.data() + g0;
        vf acc = zero();
        int64_t i = 0;
        for (; i + kW <= group_size; i += kW) acc = simd::fma(load(ug + i), load(ug + i), acc);
        float ss = reduce_add(acc);
        for (; i < group_size; ++i) ss += ug[i] * ug[i];
        const float inv = static_cast<float>(1.0 / std::sqrt(static_cast<double>(ss) / group_size + eps));
        const vf vinv = set1(inv);
        i = 0;
        for (; i + kW <= group_size; i += kW) store(yr + g0 + i, mul(mul(load(ug + i), vinv), load(pw + g0 + i)));
        for (; i < group_size; ++i) yr[g0 + i] = ug[i] * inv * pw[g0 + i];
      }
    }
  });
}

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
