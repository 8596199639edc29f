// CPU normalisations (RMSNorm, gated RMSNorm, L2 norm): one row per step, sum of squares in SIMD
// f32, rows split across threads. Each element is read before it is written, so y may alias x.
#include "base/thread_pool.h"
#include "ops/cpu/level.h"
#include "ops/cpu/simd.h"

#include <algorithm>
#include <cmath>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {
namespace {

float sum_squares(const float* x, int64_t D) {
  using namespace simd;
  vf a0 = zero(), a1 = zero();
  int64_t d = 0;
  for (; d + 2 * kW <= D; d += 2 * kW) {
    const vf x0 = load(x + d), x1 = load(x + d + kW);
    a0 = simd::fma(x0, x0, a0);
    a1 = simd::fma(x1, x1, a1);
  }
  for (; d + kW <= D; d += kW) {
    const vf x0 = load(x + d);
    a0 = simd::fma(x0, x0, a0);
  }
  float s = reduce_add(add(a0, a1));
  for (; d < D; ++d) s += x[d] * x[d];
  return s;
}

// Rows of D split across threads, ≥ ~16K elements per chunk.
template <class F>
void for_rows(int64_t R, int64_t D, F&& f) {
  const size_t grain = static_cast<size_t>(std::max<int64_t>(1, 16384 / std::max<int64_t>(D, 1)));
  parallel_for(static_cast<size_t>(R), grain, [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) f(static_cast<int64_t>(r));
  });
}

}  // namespace

// x, y: [R, D];  w: [D] f32.
void rms_norm(const Tensor& x, const Tensor& w, float eps, float weight_offset, const Tensor& y) {
  const int64_t D = x.dim(-1), R = D == 0 ? 0 : x.numel() / D;
  const float *px = x.f32(), *pw = w.f32();
  float* py = y.f32();
  for_rows(R, D, [&](int64_t r) {
    using namespace simd;
    const float* xr = px + r * D;
    float* yr = py + r * D;
    const float inv = static_cast<float>(1.0 / std::sqrt(static_cast<double>(sum_squares(xr, D)) / D + eps));
    const vf vinv = set1(inv), voff = set1(weight_offset);
    int64_t d = 0;
    for (; d + kW <= D; d += kW) store(yr + d, mul(mul(load(xr + d), vinv), add(voff, load(pw + d))));
    for (; d < D; ++d) yr[d] = xr[d] * inv * (weight_offset + pw[d]);
  });
}

// x, delta, y: [R, D];  w: [D] f32. The add, then the norm above (separate passes: on the CPU the
// fusion would save little, the rows are in cache).
void add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps, float weight_offset,
                  const Tensor& y) {
  KAPITSA_CPU_LEVEL::add(x, delta, x);
  KAPITSA_CPU_LEVEL::rms_norm(x, w, eps, weight_offset, y);
}

// x, z, y: [R, D];  w: [D] f32.
void rms_norm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, const Tensor& y) {
  const int64_t D = x.dim(-1), R = D == 0 ? 0 : x.numel() / D;
  const float *px = x.f32(), *pz = z.f32(), *pw = w.f32();
  float* py = y.f32();
  for_rows(R, D, [&](int64_t r) {
    using namespace simd;
    const float *xr = px + r * D, *zr = pz + r * D;
    float* yr = py + r * D;
    const float inv = static_cast<float>(1.0 / std::sqrt(static_cast<double>(sum_squares(xr, D)) / D + eps));
    const vf vinv = set1(inv);
    int64_t d = 0;
    for (; d + kW <= D; d += kW)
      store(yr + d, mul(mul(mul(load(xr + d), vinv), load(pw + d)), simd::silu(load(zr + d))));
    for (; d < D; ++d) yr[d] = xr[d] * inv * pw[d] * (zr[d] / (1.0f + std::exp(-zr[d])));
  });
}

// x, y: [R, D].
void l2_norm(const Tensor& x, float eps, float scale, const Tensor& y) {
  const int64_t D = x.dim(-1), R = D == 0 ? 0 : x.numel() / D;
  const float* px = x.f32();
  float* py = y.f32();
  for_rows(R, D, [&](int64_t r) {
    using namespace simd;
    const float* xr = px + r * D;
    float* yr = py + r * D;
    const float f = static_cast<float>(scale / std::sqrt(static_cast<double>(sum_squares(xr, D)) + eps));
    const vf vf_ = set1(f);
    int64_t d = 0;
    for (; d + kW <= D; d += kW) store(yr + d, mul(load(xr + d), vf_));
    for (; d < D; ++d) yr[d] = xr[d] * f;
  });
}

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
