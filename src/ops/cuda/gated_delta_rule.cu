// Kernels of Gated DeltaNet: the gates (elementwise) and the token-by-token delta rule. Each column j
// of a head's state S [Dk, Dv] evolves independently (u_j = S[:, j]·k, δ_j = (v_j − u_j)β,
// S[:, j] += k δ_j, o_j = S[:, j]·q), so a block takes one value head and 32 columns, 4 threads per
// column, each holding Dk/4 rows of it in registers; the two dot products reduce over those 4 lanes.
// A batch of sequences (Seqs) adds a grid dimension: each sequence's state lives in its slot, and after
// each checkpointed token the block also stores its columns into that token's checkpoint slot.
// The chunked op runs this same recurrence for now (gated_delta_rule.cpp): same function, no WY form yet.
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

__global__ void gdn_gates_kernel(const float* a, const float* b, const float* A_log, const float* dt_bias, float* g,
                                 float* beta, int64_t n, int64_t Hv) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t h = i % Hv;
    const float x = a[i] + dt_bias[h];
    const float softplus = x > 20.0f ? x : log1pf(expf(x));
    g[i] = -expf(A_log[h]) * softplus;
    beta[i] = 1.0f / (1.0f + expf(-b[i]));
  }
}

constexpr int kLanesPerColumn = 4;
constexpr int kColumnsPerBlock = 32;

// kRows: rows of S per thread, ≥ Dk / kLanesPerColumn. Thread (column c, lane r) holds rows r, r+4, ...
template <int kRows>
__global__ void __launch_bounds__(kLanesPerColumn * kColumnsPerBlock) gated_delta_rule_kernel(GdnArgs a) {
  const int r = threadIdx.x % kLanesPerColumn;
  const int64_t h = blockIdx.y, kh = h / (a.Hv / a.Hk);
  const int64_t j = blockIdx.x * int64_t{kColumnsPerBlock} + threadIdx.x / kLanesPerColumn;
  const bool valid = j < a.Dv;  // lanes past Dv still join the shuffles
  const int64_t Dk = a.Dk, Dv = a.Dv, seq = blockIdx.z;
  const SeqRows sq = seq_rows(a.seqs, seq, a.T);
  float* state = a.state + (sq.slot * a.Hv + h) * Dk * Dv;
  float S[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    const int64_t i = r + kLanesPerColumn * m;
    S[m] = valid && i < Dk ? state[i * Dv + j] : 0.0f;
  }
  for (int64_t t = sq.r0; t < sq.r1; ++t) {
    const float* kt = a.k + (t * a.Hk + kh) * Dk;
    const float* qt = a.q + (t * a.Hk + kh) * Dk;
    const float alpha = expf(a.g[t * a.Hv + h]), bt = a.beta[t * a.Hv + h];
    float u = 0.0f;
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const int64_t i = r + kLanesPerColumn * m;
      if (i < Dk) {
        S[m] *= alpha;
        u += S[m] * kt[i];
      }
    }
    u += __shfl_xor_sync(0xffffffffu, u, 1);
    u += __shfl_xor_sync(0xffffffffu, u, 2);
    const float delta = valid ? (a.v[(t * a.Hv + h) * Dv + j] - u) * bt : 0.0f;
    float o = 0.0f;
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const int64_t i = r + kLanesPerColumn * m;
      if (i < Dk) {
        S[m] += kt[i] * delta;
        o += S[m] * qt[i];
      }
    }
    o += __shfl_xor_sync(0xffffffffu, o, 1);
    o += __shfl_xor_sync(0xffffffffu, o, 2);
    if (valid && r == 0) a.o[(t * a.Hv + h) * Dv + j] = o;
    if (t >= sq.ckpt_begin) {
      float* ckpt = a.state + (ckpt_slot(a.seqs, seq, sq, t) * a.Hv + h) * Dk * Dv;
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        const int64_t i = r + kLanesPerColumn * m;
        if (valid && i < Dk) ckpt[i * Dv + j] = S[m];
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    const int64_t i = r + kLanesPerColumn * m;
    if (valid && i < Dk) state[i * Dv + j] = S[m];
  }
}

}  // namespace

void gdn_gates(const float* a, const float* b, const float* A_log, const float* dt_bias, float* g, float* beta,
               int64_t n, int64_t Hv, cudaStream_t s) {
  if (n > 0) gdn_gates_kernel<<<grid_for(n, 256), 256, 0, s>>>(a, b, A_log, dt_bias, g, beta, n, Hv);
}

void gated_delta_rule(const GdnArgs& a, cudaStream_t s) {
  if (a.Hv == 0 || a.Dv == 0 || a.seqs.n_seqs == 0) return;
  const dim3 grid(static_cast<unsigned>((a.Dv + kColumnsPerBlock - 1) / kColumnsPerBlock), static_cast<unsigned>(a.Hv),
                  static_cast<unsigned>(a.seqs.n_seqs));
  const int threads = kLanesPerColumn * kColumnsPerBlock;
  if (a.Dk <= 8 * kLanesPerColumn) gated_delta_rule_kernel<8><<<grid, threads, 0, s>>>(a);
  else if (a.Dk <= 32 * kLanesPerColumn) gated_delta_rule_kernel<32><<<grid, threads, 0, s>>>(a);
  else gated_delta_rule_kernel<64><<<grid, threads, 0, s>>>(a);  // Dk ≤ kGdnMaxKeyDim, checked by the caller
}

}  // namespace kapitsa::ops::cuda::kernels
