// Reference causal depthwise conv1d with a carried window of the last K-1 inputs (so a sequence can
// be fed in pieces). Builds the extended input x̃ = [window; x] explicitly, which also makes it safe
// against y aliasing x.
#include "ops/ref/ref.h"
#include "ops/ref/ref_util.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace kapitsa::ops::ref {
using detail::check_f32;

// x, y: [T, C];  w: [C, K] f32;  bias: [C] f32 or empty;  window: [K-1, C] f32, in/out.
void conv1d_causal(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& window, bool silu,
                   const Tensor& y) {
  check_f32(x, "conv1d_causal", "x"), check_f32(w, "conv1d_causal", "w"), check_f32(y, "conv1d_causal", "y");
  KAPITSA_CHECK(w.rank() == 2, "conv1d_causal: w must be [C, K], got {}", w.shape().str());
  const int64_t C = w.dim(0), K = w.dim(1);
  KAPITSA_CHECK(K >= 1, "conv1d_causal: kernel width {}", K);
  KAPITSA_CHECK(x.dim(-1) == C && y.shape() == x.shape(), "conv1d_causal: x {}, y {} for {} channels",
                x.shape().str(), y.shape().str(), C);
  const int64_t T = detail::rows_of(x);
  KAPITSA_CHECK(window.dtype() == DType::f32 && window.numel() == (K - 1) * C,
                "conv1d_causal: window {} ({}) must be [{}, {}] F32", window.shape().str(),
                dtype_name(window.dtype()), K - 1, C);
  const bool has_bias = !bias.empty();
  if (has_bias) {
    check_f32(bias, "conv1d_causal", "bias");
    KAPITSA_CHECK(bias.numel() == C, "conv1d_causal: bias {} for {} channels", bias.shape().str(), C);
  }
  const int64_t L = K - 1 + T;
  std::vector<float> xt(static_cast<size_t>(L * C));
  if (K > 1) std::memcpy(xt.data(), window.data(), static_cast<size_t>((K - 1) * C) * sizeof(float));
  if (T > 0) std::memcpy(xt.data() + (K - 1) * C, x.data(), static_cast<size_t>(T * C) * sizeof(float));
  const float* pw = w.f32();
  float* py = y.f32();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) {
      double acc = has_bias ? bias.f32()[c] : 0.0;
      for (int64_t j = 0; j < K; ++j) acc += static_cast<double>(pw[c * K + j]) * xt[static_cast<size_t>((t + j) * C + c)];
      if (silu) acc = acc / (1.0 + std::exp(-acc));
      py[t * C + c] = static_cast<float>(acc);
    }
  if (K > 1)
    std::memcpy(window.data(), xt.data() + (L - (K - 1)) * C, static_cast<size_t>((K - 1) * C) * sizeof(float));
}

}  // namespace kapitsa::ops::ref
