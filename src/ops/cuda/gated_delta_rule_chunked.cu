// Kernels of the chunked (WY) Gated DeltaNet for prefill (kernels.h, gated_delta_rule_chunked): the
// chunk form of ops/ref/gated_delta_rule.cpp (transformers' torch_chunk_gated_delta_rule, chunks of
// kGdnChunk tokens) in f32, split in two so that most of the work runs in parallel over chunks:
//   1. gdn_chunk_prep, one block per (chunk, value head), needs no state: γ = cumulative g, the chunk's
//      Tm = (I + A)⁻¹ (A_ij = β_i (k_i·k_j) e^(γ_i−γ_j), i > j), U = Tm (β ⊙ V), W = Tm (β e^γ ⊙ K) and
//      P_ij = (q_i·k_j) e^(γ_i−γ_j) for j ≤ i, into scratch.
//   2. gdn_chunk_scan, one block per (32 state columns, value head, sequence), walks its sequence's chunks
//      in order with S[:, columns] in shared memory: V' = U − W S;  O = e^γ ⊙ (Q S) + P V';
//      S ← e^(γ_L) S + (e^(γ_L−γ) ⊙ K)ᵀ V'. Columns of S evolve independently, as in the recurrence.
// The token-by-token kernel (gated_delta_rule.cu) walks 512 tokens of the 4B shape in ~0.9 ms a layer,
// a chain of dependent steps per column; here each chunk is a few small matrix products.
#include "ops/cuda/kernel_util.cuh"

#include <algorithm>

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kC = static_cast<int>(kGdnChunk);
constexpr int kThreads = 256;
constexpr int kCols = 32;  // state columns a scan block owns
constexpr int kTmStride = kC + 1;

// acc[a][b] = Σ_x X[ti + 16a, x] · Y[tj + 16b, x] for x < D: a 4×4 tile of X Yᵀ (rows of stride `stride`,
// odd, so the 16 rows a warp reads at once sit in distinct banks). 8 loads serve 16 products.
__device__ __forceinline__ void dot_tile(const float* X, const float* Y, int stride, int D, int ti, int tj, float (&acc)[4][4]) {
#pragma unroll
  for (int p = 0; p < 4; ++p)
#pragma unroll
    for (int q = 0; q < 4; ++q) acc[p][q] = 0.0f;
  for (int x = 0; x < D; ++x) {
    float xr[4], yr[4];
#pragma unroll
    for (int p = 0; p < 4; ++p) xr[p] = X[(ti + 16 * p) * stride + x], yr[p] = Y[(tj + 16 * p) * stride + x];
#pragma unroll
    for (int p = 0; p < 4; ++p)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[p][q] += xr[p] * yr[q];
  }
}

// out[i, col] = Σ_{m < 8w+8} Tm[i, m] · f(m) · B[m, col] for this warp's rows i = 8w … 8w+7 (< L) and the
// lane's columns col = lane + 32c (< D ≤ 128): 8 × 4 sums side by side. Tm is zero above its diagonal
// and B zero past L, so the triangle needs no bound but the warp's last row.
template <typename Factor>
__device__ __forceinline__ void tm_times(const float* Tm, const float* B, int sb, int D, int L, Factor f, float* out,
                                         int64_t out_stride) {
  const int lane = threadIdx.x % 32, i0 = (threadIdx.x / 32) * 8;
  float acc[8][4] = {};
  for (int m = 0; m < i0 + 8; ++m) {
    const float fm = f(m);
    float b[4];
#pragma unroll
    for (int cc = 0; cc < 4; ++cc) b[cc] = lane + 32 * cc < D ? B[m * sb + lane + 32 * cc] * fm : 0.0f;
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const float t = Tm[(i0 + r) * kTmStride + m];
#pragma unroll
      for (int cc = 0; cc < 4; ++cc) acc[r][cc] += t * b[cc];
    }
  }
#pragma unroll
  for (int r = 0; r < 8; ++r)
#pragma unroll
    for (int cc = 0; cc < 4; ++cc)
      if (i0 + r < L && lane + 32 * cc < D) out[(i0 + r) * out_stride + lane + 32 * cc] = acc[r][cc];
}

__global__ void __launch_bounds__(kThreads) gdn_chunk_prep_kernel(GdnArgs a, GdnChunks c) {
  extern __shared__ float sm[];
  const int tid = threadIdx.x, ti = tid / 16, tj = tid % 16;
  const int64_t chunk = blockIdx.x, h = blockIdx.y, kh = h / (a.Hv / a.Hk);
  const int Dk = static_cast<int>(a.Dk), Dv = static_cast<int>(a.Dv), sk = Dk + 1, sv = max(Dk, Dv) + 1;
  const int64_t t0 = c.start[chunk];
  const int L = c.len[chunk];
  float* Ks = sm;                   // [kC][sk]  k rows, zero past L
  float* Vs = Ks + kC * sk;         // [kC][sv]  β ⊙ v rows, zero past L; later q rows
  float* Tm = Vs + kC * sv;         // [kC][kTmStride]
  float* bs = Tm + kC * kTmStride;  // β
  float* gs = bs + kC;              // γ
  float* eg = gs + kC;              // e^γ
  if (tid < kC) {  // zero past L, so that the products over a whole chunk need no bound
    bs[tid] = tid < L ? a.beta[(t0 + tid) * a.Hv + h] : 0.0f;
    gs[tid] = tid < L ? a.g[(t0 + tid) * a.Hv + h] : 0.0f;
  }
  __syncthreads();
  for (int i = tid; i < kC * Dk; i += kThreads) {
    const int m = i / Dk, x = i % Dk;
    Ks[m * sk + x] = m < L ? a.k[((t0 + m) * a.Hk + kh) * Dk + x] : 0.0f;
  }
  for (int i = tid; i < kC * Dv; i += kThreads) {
    const int m = i / Dv, x = i % Dv;
    Vs[m * sv + x] = m < L ? bs[m] * a.v[((t0 + m) * a.Hv + h) * Dv + x] : 0.0f;
  }
  if (tid == 0)
    for (int i = 1; i < L; ++i) gs[i] += gs[i - 1];  // γ: the running sum, in order
  __syncthreads();
  if (tid < kC) eg[tid] = expf(gs[tid]);
  if (tid < L) c.gamma[(t0 + tid) * a.Hv + h] = gs[tid];
  float acc[4][4];
  dot_tile(Ks, Ks, sk, Dk, ti, tj, acc);  // −A, strictly lower (exp only where γ_i − γ_j ≤ 0)
#pragma unroll
  for (int p = 0; p < 4; ++p)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int i = ti + 16 * p, j = tj + 16 * q;
      Tm[i * kTmStride + j] = i < L && j < i ? -bs[i] * acc[p][q] * expf(gs[i] - gs[j]) : 0.0f;
    }
  __syncthreads();
  // Row i of (I + A)⁻¹ from the rows above it: N_im = −A_im − Σ_{m<j<i} A_ij N_jm (ref's recursion).
  for (int i = 1; i < L; ++i) {
    float s = 0.0f;
    if (tid < i) {
      s = Tm[i * kTmStride + tid];
      for (int j = tid + 1; j < i; ++j) s += Tm[i * kTmStride + j] * Tm[j * kTmStride + tid];
    }
    __syncthreads();  // row i read whole before any of it is replaced
    if (tid < i) Tm[i * kTmStride + tid] = s;
    __syncthreads();
  }
  if (tid < L) Tm[tid * kTmStride + tid] = 1.0f;
  __syncthreads();
  const int64_t row_stride_v = a.Hv * Dv, row_stride_k = a.Hv * Dk;
  tm_times(Tm, Vs, sv, Dv, L, [](int) { return 1.0f; }, c.U + (t0 * a.Hv + h) * Dv, row_stride_v);  // U = Tm (β ⊙ V)
  tm_times(Tm, Ks, sk, Dk, L, [&](int m) { return bs[m] * eg[m]; }, c.W + (t0 * a.Hv + h) * Dk, row_stride_k);  // W = Tm (β e^γ ⊙ K)
  __syncthreads();  // Vs read whole before q replaces it
  for (int i = tid; i < kC * Dk; i += kThreads) {
    const int m = i / Dk, x = i % Dk;
    Vs[m * sk + x] = m < L ? a.q[((t0 + m) * a.Hk + kh) * Dk + x] : 0.0f;  // q rows at K's stride
  }
  __syncthreads();
  dot_tile(Vs, Ks, sk, Dk, ti, tj, acc);  // P = (Q Kᵀ) ⊙ e^(γ_i−γ_j), lower triangle
  float* P = c.P + (chunk * a.Hv + h) * kC * kC;
#pragma unroll
  for (int p = 0; p < 4; ++p)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int i = ti + 16 * p, j = tj + 16 * q;
      P[i * kC + j] = i < L && j <= i ? acc[p][q] * expf(gs[i] - gs[j]) : 0.0f;
    }
}

// One block per (32 state columns, value head, sequence); lane = column, warp w owns chunk rows 8w … 8w+7
// (V', O) and state rows 16w … 16w+15 (the update, kept in registers). Each thread sums its rows side by
// side: one load of S (or V') serves eight (sixteen) products, and the rows of W, Q, P, K come as
// broadcast float4 loads, so the inner loops issue ~1 shared-memory load per 3 multiply-adds where one
// output at a time needed 2 per one (session 21's scan: 11.2 of a 46-ms 4B prefill step, latency-bound).
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = kC / kWarps;                                   // 8
constexpr int kStateRowsPerWarp = static_cast<int>(kGdnChunkMaxDim) / kWarps;  // 16
constexpr int kSc = kCols + 1;   // row stride of S and V' tiles: lanes hit distinct banks
constexpr int kPs = kC + 4;      // row stride of P: float4-aligned rows

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }

__global__ void __launch_bounds__(kThreads) gdn_chunk_scan_kernel(GdnArgs a, GdnChunks c) {
  extern __shared__ float4 smem4[];  // float4: the tiles' rows are read as aligned float4
  float* sm = reinterpret_cast<float*>(smem4);
  const int tid = threadIdx.x, j = tid % 32, warp = tid / 32;
  const int64_t h = blockIdx.y, kh = h / (a.Hv / a.Hk), seq = blockIdx.z;
  const int Dk = static_cast<int>(a.Dk), Dv = static_cast<int>(a.Dv), bs = Dk + 4;  // Dk % 4 == 0
  const int64_t col = int64_t{blockIdx.x} * kCols + j;
  const bool valid = col < Dv;
  const SeqRows sq = seq_rows(a.seqs, seq, a.T);
  float* state = a.state + (sq.slot * a.Hv + h) * Dk * Dv;
  float* Ws = sm;                  // [kC][bs]  W of the chunk
  float* Qs = Ws + kC * bs;        // [kC][bs]  Q
  float* Ks = Qs + kC * bs;        // [kC][bs]  K
  float* Ps = Ks + kC * bs;        // [kC][kPs]
  float* Ss = Ps + kC * kPs;       // [Dk][kSc]  S[:, columns]
  float* Vp = Ss + Dk * kSc;       // [kC][kSc]  V'
  float* gl = Vp + kC * kSc;       // γ of the chunk
  const int i0 = warp * kRowsPerWarp, x0 = warp * kStateRowsPerWarp;
  float s_own[kStateRowsPerWarp];  // S[x0 + r, col]
#pragma unroll
  for (int r = 0; r < kStateRowsPerWarp; ++r) {
    s_own[r] = valid && x0 + r < Dk ? state[(x0 + r) * Dv + col] : 0.0f;
    if (x0 + r < Dk) Ss[(x0 + r) * kSc + j] = s_own[r];
  }
  const int32_t c_end = c.seq_first[seq + 1];
  for (int32_t chunk = c.seq_first[seq]; chunk < c_end; ++chunk) {
    const int64_t t0 = c.start[chunk];
    const int L = c.len[chunk];
    __syncthreads();  // the last chunk's reads of every tile are done
    for (int e = tid; e < L * Dk; e += kThreads) {
      const int m = e / Dk, x = e % Dk;
      Ws[m * bs + x] = c.W[((t0 + m) * a.Hv + h) * Dk + x];
      Qs[m * bs + x] = a.q[((t0 + m) * a.Hk + kh) * Dk + x];
      Ks[m * bs + x] = a.k[((t0 + m) * a.Hk + kh) * Dk + x];
    }
    const float* P = c.P + (int64_t{chunk} * a.Hv + h) * kC * kC;
    for (int e = tid; e < kC * kC; e += kThreads) Ps[(e / kC) * kPs + e % kC] = P[e];  // zero above the diagonal and past L
    if (tid < L) gl[tid] = c.gamma[(t0 + tid) * a.Hv + h];
    float vp[kRowsPerWarp], o[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) vp[r] = valid && i0 + r < L ? c.U[((t0 + i0 + r) * a.Hv + h) * Dv + col] : 0.0f, o[r] = 0.0f;
    __syncthreads();
    for (int x = 0; x < Dk; x += 4) {  // V' = U − W S and Q S, rows side by side
      const float s0 = Ss[x * kSc + j], s1 = Ss[(x + 1) * kSc + j], s2 = Ss[(x + 2) * kSc + j], s3 = Ss[(x + 3) * kSc + j];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float4 w = ld4(Ws + (i0 + r) * bs + x), q = ld4(Qs + (i0 + r) * bs + x);
        vp[r] -= w.x * s0 + w.y * s1 + w.z * s2 + w.w * s3;
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
      if (valid && i0 + r < L) a.o[((t0 + i0 + r) * a.Hv + h) * Dv + col] = o[r];
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
    if (valid && x0 + r < Dk) state[(x0 + r) * Dv + col] = s_own[r];
}

size_t prep_smem(int64_t Dk, int64_t Dv) {
  return sizeof(float) * static_cast<size_t>(kC * (Dk + 1) + kC * (std::max(Dk, Dv) + 1) + kC * kTmStride + 3 * kC);
}
size_t scan_smem(int64_t Dk) {
  return sizeof(float) * static_cast<size_t>(3 * kC * (Dk + 4) + kC * kPs + Dk * kSc + kC * kSc + kC);
}

}  // namespace

size_t gdn_chunk_scratch_floats(int64_t T, int64_t n_chunks, int64_t Hv, int64_t Dk, int64_t Dv) {
  return static_cast<size_t>(T * Hv * (Dk + Dv + 1) + n_chunks * Hv * kC * kC);
}

void gated_delta_rule_chunked(const GdnArgs& a, const GdnChunks& c, cudaStream_t s) {
  if (a.Hv == 0 || a.Dv == 0 || c.n == 0) return;
  // Above 48 KB of dynamic shared memory a kernel must opt in (once; at Dk = Dv = 128: 84 KB and 144 KB).
  static const bool opted_in = [] {
    const int most = static_cast<int>(std::max(prep_smem(kGdnChunkMaxDim, kGdnChunkMaxDim), scan_smem(kGdnChunkMaxDim)));
    cudaFuncSetAttribute(gdn_chunk_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
    cudaFuncSetAttribute(gdn_chunk_scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
    return true;
  }();
  (void)opted_in;
  gdn_chunk_prep_kernel<<<dim3(static_cast<unsigned>(c.n), static_cast<unsigned>(a.Hv)), kThreads, prep_smem(a.Dk, a.Dv),
                          s>>>(a, c);
  const dim3 grid(static_cast<unsigned>((a.Dv + kCols - 1) / kCols), static_cast<unsigned>(a.Hv),
                  static_cast<unsigned>(a.seqs.n_seqs));
  gdn_chunk_scan_kernel<<<grid, kThreads, scan_smem(a.Dk), s>>>(a, c);
}

}  // namespace kapitsa::ops::cuda::kernels
