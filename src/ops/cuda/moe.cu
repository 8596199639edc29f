// Kernels of the MoE plumbing: softmax top-k routing (one warp per token, in double, choosing by
// repeated argmax with ties to the lower index, exactly as the reference), gathering rows, and the
// weighted scatter-add back. The scatter walks the rows in order per column (one thread per column), so
// repeated destination rows accumulate deterministically, in the reference's order, without atomics;
// distinct rows (an expert's tokens) are spread over blocks of 16.
// matmul_experts is the decode GEMV (one warp per output feature, lanes over K, up to 16 loads of 16 bytes
// in flight a lane) with a grid row per (token, choice) that reads its expert's weight pointer from a
// device table indexed by the router's id.
#include "ops/cuda/kernel_util.cuh"

#include <algorithm>

namespace kapitsa::ops::cuda::kernels {
namespace {

// Block t (one warp) routes token t: the max by a warp reduction, the exponentials once into shared
// memory, their sum by lane 0 in the reference's order, then k warp argmaxes over the probabilities.
__global__ void moe_route_softmax_kernel(const float* logits, int64_t E, int k, bool renormalize, int32_t* ids,
                                         float* weights) {
  extern __shared__ double prob[];  // [E]
  pdl_trigger();
  pdl_wait();
  const int lane = threadIdx.x;
  const int64_t t = blockIdx.x;
  const float* row = logits + t * E;
  double m = -INFINITY;
  for (int64_t e = lane; e < E; e += 32) m = fmax(m, static_cast<double>(row[e]));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmax(m, __shfl_xor_sync(0xffffffffu, m, o));
  for (int64_t e = lane; e < E; e += 32) prob[e] = exp(static_cast<double>(row[e]) - m);
  __syncwarp();
  double sum = 0.0;
  if (lane == 0)
    for (int64_t e = 0; e < E; ++e) sum += prob[e];
  sum = __shfl_sync(0xffffffffu, sum, 0);
  for (int64_t e = lane; e < E; e += 32) prob[e] /= sum;
  int32_t* ti = ids + t * k;
  float* tw = weights + t * k;
  uint64_t taken = 0;  // bit s: expert lane + 32·s is chosen (E ≤ kMoeMaxExperts)
  double chosen_sum = 0.0;
  for (int j = 0; j < k; ++j) {
    double best_p = 0.0;
    int best = -1;
    for (int64_t e = lane, slot = 0; e < E; e += 32, ++slot)
      if (!(taken >> slot & 1) && (best < 0 || prob[e] > best_p)) best_p = prob[e], best = static_cast<int>(e);
    warp_argmax(best_p, best);
    if ((best & 31) == lane) taken |= uint64_t{1} << (best >> 5);
    if (lane == 0) ti[j] = best, tw[j] = static_cast<float>(best_p);
    chosen_sum += best_p;  // every lane, in choice order
  }
  if (renormalize && lane == 0)
    for (int j = 0; j < k; ++j) tw[j] = static_cast<float>(prob[ti[j]] / chosen_sum);
}

__global__ void gather_rows_kernel(const float* x, const int32_t* rows, float* out, int64_t H) {
  pdl_trigger();
  pdl_wait();
  const int64_t r = blockIdx.y, src = rows[r];
  for (int64_t h = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; h < H; h += int64_t{gridDim.x} * blockDim.x)
    out[r * H + h] = x[src * H + h];
}

// rows_per_block rows a block (blockIdx.y), each thread one column: rows that may repeat come one block
// (rows_per_block = R, in order); distinct rows (an expert's tokens: the MoE's case) spread over blocks.
__global__ void scale_add_rows_kernel(const float* src, const int32_t* rows, const float* weights, float* dst,
                                      int64_t R, int64_t H, int64_t rows_per_block) {
  pdl_trigger();
  pdl_wait();
  const int64_t h = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (h >= H) return;
  const int64_t r0 = blockIdx.y * rows_per_block, r1 = r0 + rows_per_block < R ? r0 + rows_per_block : R;
  for (int64_t r = r0; r < r1; ++r) {
    float* d = dst + int64_t{rows[r]} * H + h;
    *d = __fadd_rn(*d, __fmul_rn(weights[r], src[r * H + h]));  // no fma: the reference's rounding
  }
}

constexpr int kExpertWarps = 8;

// Rows wa and wb (two rows of one expert) by one warp when aligned: 12 loads of 16 bytes a
// lane and row in flight before any is summed (one round for a 2688-wide bf16 row: each warp has twice the
// bytes of one row in flight, and half as many blocks pass through the SMs — the two-row trick of the
// dense gemv_pair_kernel). Each row is summed in the same order whatever the rounds (lane l adds its k
// ascending through dot_add, then warp_sum). Otherwise row wa only, element by element.
template <typename W>
__device__ __forceinline__ float2 dot_rows(const float* x, const W* __restrict__ wa, const W* __restrict__ wb,
                                           int64_t K, int lane, bool aligned) {
  float acc0 = 0.0f, acc1 = 0.0f;
  if (aligned) {
    constexpr int kVec = 16 / sizeof(W), kUnroll = 12, kStep = 32 * kVec;
    uint4 r0[kUnroll], r1[kUnroll];
    for (int64_t k0 = int64_t{lane} * kVec; k0 < K; k0 += kUnroll * kStep) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (k0 + u * kStep < K) r0[u] = load_weights(wa + k0 + u * kStep), r1[u] = load_weights(wb + k0 + u * kStep);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t k = k0 + u * kStep;
        if (k < K) dot_add<W>(acc0, r0[u], x + k), dot_add<W>(acc1, r1[u], x + k);
      }
    }
  } else {
    for (int64_t i = lane; i < K; i += 32) acc0 += x[i] * to_float(wa[i]);
  }
  return make_float2(warp_sum(acc0), aligned ? warp_sum(acc1) : 0.0f);  // (aligned is the whole warp's)
}

// Aligned: warp i of block (bx, p) computes rows 2·(8·bx + i) and the next of (token, choice) p's expert
// (the last of an odd N reads its row twice and stores it once). Not aligned: one row a warp.
// At most 128 registers (two blocks an SM, no spills; 150 without the bound kept one).
template <typename W>
__global__ void __launch_bounds__(kExpertWarps * 32, 2)
    matmul_experts_kernel(const float* x, const void* const* experts, int64_t E, const int32_t* ids, float* y, int64_t k,
                          int64_t K, int64_t N, bool aligned, Epilogue act) {
  pdl_trigger();
  pdl_wait();
  const int lane = threadIdx.x & 31, rows = aligned ? 2 : 1;
  const int64_t n = (blockIdx.x * int64_t{kExpertWarps} + (threadIdx.x >> 5)) * rows, p = blockIdx.y;
  if (n >= N) return;
  const bool second = aligned && n + 1 < N;
  const int32_t e = ids[p];
  if (e < 0 || e >= E) {
    if (lane == 0) {
      y[p * N + n] = __int_as_float(0x7fc00000);  // NaN: a bad id must not pass silently
      if (second) y[p * N + n + 1] = __int_as_float(0x7fc00000);
    }
    return;
  }
  const W* wa = static_cast<const W*>(experts[e]) + n * K;
  const float2 sums = dot_rows(x + (p / k) * K, wa, second ? wa + K : wa, K, lane, aligned);
  if (lane == 0) {
    y[p * N + n] = epilogue(sums.x, act);
    if (second) y[p * N + n + 1] = epilogue(sums.y, act);
  }
}

// addend: [T, H] or null; out may be the addend (each element read before it is written, by one thread).
// For k ≤ MaxK (0: any k, a loop) an element's k weights and rows are loaded at once into registers, then
// summed in j order (the loop waits on memory once per j: ~4 µs a layer of a Nemotron decode step on an
// H100 for k = 6); the same sums either way.
template <int MaxK>
__global__ void moe_combine_kernel(const float* y, const float* weights, const float* addend, float* out, int64_t T,
                                   int64_t k, int64_t H) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < T * H; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / H, h = i % H;
    float acc = 0.0f;
    if constexpr (MaxK > 0) {
      float wv[MaxK], yv[MaxK];
#pragma unroll
      for (int j = 0; j < MaxK; ++j)
        if (j < k) wv[j] = weights[t * k + j], yv[j] = y[(t * k + j) * H + h];
#pragma unroll
      for (int j = 0; j < MaxK; ++j)
        if (j < k) acc = __fadd_rn(acc, __fmul_rn(wv[j], yv[j]));
    } else {
      for (int64_t j = 0; j < k; ++j) acc = __fadd_rn(acc, __fmul_rn(weights[t * k + j], y[(t * k + j) * H + h]));
    }
    out[i] = addend == nullptr ? acc : __fadd_rn(acc, addend[i]);
  }
}

}  // namespace

void matmul_experts(const float* x, const void* const* experts, int64_t E, ElemType type, const int32_t* ids,
                    float* y, int64_t T, int64_t k, int64_t K, int64_t N, bool aligned, cudaStream_t s, Epilogue act) {
  const int64_t P = T * k;
  if (P == 0 || N == 0) return;
  const int64_t per_block = kExpertWarps * (aligned ? 2 : 1);
  const unsigned bx = static_cast<unsigned>((N + per_block - 1) / per_block);
  const int64_t chunk = 65535 / k * k;  // gridDim.y is at most 65535; whole tokens per launch
  for (int64_t p0 = 0; p0 < P; p0 += chunk) {
    const int64_t n = P - p0 < chunk ? P - p0 : chunk;
    const float* xs = x + p0 / k * K;
    const dim3 grid(bx, static_cast<unsigned>(n));
    switch (type) {
      case ElemType::f32:
        launch(matmul_experts_kernel<float>, grid, kExpertWarps * 32, s, xs, experts, E, ids + p0, y + p0 * N, k, K, N, aligned,
               act);
        break;
      case ElemType::f16:
        launch(matmul_experts_kernel<__half>, grid, kExpertWarps * 32, s, xs, experts, E, ids + p0, y + p0 * N, k, K, N, aligned,
               act);
        break;
      case ElemType::bf16:
        launch(matmul_experts_kernel<__nv_bfloat16>, grid, kExpertWarps * 32, s, xs, experts, E, ids + p0, y + p0 * N, k,
               K, N, aligned, act);
        break;
    }
  }
}

void moe_combine(const float* y, const float* weights, const float* addend, float* out, int64_t T, int64_t k, int64_t H,
                 cudaStream_t s) {
  if (T * H == 0) return;
  if (k <= 8) launch(moe_combine_kernel<8>, grid_for(T * H, 256), 256, s, y, weights, addend, out, T, k, H);
  else launch(moe_combine_kernel<0>, grid_for(T * H, 256), 256, s, y, weights, addend, out, T, k, H);
}

void moe_route_softmax(const float* logits, int64_t T, int64_t E, int k, bool renormalize, int32_t* ids,
                       float* weights, cudaStream_t s) {
  if (T > 0)
    launch_smem(moe_route_softmax_kernel, static_cast<unsigned>(T), 32, static_cast<size_t>(E) * sizeof(double), s,
                logits, E, k, renormalize, ids, weights);
}

void gather_rows(const float* x, const int32_t* rows, float* out, int64_t R, int64_t H, cudaStream_t s) {
  if (R == 0 || H == 0) return;
  constexpr int kThreads = 256;
  const unsigned x_blocks = static_cast<unsigned>((H + kThreads - 1) / kThreads);
  for (int64_t r0 = 0; r0 < R; r0 += 65535) {  // gridDim.y is at most 65535
    const int64_t n = R - r0 < 65535 ? R - r0 : 65535;
    launch(gather_rows_kernel, dim3(x_blocks, static_cast<unsigned>(n)), kThreads, s, x, rows + r0, out + r0 * H, H);
  }
}

void scale_add_rows(const float* src, const int32_t* rows, const float* weights, float* dst, int64_t R, int64_t H,
                    bool distinct_rows, cudaStream_t s) {
  if (R == 0 || H == 0) return;
  constexpr int kThreads = 128;
  // 2688 columns and 384 rows (Nemotron's expert, 512-token prefill) took 157 µs as one row walk a column.
  const int64_t per_block = distinct_rows ? std::max<int64_t>(16, (R + 65534) / 65535) : R;  // gridDim.y ≤ 65535
  const dim3 grid(static_cast<unsigned>((H + kThreads - 1) / kThreads), static_cast<unsigned>((R + per_block - 1) / per_block));
  launch(scale_add_rows_kernel, grid, kThreads, s, src, rows, weights, dst, R, H, per_block);
}

}  // namespace kapitsa::ops::cuda::kernels
