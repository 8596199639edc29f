// The chunked (SSD) Mamba-2 scan for prefill (kernels.h, ssd_scan_chunked): ops/ref/ssm.cpp's chunked form
// (mamba_ssm's intra-chunk "attention" through the decay matrix, inter-chunk state passing) in f32, chunks
// of kStateChunk tokens, in two kernels:
//   1. ssd_chunk_prep, one block per (chunk, head), needs no state: Δ = clamp(softplus(dt + dt_bias)),
//      γ = the running sum of Δ·A, and P_ij = (C_i·B_j) e^(γ_i−γ_j) Δ_j for j ≤ i, into scratch;
//   2. chunk_scan (chunk_scan.cu), the walk the chunked Gated DeltaNet uses, with Q = C, K = Δ ⊙ B, V' = x
//      (no W), skip = D and the state [P, N] as [Dv, Dk]: y = e^γ ⊙ (C Sᵀ) + P x + D x;
//      S ← e^(γ_L) S + x ⊗ (e^(γ_L−γ) Δ ⊙ B).
// The token-by-token kernel (ssm.cu) took 2.5 ms a layer for 512 tokens of Nemotron-3-Nano's shape (64 heads,
// P 64, N 128): half of a 114-ms prefill step (H200, session 22).
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kC = static_cast<int>(kStateChunk);
constexpr int kThreads = 256;

struct SsdScratch {
  float *gamma, *delta, *P;  // [T, H], [T, H], [n, H, kC, kC]
};

__global__ void __launch_bounds__(kThreads) ssd_chunk_prep_kernel(SsdArgs a, ChunkList c, SsdScratch sc) {
  extern __shared__ float sm[];
  const int tid = threadIdx.x, ti = tid / 16, tj = tid % 16;
  const int64_t chunk = blockIdx.x, h = blockIdx.y, g = h / (a.H / a.G);
  const int N = static_cast<int>(a.N), sn = N + 1;
  const int64_t t0 = c.start[chunk];
  const int L = c.len[chunk];
  float* Cs = sm;             // [kC][sn]  C rows, zero past L
  float* Bs = Cs + kC * sn;   // [kC][sn]  B rows, zero past L
  float* gs = Bs + kC * sn;   // γ
  float* ds = gs + kC;        // Δ, zero past L
  if (tid < kC) {
    float delta = 0.0f;
    if (tid < L) {  // as ssm.cu's token-by-token kernel
      const float v = a.dt[(t0 + tid) * a.H + h] + a.dt_bias[h];
      delta = fminf(fmaxf(v > 20.0f ? v : log1pf(expf(v)), a.dt_min), a.dt_max);
    }
    ds[tid] = delta, gs[tid] = delta * -expf(a.A_log[h]);
  }
  for (int i = tid; i < kC * N; i += kThreads) {
    const int m = i / N, n = i % N;
    const int64_t at = ((t0 + m) * a.G + g) * N + n;
    Cs[m * sn + n] = m < L ? a.C[at] : 0.0f;
    Bs[m * sn + n] = m < L ? a.B[at] : 0.0f;
  }
  __syncthreads();
  if (tid == 0)
    for (int i = 1; i < L; ++i) gs[i] += gs[i - 1];  // γ: the running sum, in order
  __syncthreads();
  if (tid < L) sc.gamma[(t0 + tid) * a.H + h] = gs[tid], sc.delta[(t0 + tid) * a.H + h] = ds[tid];
  float acc[4][4];
  dot_tile(Cs, Bs, sn, N, ti, tj, acc);
  float* P = sc.P + (chunk * a.H + h) * kC * kC;
  each_in_tile(ti, tj, acc, [&](int i, int j, float d) {
    P[i * kC + j] = i < L && j <= i ? d * expf(gs[i] - gs[j]) * ds[j] : 0.0f;
  });
}

size_t prep_smem(int64_t N) { return sizeof(float) * static_cast<size_t>(2 * kC * (N + 1) + 2 * kC); }

}  // namespace

size_t ssd_chunk_scratch_floats(int64_t T, int64_t n_chunks, int64_t H) {
  return static_cast<size_t>(2 * T * H + n_chunks * H * kC * kC);
}

void ssd_scan_chunked(const SsdArgs& a, const ChunkList& c, float* scratch, cudaStream_t s) {
  if (a.H == 0 || a.P == 0 || c.n == 0) return;
  // Above 48 KB of dynamic shared memory a kernel must opt in (once; at N = 128: 66 KB).
  static const bool opted_in = [] {
    cudaFuncSetAttribute(ssd_chunk_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(prep_smem(kStateChunkMaxDim)));
    return true;
  }();
  (void)opted_in;
  const SsdScratch sc{scratch, scratch + a.T * a.H, scratch + 2 * a.T * a.H};
  ssd_chunk_prep_kernel<<<dim3(static_cast<unsigned>(c.n), static_cast<unsigned>(a.H)), kThreads, prep_smem(a.N), s>>>(
      a, c, sc);
  chunk_scan(ChunkScanArgs{a.C, a.B, sc.delta, a.x, nullptr, sc.gamma, sc.P, a.D, a.state, true, a.y, a.T, a.G, a.H,
                           a.N, a.P, a.seqs, c},
             s);
}

}  // namespace kapitsa::ops::cuda::kernels
