// CUDA causal depthwise conv1d with a carried window, for one sequence or a SeqBatch (the batch's spans
// copied to the device in one transfer): checks, then the kernel of conv1d.cu.
#include "ops/cuda/cuda.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/runtime.h"

#include <algorithm>

namespace kapitsa::ops::cuda {
using detail::check_f32;

namespace {
// x: [T, C];  w: [C, K];  returns K after checking the kernel's width limit.
int64_t check_conv(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const char* op) {
  check_f32(x, op, "x"), check_f32(w, op, "w"), check_f32(y, op, "y");
  KAPITSA_CHECK(w.rank() == 2, "{}: w must be [C, K], got {}", op, w.shape().str());
  const int64_t C = w.dim(0), K = w.dim(1);
  KAPITSA_CHECK(K >= 1 && K <= kernels::kConvMaxWidth, "{}: kernel width {} outside [1, {}]", op, K,
                kernels::kConvMaxWidth);
  KAPITSA_CHECK(x.dim(-1) == C && y.shape() == x.shape(), "{}: x {}, y {} for {} channels", op, x.shape().str(),
                y.shape().str(), C);
  if (!bias.empty()) {
    check_f32(bias, op, "bias");
    KAPITSA_CHECK(bias.numel() == C, "{}: bias {} for {} channels", op, bias.shape().str(), C);
  }
  return K;
}
}  // namespace

// x, y: [T, C];  w: [C, K] f32;  bias: [C] f32 or empty;  window: [K-1, C] f32, in/out.
void conv1d_causal(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& window, bool silu,
                   const Tensor& y) {
  const int64_t K = check_conv(x, w, bias, y, "conv1d_causal"), C = w.dim(0);
  KAPITSA_CHECK(window.numel() == (K - 1) * C, "conv1d_causal: window {} must be [{}, {}]", window.shape().str(), K - 1,
                C);
  if (K > 1) check_f32(window, "conv1d_causal", "window");
  kernels::conv1d_causal(x.f32(), w.f32(), bias.empty() ? nullptr : bias.f32(), K > 1 ? window.f32() : nullptr, silu,
                         y.f32(), detail::rows_of(x), C, K, kernels::Seqs{}, detail::rows_of(x), detail::stream());
  detail::check_launch("conv1d_causal");
}

// x, y: [T, C];  windows: [n_slots, K-1, C] (checked with the batch in ops.cpp).
void conv1d_causal_varlen(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& windows, bool silu,
                          const SeqBatch& batch, const Tensor& y) {
  const int64_t K = check_conv(x, w, bias, y, "conv1d_causal_varlen"), C = w.dim(0);
  if (K > 1) check_f32(windows, "conv1d_causal_varlen", "windows");
  detail::HostPack pack;
  const detail::SeqsInPack at = detail::add_seqs(pack, batch);
  pack.upload();
  int64_t longest = 0;
  for (int64_t i = 0; i < batch.n_seqs(); ++i) longest = std::max(longest, batch.rows(i));
  kernels::conv1d_causal(x.f32(), w.f32(), bias.empty() ? nullptr : bias.f32(), K > 1 ? windows.f32() : nullptr, silu,
                         y.f32(), detail::rows_of(x), C, K, detail::device_seqs(pack, at, batch), longest,
                         detail::stream());
  detail::check_launch("conv1d_causal_varlen");
}

}  // namespace kapitsa::ops::cuda
