// Kernel of the Mamba-2 selective scan, token by token. Each row p of a head's state S [P, N] evolves
// independently (S[p, :] ← exp(Δ·A) S[p, :] + Δ x_p B;  y_p = S[p, :]·C + D x_p), so a block of 128
// threads takes one head and 16 rows, kLanes = 8 threads a row, each holding up to N / 8 state entries
// in registers; y reduces over those lanes. With N a multiple of 4 (every released model: 128) lane r
// holds the float4s at n = 4·(r + 8j), so a row's 8 lanes move 128 contiguous bytes an instruction; other
// N take floats n = r + 8m. Queued under PDL. (Until session 40: 4 lanes a row holding floats r + 4m, half
// of every 32-byte sector used; the float4 rows took the Nemotron-3-Nano shape's 4-bit decode on an H100
// from 436 to 453 tok/s.)
// A batch of sequences (Seqs) adds a grid dimension: each sequence's state lives in its slot, and after
// each checkpointed token the block also stores its rows into that token's checkpoint slot. Each token
// is summed in the same order whatever the batch (verification rows equal decoded ones).
#include "ops/cuda/kernel_util.cuh"

#include <cstdint>

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kThreads = 128, kLanes = 8;

// The state column of a lane's m-th register.
template <bool kVec>
__device__ __forceinline__ int64_t column(int r, int m) {
  return kVec ? 4 * (r + kLanes * (m / 4)) + m % 4 : r + kLanes * m;
}

// S[m] ← row[column(r, m)] (0 past N) / row[column(r, m)] ← S[m]; float4 at a time when kVec.
template <int kCols, bool kVec>
__device__ __forceinline__ void load_row(float (&S)[kCols], const float* row, int r, int64_t N, bool valid) {
#pragma unroll
  for (int m = 0; m < kCols; m += kVec ? 4 : 1) {
    const int64_t n = column<kVec>(r, m);
    if constexpr (kVec) {
      const float4 v = valid && n < N ? *reinterpret_cast<const float4*>(row + n) : make_float4(0, 0, 0, 0);
      S[m] = v.x, S[m + 1] = v.y, S[m + 2] = v.z, S[m + 3] = v.w;
    } else {
      S[m] = valid && n < N ? row[n] : 0.0f;
    }
  }
}
template <int kCols, bool kVec>
__device__ __forceinline__ void store_row(const float (&S)[kCols], float* row, int r, int64_t N, bool valid) {
#pragma unroll
  for (int m = 0; m < kCols; m += kVec ? 4 : 1) {
    const int64_t n = column<kVec>(r, m);
    if (!valid || n >= N) continue;
    if constexpr (kVec) *reinterpret_cast<float4*>(row + n) = make_float4(S[m], S[m + 1], S[m + 2], S[m + 3]);
    else row[n] = S[m];
  }
}

// Under launch() (PDL) it waits first: everything it reads is written by earlier kernels.
template <int kCols, bool kVec>
__global__ void __launch_bounds__(kThreads) ssd_scan_kernel(SsdArgs a) {
  pdl_trigger();
  pdl_wait();
  const int r = threadIdx.x % kLanes;
  const int64_t h = blockIdx.y, g = h / (a.H / a.G);
  const int64_t p = blockIdx.x * int64_t{kThreads / kLanes} + threadIdx.x / kLanes;
  const bool valid = p < a.P;  // lanes past P still join the shuffles
  const int64_t N = a.N, P = a.P, seq = blockIdx.z;
  const SeqRows sq = seq_rows(a.seqs, seq, a.T);
  float* state = a.state + (sq.slot * a.H + h) * P * N;
  float S[kCols];
  load_row<kCols, kVec>(S, state + p * N, r, N, valid);
  const float A = -expf(a.A_log[h]), Dh = a.D[h], bias = a.dt_bias[h];
  for (int64_t t = sq.r0; t < sq.r1; ++t) {
    const float v = a.dt[t * a.H + h] + bias;
    const float delta = fminf(fmaxf(v > 20.0f ? v : log1pf(expf(v)), a.dt_min), a.dt_max);
    const float decay = expf(delta * A);
    const float xp = valid ? a.x[t * a.x_stride + h * P + p] : 0.0f;
    const float* Bt = a.B + t * a.bc_stride + g * N;
    const float* Ct = a.C + t * a.bc_stride + g * N;
    float acc = 0.0f;
#pragma unroll
    for (int m = 0; m < kCols; ++m) {
      const int64_t n = column<kVec>(r, m);
      if (n < N) {
        S[m] = decay * S[m] + delta * xp * Bt[n];
        acc += S[m] * Ct[n];
      }
    }
#pragma unroll
    for (int lanes = 1; lanes < kLanes; lanes *= 2) acc += __shfl_xor_sync(0xffffffffu, acc, lanes);
    if (valid && r == 0) a.y[(t * a.H + h) * P + p] = acc + Dh * xp;
    if (t >= sq.ckpt_begin)
      store_row<kCols, kVec>(S, a.state + (ckpt_slot(a.seqs, sq, t) * a.H + h) * P * N + p * N, r, N, valid);
  }
  store_row<kCols, kVec>(S, state + p * N, r, N, valid);
}

// kCols registers a lane; float4 rows when vec.
template <int kCols>
void launch_scan(const SsdArgs& a, dim3 grid, bool vec, cudaStream_t s) {
  if constexpr (kCols % 4 == 0) {
    if (vec) return launch(ssd_scan_kernel<kCols, true>, grid, kThreads, s, a);
  }
  launch(ssd_scan_kernel<kCols, false>, grid, kThreads, s, a);
}

}  // namespace

void ssd_scan(const SsdArgs& a, cudaStream_t s) {
  if (a.H == 0 || a.P == 0 || a.seqs.n_seqs == 0) return;
  constexpr int kRows = kThreads / kLanes;
  const dim3 grid(static_cast<unsigned>((a.P + kRows - 1) / kRows), static_cast<unsigned>(a.H),
                  static_cast<unsigned>(a.seqs.n_seqs));
  // N ≤ kSsdMaxStateDim = 256, checked by the caller. kCols registers a lane: the smallest of 2, 4, 8, 16,
  // 32 with kCols · 8 ≥ N.
  const bool vec = a.N % 4 == 0 && reinterpret_cast<uintptr_t>(a.state) % 16 == 0;
  if (a.N <= 2 * 8) launch_scan<2>(a, grid, vec, s);
  else if (a.N <= 4 * 8) launch_scan<4>(a, grid, vec, s);
  else if (a.N <= 8 * 8) launch_scan<8>(a, grid, vec, s);
  else if (a.N <= 16 * 8) launch_scan<16>(a, grid, vec, s);
  else launch_scan<32>(a, grid, vec, s);
}

}  // namespace kapitsa::ops::cuda::kernels
