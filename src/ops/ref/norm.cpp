// Reference normalisations: RMSNorm (plain and zero-centred via weight_offset), gated RMSNorm
// (norm first, then · silu(z)), L2 norm. Row statistics in double; each output element is written
// after its own input was read, so y may alias x.
#include "ops/ref/ref.h"
#include "ops/ref/ref_util.h"

#include <cmath>

namespace kapitsa::ops::ref {

// x, y: [R, D];  w: [D] f32.
void rms_norm(const Tensor& x, const Tensor& w, float eps, float weight_offset, const Tensor& y) {
  const int64_t D = x.dim(-1), R = detail::rows_of(x);
  const float *px = x.f32(), *pw = w.f32();
  float* py = y.f32();
  for (int64_t r = 0; r < R; ++r) {
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += static_cast<double>(px[r * D + d]) * px[r * D + d];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(D) + eps);
    for (int64_t d = 0; d < D; ++d)
      py[r * D + d] = static_cast<float>(px[r * D + d] * inv * (static_cast<double>(weight_offset) + pw[d]));
  }
}

// x, delta, y: [R, D];  w: [D] f32. The add rounds to f32 first (as ops::add), then the norm as above.
void add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps, float weight_offset,
                  const Tensor& y) {
  float* px = x.f32();
  const float* pd = delta.f32();
  for (int64_t i = 0; i < x.numel(); ++i) px[i] = px[i] + pd[i];
  rms_norm(x, w, eps, weight_offset, y);
}

// x, z, y: [R, D];  w: [D] f32.
void rms_norm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, const Tensor& y) {
  const int64_t D = x.dim(-1), R = detail::rows_of(x);
  const float *px = x.f32(), *pz = z.f32(), *pw = w.f32();
  float* py = y.f32();
  for (int64_t r = 0; r < R; ++r) {
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += static_cast<double>(px[r * D + d]) * px[r * D + d];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(D) + eps);
    for (int64_t d = 0; d < D; ++d) {
      const double zz = pz[r * D + d];
      const double silu = zz / (1.0 + std::exp(-zz));
      py[r * D + d] = static_cast<float>(px[r * D + d] * inv * pw[d] * silu);
    }
  }
}

// x, y: [R, D].
void l2_norm(const Tensor& x, float eps, float scale, const Tensor& y) {
  const int64_t D = x.dim(-1), R = detail::rows_of(x);
  const float* px = x.f32();
  float* py = y.f32();
  for (int64_t r = 0; r < R; ++r) {
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += static_cast<double>(px[r * D + d]) * px[r * D + d];
    const double f = static_cast<double>(scale) / std::sqrt(ss + eps);
    for (int64_t d = 0; d < D; ++d) py[r * D + d] = static_cast<float>(px[r * D + d] * f);
  }
}

}  // namespace kapitsa::ops::ref
