// CUDA elementwise ops (add, SwiGLU, sigmoid gate, relu²): checks, then the kernels of elementwise.cu.
#include "ops/cuda/cuda.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/runtime.h"

namespace kapitsa::ops::cuda {
using detail::check_f32;
using detail::check_launch;
using detail::stream;

namespace {
void check_same(const Tensor& a, const Tensor& b, const char* op) {
  KAPITSA_CHECK(a.numel() == b.numel(), "{}: {} vs {}", op, a.shape().str(), b.shape().str());
}
}  // namespace

void add(const Tensor& a, const Tensor& b, const Tensor& y) {
  check_f32(a, "add", "a"), check_f32(b, "add", "b"), check_f32(y, "add", "y");
  check_same(a, b, "add"), check_same(a, y, "add");
  kernels::add(a.f32(), b.f32(), y.f32(), y.numel(), stream());
  check_launch("add");
}

// gate, up, y: [R, I].
void silu_mul(const Tensor& gate, const Tensor& up, const Tensor& y) {
  check_f32(gate, "silu_mul", "gate"), check_f32(up, "silu_mul", "up"), check_f32(y, "silu_mul", "y");
  check_same(gate, up, "silu_mul"), check_same(gate, y, "silu_mul");
  kernels::silu_mul(gate.f32(), up.f32(), y.f32(), y.numel(), stream());
  check_launch("silu_mul");
}

// x, y: [R, C];  gate: [R, C] or [R, 1].
void mul_sigmoid(const Tensor& x, const Tensor& gate, const Tensor& y) {
  check_f32(x, "mul_sigmoid", "x"), check_f32(gate, "mul_sigmoid", "gate"), check_f32(y, "mul_sigmoid", "y");
  check_same(x, y, "mul_sigmoid");
  const int64_t C = x.dim(-1), R = detail::rows_of(x);
  const bool broadcast = gate.numel() != x.numel();
  KAPITSA_CHECK(!broadcast || gate.numel() == R, "mul_sigmoid: gate {} is neither {} nor [{}, 1]", gate.shape().str(),
                x.shape().str(), R);
  kernels::mul_sigmoid(x.f32(), gate.f32(), y.f32(), R, C, broadcast, stream());
  check_launch("mul_sigmoid");
}

void relu_squared(const Tensor& x, const Tensor& y) {
  check_f32(x, "relu_squared", "x"), check_f32(y, "relu_squared", "y");
  check_same(x, y, "relu_squared");
  kernels::relu_squared(x.f32(), y.f32(), y.numel(), stream());
  check_launch("relu_squared");
}

}  // namespace kapitsa::ops::cuda
