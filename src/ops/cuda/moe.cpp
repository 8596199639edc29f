// CUDA MoE plumbing: softmax routing, gather_rows and scale_add_rows (kernels in moe.cu). Row lists
// and weights arrive as host spans; rows are checked on the host, then copied to the device. The
// device-routed pair (matmul_experts, moe_combine) reads the router's ids and weights where the router
// wrote them: only the experts' weight pointers travel (host → device, no wait).
#include "ops/cuda/cuda.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/runtime.h"
#include "tensor/ggml_type.h"

#include <cstdint>
#include <vector>

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
  KAPITSA_CHECK(E <= kernels::kMoeMaxExperts, "moe_route_softmax: {} experts (the cuda router takes at most {})", E,
                kernels::kMoeMaxExperts);
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
  std::vector<bool> seen(static_cast<size_t>(detail::rows_of(dst)));
  bool distinct = true;
  for (int32_t r : rows) distinct = distinct && !seen[static_cast<size_t>(r)], seen[static_cast<size_t>(r)] = true;
  kernels::scale_add_rows(src.f32(), upload(rows, Slot::span0), upload(weights, Slot::span1), dst.f32(), R, H,
                          distinct, detail::stream());
  detail::check_launch("scale_add_rows");
}

namespace {
// matmul_experts over MLX affine experts (one shape, checked by ops::matmul_experts): the experts' codes,
// scales and biases as a device table (uploaded once: the model's constants), x rounded once for the
// 4-bit int16 GEMV.
void affine_experts(const Tensor& x, std::span<const Linear> experts, const Tensor& expert_ids, const Tensor& y,
                    kernels::Epilogue act, const char* op) {
  const kernels::AffineArgs a = detail::affine_args(experts.front(), op);
  KAPITSA_CHECK(kernels::affine_experts_supported(a), "{}: affine experts of {} bits, groups of {} (the cuda backend "
                "runs 2, 3, 4, 5, 6 or 8 bits in groups of a power of two ≥ 32)", op, a.bits, a.group_size);
  std::vector<kernels::AffineExpert> table;
  table.reserve(experts.size());
  bool aligned = reinterpret_cast<uintptr_t>(x.data()) % 16 == 0;
  for (const Linear& w : experts) {
    const kernels::AffineArgs e = detail::affine_args(w, op);
    aligned = aligned && reinterpret_cast<uintptr_t>(e.words) % 16 == 0;
    table.push_back({e.words, e.scales, e.biases});
  }
  const auto* device_table = static_cast<const kernels::AffineExpert*>(
      detail::upload_constant(table.data(), table.size() * sizeof(kernels::AffineExpert)));
  const int64_t T = expert_ids.dim(0), k = expert_ids.dim(1), K = a.K;
  const void* scratch = kernels::affine_experts_int16(a, aligned)
                            ? detail::scratch(Slot::temp0, kernels::affine_int16_scratch_bytes(T, K))
                            : nullptr;
  const kernels::ExpertRoute route{device_table, expert_ids.data_as<const int32_t>(),
                                   static_cast<int64_t>(experts.size()), k};
  kernels::affine_experts(x.f32(), scratch, a, route, y.f32(), T, experts.front().rows(), aligned, detail::stream(), act);
  detail::check_launch(op);
}
// matmul_experts over llama.cpp block experts (one type and shape): the experts' block pointers as a
// device table (uploaded once), the routed GEMV (int8 x for Q8_0, Q4_K and Q6_K, as matmul).
void ggml_experts(const Tensor& x, std::span<const Linear> experts, const Tensor& expert_ids, const Tensor& y,
                  const char* op) {
  const kernels::GgmlArgs a = detail::ggml_args(experts.front(), op);
  KAPITSA_CHECK(reinterpret_cast<uintptr_t>(x.data()) % 16 == 0 && expert_ids.numel() <= 65535,
                "{}: block experts need x 16-byte aligned and at most 65535 (token, choice) pairs, got {}", op,
                expert_ids.numel());
  std::vector<const uint8_t*> table;
  table.reserve(experts.size());
  uintptr_t addresses = 0;
  for (const Linear& w : experts) {
    const kernels::GgmlArgs e = detail::ggml_args(w, op);
    KAPITSA_CHECK(e.type == a.type && e.row_bytes == a.row_bytes, "{}: experts of different block types", op);
    table.push_back(e.blocks);
    addresses |= reinterpret_cast<uintptr_t>(e.blocks);
  }
  const auto* device_table = static_cast<const uint8_t* const*>(
      detail::upload_constant(table.data(), table.size() * sizeof(const uint8_t*)));
  const kernels::GgmlRoute route{device_table, expert_ids.data_as<const int32_t>(), static_cast<int64_t>(experts.size()),
                                 expert_ids.dim(1)};
  const int64_t T = expert_ids.dim(0), N = experts.front().rows(), K = a.K, B = kernels::ggml_int8_block(a.type);
  if (B > 0 && K % B == 0 && kernels::ggml_int8_enabled()) {
    kernels::ggml_experts_int8(detail::rounded_x_int8(x, B), a, route, y.f32(), T, N, detail::stream());
  } else {
    kernels::ggml_experts(x.f32(), a, route, addresses, y.f32(), T, N, detail::stream());
  }
  detail::check_launch(op);
}

// x: [T, K];  experts[e]: [N, K] dense, MLX affine or llama.cpp blocks;  expert_ids: [T, k] i32 on the device;  y: [T·k, N].
// With act, relu² in the GEMVs' stores (the llama.cpp block GEMVs have no epilogue: a pass of its own).
void routed_experts(const Tensor& x, std::span<const Linear> experts, const Tensor& expert_ids, const Tensor& y,
                    kernels::Epilogue act, const char* op) {
  check_f32(x, op, "x"), check_f32(y, op, "y"), detail::check_on_device(expert_ids, op, "expert_ids");
  KAPITSA_CHECK(expert_ids.rank() == 2 && detail::rows_of(x) == expert_ids.dim(0) && x.dim(-1) == experts.front().cols(),
                "{}: x {} and expert_ids {} (x: [T, K] with the experts' K, expert_ids: [T, k])", op, x.shape().str(),
                expert_ids.shape().str());
  if (experts.front().format() == WeightFormat::affine) return affine_experts(x, experts, expert_ids, y, act, op);
  if (experts.front().format() == WeightFormat::ggml) {
    ggml_experts(x, experts, expert_ids, y, op);
    if (act == kernels::Epilogue::relu_squared) kernels::relu_squared(y.f32(), y.f32(), y.numel(), detail::stream());
    detail::check_launch(op);
    return;
  }
  const Tensor& w0 = experts.front().dense(op);  // stops naming the format for other quantized experts
  KAPITSA_CHECK(detail::is_weight_dtype(w0.dtype()), "{}: expert dtype {} (F32, F16 or BF16)", op,
                dtype_name(w0.dtype()));
  const int64_t T = expert_ids.dim(0), k = expert_ids.dim(1), N = w0.dim(0), K = w0.dim(1);
  const size_t vec = 16 / dtype_size(w0.dtype());
  bool aligned = K % static_cast<int64_t>(vec) == 0 && reinterpret_cast<uintptr_t>(x.data()) % 16 == 0;
  std::vector<const void*> pointers;
  pointers.reserve(experts.size());
  for (const Linear& w : experts) {
    const Tensor& t = w.dense(op);
    detail::check_on_device(t, op, "experts[e]");
    aligned = aligned && reinterpret_cast<uintptr_t>(t.data()) % 16 == 0;
    pointers.push_back(t.data());
  }
  // The experts' addresses are the model's constants: their table is uploaded once, not per call.
  const auto* table = static_cast<const void* const*>(
      detail::upload_constant(pointers.data(), pointers.size() * sizeof(const void*)));
  kernels::matmul_experts(x.f32(), table, static_cast<int64_t>(experts.size()), detail::elem_type(w0.dtype()),
                          expert_ids.data_as<const int32_t>(), y.f32(), T, k, K, N, aligned, detail::stream(), act);
  detail::check_launch(op);
}
}  // namespace

void matmul_experts(const Tensor& x, std::span<const Linear> experts, const Tensor& expert_ids, const Tensor& y) {
  routed_experts(x, experts, expert_ids, y, kernels::Epilogue::none, "matmul_experts");
}

void matmul_experts_relu_squared(const Tensor& x, std::span<const Linear> experts, const Tensor& expert_ids,
                                 const Tensor& y) {
  routed_experts(x, experts, expert_ids, y, kernels::Epilogue::relu_squared, "matmul_experts_relu_squared");
}

// y: [T·k, H];  expert_weights: [T, k];  addend: [T, H] or empty;  out: [T, H].
void moe_combine(const Tensor& y, const Tensor& expert_weights, const Tensor& addend, const Tensor& out) {
  check_f32(y, "moe_combine", "y"), check_f32(expert_weights, "moe_combine", "expert_weights");
  check_f32(out, "moe_combine", "out");
  if (!addend.empty()) check_f32(addend, "moe_combine", "addend");
  kernels::moe_combine(y.f32(), expert_weights.f32(), addend.empty() ? nullptr : addend.f32(), out.f32(),
                       expert_weights.dim(0), expert_weights.dim(1), out.dim(-1), detail::stream());
  detail::check_launch("moe_combine");
}

}  // namespace kapitsa::ops::cuda
