// Sampler: penalties, temperature, top-k / top-p / min-p truncation and a seeded draw (see sampler.h).
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace kapitsa::runtime {
namespace {

// Strict total order "better first": higher logit, then lower id — so every platform picks the same
// candidates and walks them in the same order.
struct Better {
  const float* s;
  bool operator()(int32_t a, int32_t b) const { return s[a] > s[b] || (s[a] == s[b] && a < b); }
};

// argmax over the allowed ids (disallowed ones count as -inf), as argmax of the masked copy.
int32_t masked_argmax(std::span<const float> x, std::span<const uint8_t> allowed) {
  const float minus_inf = -std::numeric_limits<float>::infinity();
  auto value = [&](size_t i) { return allowed[i] ? x[i] : minus_inf; };
  size_t best = 0;
  for (size_t i = 1; i < x.size(); ++i)
    if (value(i) > value(best)) best = i;
  return static_cast<int32_t>(best);
}

double log_sum_exp(std::span<const float> x, float max) {
  double sum = 0;
  for (float v : x) sum += std::exp(static_cast<double>(v) - max);
  return static_cast<double>(max) + std::log(sum);
}

}  // namespace

// The first maximum, as the scan `if (x[i] > x[best]) best = i` from best = 0 finds it (a NaN never
// wins; a NaN at 0 stays). A 248k vocabulary is read twice, 16 floats at a time, instead of scanned
// with a compare and a branch per element: the largest value (`m < v ? v : m` on GCC vectors compiles to
// vector max instructions, a NaN in v leaving m), then the first index holding it.
int32_t argmax(std::span<const float> x) {
  using v4 = float __attribute__((vector_size(16)));
  constexpr size_t kBlock = 16;
  auto load = [&](size_t i) {
    v4 v;
    std::memcpy(&v, x.data() + i, sizeof v);
    return v;
  };
  if (x.empty() || std::isnan(x[0])) return 0;
  const float minus_inf = -std::numeric_limits<float>::infinity();
  v4 m[4] = {v4{} + minus_inf, v4{} + minus_inf, v4{} + minus_inf, v4{} + minus_inf};
  size_t i = 0;
  for (; i + kBlock <= x.size(); i += kBlock)
    for (size_t l = 0; l < 4; ++l) {
      const v4 v = load(i + 4 * l);
      m[l] = m[l] < v ? v : m[l];
    }
  float best = x[0];
  for (const v4& l : m)
    for (int k = 0; k < 4; ++k) best = l[k] > best ? l[k] : best;
  for (; i < x.size(); ++i) best = x[i] > best ? x[i] : best;
  const v4 target = v4{} + best;
  size_t block = 0;
  for (; block + kBlock <= x.size(); block += kBlock) {
    const auto hit = (load(block) == target) | (load(block + 4) == target) | (load(block + 8) == target) |
                     (load(block + 12) == target);
    if (hit[0] | hit[1] | hit[2] | hit[3]) break;
  }
  for (size_t j = block; j < x.size(); ++j)
    if (x[j] == best) return static_cast<int32_t>(j);
  return 0;  // not reached: best is one of x's values
}

Sampler::Sampler(SamplingParams params, uint64_t seed) : params_(std::move(params)), rng_(params_.seed.value_or(seed)) {}

void Sampler::add_prompt(std::span<const int32_t> ids) {
  if (params_.repetition_penalty != 1.0f) seen_.insert(ids.begin(), ids.end());
}

void Sampler::accept(int32_t id) {
  ++generated_counts_[id];
  if (params_.repetition_penalty != 1.0f) seen_.insert(id);
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }  // [0, 1)

void Sampler::prepare(std::span<const float> logits) {
  work_.assign(logits.begin(), logits.end());
  const int64_t V = static_cast<int64_t>(work_.size());
  for (const auto& [id, bias] : params_.logit_bias)
    if (id >= 0 && id < V) work_[static_cast<size_t>(id)] += bias;
  const float r = params_.repetition_penalty;
  if (r != 1.0f)
    for (int32_t id : seen_) {
      if (id < 0 || id >= V) continue;
      float& v = work_[static_cast<size_t>(id)];
      v = v > 0 ? v / r : v * r;  // as HF's RepetitionPenaltyLogitsProcessor
    }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f)
    for (const auto& [id, count] : generated_counts_) {
      if (id < 0 || id >= V) continue;
      work_[static_cast<size_t>(id)] -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(count);
    }
}

void Sampler::truncate() {
  const int32_t V = static_cast<int32_t>(work_.size());
  const float inv_t = 1.0f / params_.temperature;
  for (float& v : work_) v *= inv_t;
  const float max = work_[static_cast<size_t>(argmax(work_))];
  const Better better{work_.data()};

  // Tokens more than kNegligibleNats below the best are no candidates: each has under e^-40 (4e-18)
  // of the best's weight, all of a 248k vocabulary together under 1e-12 of the total — below the
  // rounding of the double sums that normalise the weights. Real logits leave a few thousand of a 248k
  // vocabulary, and the selection, sorts and exponentials below run over those. Blocks of 16 whose
  // largest value is below the floor are skipped whole (a vectorised maximum).
  constexpr float kNegligibleNats = 40;
  const float floor = max - kNegligibleNats;
  candidates_.clear();
  constexpr int32_t kBlock = 16;
  int32_t i = 0;
  for (; i + kBlock <= V; i += kBlock) {
    float block_max = work_[static_cast<size_t>(i)];
    for (int32_t j = 1; j < kBlock; ++j) block_max = std::max(block_max, work_[static_cast<size_t>(i + j)]);
    if (block_max < floor) continue;
    for (int32_t j = i; j < i + kBlock; ++j)
      if (work_[static_cast<size_t>(j)] >= floor) candidates_.push_back(j);
  }
  for (; i < V; ++i)
    if (work_[static_cast<size_t>(i)] >= floor) candidates_.push_back(i);
  const int32_t n = static_cast<int32_t>(candidates_.size());
  weights_.clear();
  if (n == 0) return;  // the best is NaN: nothing to weigh (the caller's fallbacks pick a token)
  const bool sorted = params_.top_p < 1.0f;
  if (params_.top_k > 0 && params_.top_k < n) {
    std::nth_element(candidates_.begin(), candidates_.begin() + params_.top_k, candidates_.end(), better);
    candidates_.resize(static_cast<size_t>(params_.top_k));
    if (sorted) std::sort(candidates_.begin(), candidates_.end(), better);
  } else if (sorted) {
    // Top-p over the whole vocabulary: the nucleus is usually small, so sort a head first and only
    // sort everything when the head does not hold enough mass.
    double total = 0;
    for (int32_t id : candidates_) total += std::exp(static_cast<double>(work_[static_cast<size_t>(id)]) - max);
    const size_t head = std::min<size_t>(candidates_.size(), 1024);
    std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(head) - 1,
                     candidates_.end(), better);
    std::sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(head), better);
    double mass = 0;
    for (size_t i = 0; i < head; ++i) mass += std::exp(static_cast<double>(work_[static_cast<size_t>(candidates_[i])]) - max);
    if (mass < params_.top_p * total) std::sort(candidates_.begin(), candidates_.end(), better);
  }

  weights_.resize(candidates_.size());
  double z = 0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    weights_[i] = std::exp(static_cast<double>(work_[static_cast<size_t>(candidates_[i])]) - max);
    z += weights_[i];
  }
  if (sorted) {
    // Keep a token while the mass ranked above it is below top_p (HF's TopPLogitsWarper).
    double before = 0;
    size_t keep = 0;
    while (keep < candidates_.size() && (keep == 0 || before < params_.top_p * z)) before += weights_[keep++];
    candidates_.resize(keep);
    weights_.resize(keep);
  }
  if (params_.min_p > 0.0f) {
    // Relative to the best token's probability; the best token always survives top-k and top-p,
    // and its weight is exp(0) = 1.
    size_t out = 0;
    for (size_t i = 0; i < candidates_.size(); ++i)
      if (weights_[i] >= params_.min_p) {
        candidates_[out] = candidates_[i];
        weights_[out++] = weights_[i];
      }
    candidates_.resize(out);
    weights_.resize(out);
  }
}

int32_t Sampler::draw_truncated() {
  truncate();
  double z = 0;
  for (double w : weights_) z += w;
  const double target = uniform() * z;
  double acc = 0;
  // Rounding may leave target at z: the last candidate with weight (masked ones have none).
  // No candidate at all when every logit is -inf or NaN (min-p then keeps nothing): the caller's
  // mask fallback picks an allowed token.
  size_t last = candidates_.empty() ? 0 : candidates_.size() - 1;
  while (last > 0 && weights_[last] <= 0) --last;
  int32_t chosen = candidates_.empty() ? argmax(work_) : candidates_[last];
  for (size_t i = 0; i < candidates_.size(); ++i) {
    acc += weights_[i];
    if (target < acc) {
      chosen = candidates_[i];
      break;
    }
  }
  return chosen;
}

bool Sampler::adjusts_logits() const {
  return !params_.logit_bias.empty() || params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
         params_.frequency_penalty != 0.0f;
}

int32_t Sampler::sample(std::span<const float> logits, int n_top, TokenEvent* event, std::span<const uint8_t> allowed) {
  int32_t chosen = 0;
  if (params_.temperature <= 0.0f && !adjusts_logits()) {
    // Greedy with nothing to apply: the argmax of the logits themselves, without copying them.
    chosen = allowed.empty() ? argmax(logits) : masked_argmax(logits, allowed);
  } else {
    prepare(logits);
    if (!allowed.empty())
      for (size_t i = 0; i < work_.size(); ++i)
        if (!allowed[i]) work_[i] = -std::numeric_limits<float>::infinity();
    chosen = params_.temperature <= 0.0f ? argmax(work_) : draw_truncated();
  }
  if (!allowed.empty() && !allowed[static_cast<size_t>(chosen)]) {
    // Only when every allowed logit is -inf or NaN: still never a token outside the mask.
    for (size_t i = 0; i < allowed.size(); ++i)
      if (allowed[i]) {
        chosen = static_cast<int32_t>(i);
        break;
      }
  }
  if (event != nullptr && n_top >= 0) {
    event->logprob = token_logprob(logits, chosen);
    if (n_top > 0) event->top = top_logprobs(logits, n_top);
  }
  return chosen;
}

void Sampler::distribution(std::span<const float> logits, std::span<const uint8_t> allowed, std::vector<float>& probs) {
  prepare(logits);
  if (!allowed.empty())
    for (size_t i = 0; i < work_.size(); ++i)
      if (!allowed[i]) work_[i] = -std::numeric_limits<float>::infinity();
  truncate();
  double z = 0;
  for (double w : weights_) z += w;
  probs.assign(work_.size(), 0.0f);
  if (!(z > 0)) return;
  for (size_t i = 0; i < candidates_.size(); ++i) probs[static_cast<size_t>(candidates_[i])] = static_cast<float>(weights_[i] / z);
}

int32_t Sampler::draw(std::span<const float> weights) {
  double z = 0;
  for (float w : weights) z += w;
  const double target = uniform() * z;
  double acc = 0;
  int32_t last = 0;  // rounding may leave target at z: the last id with weight
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0) continue;
    last = static_cast<int32_t>(i);
    acc += weights[i];
    if (target < acc) return last;
  }
  return last;
}

float token_logprob(std::span<const float> logits, int32_t id) {
  const float max = logits[static_cast<size_t>(argmax(logits))];
  return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(id)]) - log_sum_exp(logits, max));
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int n) {
  const int32_t V = static_cast<int32_t>(logits.size());
  n = std::min(n, V);
  std::vector<int32_t> ids(static_cast<size_t>(V));
  for (int32_t i = 0; i < V; ++i) ids[static_cast<size_t>(i)] = i;
  const Better better{logits.data()};
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), better);
  const float max = logits[static_cast<size_t>(ids[0])];
  const double lse = log_sum_exp(logits, max);
  std::vector<TokenLogprob> out;
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    out.push_back({ids[static_cast<size_t>(i)], static_cast<float>(static_cast<double>(logits[static_cast<size_t>(ids[static_cast<size_t>(i)])]) - lse)});
  return out;
}

}  // namespace kapitsa::runtime
