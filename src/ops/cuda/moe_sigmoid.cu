// Kernel of the sigmoid router (Nemotron-H / DeepSeek-V3 style): one block per token, in double, the
// reference's choice exactly (group scores = sum of each group's two best biased scores, the top groups,
// then the top k experts, ties to the lower index). The biased scores go to shared memory once; warp 0
// keeps the top groups by repeated warp argmax (at most 64 groups), the other groups' scores become -inf
// (as the reference masks them); then each expert's rank — how many experts beat it: a larger score, or
// an equal one at a lower index — puts the experts of rank < k at their place in the order the
// reference's repeated argmax picks them. One pass of E comparisons a thread (most stop after a few:
// k experts beat them) instead of k warp reductions one after another: the warp-argmax kernel took 6.9 µs
// a layer of Nemotron-3-Nano's decode (128 experts, top 6; H100, session 40), one thread per token 23.
// moe_router_kernel computes the logits too (moe_router_sigmoid), its last block routing.
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kRouteThreads = 128;

// The groups that compete (bit gi), chosen by warp 0 from the biased scores in `choice`.
__device__ uint64_t kept_groups(const double* choice, int64_t per_group, int n_group, int topk_group) {
  const int lane = threadIdx.x & 31;
  double group_score[2];  // groups lane and lane + 32 (n_group ≤ 64)
  for (int h = 0; h < 2; ++h) {
    const int gi = lane + 32 * h;
    if (gi >= n_group) continue;
    double m0 = -INFINITY, m1 = -INFINITY;  // the group's two largest biased scores
    for (int64_t e = gi * per_group; e < (gi + 1) * per_group; ++e) {
      const double c = choice[e];
      if (c > m0) m1 = m0, m0 = c;
      else if (c > m1) m1 = c;
    }
    group_score[h] = m0 + (per_group > 1 ? m1 : 0.0);
  }
  uint64_t kept = 0;
  for (int j = 0; j < topk_group; ++j) {
    double v = 0.0;
    int best = -1;
    for (int h = 0; h < 2; ++h) {
      const int gi = lane + 32 * h;
      if (gi < n_group && !(kept >> gi & 1) && (best < 0 || group_score[h] > v)) v = group_score[h], best = gi;
    }
    warp_argmax(v, best);
    kept |= uint64_t{1} << best;
  }
  return kept;
}

// What the routing of a token needs besides its logits.
struct RouteArgs {
  const float* bias;  // [E] or null
  int64_t E;
  int k, n_group, topk_group;
  bool renormalize;
  float scaling;
};

// The kRouteThreads threads of a block route one token: row, its E logits (read through L2: in the fused
// router another block wrote them); ids, weights: its k outputs; choice: E doubles of shared memory.
__device__ void route_token(const float* row, const RouteArgs& r, int32_t* ids, float* weights, double* choice) {
  __shared__ uint64_t kept;
  __shared__ int chosen[32];  // k ≤ 32 (moe_route_sigmoid)
  const int tid = threadIdx.x, lane = tid & 31, k = r.k;
  const int64_t E = r.E, per_group = E / r.n_group;
  if (tid < 32) chosen[tid] = 0;  // (every slot below k is written unless a score is NaN: then ids stay in range)
  for (int64_t e = tid; e < E; e += kRouteThreads)
    choice[e] = 1.0 / (1.0 + exp(-static_cast<double>(__ldcg(row + e)))) + (r.bias != nullptr ? static_cast<double>(r.bias[e]) : 0.0);
  __syncthreads();
  if (r.n_group > 1) {
    if (tid < 32) {
      const uint64_t groups = kept_groups(choice, per_group, r.n_group, r.topk_group);
      if (lane == 0) kept = groups;
    }
    __syncthreads();
    for (int64_t e = tid; e < E; e += kRouteThreads)
      if (!(kept >> (e / per_group) & 1)) choice[e] = -INFINITY;
    __syncthreads();
  }
  for (int64_t e = tid; e < E; e += kRouteThreads) {
    const double v = choice[e];
    if (v == -INFINITY) continue;  // a group that does not compete
    int rank = 0;
    for (int64_t j = 0; j < E && rank < k; ++j) {
      const double c = choice[j];
      rank += c > v || (c == v && j < e);
    }
    if (rank < k) chosen[rank] = static_cast<int>(e);
  }
  __syncthreads();
  if (tid >= 32) return;
  // Lane j < k scores its choice (the exps side by side); every lane sums them in choice order, as the
  // reference does.
  const int mine = lane < k ? chosen[lane] : 0;
  const double w = lane < k ? 1.0 / (1.0 + exp(-static_cast<double>(__ldcg(row + mine)))) : 0.0;
  double sum = 0.0;
  for (int j = 0; j < k; ++j) sum += __shfl_sync(0xffffffffu, w, j);
  if (lane < k) {
    ids[lane] = mine;
    weights[lane] = static_cast<float>((r.renormalize ? w / (sum + 1e-20) : w) * r.scaling);
  }
}

// Block t (kRouteThreads threads) routes token t. Shared: the token's E biased scores.
__global__ void __launch_bounds__(kRouteThreads) moe_route_sigmoid_kernel(const float* logits, RouteArgs r,
                                                                          int32_t* ids, float* weights) {
  extern __shared__ double choice[];  // [E]
  pdl_trigger();
  pdl_wait();  // the logits
  const int64_t t = blockIdx.x;
  route_token(logits + t * r.E, r, ids + t * r.k, weights + t * r.k, choice);
}

// Blocks that have finished their logits in the running moe_router_kernel (its last block resets it).
__device__ unsigned int router_blocks_done = 0;

// moe_router_sigmoid for one token: warp i of block b computes logit 4·b + i as gemv_vec_kernel does (16
// loads of 16 bytes a lane in flight, the first round before pdl_wait(); the same sums as matmul's GEMVs),
// then the last block to finish (a fence and a counter) routes the token: one launch where the router's
// GEMV and moe_route_sigmoid_kernel were two. w: [E, K] of W, 16-byte aligned rows; x: [K], aligned.
template <typename W>
__global__ void __launch_bounds__(kRouteThreads) moe_router_kernel(const float* x, const W* w, int64_t K, float* logits,
                                                                   RouteArgs r, int32_t* ids, float* weights) {
  extern __shared__ double choice[];  // [E]
  __shared__ bool last;
  constexpr int kVec = 16 / sizeof(W), kUnroll = 16, kStep = 32 * kVec;
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t n = blockIdx.x * int64_t{kRouteThreads / 32} + (threadIdx.x >> 5);
  if (n < r.E) {
    const W* __restrict__ wn = w + n * K;
    float acc = 0.0f;
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
    const float sum = warp_sum(acc);
    if (lane == 0) logits[n] = sum;
  }
  pdl_wait();  // (warps without a row; and before the counter, which the kernel before may still hold)
  __threadfence();  // this block's logits visible to the last block
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&router_blocks_done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  route_token(logits, r, ids, weights, choice);
  if (threadIdx.x == 0) router_blocks_done = 0;
}

}  // namespace

void moe_route_sigmoid(const float* logits, const float* bias, int64_t T, int64_t E, int k, int n_group,
                       int topk_group, bool renormalize, float scaling, int32_t* ids, float* weights, cudaStream_t s) {
  const RouteArgs r{bias, E, k, n_group, topk_group, renormalize, scaling};
  if (T > 0)
    launch_smem(moe_route_sigmoid_kernel, static_cast<unsigned>(T), kRouteThreads, static_cast<size_t>(E) * sizeof(double),
                s, logits, r, ids, weights);
}

void moe_router_sigmoid(const float* x, const void* router, ElemType type, int64_t K, const float* bias, int64_t E, int k,
                        int n_group, int topk_group, bool renormalize, float scaling, float* logits, int32_t* ids,
                        float* weights, cudaStream_t s) {
  const RouteArgs r{bias, E, k, n_group, topk_group, renormalize, scaling};
  const unsigned blocks = static_cast<unsigned>((E + kRouteThreads / 32 - 1) / (kRouteThreads / 32));
  const size_t smem = static_cast<size_t>(E) * sizeof(double);
  switch (type) {
    case ElemType::f16:
      launch_smem(moe_router_kernel<__half>, blocks, kRouteThreads, smem, s, x, static_cast<const __half*>(router), K,
                  logits, r, ids, weights);
      break;
    case ElemType::bf16:
      launch_smem(moe_router_kernel<__nv_bfloat16>, blocks, kRouteThreads, smem, s, x,
                  static_cast<const __nv_bfloat16*>(router), K, logits, r, ids, weights);
      break;
    default:
      launch_smem(moe_router_kernel<float>, blocks, kRouteThreads, smem, s, x, static_cast<const float*>(router), K,
                  logits, r, ids, weights);
      break;
  }
}

}  // namespace kapitsa::ops::cuda::kernels
