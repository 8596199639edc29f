// Reference elementwise ops: add, SwiGLU, sigmoid gate, relu². f32 only; in-place allowed for each
// because every output element depends only on the inputs at the same index (or the same row).
#include "ops/ref/ref.h"
#include "ops/ref/ref_util.h"

#include <cmath>

namespace kapitsa::ops::ref {

namespace {
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

void add(const Tensor& a, const Tensor& b, const Tensor& y) {
  const float *pa = a.f32(), *pb = b.f32();
  float* py = y.f32();
  for (int64_t i = 0; i < y.numel(); ++i) py[i] = pa[i] + pb[i];
}

// gate, up, y: [R, I].
void silu_mul(const Tensor& gate, const Tensor& up, const Tensor& y) {
  const float *g = gate.f32(), *u = up.f32();
  float* py = y.f32();
  for (int64_t i = 0; i < y.numel(); ++i) py[i] = static_cast<float>(g[i] * sigmoid(g[i]) * u[i]);
}

// x, y: [R, C];  gate: [R, C] or [R, 1].
void mul_sigmoid(const Tensor& x, const Tensor& gate, const Tensor& y) {
  const int64_t C = x.dim(-1), R = detail::rows_of(x);
  const bool broadcast = gate.numel() != x.numel();
  const float *px = x.f32(), *pg = gate.f32();
  float* py = y.f32();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const double g = broadcast ? pg[r] : pg[r * C + c];
      py[r * C + c] = static_cast<float>(px[r * C + c] * sigmoid(g));
    }
}

void relu_squared(const Tensor& x, const Tensor& y) {
  const float* px = x.f32();
  float* py = y.f32();
  for (int64_t i = 0; i < y.numel(); ++i) {
    const float r = px[i] > 0 ? px[i] : 0.0f;
    py[i] = r * r;
  }
}

}  // namespace kapitsa::ops::ref
