// Kernels of Gated DeltaNet: the gates (elementwise) and the token-by-token delta rule. Each column j
// of a head's state S [Dk, Dv] evolves independently (u_j = S[:, j]·k, δ_j = (v_j − u_j)β,
// S[:, j] += k δ_j, o_j = S[:, j]·q), so a block takes one value head and 32 columns, 4 threads per
// column, each holding Dk/4 rows of it in registers; the two dot products reduce over those 4 lanes.
// A batch of sequences (Seqs) adds a grid dimension: each sequence's state lives in its slot, and after
// each checkpointed token the block also stores its columns into that token's checkpoint slot.
// Prefill-sized calls without checkpoints take the chunked WY kernels instead (gated_delta_rule_chunked.cu).
// gdn_core_varlen's kernel (below) is this recurrence with the layer's small steps around it.
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

// Element m of a thread's registers is row r + 4m of its column. kFull: a square head of the kernel's
// size, Dk = Dv = 4·kRows (the usual head sizes), so every m is a row and the dimensions, strides and
// offsets are constants. Offsets within a head's state are ints (Dk·Dv ≤ 2^16): Nsight Compute found
// the token walk of these kernels issuing ~570 instructions a token and warp, most of them 64-bit index
// arithmetic and per-row bounds checks on a runtime Dk (demo verification: 21.6 µs a layer, 7.7 cycles
// an instruction; 12 µs with int offsets and kFull meaning Dk = 4·kRows; session 33).
template <int kRows, bool kFull>
__device__ __forceinline__ bool has_row(int r, int m, int Dk) {
  return kFull || r + kLanesPerColumn * m < Dk;
}
// Dk or Dv: a constant when kFull.
template <int kRows, bool kFull>
__device__ __forceinline__ int head_dim(int64_t d) {
  return kFull ? kLanesPerColumn * kRows : static_cast<int>(d);
}

// The thread's rows of its column to or from registers; `column` points at row r of column j (its
// rows are 4·Dv apart). Lanes past Dv or Dk hold zeros and store nothing.
template <int kRows, bool kFull>
__device__ __forceinline__ void load_column(float (&S)[kRows], const float* column, int r, int Dk, int Dv,
                                            bool valid) {
  const int stride = kLanesPerColumn * Dv;
#pragma unroll
  for (int m = 0; m < kRows; ++m) S[m] = valid && has_row<kRows, kFull>(r, m, Dk) ? column[m * stride] : 0.0f;
}
template <int kRows, bool kFull>
__device__ __forceinline__ void store_column(const float (&S)[kRows], float* column, int r, int Dk, int Dv,
                                             bool valid) {
  const int stride = kLanesPerColumn * Dv;
  if (!valid) return;
#pragma unroll
  for (int m = 0; m < kRows; ++m)
    if (has_row<kRows, kFull>(r, m, Dk)) column[m * stride] = S[m];
}

// One token for column j, whose rows the column's 4 lanes share: S ← αS;  u = Sᵀk;  δ = (v − u)β;
// S += k δ;  returns o = Sᵀq (every lane of the column gets it). kt, qt: the token's key and query
// (global or shared memory), offset to row r (element m at [4m]); v: v_j (unused when !valid). Each dot
// product sums four interleaved partial sums (rows m ≡ 0…3 mod 4), then those, so its chain is a quarter
// as long: the kernel runs one block a head, a few warps an SM, and waited on that chain.
template <int kRows, bool kFull>
__device__ __forceinline__ float delta_step(float (&S)[kRows], int r, int Dk, const float* kt, const float* qt,
                                            float alpha, float v, float beta, bool valid) {
  constexpr int kParts = kRows >= 4 ? 4 : 1;
  float up[kParts] = {};
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    if (has_row<kRows, kFull>(r, m, Dk)) {
      S[m] *= alpha;
      up[m % kParts] = fmaf(S[m], kt[kLanesPerColumn * m], up[m % kParts]);
    }
  }
  float u = kParts == 4 ? (up[0] + up[1]) + (up[2] + up[3]) : up[0];
  u += __shfl_xor_sync(0xffffffffu, u, 1);
  u += __shfl_xor_sync(0xffffffffu, u, 2);
  const float delta = valid ? (v - u) * beta : 0.0f;
  float op[kParts] = {};
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    if (has_row<kRows, kFull>(r, m, Dk)) {
      S[m] = fmaf(kt[kLanesPerColumn * m], delta, S[m]);
      op[m % kParts] = fmaf(S[m], qt[kLanesPerColumn * m], op[m % kParts]);
    }
  }
  float o = kParts == 4 ? (op[0] + op[1]) + (op[2] + op[3]) : op[0];
  o += __shfl_xor_sync(0xffffffffu, o, 1);
  o += __shfl_xor_sync(0xffffffffu, o, 2);
  return o;
}

// Tokens whose k, q and gates a block stages in shared memory at once (32 KB at Dk = 256).
constexpr int kStageTokens = 16;

// kRows: rows of S per thread, ≥ Dk / kLanesPerColumn. Thread (column c, lane r) holds rows r, r+4, ...
// The tokens run in stages of kStageTokens: the block first copies their k and q rows and gates to
// shared memory together (and each thread its v values to registers), then walks them. Walking with
// every token's loads in the chain cost 3.7 µs a token (a 512-token prefill of the 4B shape spent 55% of
// its kernel time here, session 15); the arithmetic is unchanged (same operations, same order).
template <int kRows, bool kFull>
__global__ void __launch_bounds__(kLanesPerColumn * kColumnsPerBlock) gated_delta_rule_kernel(GdnArgs a) {
  __shared__ float kq[kStageTokens][2][kGdnMaxKeyDim];  // k, then q, of each staged token
  __shared__ float gates[kStageTokens][2];              // alpha = exp(g), beta
  const int r = threadIdx.x % kLanesPerColumn, tid = threadIdx.x;
  const int64_t h = blockIdx.y, kh = h / (a.Hv / a.Hk);
  const int j = static_cast<int>(blockIdx.x) * kColumnsPerBlock + static_cast<int>(threadIdx.x) / kLanesPerColumn;
  const bool valid = j < a.Dv;  // lanes past Dv still join the shuffles
  const int Dk = head_dim<kRows, kFull>(a.Dk), Dv = head_dim<kRows, kFull>(a.Dv), col = r * Dv + j;
  const int64_t seq = blockIdx.z;
  const SeqRows sq = seq_rows(a.seqs, seq, a.T);
  float* state = a.state + (sq.slot * a.Hv + h) * Dk * Dv;
  float S[kRows];
  load_column<kRows, kFull>(S, state + col, r, Dk, Dv, valid);
  for (int64_t t0 = sq.r0; t0 < sq.r1; t0 += kStageTokens) {
    const int n = sq.r1 - t0 < kStageTokens ? static_cast<int>(sq.r1 - t0) : kStageTokens;
    __syncthreads();  // the previous stage's reads are done
    for (int i = tid; i < n * Dk; i += blockDim.x) {
      const int64_t t = t0 + i / Dk, c = i % Dk;
      kq[i / Dk][0][c] = a.k[(t * a.Hk + kh) * Dk + c];
      kq[i / Dk][1][c] = a.q[(t * a.Hk + kh) * Dk + c];
    }
    if (tid < n) gates[tid][0] = expf(a.g[(t0 + tid) * a.Hv + h]), gates[tid][1] = a.beta[(t0 + tid) * a.Hv + h];
    float v[kStageTokens];
    int32_t ck[kStageTokens];  // checkpoint slots
#pragma unroll
    for (int u = 0; u < kStageTokens; ++u) {
      v[u] = valid && u < n ? a.v[((t0 + u) * a.Hv + h) * Dv + j] : 0.0f;
      ck[u] = u < n && t0 + u >= sq.ckpt_begin ? ckpt_slot(a.seqs, sq, t0 + u) : -1;
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kStageTokens; ++u) {
      if (u >= n) break;
      const int64_t t = t0 + u;
      const float o = delta_step<kRows, kFull>(S, r, Dk, kq[u][0] + r, kq[u][1] + r, gates[u][0], v[u], gates[u][1], valid);
      if (valid && r == 0) a.o[(t * a.Hv + h) * Dv + j] = o;
      if (ck[u] >= 0) store_column<kRows, kFull>(S, a.state + (ck[u] * a.Hv + h) * Dk * Dv + col, r, Dk, Dv, valid);
    }
  }
  store_column<kRows, kFull>(S, state + col, r, Dk, Dv, valid);
}

// A token's decay and write strength from its raw a and b (gdn_core_varlen): alpha = exp(−e^{A_log} ·
// softplus(a + dt_bias)), beta = σ(b). One function for both gdn_core kernels: a verified row equals the
// decoded one bit for bit only while they compute the same.
__device__ __forceinline__ float2 core_gates(float a_raw, float b_raw, float neg_A, float dt_bias) {
  const float at = a_raw + dt_bias;
  const float softplus = at > 20.0f ? at : log1pf(expf(at));
  return make_float2(expf(neg_A * softplus), 1.0f / (1.0f + expf(-b_raw)));
}

// gdn_core_varlen, a launch whose every sequence has one row (decode): the block of value head h holds
// the head's whole state, Dv columns × 4 lanes (rows as above), so the gated output norm needs only a
// block sum. The block's first Dk threads load k and q and the block sums their squares (one reduction
// for both), the normalised k̂ and q̂ go to shared memory, every thread computes the two gates itself,
// then the recurrence as above, then the sum of o² over the head and the gated norm. Weights (A_log,
// dt_bias, norm_w), the step's metadata and the state are loaded before pdl_wait(): within a step only
// this layer's kernel writes its state slots, and everything before a step (slot copies, the metadata's
// upload) completes before the step's first kernel, which is launched without PDL.
// (Σ x, Σ y) over the block; `shared` holds 64 floats. Every thread gets both; contains barriers.
__device__ __forceinline__ float2 block_sum2(float x, float y, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  x = warp_sum(x), y = warp_sum(y);
  __syncthreads();
  if (lane == 0) shared[warp] = x, shared[32 + warp] = y;
  __syncthreads();
  x = lane < n_warps ? shared[lane] : 0.0f;
  y = lane < n_warps ? shared[32 + lane] : 0.0f;
  return make_float2(warp_sum(x), warp_sum(y));
}

template <int kRows, int kMaxThreads, bool kFull>
__global__ void __launch_bounds__(kMaxThreads) gdn_core_row_kernel(GdnCoreArgs a) {
  __shared__ float kq[2 * kGdnMaxKeyDim];  // k̂ then q̂ of the token
  __shared__ float red[64];
  pdl_trigger();
  const int r = threadIdx.x % kLanesPerColumn, tid = threadIdx.x;
  const int64_t h = blockIdx.x, kh = h / (a.Hv / a.Hk), seq = blockIdx.y;
  const int Dk = head_dim<kRows, kFull>(a.Dk), Dv = head_dim<kRows, kFull>(a.Dv);
  const int j = static_cast<int>(threadIdx.x) / kLanesPerColumn, col = r * Dv + j;
  const bool valid = j < Dv;  // lanes past Dv still join the shuffles and block sums
  const float neg_A = -expf(a.A_log[h]), dt_bias = a.dt_bias[h], wj = valid ? a.norm_w[j] : 0.0f;
  const SeqRows sq = seq_rows(a.seqs, seq, a.T);
  float* state = a.state + (sq.slot * a.Hv + h) * Dk * Dv;
  float S[kRows];
  load_column<kRows, kFull>(S, state + col, r, Dk, Dv, valid);
  pdl_wait();
  const int64_t C = 2 * a.Hk * Dk + a.Hv * Dv;
  const float q_scale = 1.0f / sqrtf(static_cast<float>(Dk));
  for (int64_t t = sq.r0; t < sq.r1; ++t) {
    const float* row = a.qkv + t * C;
    const float kx = tid < Dk ? row[(a.Hk + kh) * Dk + tid] : 0.0f;
    const float qx = tid < Dk ? row[kh * Dk + tid] : 0.0f;
    const float vj = valid ? row[2 * a.Hk * Dk + h * Dv + j] : 0.0f;
    const float zj = valid ? a.z[(t * a.Hv + h) * Dv + j] : 0.0f;
    const float2 gate = core_gates(a.a[t * a.Hv + h], a.b[t * a.Hv + h], neg_A, dt_bias);
    const float2 ss = block_sum2(kx * kx, qx * qx, red);  // its barriers also end the last token's reads of kq
    if (tid < Dk) kq[tid] = kx * rsqrtf(ss.x + 1e-6f), kq[Dk + tid] = qx * (q_scale * rsqrtf(ss.y + 1e-6f));
    __syncthreads();
    const float o = delta_step<kRows, kFull>(S, r, Dk, kq + r, kq + Dk + r, gate.x, vj, gate.y, valid);
    const float oss = block_sum(valid && r == 0 ? o * o : 0.0f, red);
    if (valid && r == 0) {
      const float inv = rsqrtf(oss / static_cast<float>(Dv) + a.norm_eps);
      a.o[(t * a.Hv + h) * Dv + j] = o * inv * wj * (zj / (1.0f + expf(-zj)));
    }
    if (t >= sq.ckpt_begin)
      store_column<kRows, kFull>(S, a.state + (ckpt_slot(a.seqs, sq, t) * a.Hv + h) * Dk * Dv + col, r, Dk, Dv, valid);
  }
  store_column<kRows, kFull>(S, state + col, r, Dk, Dv, valid);
}

// gdn_core_varlen, a launch with a sequence of several rows (a speculative verification): as the kernel
// above, but the tokens run in stages of up to kCoreStage: the block first copies their k and q rows,
// v and z columns, gates and checkpoint slots to shared memory and normalises k and q (a warp a token);
// then the recurrence walks the staged tokens with no barrier and no global load in its chain, each
// column's first lane keeping o in shared memory; last, a warp a token sums its Σo² and the block
// writes the gated, normed outputs. (Loading each token's rows and checkpoint slot and summing over the
// block inside the walk: a demo 5-row verification took 22 µs a layer, one row 5.4; staged, 14.5.) The
// walk is not unrolled: unrolled, the kernel waited mostly on instruction fetches (Nsight Compute: "no
// instruction" stalls), one row 5 → 10 µs. Each token's sums (Σk², Σq², Σo²) run in the row kernel's
// order, so a row is computed the same, bit for bit, decoded alone or verified with others. For one row
// a token this kernel is slower than the row kernel (its warps wait at barriers while one sums: 4B
// shape 9–17 against 6.2 µs), so decode keeps that one.
// A launch stages `stage` tokens at a time (the longest sequence's rows, at most kCoreStage) in dynamic
// shared memory: k̂ and q̂ [stage][2][Dk], then v, z and o [stage][3][Dv].
// Weights (A_log, dt_bias, norm_w), the step's metadata and the state are loaded before pdl_wait():
// within a step only this layer's kernel writes its state slots, and everything before a step (slot
// copies, the metadata's upload) completes before the step's first kernel, launched without PDL.
constexpr int kCoreStage = 8;

template <int kRows, int kMaxThreads, bool kFull>
__global__ void __launch_bounds__(kMaxThreads) gdn_core_kernel(GdnCoreArgs a, int stage) {
  extern __shared__ float staged[];
  __shared__ float2 gates[kCoreStage];        // alpha, beta
  __shared__ float inv_norm[kCoreStage];      // 1 / rms(o) of each staged token
  __shared__ float o_partial[kCoreStage][32];  // each warp's Σo² of a token
  __shared__ int32_t ckpts[kCoreStage];       // checkpoint slot after each staged token, or -1
  pdl_trigger();
  const int r = threadIdx.x % kLanesPerColumn, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n_warps = static_cast<int>(blockDim.x >> 5), Dk = head_dim<kRows, kFull>(a.Dk),
            Dv = head_dim<kRows, kFull>(a.Dv);
  const int64_t h = blockIdx.x, kh = h / (a.Hv / a.Hk), seq = blockIdx.y;
  const int j = static_cast<int>(threadIdx.x) / kLanesPerColumn, col = r * Dv + j;
  const bool valid = j < Dv;  // lanes past Dv still join the shuffles
  float* kq = staged;                  // token u: k̂ at 2u·Dk, q̂ at (2u+1)·Dk
  float* vzo = staged + stage * 2 * Dk;  // token u: v at 3u·Dv, z at (3u+1)·Dv, o at (3u+2)·Dv
  const float neg_A = -expf(a.A_log[h]), dt_bias = a.dt_bias[h], wj = valid ? a.norm_w[j] : 0.0f;
  const SeqRows sq = seq_rows(a.seqs, seq, a.T);
  float* state = a.state + (sq.slot * a.Hv + h) * Dk * Dv;
  float S[kRows];
  load_column<kRows, kFull>(S, state + col, r, Dk, Dv, valid);
  pdl_wait();
  const int64_t C = 2 * a.Hk * Dk + a.Hv * Dv;
  const float q_scale = 1.0f / sqrtf(static_cast<float>(Dk));
  for (int64_t t0 = sq.r0; t0 < sq.r1; t0 += stage) {
    const int n = sq.r1 - t0 < stage ? static_cast<int>(sq.r1 - t0) : stage;
    __syncthreads();  // the previous stage's reads of the staged rows are done
    // Every staged load at once: a token's rows one after another put n load latencies in the chain.
    for (int i = tid; i < n * Dk; i += blockDim.x) {
      const int u = i / Dk, c = i - u * Dk;
      const float* row = a.qkv + (t0 + u) * C;
      kq[(2 * u) * Dk + c] = row[(a.Hk + kh) * Dk + c];
      kq[(2 * u + 1) * Dk + c] = row[kh * Dk + c];
    }
    for (int i = tid; i < n * Dv; i += blockDim.x) {
      const int u = i / Dv, c = i - u * Dv;
      vzo[(3 * u) * Dv + c] = a.qkv[(t0 + u) * C + 2 * a.Hk * Dk + h * Dv + c];
      vzo[(3 * u + 1) * Dv + c] = a.z[((t0 + u) * a.Hv + h) * Dv + c];
    }
    if (tid < n) {
      const int64_t t = t0 + tid;
      gates[tid] = core_gates(a.a[t * a.Hv + h], a.b[t * a.Hv + h], neg_A, dt_bias);
      ckpts[tid] = t >= sq.ckpt_begin ? ckpt_slot(a.seqs, sq, t) : -1;
    }
    __syncthreads();
    for (int u = warp; u < n; u += n_warps) {  // a warp normalises token u's k and q
      float* ku = kq + (2 * u) * Dk;
      float* qu = ku + Dk;
      // Σk² and Σq² in the row kernel's order (block_sum2): lane w gets the sum of its warp w's 32
      // elements, then the warp sums those.
      float kk = 0.0f, qq = 0.0f;
      for (int w = 0; w * 32 < Dk; ++w) {
        const int c = w * 32 + lane;
        const float kx = c < Dk ? ku[c] : 0.0f, qx = c < Dk ? qu[c] : 0.0f;
        const float ks = warp_sum(kx * kx), qs = warp_sum(qx * qx);
        if (lane == w) kk = ks, qq = qs;
      }
      const float k_inv = rsqrtf(warp_sum(kk) + 1e-6f), q_inv = q_scale * rsqrtf(warp_sum(qq) + 1e-6f);
      for (int c = lane; c < Dk; c += 32) ku[c] *= k_inv, qu[c] *= q_inv;
    }
    __syncthreads();
#pragma unroll 1
    for (int u = 0; u < n; ++u) {
      const float vj = valid ? vzo[(3 * u) * Dv + j] : 0.0f;
      const float* ku = kq + (2 * u) * Dk + r;
      const float o = delta_step<kRows, kFull>(S, r, Dk, ku, ku + Dk, gates[u].x, vj, gates[u].y, valid);
      if (valid && r == 0) vzo[(3 * u + 2) * Dv + j] = o;
      if (ckpts[u] >= 0)
        store_column<kRows, kFull>(S, a.state + (ckpts[u] * a.Hv + h) * Dk * Dv + col, r, Dk, Dv, valid);
    }
    __syncthreads();
    // Σo² of each token in the row kernel's order (block_sum): each warp sums its own columns' o² (the
    // tokens' sums independent of one another), then a warp a token sums the warps' sums.
#pragma unroll
    for (int u = 0; u < kCoreStage; ++u) {
      if (u >= n) break;
      const float x = valid && r == 0 ? vzo[(3 * u + 2) * Dv + j] * vzo[(3 * u + 2) * Dv + j] : 0.0f;
      const float sum = warp_sum(x);
      if (lane == 0) o_partial[u][warp] = sum;
    }
    __syncthreads();
    for (int u = warp; u < n; u += n_warps) {
      const float oo = warp_sum(lane < n_warps ? o_partial[u][lane] : 0.0f);
      if (lane == 0) inv_norm[u] = rsqrtf(oo / static_cast<float>(Dv) + a.norm_eps);
    }
    __syncthreads();
    // Column j's outputs, its 4 lanes taking every 4th token (the norm weight already in a register).
    for (int u = r; u < n && valid; u += kLanesPerColumn) {
      const float o = vzo[(3 * u + 2) * Dv + j], z = vzo[(3 * u + 1) * Dv + j];
      a.o[((t0 + u) * a.Hv + h) * Dv + j] = o * inv_norm[u] * wj * (z / (1.0f + expf(-z)));
    }
  }
  store_column<kRows, kFull>(S, state + col, r, Dk, Dv, valid);
}

}  // namespace

void gdn_core(const GdnCoreArgs& a, cudaStream_t s) {
  if (a.Hv == 0 || a.Dv == 0 || a.seqs.n_seqs == 0) return;
  const dim3 grid(static_cast<unsigned>(a.Hv), static_cast<unsigned>(a.seqs.n_seqs));
  const int64_t need = kLanesPerColumn * a.Dv > a.Dk ? kLanesPerColumn * a.Dv : a.Dk;
  const int threads = static_cast<int>((need + 31) / 32 * 32);  // ≤ 1024: Dv ≤ 256, Dk ≤ 256
  // Decode (every sequence one row) takes the row kernel; a verification the staged one, staging the
  // longest sequence's rows (at most kCoreStage) in dynamic shared memory (≤ 40 KB).
  const int64_t longest = a.T - a.seqs.n_seqs + 1;  // no sequence has more rows
  const int stage = static_cast<int>(longest < kCoreStage ? longest : kCoreStage);
  const size_t smem = static_cast<size_t>(stage * (2 * a.Dk + 3 * a.Dv)) * sizeof(float);
  auto go = [&](auto rows, auto max_threads) {
    constexpr int kRows = decltype(rows)::value, kMaxThreads = decltype(max_threads)::value;
    // kFull (Dk = Dv = 4·kRows) for the usual head sizes; the largest blocks spill with it.
    if constexpr (kRows * kMaxThreads <= 16 * 1024) {
      if (a.Dk == kLanesPerColumn * kRows && a.Dv == a.Dk) {
        if (longest <= 1) launch(gdn_core_row_kernel<kRows, kMaxThreads, true>, grid, threads, s, a);
        else launch_smem(gdn_core_kernel<kRows, kMaxThreads, true>, grid, threads, smem, s, a, stage);
        return;
      }
    }
    if (longest <= 1) launch(gdn_core_row_kernel<kRows, kMaxThreads, false>, grid, threads, s, a);
    else launch_smem(gdn_core_kernel<kRows, kMaxThreads, false>, grid, threads, smem, s, a, stage);
  };
  using std::integral_constant;
  if (a.Dk <= 8 * kLanesPerColumn) go(integral_constant<int, 8>{}, integral_constant<int, 1024>{});
  else if (a.Dk <= 16 * kLanesPerColumn && threads <= 512) go(integral_constant<int, 16>{}, integral_constant<int, 512>{});
  else if (a.Dk <= 32 * kLanesPerColumn && threads <= 512) go(integral_constant<int, 32>{}, integral_constant<int, 512>{});
  else if (a.Dk <= 32 * kLanesPerColumn) go(integral_constant<int, 32>{}, integral_constant<int, 1024>{});
  else go(integral_constant<int, 64>{}, integral_constant<int, 1024>{});
}

void gdn_gates(const float* a, const float* b, const float* A_log, const float* dt_bias, float* g, float* beta,
               int64_t n, int64_t Hv, cudaStream_t s) {
  if (n > 0) gdn_gates_kernel<<<grid_for(n, 256), 256, 0, s>>>(a, b, A_log, dt_bias, g, beta, n, Hv);
}

void gated_delta_rule(const GdnArgs& a, cudaStream_t s) {
  if (a.Hv == 0 || a.Dv == 0 || a.seqs.n_seqs == 0) return;
  const dim3 grid(static_cast<unsigned>((a.Dv + kColumnsPerBlock - 1) / kColumnsPerBlock), static_cast<unsigned>(a.Hv),
                  static_cast<unsigned>(a.seqs.n_seqs));
  const int threads = kLanesPerColumn * kColumnsPerBlock;
  // kFull (Dk = Dv = 4·kRows) for the usual head sizes 32 and 128; Dk = 256 spills with it.
  if (a.Dk == 8 * kLanesPerColumn && a.Dv == a.Dk) gated_delta_rule_kernel<8, true><<<grid, threads, 0, s>>>(a);
  else if (a.Dk <= 8 * kLanesPerColumn) gated_delta_rule_kernel<8, false><<<grid, threads, 0, s>>>(a);
  else if (a.Dk == 32 * kLanesPerColumn && a.Dv == a.Dk) gated_delta_rule_kernel<32, true><<<grid, threads, 0, s>>>(a);
  else if (a.Dk <= 32 * kLanesPerColumn) gated_delta_rule_kernel<32, false><<<grid, threads, 0, s>>>(a);
  else gated_delta_rule_kernel<64, false><<<grid, threads, 0, s>>>(a);  // Dk ≤ kGdnMaxKeyDim, checked by the caller
}

}  // namespace kapitsa::ops::cuda::kernels
