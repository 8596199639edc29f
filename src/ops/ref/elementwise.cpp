// Reference elementwise ops: add, SwiGLU, sigmoid gate, relu². f32 only; in-place allowed for each
// because every output element depends only on the inputs at the same index (or the same row).
#include "ops/ref/ref.h"
#include "ops/ref/ref_util.h"

#include <cmath>

namespace kapitsa::ops::ref {
using detail::check_f32;

namespace {
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
void check_same(const Tensor& a, const Tensor& b, const char* op) {
  KAPITSA_CHECK(a.numel() == b.numel(), "{}: {} vs {}", op, a.shape().str(), b.shape().str());
}
}  // namespace

void add(const Tensor& a, const Tensor& b, const Tensor& y) {
  check_f32(a, "add", "a"), check_f32(b, "add", "b"), check_f32(y, "add", "y");
  check_same(a, b, "add"), check_same(a, y, "add");
  const float *pa = a.f32(), *pb = b.f32();
  float* py = y.f32();
  for (int64_t i = 0; i < y.numel(); ++i) py[i] = pa[i] + pb[i];
}

// gate, up, y: [R, I].
void silu_mul(const Tensor& gate, const Tensor& up, const Tensor& y) {
  check_f32(gate, "silu_mul", "gate"), check_f32(up, "silu_mul", "up"), check_f32(y, "silu_mul", "y");
  check_same(gate, up, "silu_mul"), check_same(gate, y, "silu_mul");
  const float *g = gate.f32(), *u = up.f32();
  float* py = y.f32();
  for (int64_t i = 0; i < y.numel(); ++i) py[i] = static_cast<float>(g[i] * sigmoid(g[i]) * u[i]);
}

// x, y: [R, C];  gate: [R, C] or [R, 1].
void mul_sigmoid(const Tensor& x, const Tensor& gate, const Tensor& y) {
  check_f32(x, "mul_sigmoid", "x"), check_f32(gate, "mul_sigmoid", "gate"), check_f32(y, "mul_sigmoid", "y");
  check_same(x, y, "mul_sigmoid");
  const int64_t C = x.dim(-1), R = detail::rows_of(x);
  const bool broadcast = gate.numel() != x.numel();
  KAPITSA_CHECK(!broadcast || gate.numel() == R, "mul_sigmoid: gate {} is neither {} nor [{}, 1]",
                gate.shape().str(), x.shape().str(), R);
  const float *px = x.f32(), *pg = gate.f32();
  float* py = y.f32();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const double g = broadcast ? pg[r] : pg[r * C + c];
      py[r * C + c] = static_cast<float>(px[r * C + c] * sigmoid(g));
    }
}

void relu_squared(const Tensor& x, const Tensor& y) {
  check_f32(x, "relu_squared", "x"), check_f32(y, "relu_squared", "y");
  check_same(x, y, "relu_squared");
  const float* px = x.f32();
  float* py = y.f32();
  for (int64_t i = 0; i < y.numel(); ++i) {
    const float r = px[i] > 0 ? px[i] : 0.0f;
    py[i] = r * r;
  }
}

}  // namespace kapitsa::ops::ref
