// The chunked (WY) Gated DeltaNet for prefill (kernels.h, gated_delta_rule_chunked): the chunk form of
// ops/ref/gated_delta_rule.cpp (transformers' torch_chunk_gated_delta_rule, chunks of kStateChunk tokens)
// in f32, in two kernels so that most of the work runs in parallel over chunks:
//   1. gdn_chunk_prep, one block per (chunk, value head), needs no state: γ = cumulative g, the chunk's
//      Tm = (I + A)⁻¹ (A_ij = β_i (k_i·k_j) e^(γ_i−γ_j), i > j), U = Tm (β ⊙ V), W = Tm (β e^γ ⊙ K) and
//      P_ij = (q_i·k_j) e^(γ_i−γ_j) for j ≤ i, into scratch;
//   2. chunk_scan (chunk_scan.cu) walks each sequence's chunks: V' = U − W S;  O = e^γ ⊙ (Q S) + P V';
//      S ← e^(γ_L) S + (e^(γ_L−γ) ⊙ K)ᵀ V'.
// The token-by-token kernel (gated_delta_rule.cu) walks 512 tokens of the 4B shape in ~0.9 ms a layer,
// a chain of dependent steps per column; here each chunk is a few small matrix products.
#include "ops/cuda/kernel_util.cuh"

#include <algorithm>

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kC = static_cast<int>(kStateChunk);
constexpr int kThreads = 256;
constexpr int kTmStride = kC + 1;

struct GdnScratch {
  float *U, *W, *gamma, *P;  // [T, Hv, Dv], [T, Hv, Dk], [T, Hv], [n, Hv, kC, kC]
};

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

__global__ void __launch_bounds__(kThreads) gdn_chunk_prep_kernel(GdnArgs a, ChunkList c, GdnScratch sc) {
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
  if (tid < L) sc.gamma[(t0 + tid) * a.Hv + h] = gs[tid];
  float acc[4][4];
  dot_tile(Ks, Ks, sk, Dk, ti, tj, acc);  // −A, strictly lower (exp only where γ_i − γ_j ≤ 0)
  each_in_tile(ti, tj, acc, [&](int i, int j, float d) {
    Tm[i * kTmStride + j] = i < L && j < i ? -bs[i] * d * expf(gs[i] - gs[j]) : 0.0f;
  });
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
  tm_times(Tm, Vs, sv, Dv, L, [](int) { return 1.0f; }, sc.U + (t0 * a.Hv + h) * Dv, row_stride_v);  // U = Tm (β ⊙ V)
  tm_times(Tm, Ks, sk, Dk, L, [&](int m) { return bs[m] * eg[m]; }, sc.W + (t0 * a.Hv + h) * Dk, row_stride_k);  // W = Tm (β e^γ ⊙ K)
  __syncthreads();  // Vs read whole before q replaces it
  for (int i = tid; i < kC * Dk; i += kThreads) {
    const int m = i / Dk, x = i % Dk;
    Vs[m * sk + x] = m < L ? a.q[((t0 + m) * a.Hk + kh) * Dk + x] : 0.0f;  // q rows at K's stride
  }
  __syncthreads();
  dot_tile(Vs, Ks, sk, Dk, ti, tj, acc);  // P = (Q Kᵀ) ⊙ e^(γ_i−γ_j), lower triangle
  float* P = sc.P + (chunk * a.Hv + h) * kC * kC;
  each_in_tile(ti, tj, acc, [&](int i, int j, float d) { P[i * kC + j] = i < L && j <= i ? d * expf(gs[i] - gs[j]) : 0.0f; });
}

size_t prep_smem(int64_t Dk, int64_t Dv) {
  return sizeof(float) * static_cast<size_t>(kC * (Dk + 1) + kC * (std::max(Dk, Dv) + 1) + kC * kTmStride + 3 * kC);
}
}  // namespace

size_t gdn_chunk_scratch_floats(int64_t T, int64_t n_chunks, int64_t Hv, int64_t Dk, int64_t Dv) {
  return static_cast<size_t>(T * Hv * (Dk + Dv + 1) + n_chunks * Hv * kC * kC);
}

void gated_delta_rule_chunked(const GdnArgs& a, const ChunkList& c, float* scratch, cudaStream_t s) {
  if (a.Hv == 0 || a.Dv == 0 || c.n == 0) return;
  // Above 48 KB of dynamic shared memory a kernel must opt in (once; at Dk = Dv = 128: 84 KB).
  static const bool opted_in = [] {
    cudaFuncSetAttribute(gdn_chunk_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(prep_smem(kStateChunkMaxDim, kStateChunkMaxDim)));
    return true;
  }();
  (void)opted_in;
  GdnScratch sc;
  sc.U = scratch;
  sc.W = sc.U + a.T * a.Hv * a.Dv;
  sc.gamma = sc.W + a.T * a.Hv * a.Dk;
  sc.P = sc.gamma + a.T * a.Hv;
  gdn_chunk_prep_kernel<<<dim3(static_cast<unsigned>(c.n), static_cast<unsigned>(a.Hv)), kThreads, prep_smem(a.Dk, a.Dv),
                          s>>>(a, c, sc);
  chunk_scan(ChunkScanArgs{a.q, a.k, nullptr, sc.U, sc.W, sc.gamma, sc.P, nullptr, a.state, false, a.o, a.T, a.Hk, a.Hv,
                           a.Dk, a.Dv, a.seqs, c},
             s);
}

}  // namespace kapitsa::ops::cuda::kernels
