// CUDA gated group RMSNorm (Mamba-2 output norm): checks, then the kernel of norm_group.cu.
#include "ops/cuda/cuda.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/runtime.h"

namespace kapitsa::ops::cuda {
using detail::check_f32;

// x, z, y: [R, D];  w: [D] f32.
void rms_norm_group_gated(const Tensor& x, const Tensor& z, const Tensor& w, int64_t group_size, float eps,
                          const Tensor& y) {
  check_f32(x, "rms_norm_group_gated", "x"), check_f32(z, "rms_norm_group_gated", "z");
  check_f32(w, "rms_norm_group_gated", "w"), check_f32(y, "rms_norm_group_gated", "y");
  const int64_t D = x.dim(-1), R = detail::rows_of(x);
  KAPITSA_CHECK(group_size >= 1 && D % group_size == 0, "rms_norm_group_gated: group size {} for rows of {}", group_size,
                D);
  KAPITSA_CHECK(w.numel() == D && y.numel() == x.numel() && z.numel() == x.numel(),
                "rms_norm_group_gated: x {}, z {}, w {}, y {}", x.shape().str(), z.shape().str(), w.shape().str(),
                y.shape().str());
  kernels::rms_norm_group_gated(x.f32(), z.f32(), w.f32(), group_size, eps, y.f32(), R, D, detail::stream());
  detail::check_launch("rms_norm_group_gated");
}

}  // namespace kapitsa::ops::cuda
