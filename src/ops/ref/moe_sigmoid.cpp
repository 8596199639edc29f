// Reference sigmoid router (Nemotron-H MoE, DeepSeek-V3 style): sigmoid scores, a correction bias
// used only to choose, optional group-limited selection, weights from the unbiased scores. Scores in
// double; selection by repeated argmax (ties → lower index), so any k ≤ E works.
#include "ops/ref/ref.h"
#include "ops/ref/ref_util.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace kapitsa::ops::ref {

// logits: [T, E];  bias: [E] or empty;  expert_ids: [T, k] i32;  expert_weights: [T, k] f32.
void moe_route_sigmoid(const Tensor& logits, const Tensor& bias, int k, int n_group, int topk_group, bool renormalize,
                       float scaling, const Tensor& expert_ids, const Tensor& expert_weights) {
  const int64_t E = logits.dim(-1), T = detail::rows_of(logits);
  const int64_t per_group = E / n_group;
  if (!bias.empty()) {
  }
  constexpr double kMasked = -std::numeric_limits<double>::infinity();
  std::vector<double> s(static_cast<size_t>(E)), choice(static_cast<size_t>(E)), group_score(static_cast<size_t>(n_group));
  std::vector<bool> group_kept(static_cast<size_t>(n_group)), taken(static_cast<size_t>(E));
  // Index of the largest value among candidates (not yet taken), lower index on ties.
  auto argmax = [](const std::vector<double>& v, const std::vector<bool>& done) {
    int64_t best = -1;
    for (size_t i = 0; i < v.size(); ++i)
      if (!done[i] && (best < 0 || v[i] > v[static_cast<size_t>(best)])) best = static_cast<int64_t>(i);
    return best;
  };
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) {
      const double l = logits.f32()[t * E + e];
      s[static_cast<size_t>(e)] = 1.0 / (1.0 + std::exp(-l));
      choice[static_cast<size_t>(e)] = s[static_cast<size_t>(e)] + (bias.empty() ? 0.0 : bias.f32()[e]);
    }
    if (n_group > 1) {
      for (int64_t gi = 0; gi < n_group; ++gi) {  // sum of the group's two best biased scores
        std::vector<double> m(choice.begin() + gi * per_group, choice.begin() + (gi + 1) * per_group);
        std::sort(m.begin(), m.end(), std::greater<>());
        group_score[static_cast<size_t>(gi)] = m[0] + (per_group > 1 ? m[1] : 0.0);
      }
      std::fill(group_kept.begin(), group_kept.end(), false);
      std::vector<bool> done(static_cast<size_t>(n_group), false);
      for (int j = 0; j < topk_group; ++j) {
        const int64_t best = argmax(group_score, done);
        done[static_cast<size_t>(best)] = group_kept[static_cast<size_t>(best)] = true;
      }
      for (int64_t e = 0; e < E; ++e)
        if (!group_kept[static_cast<size_t>(e / per_group)]) choice[static_cast<size_t>(e)] = kMasked;
    }
    std::fill(taken.begin(), taken.end(), false);
    double sum = 0;
    for (int j = 0; j < k; ++j) {
      const int64_t best = argmax(choice, taken);
      taken[static_cast<size_t>(best)] = true;
      expert_ids.data_as<int32_t>()[t * k + j] = static_cast<int32_t>(best);
      sum += s[static_cast<size_t>(best)];
    }
    for (int j = 0; j < k; ++j) {
      double w = s[static_cast<size_t>(expert_ids.data_as<int32_t>()[t * k + j])];
      if (renormalize) w /= sum + 1e-20;
      expert_weights.f32()[t * k + j] = static_cast<float>(w * scaling);
    }
  }
}

}  // namespace kapitsa::ops::ref
