// CUDA matmul y = x·wᵀ (and matmul_many, several weights on one x): a GEMV kernel for up to
// kGemvMaxTokens rows of dense and affine weights (decode; f32 accumulation, reads the weight once),
// cuBLAS above that. f32 weights: SGEMM in plain f32 (no TF32). bf16 weights: cuBLAS has no f32 × bf16
// product, so x is split into bf16 parts and a bf16 GEMM a part on the tensor cores (f32 accumulation)
// adds its products into y, smallest part first: up to 64 rows three parts (x exact,
// f32's precision), above that two (x to 16 bits; kDenseExactMaxTokens says why). f16 weights (rare in
// checkpoints): f16 cannot split x exactly (its range), so the weight is widened to f32 in scratch and
// SGEMM runs: exact, slow. Quantized weights (MLX affine, llama.cpp blocks) past the GEMVs' token counts
// (prefill): x split in three and the weight dequantized into a bf16 pair, four tensor-core GEMMs
// (quantized_prefill).
#include "ops/composed/composed.h"
#include "ops/cuda/cuda.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/runtime.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <utility>
#include <vector>

namespace kapitsa::ops::cuda {
using detail::check;
using detail::check_f32;
using detail::check_launch;
using detail::stream;

namespace {
void dense_matmul(const Tensor& x, const Tensor& w, const Tensor& y, kernels::Epilogue act);
void ggml_matmul(const Tensor& x, const Linear& linear, const Tensor& y);
void dense_gemm(const Tensor& x, const Tensor& w, const Tensor& y);
template <typename DequantizeRows>
void quantized_prefill(const Tensor& x, int64_t N, int64_t K, const Tensor& y, const char* what, DequantizeRows dequantize);

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Whether kGemvMaxTokens rows of x over this quantized weight take a GEMV (not the prefill path).
bool gemv_takes(const Tensor& x, const Linear& linear) {
  constexpr int64_t T = kernels::kGemvMaxTokens;
  if (!aligned16(x.data()) || x.dim(-1) % 4 != 0) return false;  // every chunk's rows stay 16-byte aligned
  if (linear.format() == WeightFormat::affine) {
    const kernels::AffineArgs a = detail::affine_args(linear, "matmul");
    return kernels::affine_int16_supported(a, T) || kernels::affine_gemv_supported(a, x.f32(), T);
  }
  return linear.format() == WeightFormat::ggml;  // ggml_matmul: the int8 GEMV, else the dequantize-and-dot GEMV
}

// Dense weights: the GEMV up to kGemvMaxTokens rows, each row summed as it is alone (so speculative
// verification and decode batches are batch-invariant), cuBLAS above. KAPITSA_GEMV_ROWS=0 (measuring):
// cuBLAS from two rows, except small weights (a draft model's), whose few-row GEMV costs less than
// cuBLAS's fixed cost per call and the split/sum around it.
constexpr int64_t kSmallDenseWeight = int64_t{1} << 18;  // elements: up to 512 KB of bf16
bool dense_gemv_takes(int64_t T, int64_t N, int64_t K) {
  if (T > kernels::kGemvMaxTokens) return false;
  return T <= 1 || kernels::dense_gemv_rows_enabled() || N * K <= kSmallDenseWeight;
}
// Quantized weights: up to this many rows as GEMVs of at most kGemvMaxTokens rows each (see matmul).
constexpr int64_t kChunkedGemvMaxTokens = 32;
// bf16 weights over more rows than this take x to 16 bits (two bf16 parts, each product within 2^-16 of
// itself) rather than 24 (three): prefill's GEMMs are compute-bound, so a third fewer products is a third
// less time (4B shape, 512 tokens: docs/cuda.md, session 22), while decode batches and speculative
// verification, bound by reading the weight, keep f32's precision at no cost.
constexpr int64_t kDenseExactMaxTokens = 64;
// KAPITSA_PREFILL_X_PARTS=1|2|3 forces the parts above kDenseExactMaxTokens rows (measuring only: 1 is
// x rounded to bf16, as llama.cpp and PyTorch's bf16 linear take it), read once; 0 when unset.
int prefill_x_parts_setting() {
  static const int v = [] {
    const char* s = std::getenv("KAPITSA_PREFILL_X_PARTS");
    const int n = s == nullptr ? 0 : std::atoi(s);
    return n >= 1 && n <= 3 ? n : 0;
  }();
  return v;
}

// x: [T, K] rounded to int16 for the int16 affine GEMVs, in Slot::temp0 (valid until its next use).
// (Rounding inside each GEMV block instead, for one token, was measured slower: docs/cuda.md.)
const void* rounded_x(const Tensor& x, int64_t T, int64_t K) {
  void* xq = detail::scratch(detail::Slot::temp0, kernels::affine_int16_scratch_bytes(T, K));
  kernels::quantize_x_int16(x.f32(), T, K, xq, stream());
  return xq;
}

// The epilogue as a pass of its own over y, for the paths whose kernels have none (cuBLAS, the chunk GEMVs).
void apply_after(const Tensor& y, kernels::Epilogue act) {
  if (act == kernels::Epilogue::none) return;
  kernels::relu_squared(y.f32(), y.f32(), y.numel(), stream());
  check_launch("matmul_relu_squared (relu² after the product)");
}

void matmul_then(const Tensor& x, const Linear& linear, const Tensor& y, kernels::Epilogue act);
}  // namespace

// Dense weights: the GEMVs up to kGemvMaxTokens rows (each token's sums in the one-token order);
// 4-bit affine weights: the int16 GEMV (the same), over chunks of rows up to kChunkedGemvMaxTokens;
// llama.cpp blocks up to kGemvMaxTokens where the int8-activation GEMV or Kapitsa's float blocks take
// them; no claim for the other formats.
int64_t matmul_invariant_rows(const Linear& w) {
  switch (w.format()) {
    case WeightFormat::dense: return kernels::dense_gemv_rows_enabled() ? kernels::kGemvMaxTokens : 0;
    case WeightFormat::affine:
      return kernels::affine_int16_supported(detail::affine_fields(w), kernels::kGemvMaxTokens) ? kChunkedGemvMaxTokens : 0;
    case WeightFormat::ggml: {
      const int64_t B = kernels::ggml_int8_block(static_cast<uint32_t>(w.ggml_type()));
      const bool int8 = B > 0 && w.cols() % B == 0 && kernels::ggml_int8_enabled();
      return int8 || ggml_type_internal(w.ggml_type()) ? kernels::kGemvMaxTokens : 0;
    }
  }
  return 0;
}

// x: [T, K] f32;  w: [N, K] f32|f16|bf16, MLX affine (up to kGemvMaxTokens rows: the fused
// dequantize-GEMV, for 4 bits on x rounded to int16; more: quantized_prefill) or llama.cpp blocks
// (ggml_matmul);  y: [T, N] f32.
void matmul(const Tensor& x, const Linear& linear, const Tensor& y) { matmul_then(x, linear, y, kernels::Epilogue::none); }

// matmul with relu(v)² on every output: in the GEMV's stores for dense weights up to kGemvMaxTokens
// rows and 4-bit affine weights on the int16 GEMV (a Nemotron decode step: one kernel less a relu² MLP),
// a pass after the product on the other paths.
void matmul_relu_squared(const Tensor& x, const Linear& w, const Tensor& y) {
  matmul_then(x, w, y, kernels::Epilogue::relu_squared);
}

namespace {
// matmul, then `act` on every output.
void matmul_then(const Tensor& x, const Linear& linear, const Tensor& y, kernels::Epilogue act) {
  if (x.rank() == 2 && y.rank() == 2 && x.dim(0) > kernels::kGemvMaxTokens && x.dim(0) <= kChunkedGemvMaxTokens &&
      x.dim(0) == y.dim(0) && gemv_takes(x, linear)) {
    // A few more rows than the GEMVs take (a verification step of k ≥ 8 guesses): GEMVs over even
    // chunks of rows, each reading the packed weight again (mostly from L2), instead of the prefill
    // path's dequantized copy of the whole matrix (written and read at 4 bytes a weight).
    const int64_t T = x.dim(0), chunks = (T + kernels::kGemvMaxTokens - 1) / kernels::kGemvMaxTokens;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t r0 = T * c / chunks, r1 = T * (c + 1) / chunks;
      matmul_then(x.rows(r0, r1), linear, y.rows(r0, r1), act);
    }
    return;
  }
  if (linear.format() == WeightFormat::ggml) {
    ggml_matmul(x, linear, y);
    return apply_after(y, act);
  }
  if (linear.format() != WeightFormat::affine) return dense_matmul(x, linear.dense("matmul"), y, act);
  const kernels::AffineArgs a = detail::affine_args(linear, "matmul");
  const int64_t N = linear.rows(), K = linear.cols();
  check_f32(x, "matmul", "x"), check_f32(y, "matmul", "y");
  const int64_t T = detail::rows_of(x);
  KAPITSA_CHECK(x.dim(-1) == K && y.dim(-1) == N && detail::rows_of(y) == T && (x.data() != y.data() || x.numel() == 0),
                "matmul: x {}, affine w [{}, {}], y {} (y must not alias x)", x.shape().str(), N, K, y.shape().str());
  if (kernels::affine_int16_supported(a, T) && aligned16(x.data())) {
    float* out = y.f32();
    kernels::affine_gemv_int16(rounded_x(x, T, K), &a, &out, &N, 1, T, stream(), act);
    check_launch("matmul (affine int16 gemv)");
    return;
  }
  if (kernels::affine_gemv_supported(a, x.f32(), T)) {
    kernels::affine_gemv(x.f32(), a, y.f32(), T, N, stream());
    check_launch("matmul (affine gemv)");
    return apply_after(y, act);
  }
  KAPITSA_CHECK(a.group_size % 8 == 0, "matmul: affine group size {} (the GPU's prefill needs a multiple of 8)",
                a.group_size);
  quantized_prefill(x, N, K, y, "matmul (dequantize affine)", [&](int64_t r0, int64_t rows, void* out) {
    kernels::dequantize_affine(kernels::affine_rows_from(a, r0), nullptr, out, kernels::DequantOut::bf16_pair, rows, stream());
  });
  apply_after(y, act);
}

// matmul_many over 4-bit affine weights that all take the int16 GEMV (one group size and scale type): x
// rounded once, one launch for up to four weights.
// False (nothing done) otherwise.
bool affine_int16_many(const Tensor& x, std::span<const Linear> w, std::span<const Tensor> y) {
  const int64_t T = detail::rows_of(x), K = x.dim(-1);
  if (w.size() < 2 || !aligned16(x.data())) return false;
  std::vector<kernels::AffineArgs> args;
  std::vector<float*> out;
  std::vector<int64_t> rows;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i].format() != WeightFormat::affine) return false;
    args.push_back(detail::affine_args(w[i], "matmul_many"));
    if (!kernels::affine_int16_supported(args.back(), T) || w[i].cols() != K ||
        args.back().group_size != args[0].group_size || args.back().sb_type != args[0].sb_type)
      return false;
    check_f32(y[i], "matmul_many", "y[i]");
    KAPITSA_CHECK(y[i].dim(-1) == w[i].rows() && detail::rows_of(y[i]) == T && y[i].data() != x.data(),
                  "matmul_many: x {}, affine w[{}] [{}, {}], y[{}] {}", x.shape().str(), i, w[i].rows(), K, i,
                  y[i].shape().str());
    out.push_back(y[i].f32()), rows.push_back(w[i].rows());
  }
  kernels::affine_gemv_int16(rounded_x(x, T, K), args.data(), out.data(), rows.data(), static_cast<int>(args.size()), T, stream());
  check_launch("matmul_many (affine int16 gemv)");
  return true;
}

// matmul_many over llama.cpp blocks that all take the int8-activation GEMV with one x block size (a
// step's q/k/v or gate/up): x rounded once, then each weight's GEMV. False (nothing done) otherwise.
bool ggml_int8_many(const Tensor& x, std::span<const Linear> w, std::span<const Tensor> y) {
  const int64_t T = detail::rows_of(x), K = x.dim(-1);
  if (w.size() < 2 || T > kernels::kGemvMaxTokens || !kernels::ggml_int8_enabled()) return false;
  std::vector<kernels::GgmlArgs> args;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i].format() != WeightFormat::ggml || w[i].cols() != K) return false;
    args.push_back(detail::ggml_args(w[i], "matmul_many"));
    const int64_t B = kernels::ggml_int8_block(args.back().type);
    if (B == 0 || K % B != 0 || B != kernels::ggml_int8_block(args[0].type)) return false;
    check_f32(y[i], "matmul_many", "y[i]");
    KAPITSA_CHECK(y[i].dim(-1) == w[i].rows() && detail::rows_of(y[i]) == T && y[i].data() != x.data(),
                  "matmul_many: x {}, {} w[{}] [{}, {}], y[{}] {}", x.shape().str(), ggml_type_name(w[i].ggml_type()), i,
                  w[i].rows(), K, i, y[i].shape().str());
  }
  const void* xq = detail::rounded_x_int8(x, kernels::ggml_int8_block(args[0].type));
  for (size_t i = 0; i < w.size(); ++i) kernels::ggml_gemv_int8(xq, args[i], y[i].f32(), T, w[i].rows(), stream());
  check_launch("matmul_many (ggml int8 gemv)");
  return true;
}
}  // namespace

// x: [T, K] f32;  w[i]: [N_i, K];  y[i]: [T, N_i] f32. Dense weights of one dtype for a few tokens: one
// GEMV launch over all of them (a decode step's q/k/v or gate/up: fewer launches, and a small weight
// such as a 32-row gate projection rides along instead of running a nearly empty launch of its own).
// Otherwise one matmul each.
void matmul_many(const Tensor& x, std::span<const Linear> w, std::span<const Tensor> y) {
  check_f32(x, "matmul_many", "x");
  const int64_t T = detail::rows_of(x), K = x.dim(-1);
  bool one_launch = T >= 1 && !w.empty();
  for (const Linear& l : w)
    one_launch = one_launch && l.format() == WeightFormat::dense && l.weight().dtype() == w[0].weight().dtype() &&
                 dense_gemv_takes(T, l.rows(), K);
  if (!one_launch) {
    if (affine_int16_many(x, w, y) || ggml_int8_many(x, w, y)) return;
    for (size_t i = 0; i < w.size(); ++i) matmul(x, w[i], y[i]);
    return;
  }
  std::vector<kernels::GemvPart> parts;
  for (size_t i = 0; i < w.size(); ++i) {
    const Tensor& wi = w[i].dense("matmul_many");
    detail::check_on_device(wi, "matmul_many", "w[i]");
    check_f32(y[i], "matmul_many", "y[i]");
    KAPITSA_CHECK(wi.rank() == 2 && detail::is_weight_dtype(wi.dtype()) && wi.dim(1) == K && y[i].dim(-1) == wi.dim(0) &&
                      detail::rows_of(y[i]) == T && y[i].data() != x.data(),
                  "matmul_many: x {}, w[{}] {} {}, y[{}] {}", x.shape().str(), i, dtype_name(wi.dtype()),
                  wi.shape().str(), i, y[i].shape().str());
    parts.push_back({wi.data(), y[i].f32(), wi.dim(0)});
  }
  kernels::gemv_many(x.f32(), parts.data(), static_cast<int>(parts.size()), detail::elem_type(w[0].weight().dtype()),
                     T, K, stream());
  check_launch("matmul_many (gemv)");
}

// One token, dense weights of one dtype: one GEMV launch computing both rows of each output (the
// activation in its epilogue); otherwise matmul_many and silu_mul.
void matmul_swiglu(const Tensor& x, const Linear& w_gate, const Linear& w_up, const Tensor& up, const Tensor& y) {
  check_f32(x, "matmul_swiglu", "x"), check_f32(up, "matmul_swiglu", "up"), check_f32(y, "matmul_swiglu", "y");
  const int64_t T = detail::rows_of(x), K = x.dim(-1);
  if (w_gate.format() == WeightFormat::affine && w_up.format() == WeightFormat::affine && aligned16(x.data())) {
    const kernels::AffineArgs g = detail::affine_args(w_gate, "matmul_swiglu"), u = detail::affine_args(w_up, "matmul_swiglu");
    const int64_t N = w_gate.rows();
    if (kernels::affine_int16_supported(g, T) && kernels::affine_int16_supported(u, T) && w_up.rows() == N &&
        w_gate.cols() == K && w_up.cols() == K && g.group_size == u.group_size && g.sb_type == u.sb_type) {
      KAPITSA_CHECK(y.dim(-1) == N && detail::rows_of(y) == T && y.data() != x.data(),
                    "matmul_swiglu: x {}, affine w_gate/w_up [{}, {}], y {}", x.shape().str(), N, K, y.shape().str());
      kernels::affine_gemv_int16_swiglu(rounded_x(x, T, K), g, u, y.f32(), N, T, stream());
      check_launch("matmul_swiglu (affine int16 gemv)");
      return;
    }
  }
  const bool dense = w_gate.format() == WeightFormat::dense && w_up.format() == WeightFormat::dense &&
                     w_gate.weight().dtype() == w_up.weight().dtype() && detail::is_weight_dtype(w_gate.weight().dtype());
  if (T != 1 || !dense ||
      K % static_cast<int64_t>(16 / dtype_size(w_gate.weight().dtype())) != 0 || !aligned16(x.data()) ||
      !aligned16(w_gate.weight().data()) || !aligned16(w_up.weight().data())) {
    return composed::matmul_swiglu(*backend(), x, w_gate, w_up, up, y);
  }
  const Tensor& g = w_gate.dense("matmul_swiglu");
  const Tensor& u = w_up.dense("matmul_swiglu");
  detail::check_on_device(g, "matmul_swiglu", "w_gate"), detail::check_on_device(u, "matmul_swiglu", "w_up");
  kernels::gemv_swiglu(x.f32(), g.data(), u.data(), detail::elem_type(g.dtype()), y.f32(), K, g.dim(0), stream());
  check_launch("matmul_swiglu (gemv)");
}

namespace {
// x: [T, K] f32;  w: llama.cpp blocks [N, K];  y: [T, N] f32. Up to kGemvMaxTokens tokens: for Q8_0,
// Q4_K and Q6_K the int8-activation GEMV (x rounded as the cpu backend rounds it), else the
// dequantize-and-dot GEMV. More (prefill): quantized_prefill.
void ggml_matmul(const Tensor& x, const Linear& linear, const Tensor& y) {
  const kernels::GgmlArgs a = detail::ggml_args(linear, "matmul");
  const int64_t N = linear.rows(), K = linear.cols();
  check_f32(x, "matmul", "x"), check_f32(y, "matmul", "y");
  const int64_t T = detail::rows_of(x);
  KAPITSA_CHECK(x.dim(-1) == K && y.dim(-1) == N && detail::rows_of(y) == T && (x.data() != y.data() || x.numel() == 0),
                "matmul: x {}, {} w [{}, {}], y {} (y must not alias x)", x.shape().str(),
                ggml_type_name(linear.ggml_type()), N, K, y.shape().str());
  if (T == 0 || N == 0) return;
  const int64_t B = kernels::ggml_int8_block(a.type);
  if (T <= kernels::kGemvMaxTokens && B > 0 && K % B == 0 && kernels::ggml_int8_enabled()) {
    kernels::ggml_gemv_int8(detail::rounded_x_int8(x, B), a, y.f32(), T, N, stream());
    check_launch("matmul (ggml int8 gemv)");
    return;
  }
  if (T <= kernels::kGemvMaxTokens && aligned16(x.data())) {
    kernels::ggml_gemv(x.f32(), a, y.f32(), T, N, stream());
    check_launch("matmul (ggml gemv)");
    return;
  }
  quantized_prefill(x, N, K, y, "matmul (dequantize ggml)", [&](int64_t r0, int64_t rows, void* out) {
    kernels::GgmlArgs part = a;
    part.blocks += r0 * a.row_bytes;
    kernels::dequantize_ggml(part, nullptr, out, kernels::DequantOut::bf16_pair, rows, stream());
  });
}

// y: [T, ldy] f32, its columns [0, rows) (y points at the first): y = w·x (beta 0) or y += w·x (beta 1), w:
// [rows, K] bf16, x: [T, K] bf16, on the tensor cores with f32 accumulation. Column-major view for cuBLAS:
// yᵀ[rows, T] (+)= (w as col-major [K, rows])ᵀ · (x as col-major [K, T]).
void bf16_gemm(const void* w, const uint16_t* x, float* y, int64_t rows, int64_t T, int64_t K, int64_t ldy, float beta,
               const char* what) {
  const float one = 1.0f;
  check(cublasGemmEx(detail::cublas(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(T),
                     static_cast<int>(K), &one, w, CUDA_R_16BF, static_cast<int>(K), x, CUDA_R_16BF,
                     static_cast<int>(K), &beta, y, CUDA_R_32F, static_cast<int>(ldy), CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT),
        what);
}

// Prefill over quantized weights on the tensor cores, keeping f32's accuracy: x split into three bf16
// parts (x = x_hi + x_mid + x_lo exactly, as the bf16 path), the weight dequantized into two (w_hi =
// bf16(w), w_lo = bf16(w − w_hi): w to 16 significant bits) a chunk of rows at a time (dequantize(r0,
// rows, out) writes rows [r0, r0 + rows) as [2, rows, K] bf16), then per chunk four bf16 GEMMs with f32
// accumulation summed into its columns of y: [T, N] f32, smallest first: w_hi·x_lo + w_lo·x_hi +
// w_hi·x_mid + w_hi·x_hi. The terms left out (w_lo·x_mid, w_lo·x_lo, w beyond 16 bits) move a product
// by at most 2^-15 of itself. H200, 4B shape, 512-token prefill (session 21): Q4_K_M 7890 tok/s, where
// f32 weights and SGEMM gave 3950, two terms (x rounded to bf16) 9740 and one (x and w rounded) 11500
// — but those moved the Q8_0 fixture's prompt logits by 1.5e-2 and 2.1e-2 against 2.6e-5 for these four.
// Chunks of at most 32M values bound the scratch whatever the matrix (a 248k-row head in 20).
template <typename DequantizeRows>
void quantized_prefill(const Tensor& x, int64_t N, int64_t K, const Tensor& y, const char* what, DequantizeRows dequantize) {
  constexpr int64_t kChunkValues = int64_t{1} << 25;
  const int64_t T = detail::rows_of(x), chunk = std::clamp<int64_t>(kChunkValues / std::max<int64_t>(K, 1), 1, N);
  auto* xb = static_cast<uint16_t*>(detail::scratch(detail::Slot::temp0, static_cast<size_t>(3 * T * K) * 2));
  auto* wb = static_cast<uint16_t*>(detail::scratch(detail::Slot::temp1, static_cast<size_t>(2 * chunk * K) * 2));
  kernels::split_bf16(x.f32(), xb, T * K, 3, stream());
  check_launch("matmul (split x)");
  const uint16_t *x_hi = xb, *x_mid = xb + T * K, *x_lo = xb + 2 * T * K;
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t rows = std::min(chunk, N - r0);
    dequantize(r0, rows, wb);
    check_launch(what);
    const uint16_t *w_hi = wb, *w_lo = wb + rows * K;
    const std::pair<const uint16_t*, const uint16_t*> products[] = {{w_hi, x_lo}, {w_lo, x_hi}, {w_hi, x_mid}, {w_hi, x_hi}};
    for (size_t i = 0; i < std::size(products); ++i)
      bf16_gemm(products[i].first, products[i].second, y.f32() + r0, rows, T, K, N, i == 0 ? 0.0f : 1.0f,
                "matmul (cublasGemmEx, dequantized w)");
  }
}

// x: [T, K] f32;  w: [N, K] f32|f16|bf16;  y: [T, N] f32 (leading dims of x and y flattened), then `act`
// on every output (in the GEMV's stores, else a pass after cuBLAS).
void dense_matmul(const Tensor& x, const Tensor& w, const Tensor& y, kernels::Epilogue act) {
  check_f32(x, "matmul", "x"), check_f32(y, "matmul", "y");
  KAPITSA_CHECK(w.rank() == 2 && detail::is_weight_dtype(w.dtype()), "matmul: w {} {} must be [N, K] f32|f16|bf16",
                dtype_name(w.dtype()), w.shape().str());
  detail::check_on_device(w, "matmul", "w");
  const int64_t N = w.dim(0), K = w.dim(1), T = detail::rows_of(x);
  KAPITSA_CHECK(x.dim(-1) == K && y.dim(-1) == N && detail::rows_of(y) == T, "matmul: x {}, w {}, y {}",
                x.shape().str(), w.shape().str(), y.shape().str());
  KAPITSA_CHECK(x.data() != y.data() || x.numel() == 0, "matmul: y must not alias x");
  if (T == 0 || N == 0) return;
  if (dense_gemv_takes(T, N, K) || K == 0) {
    kernels::gemv(x.f32(), w.data(), detail::elem_type(w.dtype()), y.f32(), T, K, N, stream(), act);
    check_launch("matmul (gemv)");
    return;
  }
  dense_gemm(x, w, y);
  apply_after(y, act);
}

// dense_matmul's cuBLAS paths (more rows than the GEMV takes).
void dense_gemm(const Tensor& x, const Tensor& w, const Tensor& y) {
  const int64_t N = w.dim(0), K = w.dim(1), T = detail::rows_of(x);
  // Column-major view: yᵀ [N, T] = (w as col-major [K, N])ᵀ · (x as col-major [K, T]).
  const float one = 1.0f, zero = 0.0f;
  const int n = static_cast<int>(N), t = static_cast<int>(T), k = static_cast<int>(K);
  if (w.dtype() == DType::f32) {
    check(cublasSgemm(detail::cublas(), CUBLAS_OP_T, CUBLAS_OP_N, n, t, k, &one, w.f32(), k, x.f32(), k, &zero, y.f32(), n),
          "matmul (cublasSgemm)");
    return;
  }
  if (w.dtype() == DType::f16) {
    float* w32 = static_cast<float*>(detail::scratch(detail::Slot::temp0, static_cast<size_t>(N * K) * sizeof(float)));
    kernels::convert(w.data(), kernels::ElemType::f16, w32, kernels::ElemType::f32, N * K, stream());
    check_launch("matmul (widen f16 w)");
    check(cublasSgemm(detail::cublas(), CUBLAS_OP_T, CUBLAS_OP_N, n, t, k, &one, w32, k, x.f32(), k, &zero, y.f32(), n),
          "matmul (cublasSgemm, f16 w)");
    return;
  }
  // bf16: parts [P, T, K] bf16 (hi first), then one GEMM a part into y, smallest first, each adding to the
  // sum so far (beta = 1). Until session 37 one GEMM over all parts' P·T columns wrote [P, T, N] partial
  // products that a kernel then summed: 4B shape, 512-token prefill on an H200, 15670 → 16180–16340 tok/s.
  const int forced = prefill_x_parts_setting();
  const int n_parts = T <= kDenseExactMaxTokens ? 3 : forced > 0 ? forced : 2;
  auto* parts = static_cast<uint16_t*>(detail::scratch(detail::Slot::temp0, static_cast<size_t>(n_parts * T * K) * 2));
  kernels::split_bf16(x.f32(), parts, T * K, n_parts, stream());
  check_launch("matmul (split x)");
  for (int p = n_parts - 1; p >= 0; --p)
    bf16_gemm(w.data(), parts + p * T * K, y.f32(), N, T, K, N, p == n_parts - 1 ? 0.0f : 1.0f, "matmul (cublasGemmEx)");
}
}  // namespace

}  // namespace kapitsa::ops::cuda
