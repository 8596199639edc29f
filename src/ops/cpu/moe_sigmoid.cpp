// CPU sigmoid router (Nemotron-H MoE): f32 scores, selection by partial sort on (score desc, index asc)
// — the same tie rule as the oracle — with no fixed bound on k; tokens split across threads.
#include "base/thread_pool.h"
#include "ops/cpu/level.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {

// logits: [T, E];  bias: [E] or empty;  expert_ids: [T, k] i32;  expert_weights: [T, k] f32.
void moe_route_sigmoid(const Tensor& logits, const Tensor& bias, int k, int n_group, int topk_group, bool renormalize,
                       float scaling, const Tensor& expert_ids, const Tensor& expert_weights) {
  const int64_t E = logits.dim(-1), T = E == 0 ? 0 : logits.numel() / E;
  const int64_t per_group = E / n_group;
  const float* pb = bias.empty() ? nullptr : bias.f32();
  parallel_for(static_cast<size_t>(T), 16, [&](size_t begin, size_t end) {
    std::vector<float> s(static_cast<size_t>(E)), choice(static_cast<size_t>(E)), gscore(static_cast<size_t>(n_group));
    std::vector<int32_t> order(static_cast<size_t>(E)), gorder(static_cast<size_t>(n_group));
    for (size_t t = begin; t < end; ++t) {
      const float* row = logits.f32() + static_cast<int64_t>(t) * E;
      for (int64_t e = 0; e < E; ++e) {
        s[static_cast<size_t>(e)] = 1.0f / (1.0f + std::exp(-row[e]));
        choice[static_cast<size_t>(e)] = s[static_cast<size_t>(e)] + (pb ? pb[e] : 0.0f);
      }
      if (n_group > 1) {
        for (int64_t gi = 0; gi < n_group; ++gi) {  // sum of the group's two best biased scores
          float m0 = -std::numeric_limits<float>::infinity(), m1 = m0;
          for (int64_t e = gi * per_group; e < (gi + 1) * per_group; ++e) {
            const float v = choice[static_cast<size_t>(e)];
            if (v > m0) m1 = m0, m0 = v;
            else if (v > m1) m1 = v;
          }
          gscore[static_cast<size_t>(gi)] = per_group > 1 ? m0 + m1 : m0;
        }
        std::iota(gorder.begin(), gorder.end(), 0);
        std::partial_sort(gorder.begin(), gorder.begin() + topk_group, gorder.end(), [&](int32_t a, int32_t b) {
          return gscore[static_cast<size_t>(a)] > gscore[static_cast<size_t>(b)] ||
                 (gscore[static_cast<size_t>(a)] == gscore[static_cast<size_t>(b)] && a < b);
        });
        std::vector<bool> kept(static_cast<size_t>(n_group), false);
        for (int j = 0; j < topk_group; ++j) kept[static_cast<size_t>(gorder[static_cast<size_t>(j)])] = true;
        for (int64_t e = 0; e < E; ++e)
          if (!kept[static_cast<size_t>(e / per_group)]) choice[static_cast<size_t>(e)] = -std::numeric_limits<float>::infinity();
      }
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
        return choice[static_cast<size_t>(a)] > choice[static_cast<size_t>(b)] ||
               (choice[static_cast<size_t>(a)] == choice[static_cast<size_t>(b)] && a < b);
      });
      int32_t* ids = expert_ids.data_as<int32_t>() + static_cast<int64_t>(t) * k;
      float* ws = expert_weights.f32() + static_cast<int64_t>(t) * k;
      float sum = 0;
      for (int j = 0; j < k; ++j) {
        ids[j] = order[static_cast<size_t>(j)];
        sum += s[static_cast<size_t>(ids[j])];
      }
      for (int j = 0; j < k; ++j) {
        float w = s[static_cast<size_t>(ids[j])];
        if (renormalize) w /= sum + 1e-20f;
        ws[j] = w * scaling;
      }
    }
  });
}

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
