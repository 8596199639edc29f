// The cost-aware draft length (see draft_cost.h).
#include "runtime/draft_cost.h"

#include <algorithm>

namespace kapitsa::runtime {

void DraftCostModel::record(int length, double seconds) {
  if (length < 0 || length > kMaxLength || !(seconds > 0)) return;
  const size_t i = static_cast<size_t>(length);
  // A decayed mean: recent steps count most (the machine's load and the context length drift).
  seconds_[i] = samples_[i] == 0 ? seconds : 0.8 * seconds_[i] + 0.2 * seconds;
  samples_[i] = std::min(samples_[i] + 1, 1 << 20);
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
  int best = 0;
  double best_rate = 1 / seconds_[0];
  for (int k = 1; k <= suggested; ++k) {
    const auto i = static_cast<size_t>(k);
    if (samples_[i] < kSamples) continue;
    const double rate = expected_tokens(acceptance, k) / seconds_[i];
    if (rate > best_rate) best = k, best_rate = rate;
  }
  return best;
}

}  // namespace kapitsa::runtime
