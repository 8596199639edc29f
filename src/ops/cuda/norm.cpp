// CUDA row normalisations (RMSNorm, residual add + RMSNorm, gated RMSNorm, L2 norm): checks, then the kernels of norm.cu.
#include "ops/cuda/cuda.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/runtime.h"

namespace kapitsa::ops::cuda {
using detail::check_f32;
using detail::check_launch;
using detail::rows_of;
using detail::stream;

// x, y: [R, D];  w: [D] f32.
void rms_norm(const Tensor& x, const Tensor& w, float eps, float weight_offset, const Tensor& y) {
  check_f32(x, "rms_norm", "x"), check_f32(w, "rms_norm", "w"), check_f32(y, "rms_norm", "y");
  const int64_t D = x.dim(-1), R = rows_of(x);
  KAPITSA_CHECK(w.numel() == D && y.numel() == x.numel(), "rms_norm: x {}, w {}, y {}", x.shape().str(),
                w.shape().str(), y.shape().str());
  kernels::rms_norm(x.f32(), w.f32(), eps, weight_offset, y.f32(), R, D, stream());
  check_launch("rms_norm");
}

// x, delta, y: [R, D];  w: [D] f32 (x, delta, y distinct: checked in ops.cpp).
void add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps, float weight_offset,
                  const Tensor& y) {
  check_f32(x, "add_rms_norm", "x"), check_f32(delta, "add_rms_norm", "delta");
  check_f32(w, "add_rms_norm", "w"), check_f32(y, "add_rms_norm", "y");
  const int64_t D = x.dim(-1), R = rows_of(x);
  KAPITSA_CHECK(w.numel() == D && y.numel() == x.numel() && delta.numel() == x.numel(),
                "add_rms_norm: x {}, delta {}, w {}, y {}", x.shape().str(), delta.shape().str(), w.shape().str(),
                y.shape().str());
  kernels::add_rms_norm(x.f32(), delta.f32(), w.f32(), eps, weight_offset, y.f32(), R, D, stream());
  check_launch("add_rms_norm");
}

// x, z, y: [R, D];  w: [D] f32.
void rms_norm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, const Tensor& y) {
  check_f32(x, "rms_norm_gated", "x"), check_f32(z, "rms_norm_gated", "z");
  check_f32(w, "rms_norm_gated", "w"), check_f32(y, "rms_norm_gated", "y");
  const int64_t D = x.dim(-1), R = rows_of(x);
  KAPITSA_CHECK(w.numel() == D && y.numel() == x.numel() && z.numel() == x.numel(), "rms_norm_gated: x {}, z {}, w {}, y {}",
                x.shape().str(), z.shape().str(), w.shape().str(), y.shape().str());
  kernels::rms_norm_gated(x.f32(), z.f32(), w.f32(), eps, y.f32(), R, D, stream());
  check_launch("rms_norm_gated");
}

// x, y: [R, D].
void l2_norm(const Tensor& x, float eps, float scale, const Tensor& y) {
  check_f32(x, "l2_norm", "x"), check_f32(y, "l2_norm", "y");
  KAPITSA_CHECK(y.numel() == x.numel(), "l2_norm: y {} vs x {}", y.shape().str(), x.shape().str());
  kernels::l2_norm(x.f32(), eps, scale, y.f32(), rows_of(x), x.dim(-1), stream());
  check_launch("l2_norm");
}

}  // namespace kapitsa::ops::cuda
