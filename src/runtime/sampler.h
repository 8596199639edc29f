// Sampler: turns one row of logits into the next token id, per SamplingParams. Order (as Hugging Face
// generate and vLLM): logit bias and penalties on the raw logits, then temperature, top-k, top-p,
// min-p, then a draw from a seeded generator. Not thread-safe: one per sequence.
// Invariants: the same seed, the same logits and the same accepted tokens give the same ids on every
// platform (own uniform draw from mt19937_64, no std distributions); temperature 0 is argmax (the
// first maximum wins, as torch.argmax). Logprobs are those of the model's raw distribution
// (log_softmax of the logits before penalties, bias and temperature), as vLLM reports by default.
#pragma once

#include "runtime/request.h"

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace kapitsa::runtime {

// The index of the first maximum of x (0 for an empty x or a NaN at 0; a NaN never wins), vectorised: a
// 248k-vocabulary row in about a microsecond. Greedy choice and the proposers' greedy guesses.
int32_t argmax(std::span<const float> x);

class Sampler {
 public:
  // `seed` is used when params.seed is absent (callers pass a fresh random one).
  Sampler(SamplingParams params, uint64_t seed);

  // Tokens the repetition penalty also covers (the prompt); presence/frequency cover generated only.
  void add_prompt(std::span<const int32_t> ids);
  // A token that was generated (and kept): it now counts for every penalty.
  void accept(int32_t id);

  // logits: [V]. Returns the chosen id; fills event->logprob / event->top when top_logprobs >= 0.
  // allowed: [V] or empty; tokens with allowed[id] == 0 are never chosen (constrained decoding; at
  // least one must be allowed). Logprobs stay those of the unmasked logits.
  int32_t sample(std::span<const float> logits, int top_logprobs = -1, TokenEvent* event = nullptr,
                 std::span<const uint8_t> allowed = {});

  // Speculative sampling (temperature > 0): the distribution sample() draws from — bias, penalties,
  // mask, temperature, top-k, top-p, min-p — as probabilities summing to 1 into probs [V] (zero
  // outside what survives).
  void distribution(std::span<const float> logits, std::span<const uint8_t> allowed, std::vector<float>& probs);
  // A draw from `weights` ([V], >= 0, not necessarily normalised; their sum must be > 0), walking ids in order.
  int32_t draw(std::span<const float> weights);
  // The next uniform number in [0, 1) of this sampler's seeded stream.
  double uniform();

  const SamplingParams& params() const { return params_; }
  // Temperature 0 with nothing applied to the logits (no bias, no penalty): sample() without a mask is
  // their argmax.
  bool plain_greedy() const { return params_.temperature <= 0.0f && !adjusts_logits(); }

 private:
  // Logit bias or a penalty is set: the logits are adjusted (in a copy) before anything else.
  bool adjusts_logits() const;
  // Applies bias and penalties to a copy of the logits, in work_.
  void prepare(std::span<const float> logits);
  // The candidates left after temperature/top-k/top-p/min-p, with their unnormalised weights.
  void truncate();
  // truncate(), then a seeded draw among the candidates (work_ prepared).
  int32_t draw_truncated();

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int> generated_counts_;
  std::unordered_set<int32_t> seen_;  // prompt + generated, for the repetition penalty
  std::vector<float> work_;           // [V] adjusted logits
  std::vector<int32_t> candidates_;   // ids surviving truncation, best first
  std::vector<double> weights_;       // exp((logit - max) / T) per candidate
};

// log_softmax of `logits` at `id`, and the `n` best (id, logprob) pairs, best first (ties: lower id).
float token_logprob(std::span<const float> logits, int32_t id);
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int n);

}  // namespace kapitsa::runtime
