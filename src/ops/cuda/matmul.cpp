// CUDA matmul y = x·wᵀ: a GEMV kernel for up to kGemvMaxTokens rows (decode; f32 accumulation, reads
// the weight once), cuBLAS above that. f32 weights: SGEMM in plain f32. f16/bf16 weights: x is rounded
// to the weight's dtype in scratch and multiplied on the tensor cores with f32 accumulation and output
// (cuBLAS has no f32 × bf16 product), so prefill rows carry bf16/f16 rounding of the activations.
#include "ops/cuda/cuda.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/runtime.h"

namespace kapitsa::ops::cuda {
using detail::check;
using detail::check_f32;
using detail::check_launch;
using detail::stream;

// x: [T, K] f32;  w: [N, K] f32|f16|bf16;  y: [T, N] f32 (leading dims of x and y flattened).
void matmul(const Tensor& x, const Linear& linear, const Tensor& y) {
  const Tensor& w = linear.dense("matmul");
  check_f32(x, "matmul", "x"), check_f32(y, "matmul", "y");
  KAPITSA_CHECK(w.rank() == 2 && detail::is_weight_dtype(w.dtype()), "matmul: w {} {} must be [N, K] f32|f16|bf16",
                dtype_name(w.dtype()), w.shape().str());
  detail::check_on_device(w, "matmul", "w");
  const int64_t N = w.dim(0), K = w.dim(1), T = detail::rows_of(x);
  KAPITSA_CHECK(x.dim(-1) == K && y.dim(-1) == N && detail::rows_of(y) == T, "matmul: x {}, w {}, y {}",
                x.shape().str(), w.shape().str(), y.shape().str());
  KAPITSA_CHECK(x.data() != y.data() || x.numel() == 0, "matmul: y must not alias x");
  if (T == 0 || N == 0) return;
  if (T <= kernels::kGemvMaxTokens || K == 0) {
    kernels::gemv(x.f32(), w.data(), detail::elem_type(w.dtype()), y.f32(), T, K, N, stream());
    check_launch("matmul (gemv)");
    return;
  }
  // Column-major view: yᵀ [N, T] = (w as col-major [K, N])ᵀ · (x as col-major [K, T]).
  const float one = 1.0f, zero = 0.0f;
  const int n = static_cast<int>(N), t = static_cast<int>(T), k = static_cast<int>(K);
  if (w.dtype() == DType::f32) {
    check(cublasSgemm(detail::cublas(), CUBLAS_OP_T, CUBLAS_OP_N, n, t, k, &one, w.f32(), k, x.f32(), k, &zero, y.f32(), n),
          "matmul (cublasSgemm)");
    return;
  }
  const cudaDataType_t type = w.dtype() == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  void* x_narrow = detail::scratch(detail::Slot::temp0, static_cast<size_t>(T * K) * 2);
  kernels::convert(x.f32(), kernels::ElemType::f32, x_narrow, detail::elem_type(w.dtype()), T * K, stream());
  check_launch("matmul (convert x)");
  check(cublasGemmEx(detail::cublas(), CUBLAS_OP_T, CUBLAS_OP_N, n, t, k, &one, w.data(), type, k, x_narrow, type, k,
                     &zero, y.f32(), CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "matmul (cublasGemmEx)");
}

}  // namespace kapitsa::ops::cuda
