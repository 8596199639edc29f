// CPU elementwise ops (add, SwiGLU, sigmoid gate, relu²): SIMD over contiguous elements, split across
// threads in chunks of ≥ 16K elements. Index-for-index, so in-place use is safe.
#include "base/thread_pool.h"
#include "ops/cpu/level.h"
#include "ops/cpu/simd.h"

#include <algorithm>
#include <cmath>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {
namespace {

constexpr size_t kGrain = 16384;

// y[i] = fv(a[i], b[i]), the tail too through fv (padded): an element's value does not depend on where
// it sits (a vector lane or the tail, which moves with the row count and the threads' chunks), so a row
// of a many-row step gets the bits it gets alone (silu and sigmoid differ between simd and std::exp).
template <class FV>
void binary(const float* a, const float* b, float* y, int64_t n, FV fv) {
  parallel_for(static_cast<size_t>(n), kGrain, [&](size_t begin, size_t end) {
    size_t i = begin;
    for (; i + simd::kW <= end; i += simd::kW) simd::store(y + i, fv(simd::load(a + i), simd::load(b + i)));
    if (i == end) return;
    float ta[simd::kW] = {}, tb[simd::kW] = {}, ty[simd::kW];
    std::copy(a + i, a + end, ta), std::copy(b + i, b + end, tb);
    simd::store(ty, fv(simd::load(ta), simd::load(tb)));
    std::copy(ty, ty + (end - i), y + i);
  });
}

}  // namespace

void add(const Tensor& a, const Tensor& b, const Tensor& y) {
  binary(a.f32(), b.f32(), y.f32(), y.numel(), [](simd::vf p, simd::vf q) { return simd::add(p, q); });
}

// gate, up, y: [R, I].
void silu_mul(const Tensor& gate, const Tensor& up, const Tensor& y) {
  binary(gate.f32(), up.f32(), y.f32(), y.numel(), [](simd::vf g, simd::vf u) { return simd::mul(simd::silu(g), u); });
}

// x, y: [R, C];  gate: [R, C] or [R, 1].
void mul_sigmoid(const Tensor& x, const Tensor& gate, const Tensor& y) {
  const int64_t C = x.dim(-1), R = C == 0 ? 0 : x.numel() / C;
  if (gate.numel() == x.numel()) {
    binary(x.f32(), gate.f32(), y.f32(), y.numel(),
           [](simd::vf v, simd::vf g) { return simd::mul(v, simd::sigmoid(g)); });
    return;
  }
  const float *px = x.f32(), *pg = gate.f32();
  float* py = y.f32();
  parallel_for(static_cast<size_t>(R), std::max<size_t>(1, kGrain / static_cast<size_t>(std::max<int64_t>(C, 1))),
               [&](size_t begin, size_t end) {
                 for (size_t r = begin; r < end; ++r) {
                   const float s = 1.0f / (1.0f + std::exp(-pg[r]));
                   const simd::vf vs = simd::set1(s);
                   const float* xr = px + r * C;
                   float* yr = py + r * C;
                   int64_t c = 0;
                   for (; c + simd::kW <= C; c += simd::kW) simd::store(yr + c, simd::mul(simd::load(xr + c), vs));
                   for (; c < C; ++c) yr[c] = xr[c] * s;
                 }
               });
}

void relu_squared(const Tensor& x, const Tensor& y) {
  const float* px = x.f32();
  float* py = y.f32();
  parallel_for(static_cast<size_t>(y.numel()), kGrain, [&](size_t begin, size_t end) {
    size_t i = begin;
    for (; i + simd::kW <= end; i += simd::kW) {
      const simd::vf r = simd::max(simd::load(px + i), simd::zero());
      simd::store(py + i, simd::mul(r, r));
    }
    for (; i < end; ++i) {
      const float r = px[i] > 0 ? px[i] : 0.0f;
      py[i] = r * r;
    }
  });
}

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
