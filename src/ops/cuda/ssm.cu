// Kernel of the Mamba-2 selective scan, token by token. Each row p of a head's state S [P, N] evolves
// independently (S[p, :] ← exp(Δ·A) S[p, :] + Δ x_p B;  y_p = S[p, :]·C + D x_p), so a block takes one
// head and 32 rows, 4 threads per row, each holding N/4 state entries in registers; y reduces over
// those 4 lanes. A batch of sequences (Seqs) adds a grid dimension: each sequence's state lives in its
// slot, and after each checkpointed token the block also stores its rows into that token's checkpoint
// slot. The chunked op runs this same recurrence for now (ssm.cpp): same function, no SSD yet.
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kLanesPerRow = 4;
constexpr int kRowsPerBlock = 32;

template <int kCols>
__global__ void __launch_bounds__(kLanesPerRow * kRowsPerBlock) ssd_scan_kernel(SsdArgs a) {
  const int r = threadIdx.x % kLanesPerRow;
  const int64_t h = blockIdx.y, g = h / (a.H / a.G);
  const int64_t p = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kLanesPerRow;
  const bool valid = p < a.P;  // lanes past P still join the shuffles
  const int64_t N = a.N, P = a.P, seq = blockIdx.z;
  const SeqRows sq = seq_rows(a.seqs, seq, a.T);
  float* state = a.state + (sq.slot * a.H + h) * P * N;
  float S[kCols];
#pragma unroll
  for (int m = 0; m < kCols; ++m) {
    const int64_t n = r + kLanesPerRow * m;
    S[m] = valid && n < N ? state[p * N + n] : 0.0f;
  }
  const float A = -expf(a.A_log[h]), Dh = a.D[h], bias = a.dt_bias[h];
  for (int64_t t = sq.r0; t < sq.r1; ++t) {
    const float v = a.dt[t * a.H + h] + bias;
    const float delta = fminf(fmaxf(v > 20.0f ? v : log1pf(expf(v)), a.dt_min), a.dt_max);
    const float decay = expf(delta * A);
    const float xp = valid ? a.x[(t * a.H + h) * P + p] : 0.0f;
    const float* Bt = a.B + (t * a.G + g) * N;
    const float* Ct = a.C + (t * a.G + g) * N;
    float acc = 0.0f;
#pragma unroll
    for (int m = 0; m < kCols; ++m) {
      const int64_t n = r + kLanesPerRow * m;
      if (n < N) {
        S[m] = decay * S[m] + delta * xp * Bt[n];
        acc += S[m] * Ct[n];
      }
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    if (valid && r == 0) a.y[(t * a.H + h) * P + p] = acc + Dh * xp;
    if (t >= sq.ckpt_begin) {
      float* ckpt = a.state + (ckpt_slot(a.seqs, sq, t) * a.H + h) * P * N;
#pragma unroll
      for (int m = 0; m < kCols; ++m) {
        const int64_t n = r + kLanesPerRow * m;
        if (valid && n < N) ckpt[p * N + n] = S[m];
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kCols; ++m) {
    const int64_t n = r + kLanesPerRow * m;
    if (valid && n < N) state[p * N + n] = S[m];
  }
}

}  // namespace

void ssd_scan(const SsdArgs& a, cudaStream_t s) {
  if (a.H == 0 || a.P == 0 || a.seqs.n_seqs == 0) return;
  const dim3 grid(static_cast<unsigned>((a.P + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(a.H),
                  static_cast<unsigned>(a.seqs.n_seqs));
  const int threads = kLanesPerRow * kRowsPerBlock;
  if (a.N <= 8 * kLanesPerRow) ssd_scan_kernel<8><<<grid, threads, 0, s>>>(a);
  else if (a.N <= 32 * kLanesPerRow) ssd_scan_kernel<32><<<grid, threads, 0, s>>>(a);
  else ssd_scan_kernel<64><<<grid, threads, 0, s>>>(a);  // N ≤ kSsdMaxStateDim, checked by the caller
}

}  // namespace kapitsa::ops::cuda::kernels
