// The cost-aware draft length (see draft_cost.h).
#include "runtime/draft_cost.h"

#include <algorithm>

namespace kapitsa::runtime {

void DraftCostModel::record(int length, double seconds) {
  if (length < 0 || length > kMaxLength || !(seconds > 0)) return;
  const size_t i = static_cast<size_t>(length);
  // The last kWindow timings: the machine's load and the context length drift.
  recent_[i][static_cast<size_t>(samples_[i] % kWindow)] = seconds;
  const int next = samples_[i] + 1;
  samples_[i] = next < (1 << 20) ? next : kWindow + next % kWindow;  // the ring's position kept
}

double DraftCostModel::cost(int length) const {
  const size_t i = static_cast<size_t>(std::clamp(length, 0, kMaxLength));
  const int n = std::min(samples_[i], kWindow);
  if (n == 0) return 0;
  std::array<double, kWindow> held = recent_[i];
  std::sort(held.begin(), held.begin() + n);
  return held[static_cast<size_t>((n - 1) / 4)];
}

double DraftCostModel::expected_tokens(double acceptance, int length) {
  double tokens = 1, kept = 1;
  for (int j = 0; j < length; ++j) tokens += kept *= acceptance;
  return tokens;
}

int DraftCostModel::choose(double acceptance, int suggested) {
  suggested = std::clamp(suggested, 0, kMaxLength);
  const int64_t turn = choices_++ % kRefreshEvery;
  if (samples_[0] < kSamples || turn == 0) return 0;  // the plain step's cost, now and then
  if (suggested == 0) return 0;
  const auto s = static_cast<size_t>(suggested);
  // Two drafted steps in a row at a refresh: the engine times a draft only after a drafted step.
  if (acceptance < 0 || samples_[s] < kSamples || turn == kRefreshEvery / 2 || turn == kRefreshEvery / 2 + 1)
    return suggested;
  return best(acceptance, suggested);
}

int DraftCostModel::best(double acceptance, int suggested) const {
  if (samples_[0] == 0) return 0;
  int best = 0;
  double best_rate = 1 / cost(0);
  for (int k = 1; k <= std::clamp(suggested, 0, kMaxLength); ++k) {
    if (samples_[static_cast<size_t>(k)] < kSamples) continue;
    const double rate = expected_tokens(acceptance, k) / cost(k);
    if (rate > best_rate) best = k, best_rate = rate;
  }
  return best;
}

}  // namespace kapitsa::runtime
