// Kernel of the sigmoid router (Nemotron-H / DeepSeek-V3 style): one block per token, in double, the
// reference's choice exactly (group scores = sum of each group's two best biased scores, the top groups,
// then the top k experts, ties to the lower index). The biased scores go to shared memory once; warp 0
// keeps the top groups by repeated warp argmax (at most 64 groups), the other groups' scores become -inf
// (as the reference masks them); then each expert's rank — how many experts beat it: a larger score, or
// an equal one at a lower index — puts the experts of rank < k at their place in the order the
// reference's repeated argmax picks them. One pass of E comparisons a thread (most stop after a few:
// k experts beat them) instead of k warp reductions one after another: the warp-argmax kernel took 6.9 µs
// a layer of Nemotron-3-Nano's decode (128 experts, top 6; H100, session 40), one thread per token 23.
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

constexpr int kRouteThreads = 128;

__device__ __forceinline__ double score(const float* row, int64_t e) { return 1.0 / (1.0 + exp(-static_cast<double>(row[e]))); }
__device__ __forceinline__ double biased(const float* row, const float* bias, int64_t e) {
  return score(row, e) + (bias != nullptr ? static_cast<double>(bias[e]) : 0.0);
}

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

// Block t (kRouteThreads threads) routes token t. Shared: the token's E biased scores.
__global__ void __launch_bounds__(kRouteThreads) moe_route_sigmoid_kernel(const float* logits, const float* bias,
                                                                          int64_t E, int k, int n_group,
                                                                          int topk_group, bool renormalize,
                                                                          float scaling, int32_t* ids, float* weights) {
  extern __shared__ double choice[];  // [E]
  __shared__ uint64_t kept;
  __shared__ int chosen[32];  // k ≤ 32 (moe_route_sigmoid)
  pdl_trigger();
  pdl_wait();  // the logits
  const int tid = threadIdx.x, lane = tid & 31;
  const int64_t t = blockIdx.x, per_group = E / n_group;
  const float* row = logits + t * E;
  if (tid < 32) chosen[tid] = 0;  // (every slot below k is written unless a score is NaN: then ids stay in range)
  for (int64_t e = tid; e < E; e += kRouteThreads) choice[e] = biased(row, bias, e);
  __syncthreads();
  if (n_group > 1) {
    if (tid < 32) {
      const uint64_t groups = kept_groups(choice, per_group, n_group, topk_group);
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
  const double w = lane < k ? score(row, mine) : 0.0;
  double sum = 0.0;
  for (int j = 0; j < k; ++j) sum += __shfl_sync(0xffffffffu, w, j);
  if (lane < k) {
    ids[t * k + lane] = mine;
    weights[t * k + lane] = static_cast<float>((renormalize ? w / (sum + 1e-20) : w) * scaling);
  }
}

}  // namespace

void moe_route_sigmoid(const float* logits, const float* bias, int64_t T, int64_t E, int k, int n_group,
                       int topk_group, bool renormalize, float scaling, int32_t* ids, float* weights, cudaStream_t s) {
  if (T > 0)
    launch_smem(moe_route_sigmoid_kernel, static_cast<unsigned>(T), kRouteThreads, static_cast<size_t>(E) * sizeof(double), s,
                logits, bias, E, k, n_group, topk_group, renormalize, scaling, ids, weights);
}

}  // namespace kapitsa::ops::cuda::kernels
