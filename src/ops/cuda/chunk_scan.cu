// The state walk of the chunked (WY / SSD) scans for prefill (kernels.h, chunk_scan), shared by the
// chunked Gated DeltaNet (gated_delta_rule_chunked.cu) and the chunked Mamba-2 scan (ssm_chunked.cu): their
// prep kernels compute every chunk's products in parallel, then this kernel walks each sequence's chunks
// in order. One block per (32 state columns, value head, sequence); lane = column, warp w owns chunk rows
// 8w … 8w+7 (V', O) and state rows 16w … 16w+15 (the update, kept in registers). Each thread sums its rows
// side by side: one load of S (or V') serves eight (sixteen) products, and the rows of W, Q, P, K come as
// broadcast float4 loads. Session 21's one-output-a-thread scan (two shared loads per multiply-add, one
// dependent chain) took 11.2 ms of a 46-ms 4B prefill step, latency-bound.
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kC = static_cast<int>(kStateChunk);
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kCols = 32;                                                      // state columns a block owns
constexpr int kRowsPerWarp = kC / kWarps;                                      // 8
constexpr int kStateRowsPerWarp = static_cast<int>(kStateChunkMaxDim) / kWarps;  // 16
constexpr int kSc = kCols + 1;  // row stride of the S and V' tiles: lanes hit distinct banks
constexpr int kPs = kC + 4;     // row stride of P: float4-aligned rows

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }

// kHasW: a.W given (Gated DeltaNet: V' = U − W S); without it (Mamba-2) V' = U and Ws stays unused.
template <bool kHasW>
__global__ void __launch_bounds__(kThreads) chunk_scan_kernel(ChunkScanArgs a) {
  extern __shared__ float4 smem4[];  // float4: the tiles' rows are read as aligned float4
  float* sm = reinterpret_cast<float*>(smem4);
  const int tid = threadIdx.x, j = tid % 32, warp = tid / 32;
  const int64_t h = blockIdx.y, kh = h / (a.Hv / a.Hk), seq = blockIdx.z;
  const int Dk = static_cast<int>(a.Dk), Dv = static_cast<int>(a.Dv), bs = Dk + 4;  // Dk % 4 == 0
  const int64_t col = int64_t{blockIdx.x} * kCols + j;
  const bool valid = col < Dv;
  const SeqRows sq = seq_rows(a.seqs, seq, a.T);
  float* state = a.state + (sq.slot * a.Hv + h) * Dk * Dv;
  // S[x, col] in the state's layout: [Dk, Dv], or [Dv, Dk] (Mamba-2's [P, N]).
  const int64_t sx = a.state_vk ? 1 : Dv, scol = a.state_vk ? Dk : 1;
  float* Ws = sm;                  // [kC][bs]  W of the chunk
  float* Qs = Ws + kC * bs;        // [kC][bs]  Q
  float* Ks = Qs + kC * bs;        // [kC][bs]  K (scaled by k_scale)
  float* Ps = Ks + kC * bs;        // [kC][kPs]
  float* Ss = Ps + kC * kPs;       // [Dk][kSc]  S[:, columns]
  float* Vp = Ss + Dk * kSc;       // [kC][kSc]  V'
  float* gl = Vp + kC * kSc;       // γ of the chunk
  const int i0 = warp * kRowsPerWarp, x0 = warp * kStateRowsPerWarp;
  const float skip = a.skip != nullptr ? a.skip[h] : 0.0f;
  float s_own[kStateRowsPerWarp];  // S[x0 + r, col]
#pragma unroll
  for (int r = 0; r < kStateRowsPerWarp; ++r) {
    s_own[r] = valid && x0 + r < Dk ? state[(x0 + r) * sx + col * scol] : 0.0f;
    if (x0 + r < Dk) Ss[(x0 + r) * kSc + j] = s_own[r];
  }
  const int32_t c_end = a.chunks.seq_first[seq + 1];
  for (int32_t chunk = a.chunks.seq_first[seq]; chunk < c_end; ++chunk) {
    const int64_t t0 = a.chunks.start[chunk];
    const int L = a.chunks.len[chunk];
    __syncthreads();  // the last chunk's reads of every tile are done
    for (int e = tid; e < L * Dk; e += kThreads) {
      const int m = e / Dk, x = e % Dk;
      const int64_t qk = ((t0 + m) * a.Hk + kh) * Dk + x;
      if constexpr (kHasW) Ws[m * bs + x] = a.W[((t0 + m) * a.Hv + h) * Dk + x];
      Qs[m * bs + x] = a.q[qk];
      Ks[m * bs + x] = a.k_scale != nullptr ? a.k[qk] * a.k_scale[(t0 + m) * a.Hv + h] : a.k[qk];
    }
    const float* P = a.P + (int64_t{chunk} * a.Hv + h) * kC * kC;
    for (int e = tid; e < kC * kC; e += kThreads) Ps[(e / kC) * kPs + e % kC] = P[e];  // zero above the diagonal and past L
    if (tid < L) gl[tid] = a.gamma[(t0 + tid) * a.Hv + h];
    float u[kRowsPerWarp], vp[kRowsPerWarp], o[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      u[r] = valid && i0 + r < L ? a.U[((t0 + i0 + r) * a.Hv + h) * Dv + col] : 0.0f;
      vp[r] = u[r], o[r] = 0.0f;
    }
    __syncthreads();
    for (int x = 0; x < Dk; x += 4) {  // V' = U − W S and Q S, rows side by side
      const float s0 = Ss[x * kSc + j], s1 = Ss[(x + 1) * kSc + j], s2 = Ss[(x + 2) * kSc + j], s3 = Ss[(x + 3) * kSc + j];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        if constexpr (kHasW) {
          const float4 w = ld4(Ws + (i0 + r) * bs + x);
          vp[r] -= w.x * s0 + w.y * s1 + w.z * s2 + w.w * s3;
        }
        const float4 q = ld4(Qs + (i0 + r) * bs + x);
        o[r] += q.x * s0 + q.y * s1 + q.z * s2 + q.w * s3;
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) Vp[(i0 + r) * kSc + j] = i0 + r < L ? vp[r] : 0.0f;  // rows past L: 0 for P V'
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) o[r] *= i0 + r < L ? expf(gl[i0 + r]) : 0.0f;
    for (int m = 0; m < i0 + kRowsPerWarp; m += 4) {  // O += P V' (P's upper triangle is zero)
      const float v0 = Vp[m * kSc + j], v1 = Vp[(m + 1) * kSc + j], v2 = Vp[(m + 2) * kSc + j], v3 = Vp[(m + 3) * kSc + j];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float4 p = ld4(Ps + (i0 + r) * kPs + m);
        o[r] += p.x * v0 + p.y * v1 + p.z * v2 + p.w * v3;
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
      if (valid && i0 + r < L) a.o[((t0 + i0 + r) * a.Hv + h) * Dv + col] = o[r] + skip * u[r];
    // S ← e^(γ_L) S + (e^(γ_L−γ) ⊙ K)ᵀ V': this thread's rows x0 … x0+15 of its column.
    const float gL = gl[L - 1], eL = expf(gL);
#pragma unroll
    for (int r = 0; r < kStateRowsPerWarp; ++r) s_own[r] *= eL;
    if (x0 < Dk) {
      for (int m = 0; m < L; ++m) {
        const float v = Vp[m * kSc + j] * expf(gL - gl[m]);
#pragma unroll
        for (int q4 = 0; q4 < kStateRowsPerWarp / 4; ++q4) {
          if (x0 + 4 * q4 >= Dk) break;
          const float4 kk = ld4(Ks + m * bs + x0 + 4 * q4);
          s_own[4 * q4] += kk.x * v, s_own[4 * q4 + 1] += kk.y * v, s_own[4 * q4 + 2] += kk.z * v, s_own[4 * q4 + 3] += kk.w * v;
        }
      }
#pragma unroll
      for (int r = 0; r < kStateRowsPerWarp; ++r)
        if (x0 + r < Dk) Ss[(x0 + r) * kSc + j] = s_own[r];
    }
  }
#pragma unroll
  for (int r = 0; r < kStateRowsPerWarp; ++r)
    if (valid && x0 + r < Dk) state[(x0 + r) * sx + col * scol] = s_own[r];
}

size_t scan_smem(int64_t Dk) {
  return sizeof(float) * static_cast<size_t>(3 * kC * (Dk + 4) + kC * kPs + Dk * kSc + kC * kSc + kC);
}

}  // namespace

void chunk_scan(const ChunkScanArgs& a, cudaStream_t s) {
  if (a.Hv == 0 || a.Dv == 0 || a.chunks.n == 0) return;
  // Above 48 KB of dynamic shared memory a kernel must opt in (once; at Dk = 128: 144 KB).
  static const bool opted_in = [] {
    const int most = static_cast<int>(scan_smem(kStateChunkMaxDim));
    cudaFuncSetAttribute(chunk_scan_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
    cudaFuncSetAttribute(chunk_scan_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
    return true;
  }();
  (void)opted_in;
  const dim3 grid(static_cast<unsigned>((a.Dv + kCols - 1) / kCols), static_cast<unsigned>(a.Hv),
                  static_cast<unsigned>(a.seqs.n_seqs));
  if (a.W != nullptr) chunk_scan_kernel<true><<<grid, kThreads, scan_smem(a.Dk), s>>>(a);
  else chunk_scan_kernel<false><<<grid, kThreads, scan_smem(a.Dk), s>>>(a);
}

}  // namespace kapitsa::ops::cuda::kernels
