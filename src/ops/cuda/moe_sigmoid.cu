// Kernel of the sigmoid router (Nemotron-H / DeepSeek-V3 style): one thread per token, in double, the
// same steps as the reference (group scores = sum of each group's two best biased scores, top groups and
// then top experts by repeated argmax, ties to the lower index), so the choice matches it exactly.
// Scores are recomputed per pass instead of stored (no per-thread array of E).
#include "ops/cuda/kernel_util.cuh"

namespace kapitsa::ops::cuda::kernels {
namespace {

__device__ __forceinline__ double score(const float* row, const float* bias, int64_t e) {
  return 1.0 / (1.0 + exp(-static_cast<double>(row[e])));
}
__device__ __forceinline__ double biased(const float* row, const float* bias, int64_t e) {
  return score(row, bias, e) + (bias != nullptr ? static_cast<double>(bias[e]) : 0.0);
}

__global__ void moe_route_sigmoid_kernel(const float* logits, const float* bias, int64_t T, int64_t E, int k,
                                         int n_group, int topk_group, bool renormalize, float scaling, int32_t* ids,
                                         float* weights) {
  const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (t >= T) return;
  const float* row = logits + t * E;
  const int64_t per_group = E / n_group;
  uint64_t kept = ~uint64_t{0};  // bit gi: group gi competes
  if (n_group > 1) {
    kept = 0;
    for (int j = 0; j < topk_group; ++j) {
      int best = -1;
      double best_score = 0.0;
      for (int gi = 0; gi < n_group; ++gi) {
        if (kept >> gi & 1) continue;
        double m0 = -INFINITY, m1 = -INFINITY;  // the group's two largest biased scores
        for (int64_t e = gi * per_group; e < (gi + 1) * per_group; ++e) {
          const double c = biased(row, bias, e);
          if (c > m0) m1 = m0, m0 = c;
          else if (c > m1) m1 = c;
        }
        const double group_score = m0 + (per_group > 1 ? m1 : 0.0);
        if (best < 0 || group_score > best_score) best = gi, best_score = group_score;
      }
      kept |= uint64_t{1} << best;
    }
  }
  int32_t* ti = ids + t * k;
  float* tw = weights + t * k;
  double sum = 0.0;
  for (int j = 0; j < k; ++j) {
    int64_t best = -1;
    double best_choice = 0.0;
    for (int64_t e = 0; e < E; ++e) {
      if (!(kept >> (e / per_group) & 1)) continue;
      bool taken = false;
      for (int i = 0; i < j; ++i) taken |= ti[i] == e;
      if (taken) continue;
      const double c = biased(row, bias, e);
      if (best < 0 || c > best_choice) best = e, best_choice = c;
    }
    ti[j] = static_cast<int32_t>(best);
    sum += score(row, bias, best);
  }
  for (int j = 0; j < k; ++j) {
    double w = score(row, bias, ti[j]);
    if (renormalize) w /= sum + 1e-20;
    tw[j] = static_cast<float>(w * scaling);
  }
}

}  // namespace

void moe_route_sigmoid(const float* logits, const float* bias, int64_t T, int64_t E, int k, int n_group,
                       int topk_group, bool renormalize, float scaling, int32_t* ids, float* weights, cudaStream_t s) {
  if (T > 0)
    moe_route_sigmoid_kernel<<<grid_for(T, 128), 128, 0, s>>>(logits, bias, T, E, k, n_group, topk_group, renormalize,
                                                               scaling, ids, weights);
}

}  // namespace kapitsa::ops::cuda::kernels
