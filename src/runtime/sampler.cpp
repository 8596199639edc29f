// Sampler: penalties, temperature, top-k / top-p / min-p truncation and a seeded draw (see sampler.h).
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kapitsa::runtime {
namespace {

// Strict total order "better first": higher logit, then lower id — so every platform picks the same
// candidates and walks them in the same order.
struct Better {
  const float* s;
  bool operator()(int32_t a, int32_t b) const { return s[a] > s[b] || (s[a] == s[b] && a < b); }
};

int32_t argmax(std::span<const float> x) {
  size_t best = 0;
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[best]) best = i;
  return static_cast<int32_t>(best);
}

double log_sum_exp(std::span<const float> x, float max) {
  double sum = 0;
  for (float v : x) sum += std::exp(static_cast<double>(v) - max);
  return static_cast<double>(max) + std::log(sum);
}

}  // namespace

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

  candidates_.resize(static_cast<size_t>(V));
  for (int32_t i = 0; i < V; ++i) candidates_[static_cast<size_t>(i)] = i;
  const bool sorted = params_.top_p < 1.0f;
  if (params_.top_k > 0 && params_.top_k < V) {
    std::nth_element(candidates_.begin(), candidates_.begin() + params_.top_k, candidates_.end(), better);
    candidates_.resize(static_cast<size_t>(params_.top_k));
    if (sorted) std::sort(candidates_.begin(), candidates_.end(), better);
  } else if (sorted) {
    // Top-p over the whole vocabulary: the nucleus is usually small, so sort a head first and only
    // sort everything when the head does not hold enough mass.
    double total = 0;
    for (float v : work_) total += std::exp(static_cast<double>(v) - max);
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

int32_t Sampler::sample(std::span<const float> logits, int n_top, TokenEvent* event, std::span<const uint8_t> allowed) {
  prepare(logits);
  if (!allowed.empty())
    for (size_t i = 0; i < work_.size(); ++i)
      if (!allowed[i]) work_[i] = -std::numeric_limits<float>::infinity();
  int32_t chosen;
  if (params_.temperature <= 0.0f) {
    chosen = argmax(work_);
  } else {
    truncate();
    double z = 0;
    for (double w : weights_) z += w;
    const double target = uniform() * z;
    double acc = 0;
    // Rounding may leave target at z: the last candidate with weight (masked ones have none).
    // No candidate at all when every logit is -inf or NaN (min-p then keeps nothing): the mask
    // fallback below picks an allowed token.
    size_t last = candidates_.empty() ? 0 : candidates_.size() - 1;
    while (last > 0 && weights_[last] <= 0) --last;
    chosen = candidates_.empty() ? argmax(work_) : candidates_[last];
    for (size_t i = 0; i < candidates_.size(); ++i) {
      acc += weights_[i];
      if (target < acc) {
        chosen = candidates_[i];
        break;
      }
    }
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
