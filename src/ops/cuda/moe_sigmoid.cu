// Kernel of the sigmoid router (Nemotron-H / DeepSeek-V3 style): one warp per token, in double, the same
// steps as the reference (group scores = sum of each group's two best biased scores, top groups and then
// top experts by repeated argmax, ties to the lower index), so the choice matches it exactly. The biased
// scores are computed once into shared memory (lane l holds experts l, l + 32, …); each argmax is a warp
// reduction. (One thread per token, as before, took 23 µs a token for 8 experts top-6 on the H200 — 15%
// of a 4-bit Nemotron-shaped decode step — and grows with E·k.)
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

__device__ __forceinline__ double score(const float* row, int64_t e) { return 1.0 / (1.0 + exp(-static_cast<double>(row[e]))); }
__device__ __forceinline__ double biased(const float* row, const float* bias, int64_t e) {
  return score(row, e) + (bias != nullptr ? static_cast<double>(bias[e]) : 0.0);
}

// Block t (one warp) routes token t. Shared: the token's E biased scores.
__global__ void moe_route_sigmoid_kernel(const float* logits, const float* bias, int64_t E, int k, int n_group,
                                         int topk_group, bool renormalize, float scaling, int32_t* ids, float* weights) {
  extern __shared__ double choice[];  // [E]
  pdl_trigger();
  pdl_wait();  // the logits
  const int lane = threadIdx.x;
  const int64_t t = blockIdx.x;
  const float* row = logits + t * E;
  for (int64_t e = lane; e < E; e += 32) choice[e] = biased(row, bias, e);
  __syncwarp();
  const int64_t per_group = E / n_group;
  uint64_t kept = ~uint64_t{0};  // bit gi: group gi competes
  if (n_group > 1) {
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
    kept = 0;
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
  }
  int32_t* ti = ids + t * k;
  float* tw = weights + t * k;
  uint64_t taken = 0;  // bit s: expert lane + 32·s is chosen (E ≤ kMoeMaxExperts)
  int mine = 0;       // lane j < k: the j-th choice
  for (int j = 0; j < k; ++j) {
    double v = 0.0;
    int best = -1;
    for (int64_t e = lane, slot = 0; e < E; e += 32, ++slot) {
      if (!(kept >> (e / per_group) & 1) || (taken >> slot & 1)) continue;
      if (best < 0 || choice[e] > v) v = choice[e], best = static_cast<int>(e);
    }
    warp_argmax(v, best);
    if ((best & 31) == lane) taken |= uint64_t{1} << (best >> 5);
    if (lane == j) mine = best;
  }
  // Lane j < k scores its choice (the exps side by side, not one after another); lane 0 sums them in
  // choice order, as the reference does, and every lane reads the sum. k ≤ 32 (moe_route_sigmoid).
  const double w = lane < k ? score(row, mine) : 0.0;
  double sum = 0.0;
  for (int j = 0; j < k; ++j) sum += __shfl_sync(0xffffffffu, w, j);
  if (lane < k) {
    ti[lane] = mine;
    tw[lane] = static_cast<float>((renormalize ? w / (sum + 1e-20) : w) * scaling);
  }
}

}  // namespace

void moe_route_sigmoid(const float* logits, const float* bias, int64_t T, int64_t E, int k, int n_group,
                       int topk_group, bool renormalize, float scaling, int32_t* ids, float* weights, cudaStream_t s) {
  if (T > 0)
    launch_smem(moe_route_sigmoid_kernel, static_cast<unsigned>(T), 32, static_cast<size_t>(E) * sizeof(double), s,
                logits, bias, E, k, n_group, topk_group, renormalize, scaling, ids, weights);
}

}  // namespace kapitsa::ops::cuda::kernels
