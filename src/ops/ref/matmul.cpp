// Reference matmul: y = x · wᵀ with weights of any format (each row dequantized to f32 first),
// accumulated in double (the oracle; the cpu backend accumulates in f32 and so differs only by
// rounding/summation order).
#include "ops/composed/composed.h"
#include "ops/ref/ref.h"
#include "ops/ref/ref_util.h"

#include <vector>

namespace kapitsa::ops::ref {

// x: [T, K] f32;  w: [N, K] (any format);  y: [T, N] f32.  (Leading dims of x and y are flattened.)
void matmul(const Tensor& x, const Linear& w, const Tensor& y) {
  const int64_t N = w.rows(), K = w.cols();
  const int64_t T = detail::rows_of(x);
  const float* px = x.f32();
  float* py = y.f32();
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    dequantize_row(w, n, row.data());
    for (int64_t t = 0; t < T; ++t) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(px[t * K + k]) * row[static_cast<size_t>(k)];
      py[t * N + n] = static_cast<float>(acc);
    }
  }
}

// x: [T, K] f32;  w[i]: [N_i, K];  y[i]: [T, N_i] f32.
void matmul_many(const Tensor& x, std::span<const Linear> w, std::span<const Tensor> y) {
  for (size_t i = 0; i < w.size(); ++i) matmul(x, w[i], y[i]);
}

void matmul_swiglu(const Tensor& x, const Linear& w_gate, const Linear& w_up, const Tensor& up, const Tensor& y) {
  composed::matmul_swiglu(*backend(), x, w_gate, w_up, up, y);
}

void matmul_relu_squared(const Tensor& x, const Linear& w, const Tensor& y) {
  composed::matmul_relu_squared(*backend(), x, w, y);
}

}  // namespace kapitsa::ops::ref
