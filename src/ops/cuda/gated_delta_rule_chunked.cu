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

__global__ void __launch_bounds__(kThreads) gdn_chunk_prep_kernel(GdnArgs a, GdnChunks c) {
  extern __shared__ float sm[];
  const int tid = threadIdx.x;
  const int64_t chunk = blockIdx.x, h = blockIdx.y, kh = h / (a.Hv / a.Hk);
  const int Dk = static_cast<int>(a.Dk), Dv = static_cast<int>(a.Dv), sk = Dk + 1, sv = Dv + 1;
  const int64_t t0 = c.start[chunk];
  const int L = c.len[chunk];
  float* Ks = sm;                 // [kC][sk]  k rows
  float* Vs = Ks + kC * sk;       // [kC][sv]  v rows
  float* Tm = Vs + kC * sv;       // [kC][kTmStride]
  float* bs = Tm + kC * kTmStride;  // β
  float* gs = bs + kC;            // γ
  float* eg = gs + kC;            // e^γ
  for (int i = tid; i < L * Dk; i += kThreads) Ks[(i / Dk) * sk + i % Dk] = a.k[((t0 + i / Dk) * a.Hk + kh) * Dk + i % Dk];
  for (int i = tid; i < L * Dv; i += kThreads) Vs[(i / Dv) * sv + i % Dv] = a.v[((t0 + i / Dv) * a.Hv + h) * Dv + i % Dv];
  if (tid < L) bs[tid] = a.beta[(t0 + tid) * a.Hv + h], gs[tid] = a.g[(t0 + tid) * a.Hv + h];
  __syncthreads();
  if (tid == 0)
    for (int i = 1; i < L; ++i) gs[i] += gs[i - 1];  // γ: the running sum, in order
  __syncthreads();
  if (tid < L) eg[tid] = expf(gs[tid]), c.gamma[(t0 + tid) * a.Hv + h] = gs[tid];
  // −A, strictly lower (exp only where γ_i − γ_j ≤ 0).
  for (int e = tid; e < kC * kC; e += kThreads) {
    const int i = e / kC, j = e % kC;
    float val = 0.0f;
    if (i < L && j < i) {
      float dot = 0.0f;
      for (int x = 0; x < Dk; ++x) dot += Ks[i * sk + x] * Ks[j * sk + x];
      val = -bs[i] * dot * expf(gs[i] - gs[j]);
    }
    Tm[i * kTmStride + j] = val;
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
  for (int e = tid; e < L * Dv; e += kThreads) {  // U = Tm (β ⊙ V)
    const int i = e / Dv, j = e % Dv;
    float s = 0.0f;
    for (int m = 0; m <= i; ++m) s += Tm[i * kTmStride + m] * bs[m] * Vs[m * sv + j];
    c.U[((t0 + i) * a.Hv + h) * Dv + j] = s;
  }
  for (int e = tid; e < L * Dk; e += kThreads) {  // W = Tm (β e^γ ⊙ K)
    const int i = e / Dk, x = e % Dk;
    float s = 0.0f;
    for (int m = 0; m <= i; ++m) s += Tm[i * kTmStride + m] * bs[m] * eg[m] * Ks[m * sk + x];
    c.W[((t0 + i) * a.Hv + h) * Dk + x] = s;
  }
  float* P = c.P + (chunk * a.Hv + h) * kC * kC;
  for (int e = tid; e < kC * kC; e += kThreads) {  // P = (Q Kᵀ) ⊙ e^(γ_i−γ_j), lower triangle
    const int i = e / kC, j = e % kC;
    float val = 0.0f;
    if (i < L && j <= i) {
      const float* q = a.q + ((t0 + i) * a.Hk + kh) * Dk;
      float dot = 0.0f;
      for (int x = 0; x < Dk; ++x) dot += q[x] * Ks[j * sk + x];
      val = dot * expf(gs[i] - gs[j]);
    }
    P[e] = val;
  }
}

__global__ void __launch_bounds__(kThreads) gdn_chunk_scan_kernel(GdnArgs a, GdnChunks c) {
  extern __shared__ float sm[];
  const int tid = threadIdx.x, j = tid % kCols, grp = tid / kCols;
  constexpr int kGroups = kThreads / kCols;
  const int64_t h = blockIdx.y, kh = h / (a.Hv / a.Hk), seq = blockIdx.z;
  const int Dk = static_cast<int>(a.Dk), Dv = static_cast<int>(a.Dv), sk = Dk + 1;
  const int64_t col = int64_t{blockIdx.x} * kCols + j;
  const bool valid = col < Dv;
  const SeqRows sq = seq_rows(a.seqs, seq, a.T);
  float* state = a.state + (sq.slot * a.Hv + h) * Dk * Dv;
  float* Ss = sm;                        // [Dk][kCols + 1]  S[:, columns]
  float* Buf = Ss + Dk * (kCols + 1);    // [kC][sk]  W, then Q, then e^(γ_L−γ) ⊙ K
  float* Vp = Buf + kC * sk;             // [kC][kCols + 1]  V'
  float* Ps = Vp + kC * (kCols + 1);     // [kC][kTmStride]
  float* gl = Ps + kC * kTmStride;       // γ of the chunk
  constexpr int sc = kCols + 1;
  for (int x = grp; x < Dk; x += kGroups) Ss[x * sc + j] = valid ? state[x * Dv + col] : 0.0f;
  const int32_t c_end = c.seq_first[seq + 1];
  for (int32_t chunk = c.seq_first[seq]; chunk < c_end; ++chunk) {
    const int64_t t0 = c.start[chunk];
    const int L = c.len[chunk];
    __syncthreads();  // the last chunk's reads of Buf, Vp, Ps are done
    for (int e = tid; e < L * Dk; e += kThreads) Buf[(e / Dk) * sk + e % Dk] = c.W[((t0 + e / Dk) * a.Hv + h) * Dk + e % Dk];
    const float* P = c.P + (int64_t{chunk} * a.Hv + h) * kC * kC;
    for (int e = tid; e < L * kC; e += kThreads) Ps[(e / kC) * kTmStride + e % kC] = P[e];
    if (tid < L) gl[tid] = c.gamma[(t0 + tid) * a.Hv + h];
    __syncthreads();
    for (int i = grp; i < L; i += kGroups) {  // V' = U − W S
      float s = valid ? c.U[((t0 + i) * a.Hv + h) * Dv + col] : 0.0f;
      for (int x = 0; x < Dk; ++x) s -= Buf[i * sk + x] * Ss[x * sc + j];
      Vp[i * sc + j] = s;
    }
    __syncthreads();
    for (int e = tid; e < L * Dk; e += kThreads) Buf[(e / Dk) * sk + e % Dk] = a.q[((t0 + e / Dk) * a.Hk + kh) * Dk + e % Dk];
    __syncthreads();
    for (int i = grp; i < L; i += kGroups) {  // O = e^γ ⊙ (Q S) + P V'
      float s = 0.0f;
      for (int x = 0; x < Dk; ++x) s += Buf[i * sk + x] * Ss[x * sc + j];
      s *= expf(gl[i]);
      for (int m = 0; m <= i; ++m) s += Ps[i * kTmStride + m] * Vp[m * sc + j];
      if (valid) a.o[((t0 + i) * a.Hv + h) * Dv + col] = s;
    }
    __syncthreads();
    const float gL = gl[L - 1];
    for (int e = tid; e < L * Dk; e += kThreads) {
      const int m = e / Dk, x = e % Dk;
      Buf[m * sk + x] = a.k[((t0 + m) * a.Hk + kh) * Dk + x] * expf(gL - gl[m]);
    }
    __syncthreads();
    const float eL = expf(gL);
    for (int x = grp; x < Dk; x += kGroups) {  // S ← e^(γ_L) S + (e^(γ_L−γ) ⊙ K)ᵀ V'
      float s = eL * Ss[x * sc + j];
      for (int m = 0; m < L; ++m) s += Buf[m * sk + x] * Vp[m * sc + j];
      Ss[x * sc + j] = s;
    }
  }
  __syncthreads();
  for (int x = grp; x < Dk; x += kGroups)
    if (valid) state[x * Dv + col] = Ss[x * sc + j];
}

size_t prep_smem(int64_t Dk, int64_t Dv) {
  return sizeof(float) * static_cast<size_t>(kC * (Dk + 1) + kC * (Dv + 1) + kC * kTmStride + 3 * kC);
}
size_t scan_smem(int64_t Dk) {
  return sizeof(float) * static_cast<size_t>(Dk * (kCols + 1) + kC * (Dk + 1) + kC * (kCols + 1) + kC * kTmStride + kC);
}

}  // namespace

size_t gdn_chunk_scratch_floats(int64_t T, int64_t n_chunks, int64_t Hv, int64_t Dk, int64_t Dv) {
  return static_cast<size_t>(T * Hv * (Dk + Dv + 1) + n_chunks * Hv * kC * kC);
}

void gated_delta_rule_chunked(const GdnArgs& a, const GdnChunks& c, cudaStream_t s) {
  if (a.Hv == 0 || a.Dv == 0 || c.n == 0) return;
  // Above 48 KB of dynamic shared memory a kernel must opt in (once; at Dk = Dv = 128: 84 KB and 77 KB).
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
