// Kernels of the MoE plumbing: softmax top-k routing (one thread per token, in double, choosing by
// repeated argmax with ties to the lower index, exactly as the reference), gathering rows, and the
// weighted scatter-add back. The scatter walks the rows in order per column (one thread per column), so
// repeated destination rows accumulate deterministically, in the reference's order, without atomics.
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

__global__ void moe_route_softmax_kernel(const float* logits, int64_t T, int64_t E, int k, bool renormalize,
                                         int32_t* ids, float* weights) {
  const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (t >= T) return;
  const float* row = logits + t * E;
  double m = -INFINITY, sum = 0.0;
  for (int64_t e = 0; e < E; ++e) m = fmax(m, static_cast<double>(row[e]));
  for (int64_t e = 0; e < E; ++e) sum += exp(static_cast<double>(row[e]) - m);
  int32_t* ti = ids + t * k;
  float* tw = weights + t * k;
  double chosen_sum = 0.0;
  for (int j = 0; j < k; ++j) {
    int64_t best = -1;
    double best_p = 0.0;
    for (int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken |= ti[i] == e;
      if (taken) continue;
      const double p = exp(static_cast<double>(row[e]) - m) / sum;
      if (best < 0 || p > best_p) best = e, best_p = p;  // strict >: ties keep the lower index
    }
    ti[j] = static_cast<int32_t>(best);
    tw[j] = static_cast<float>(best_p);
    chosen_sum += best_p;
  }
  if (renormalize)
    for (int j = 0; j < k; ++j) tw[j] = static_cast<float>(exp(static_cast<double>(row[ti[j]]) - m) / sum / chosen_sum);
}

__global__ void gather_rows_kernel(const float* x, const int32_t* rows, float* out, int64_t H) {
  const int64_t r = blockIdx.y, src = rows[r];
  for (int64_t h = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; h < H; h += int64_t{gridDim.x} * blockDim.x)
    out[r * H + h] = x[src * H + h];
}

__global__ void scale_add_rows_kernel(const float* src, const int32_t* rows, const float* weights, float* dst,
                                      int64_t R, int64_t H) {
  const int64_t h = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (h >= H) return;
  for (int64_t r = 0; r < R; ++r) {
    float* d = dst + int64_t{rows[r]} * H + h;
    *d = __fadd_rn(*d, __fmul_rn(weights[r], src[r * H + h]));  // no fma: the reference's rounding
  }
}

}  // namespace

void moe_route_softmax(const float* logits, int64_t T, int64_t E, int k, bool renormalize, int32_t* ids,
                       float* weights, cudaStream_t s) {
  if (T > 0) moe_route_softmax_kernel<<<grid_for(T, 128), 128, 0, s>>>(logits, T, E, k, renormalize, ids, weights);
}

void gather_rows(const float* x, const int32_t* rows, float* out, int64_t R, int64_t H, cudaStream_t s) {
  if (R == 0 || H == 0) return;
  constexpr int kThreads = 256;
  const unsigned x_blocks = static_cast<unsigned>((H + kThreads - 1) / kThreads);
  for (int64_t r0 = 0; r0 < R; r0 += 65535) {  // gridDim.y is at most 65535
    const int64_t n = R - r0 < 65535 ? R - r0 : 65535;
    gather_rows_kernel<<<dim3(x_blocks, static_cast<unsigned>(n)), kThreads, 0, s>>>(x, rows + r0, out + r0 * H, H);
  }
}

void scale_add_rows(const float* src, const int32_t* rows, const float* weights, float* dst, int64_t R, int64_t H,
                    cudaStream_t s) {
  if (R == 0 || H == 0) return;
  constexpr int kThreads = 128;
  scale_add_rows_kernel<<<static_cast<unsigned>((H + kThreads - 1) / kThreads), kThreads, 0, s>>>(src, rows, weights,
                                                                                                 dst, R, H);
}

}  // namespace kapitsa::ops::cuda::kernels
