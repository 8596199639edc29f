// CUDA causal depthwise conv1d with a carried window: checks, then the kernel of conv1d.cu.
#include "ops/cuda/cuda.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/runtime.h"

namespace kapitsa::ops::cuda {
using detail::check_f32;

// x, y: [T, C];  w: [C, K] f32;  bias: [C] f32 or empty;  window: [K-1, C] f32, in/out.
void conv1d_causal(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& window, bool silu,
                   const Tensor& y) {
  check_f32(x, "conv1d_causal", "x"), check_f32(w, "conv1d_causal", "w"), check_f32(y, "conv1d_causal", "y");
  KAPITSA_CHECK(w.rank() == 2, "conv1d_causal: w must be [C, K], got {}", w.shape().str());
  const int64_t C = w.dim(0), K = w.dim(1);
  KAPITSA_CHECK(K >= 1 && K <= kernels::kConvMaxWidth, "conv1d_causal: kernel width {} outside [1, {}]", K,
                kernels::kConvMaxWidth);
  KAPITSA_CHECK(x.dim(-1) == C && y.shape() == x.shape(), "conv1d_causal: x {}, y {} for {} channels", x.shape().str(),
                y.shape().str(), C);
  KAPITSA_CHECK(window.numel() == (K - 1) * C, "conv1d_causal: window {} must be [{}, {}]", window.shape().str(), K - 1,
                C);
  if (K > 1) check_f32(window, "conv1d_causal", "window");
  if (!bias.empty()) {
    check_f32(bias, "conv1d_causal", "bias");
    KAPITSA_CHECK(bias.numel() == C, "conv1d_causal: bias {} for {} channels", bias.shape().str(), C);
  }
  kernels::conv1d_causal(x.f32(), w.f32(), bias.empty() ? nullptr : bias.f32(), K > 1 ? window.f32() : nullptr, silu,
                         y.f32(), detail::rows_of(x), C, K, detail::stream());
  detail::check_launch("conv1d_causal");
}

}  // namespace kapitsa::ops::cuda
