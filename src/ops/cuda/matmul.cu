// Kernel of matmul and matmul_many for a few tokens (decode): a GEMV reading the weight once for up to
// kGemvMaxTokens rows of x, over up to kGemvMaxParts weights sharing x in one launch (fewer, fuller
// launches per decode step). One warp per output feature n: lanes stride over K (coalesced weight
// reads), accumulate in f32 for every token, then a warp sum. When rows are 16-byte aligned each lane reads 16 bytes of
// the weight at a time (8 bf16/f16 or 4 f32); otherwise one element. Every kernel here gives a token's
// row the bits it gets alone (each lane adds its k in one order, then the same warp sum), so a step of up
// to 8 rows is batch-invariant (docs/speculative-decoding.md). Against cuBLAS (what 2-8 tokens took
// before session 34) the few-token kernel is faster at 2-4 tokens and ~11% slower at 8 (gemv_rows_per_warp).
#include "ops/cuda/kernel_util.cuh"

#include <cstdlib>
#include <cstring>

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kWarps = 8;
// Warps of a one-token GEMV block: its 16 loads in flight a lane take ~94 registers, so an SM holds
// ~21 warps; blocks of 4 warps keep a 2560-row matrix (640 blocks) in one wave (with 8-warp blocks,
// 320 of them, a second wave of 56 made the K = 4096 and 9216 projections slower than before).
constexpr int kVecWarps = 4;

template <typename W>
__device__ __forceinline__ float widen(W v) {
  if constexpr (std::is_same_v<W, __half>) return __half2float(v);
  else if constexpr (std::is_same_v<W, __nv_bfloat16>) return __bfloat162float(v);
  else return v;
}

// The weights of one launch (matmul_many; a plain matmul is one part): blocks [first_block[p],
// first_block[p + 1]) compute part p. Passed by value, so a graph replay needs no table in memory.
template <typename W>
struct Job {
  const W* w[kGemvMaxParts];
  float* y[kGemvMaxParts];
  int64_t N[kGemvMaxParts];
  unsigned first_block[kGemvMaxParts];
  int parts;
  Epilogue act;  // applied to every output of every part
};

// This block's part: its weight, output, rows, and the block's index within the part. Constant indices
// only (a dynamic index into a kernel parameter would copy the struct to local memory).
template <typename W>
struct Part {
  const W* w;
  float* y;
  int64_t N;
  unsigned block;
};
template <typename W>
__device__ __forceinline__ Part<W> part_of(const Job<W>& job) {
  Part<W> p{job.w[0], job.y[0], job.N[0], blockIdx.x};
#pragma unroll
  for (int i = 1; i < kGemvMaxParts; ++i)
    if (i < job.parts && blockIdx.x >= job.first_block[i]) p = {job.w[i], job.y[i], job.N[i], blockIdx.x - job.first_block[i]};
  return p;
}

// The output row of this warp in a one-token launch of kVecWarps-warp blocks (none when n ≥ N).
template <typename W>
struct WarpRow {
  const W* w;  // the row's weights
  float* y;
  int64_t n, N;
};
template <typename W>
__device__ __forceinline__ WarpRow<W> warp_row(const Job<W>& job, int64_t K) {
  const Part<W> part = part_of(job);
  const int64_t n = part.block * int64_t{kVecWarps} + (threadIdx.x >> 5);
  return {part.w + n * K, part.y, n, part.N};
}

template <typename W>
__global__ void gemv_kernel(const float* x, const Job<W> job, int64_t T, int64_t K) {
  pdl_trigger();
  pdl_wait();
  const Part<W> part = part_of(job);
  const int lane = threadIdx.x & 31;
  const int64_t n = part.block * int64_t{kWarps} + (threadIdx.x >> 5), N = part.N;
  if (n >= N) return;
  const W* wn = part.w + n * K;
  float acc[kGemvMaxTokens] = {};
  for (int64_t k = lane; k < K; k += 32) {
    const float wk = widen(wn[k]);
#pragma unroll
    for (int t = 0; t < kGemvMaxTokens; ++t)
      if (t < T) acc[t] += x[t * K + k] * wk;
  }
#pragma unroll
  for (int t = 0; t < kGemvMaxTokens; ++t) {
    if (t < T) {
      const float sum = warp_sum(acc[t]);
      if (lane == 0) part.y[t * N + n] = epilogue(sum, job.act);
    }
  }
}

// Requires K % (16 / sizeof(W)) == 0 and 16-byte aligned w and x. Each lane issues up to kUnroll
// 16-byte weight loads (predicated on k < K) before using any: a row of K = 2560 bf16 is 10 loads a
// lane, all in flight at once, so a warp waits on memory latency once per row instead of once per 4
// loads (with 4 in flight, decode GEMVs of 20-50 MB reached 2.1-2.9 TB/s, the lm head 4.4). Launched with
// one token.
// At most 102 registers (5 blocks an SM): a 2560-row projection's 640 blocks fit in one wave.
template <typename W>
__global__ void __launch_bounds__(kVecWarps * 32, 5) gemv_vec_kernel(const float* x, const Job<W> job, int64_t K) {
  constexpr int kVec = 16 / sizeof(W), kUnroll = 16, kStep = 32 * kVec;
  pdl_trigger();
  const WarpRow<W> row = warp_row(job, K);
  if (row.n >= row.N) return;  // writes nothing
  const int lane = threadIdx.x & 31;
  const W* __restrict__ wn = row.w;
  float acc = 0.0f;
  // The first round of weight loads goes out before pdl_wait(): weights are written by no kernel, so
  // with PDL they stream while the kernel before (a norm, an activation) still runs. x is read after.
  uint4 raw[kUnroll];
  for (int64_t k0 = int64_t{lane} * kVec; k0 < K; k0 += kUnroll * kStep) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (k0 + u * kStep < K) raw[u] = load_weights(wn + k0 + u * kStep);
    if (k0 < kUnroll * kStep) pdl_wait();
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (k0 + u * kStep < K) dot_add<W>(acc, raw[u], x + k0 + u * kStep);
  }
  pdl_wait();  // (again: a no-op unless K = 0 skipped the loop)
  const float sum = warp_sum(acc);
  if (lane == 0) row.y[row.n] = epilogue(sum, job.act);
}

// Two to MaxT tokens over aligned rows: warp i of a block computes Rows consecutive output rows for
// every token, each (row, token) sum formed exactly as gemv_vec_kernel forms its one token's (lane l
// adds k = l·kVec + j·32·kVec in ascending j through dot_add, then warp_sum), so each token's row equals
// that token's row alone, bit for bit: a speculative verification step or a decode batch gives a
// sequence exactly the logits it gets alone (docs/speculative-decoding.md, "Batch composition").
// The Rows rows share each x load: x is read again by every warp (from L1/L2), and with one row a warp
// 8 tokens read 16 times the weight's bytes of x (2·T / Rows times: at 8 tokens the L1's bandwidth, not
// the memory's, bounds the kernel). kU rounds of loads in flight a lane: 4 up to two rows, then 8 / Rows
// (the same 8 loads of 16 bytes), so that four and eight rows' accumulators fit the registers.
template <typename W, int Rows>
__global__ void __launch_bounds__(kVecWarps * 32) gemv_rows_kernel(const float* x, const Job<W> job, int64_t T, int64_t K) {
  constexpr int kVec = 16 / sizeof(W), kU = Rows <= 2 ? 4 : 8 / Rows, kStep = 32 * kVec, kMaxT = kGemvMaxTokens;
  pdl_trigger();
  const Part<W> part = part_of(job);
  const int64_t n0 = (part.block * int64_t{kVecWarps} + (threadIdx.x >> 5)) * Rows, N = part.N;
  if (n0 >= N) return;  // writes nothing
  const int lane = threadIdx.x & 31;
  const W* __restrict__ wr[Rows];
#pragma unroll
  for (int r = 0; r < Rows; ++r) wr[r] = part.w + (n0 + r < N ? n0 + r : n0) * K;  // rows past N: never stored
  float acc[Rows][kMaxT] = {};
  uint4 raw[kU][Rows];
  for (int64_t k0 = int64_t{lane} * kVec; k0 < K; k0 += kU * kStep) {
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (k0 + u * kStep < K)
#pragma unroll
        for (int r = 0; r < Rows; ++r) raw[u][r] = load_weights(wr[r] + k0 + u * kStep);
    if (k0 < kU * kStep) pdl_wait();
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t k = k0 + u * kStep;
      if (k >= K) break;
#pragma unroll
      for (int t = 0; t < kMaxT; ++t) {
        if (t >= T) break;
#pragma unroll
        for (int r = 0; r < Rows; ++r) dot_add<W>(acc[r][t], raw[u][r], x + t * K + k);
      }
    }
  }
  pdl_wait();  // (again: a no-op unless K = 0 skipped the loop)
#pragma unroll
  for (int r = 0; r < Rows; ++r)
#pragma unroll
    for (int t = 0; t < kMaxT; ++t) {
      if (t >= T) break;
      const float sum = warp_sum(acc[r][t]);
      if (lane == 0 && n0 + r < N) part.y[t * N + n0 + r] = epilogue(sum, job.act);
    }
}

// x · wa and x · wb for one token, by one warp: kSwigluUnroll 16-byte loads of each row in flight a
// lane (the first round before pdl_wait(), as in gemv_vec_kernel), each x float4 serving both rows.
// Per lane the k order and the sums are gemv_vec_kernel's. Returns the warp's sums (every lane).
constexpr int kSwigluUnroll = 12;  // a K = 2560 row of bf16 (10 loads a lane) in one round
template <typename W, int kU = kSwigluUnroll>
__device__ __forceinline__ float2 dot_two_rows(const float* x, const W* __restrict__ wa, const W* __restrict__ wb,
                                               int64_t K) {
  constexpr int kVec = 16 / sizeof(W), kStep = 32 * kVec;
  const int lane = threadIdx.x & 31;
  float acc_a = 0.0f, acc_b = 0.0f;
  uint4 ra[kU], rb[kU];
  for (int64_t k0 = int64_t{lane} * kVec; k0 < K; k0 += kU * kStep) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (k0 + u * kStep < K) {
        ra[u] = load_weights(wa + k0 + u * kStep);
        rb[u] = load_weights(wb + k0 + u * kStep);
      }
    }
    if (k0 < kU * kStep) pdl_wait();
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t k = k0 + u * kStep;
      if (k < K) dot_add<W>(acc_a, ra[u], x + k), dot_add<W>(acc_b, rb[u], x + k);
    }
  }
  pdl_wait();  // (again: a no-op unless K = 0 skipped the loop)
  return make_float2(warp_sum(acc_a), warp_sum(acc_b));
}

// matmul_swiglu for one token: warp n computes row n of both weights and writes silu(gate) · up as
// silu_mul does.
template <typename W>
__global__ void gemv_swiglu_kernel(const float* x, const W* w_gate, const W* w_up, float* y, int64_t N, int64_t K) {
  pdl_trigger();
  const int64_t n = blockIdx.x * int64_t{kVecWarps} + (threadIdx.x >> 5);
  if (n >= N) return;  // writes nothing
  const float2 gu = dot_two_rows(x, w_gate + n * K, w_up + n * K, K);
  if ((threadIdx.x & 31) == 0) y[n] = gu.x / (1.0f + expf(-gu.x)) * gu.y;
}

// One token, short rows (K within one round of dot_two_rows' loads): warp i of a part computes its rows
// 2i and 2i + 1 (one row past N reads row 2i twice and writes once), so each warp has twice the bytes of
// gemv_vec_kernel in flight (a 2560-wide row is only 10 loads a lane: the q/k/v and lm-head projections
// streamed at 2.5-3.0 TB/s where the two-row SwiGLU kernel reached 3.4).
// Rows of 13-16 loads a lane (Nemotron-3-Nano's 2688-row projections, K = 3712 and 4096) take one round
// of 16 (kU = 16: 168 registers, 8 bytes spilled, three blocks an SM) rather than 12 + 4: H100, its bf16
// decode 283.1 / 282.4 → 284.7 / 284.8 tok/s (session 41). At most 170 registers: three blocks an SM.
template <typename W, int kU = kSwigluUnroll>
__global__ void __launch_bounds__(kVecWarps * 32, 3) gemv_pair_kernel(const float* x, const Job<W> job, int64_t K) {
  pdl_trigger();
  const Part<W> part = part_of(job);
  const int64_t n = (part.block * int64_t{kVecWarps} + (threadIdx.x >> 5)) * 2, N = part.N;
  if (n >= N) return;  // writes nothing
  const bool second = n + 1 < N;
  const float2 ab = dot_two_rows<W, kU>(x, part.w + n * K, part.w + (second ? n + 1 : n) * K, K);
  if ((threadIdx.x & 31) == 0) {
    part.y[n] = epilogue(ab.x, job.act);
    if (second) part.y[n + 1] = epilogue(ab.y, job.act);
  }
}

// Two rows a warp for short rows unless KAPITSA_GEMV_PAIR=0 (read once; for measuring).
bool gemv_pair_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("KAPITSA_GEMV_PAIR");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}
// KAPITSA_GEMV_ROWS as a number (-1 when unset), read once.
int gemv_rows_setting() {
  static const int v = [] {
    const char* s = std::getenv("KAPITSA_GEMV_ROWS");
    return s == nullptr ? -1 : std::atoi(s);
  }();
  return v;
}
// Output rows a warp of gemv_rows_kernel computes for T tokens: KAPITSA_GEMV_ROWS=1|2|4|8 (measuring), else
// one row for 2 tokens and two from 3. H100, 0.8B shape bf16, aggregate decode tok/s of 4 / 8 sequences
// (bench_model --batch): one row 1606 / 1903-1937, two 1746 / 2082-2100, four (then with four rounds of
// loads in flight, not today's two) 1611 / 1917-1931; cuBLAS
// (KAPITSA_GEMV_ROWS=0) 1459 / 2341-2364; 2 sequences: one row 1324, cuBLAS 933. Session 36, 8 sequences,
// today's kernel: two rows 2110, four 2003, eight 1903, cuBLAS 2364 (fewer warps lose more than the
// shared x loads save: docs/cuda.md, session 36).
int gemv_rows_per_warp(int64_t T) {
  const int forced = gemv_rows_setting();
  if (forced == 1 || forced == 2 || forced == 4 || forced == 8) return forced;
  return T <= 2 ? 1 : 2;
}
}  // namespace

bool dense_gemv_rows_enabled() { return gemv_rows_setting() != 0; }

namespace {
// How many gemv_vec_kernel blocks the GPU holds at once (one wave): device 0's SMs × blocks an SM.
template <typename W>
int64_t vec_blocks_per_wave() {
  static const int64_t n = [] {
    int sms = 0, per_sm = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_vec_kernel<W>, kVecWarps * 32, 0);
    return static_cast<int64_t>(sms) * per_sm;
  }();
  return n;
}

// parts: 1 … kGemvMaxParts weights of type W, one launch.
template <typename W>
void launch_gemv(const float* x, const GemvPart* parts, int n_parts, int64_t T, int64_t K, Epilogue act, cudaStream_t s) {
  bool aligned = K % static_cast<int64_t>(16 / sizeof(W)) == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  for (int p = 0; p < n_parts; ++p) aligned = aligned && reinterpret_cast<uintptr_t>(parts[p].w) % 16 == 0;
  // One token and rows of at most one round of loads (K ≤ 12 · 16 bytes a lane: the hidden size of the
  // 4B shape): two rows a warp (gemv_pair_kernel). Rows of two rounds too when one row a warp would
  // take more than one wave of blocks: Nemotron-3-Nano's 2688 rows of K = 4096 and 3712 are 672 blocks
  // where an H200 holds 660, and its 52-layer decode went 244 → 253 tok/s through the pair kernel, while
  // the 4B shape's 2560 rows (640 blocks, one wave) went 259 → 255: one wave of one row a warp is better.
  const int64_t one_round = int64_t{kSwigluUnroll} * 32 * (16 / static_cast<int64_t>(sizeof(W)));
  int64_t vec_blocks = 0;
  for (int p = 0; p < n_parts; ++p) vec_blocks += (parts[p].N + kVecWarps - 1) / kVecWarps;
  const bool pair = aligned && T == 1 && gemv_pair_enabled() &&
                    (K <= one_round || (K <= 2 * one_round && vec_blocks > vec_blocks_per_wave<W>()));
  const bool generic = !aligned;
  const int rows = T > 1 ? gemv_rows_per_warp(T) : 1;  // T > 1: gemv_rows_kernel
  const int64_t per_block = generic ? kWarps : pair ? 2 * kVecWarps : kVecWarps * rows;
  Job<W> job{};
  unsigned blocks = 0;
  for (int p = 0; p < n_parts; ++p) {
    job.w[p] = static_cast<const W*>(parts[p].w), job.y[p] = parts[p].y, job.N[p] = parts[p].N;
    job.first_block[p] = blocks;
    blocks += static_cast<unsigned>((parts[p].N + per_block - 1) / per_block);
  }
  job.parts = n_parts;
  job.act = act;
  if (blocks == 0) return;
  if (generic) launch(gemv_kernel<W>, blocks, kWarps * 32, s, x, job, T, K);
  else if (T > 1 && rows == 8) launch(gemv_rows_kernel<W, 8>, blocks, kVecWarps * 32, s, x, job, T, K);
  else if (T > 1 && rows == 4) launch(gemv_rows_kernel<W, 4>, blocks, kVecWarps * 32, s, x, job, T, K);
  else if (T > 1 && rows == 2) launch(gemv_rows_kernel<W, 2>, blocks, kVecWarps * 32, s, x, job, T, K);
  else if (T > 1) launch(gemv_rows_kernel<W, 1>, blocks, kVecWarps * 32, s, x, job, T, K);
  else if (pair && K > one_round && K <= 16 * 32 * (16 / static_cast<int64_t>(sizeof(W))))
    launch(gemv_pair_kernel<W, 16>, blocks, kVecWarps * 32, s, x, job, K);  // one round of 16 loads a row
  else if (pair) launch(gemv_pair_kernel<W>, blocks, kVecWarps * 32, s, x, job, K);
  else launch(gemv_vec_kernel<W>, blocks, kVecWarps * 32, s, x, job, K);
}

__global__ void split_bf16_kernel(const float* x, __nv_bfloat16* parts, int64_t n, int n_parts) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float rest = x[i];
    for (int p = 0; p < n_parts; ++p) {
      const __nv_bfloat16 part = __float2bfloat16_rn(rest);
      parts[p * n + i] = part;
      rest = __fsub_rn(rest, __bfloat162float(part));  // exact: rest and part share the top bits
    }
  }
}

}  // namespace

void split_bf16(const float* x, void* parts, int64_t n, int n_parts, cudaStream_t s) {
  if (n > 0) split_bf16_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, static_cast<__nv_bfloat16*>(parts), n, n_parts);
}

void gemv_many(const float* x, const GemvPart* parts, int n_parts, ElemType type, int64_t T, int64_t K, cudaStream_t s,
               Epilogue act) {
  if (T == 0) return;
  for (int first = 0; first < n_parts; first += kGemvMaxParts) {
    const int n = n_parts - first < kGemvMaxParts ? n_parts - first : kGemvMaxParts;
    switch (type) {
      case ElemType::f16: launch_gemv<__half>(x, parts + first, n, T, K, act, s); break;
      case ElemType::bf16: launch_gemv<__nv_bfloat16>(x, parts + first, n, T, K, act, s); break;
      default: launch_gemv<float>(x, parts + first, n, T, K, act, s); break;
    }
  }
}

void gemv_swiglu(const float* x, const void* w_gate, const void* w_up, ElemType type, float* y, int64_t K, int64_t N,
                 cudaStream_t s) {
  if (N == 0) return;
  const unsigned blocks = static_cast<unsigned>((N + kVecWarps - 1) / kVecWarps);
  switch (type) {
    case ElemType::f16:
      launch(gemv_swiglu_kernel<__half>, blocks, kVecWarps * 32, s, x, static_cast<const __half*>(w_gate),
             static_cast<const __half*>(w_up), y, N, K);
      break;
    case ElemType::bf16:
      launch(gemv_swiglu_kernel<__nv_bfloat16>, blocks, kVecWarps * 32, s, x, static_cast<const __nv_bfloat16*>(w_gate),
             static_cast<const __nv_bfloat16*>(w_up), y, N, K);
      break;
    default:
      launch(gemv_swiglu_kernel<float>, blocks, kVecWarps * 32, s, x, static_cast<const float*>(w_gate),
             static_cast<const float*>(w_up), y, N, K);
      break;
  }
}

void gemv(const float* x, const void* w, ElemType type, float* y, int64_t T, int64_t K, int64_t N, cudaStream_t s,
          Epilogue act) {
  const GemvPart part{w, y, N};
  gemv_many(x, &part, 1, type, T, K, s, act);
}

}  // namespace kapitsa::ops::cuda::kernels
