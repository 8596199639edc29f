// CUDA MoE plumbing: softmax routing, gather_rows and scale_add_rows (kernels in moe.cu). Row lists
// and weights arrive as host spans; rows are checked on the host, then copied to the device.
#include "ops/cuda/cuda.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/runtime.h"

namespace kapitsa::ops::cuda {
using detail::check_f32;
using detail::Slot;
using detail::upload;

namespace {
void check_rows(std::span<const int32_t> rows, int64_t T, const char* op) {
  for (size_t r = 0; r < rows.size(); ++r)
    KAPITSA_CHECK(0 <= rows[r] && rows[r] < T, "{}: row {} at {} outside [0, {})", op, rows[r], r, T);
}
}  // namespace

// logits: [T, E];  expert_ids: [T, k] i32;  expert_weights: [T, k] f32.
void moe_route_softmax(const Tensor& logits, int k, bool renormalize, const Tensor& expert_ids,
                       const Tensor& expert_weights) {
  check_f32(logits, "moe_route_softmax", "logits"), check_f32(expert_weights, "moe_route_softmax", "expert_weights");
  KAPITSA_CHECK(expert_ids.dtype() == DType::i32, "moe_route_softmax: expert_ids must be I32, got {}",
                dtype_name(expert_ids.dtype()));
  detail::check_on_device(expert_ids, "moe_route_softmax", "expert_ids");
  const int64_t E = logits.dim(-1), T = detail::rows_of(logits);
  KAPITSA_CHECK(k >= 1 && k <= E, "moe_route_softmax: k = {} with {} experts", k, E);
  KAPITSA_CHECK(expert_ids.numel() == T * k && expert_weights.numel() == T * k,
                "moe_route_softmax: expert_ids {} / expert_weights {} must be [{}, {}]", expert_ids.shape().str(),
                expert_weights.shape().str(), T, k);
  kernels::moe_route_softmax(logits.f32(), T, E, k, renormalize, expert_ids.data_as<int32_t>(), expert_weights.f32(),
                             detail::stream());
  detail::check_launch("moe_route_softmax");
}

// x: [T, H];  out: [R, H];  rows: [R].
void gather_rows(const Tensor& x, std::span<const int32_t> rows, const Tensor& out) {
  check_f32(x, "gather_rows", "x"), check_f32(out, "gather_rows", "out");
  const int64_t H = x.dim(-1), R = static_cast<int64_t>(rows.size());
  KAPITSA_CHECK(out.dim(-1) == H && out.numel() == R * H, "gather_rows: out {} for {} rows of width {}", out.shape().str(),
                R, H);
  check_rows(rows, detail::rows_of(x), "gather_rows");
  kernels::gather_rows(x.f32(), upload(rows, Slot::span0), out.f32(), R, H, detail::stream());
  detail::check_launch("gather_rows");
}

// src: [R, H];  dst: [T, H];  rows, weights: [R].
void scale_add_rows(const Tensor& src, std::span<const int32_t> rows, std::span<const float> weights,
                    const Tensor& dst) {
  check_f32(src, "scale_add_rows", "src"), check_f32(dst, "scale_add_rows", "dst");
  const int64_t H = dst.dim(-1), R = static_cast<int64_t>(rows.size());
  KAPITSA_CHECK(weights.size() == rows.size(), "scale_add_rows: {} weights for {} rows", weights.size(), rows.size());
  KAPITSA_CHECK(src.dim(-1) == H && src.numel() == R * H, "scale_add_rows: src {} for {} rows of width {}",
                src.shape().str(), R, H);
  check_rows(rows, detail::rows_of(dst), "scale_add_rows");
  kernels::scale_add_rows(src.f32(), upload(rows, Slot::span0), upload(weights, Slot::span1), dst.f32(), R, H,
                          detail::stream());
  detail::check_launch("scale_add_rows");
}

}  // namespace kapitsa::ops::cuda
