// What a decode step costs with a draft of k guesses, learnt from the engine's own batch-1 steps, and
// the draft length that yields the most tokens per second (docs/speculative-decoding.md, "A draft length
// that knows what a step costs"). Guessing pays only where verifying k + 1 rows (and proposing k guesses)
// costs less than the tokens it yields: on a GPU step bound by launches almost always, on a CPU whose
// step is bound by arithmetic rarely — the acceptance alone cannot tell.
// A draft of k guesses, each kept with probability a (given the ones before were), yields
// 1 + a + … + a^k tokens; the model picks the k in [0, suggested] (suggested: the acceptance-driven
// length of speculation.cpp) with the most of them per second of that length's measured step. A length
// not yet timed is tried; every kRefreshEvery choices a plain step and the suggested length are timed
// again, so the costs follow the machine and the acceptance keeps being measured.
#pragma once

#include <array>
#include <cstdint>

namespace kapitsa::runtime {

class DraftCostModel {
 public:
  static constexpr int kMaxLength = 32;     // --spec-k's bound
  static constexpr int kSamples = 3;        // timed steps of a length before its cost is used
  static constexpr int kRefreshEvery = 64;  // choices between re-timing a plain and a suggested step
  static constexpr int kWindow = 8;         // the recent timings of a length that its cost comes from

  // A batch-1 decode step with a draft of `length` guesses (0: plain) took `seconds`, proposing included.
  void record(int length, double seconds);
  // What a step of `length` guesses costs: the lower quartile of its last kWindow timings (≥ 1 needed).
  // Not a mean: a step that first runs a shape eagerly or captures its CUDA graph takes milliseconds
  // where a replay takes a few hundred microseconds, and a mean held those outliers for dozens of steps
  // — long enough to switch a draft model that pays 1.5x off for the rest of a GPU generation.
  double cost(int length) const;

  // The draft length for the next batch-1 step: in [0, suggested]. `acceptance`: the share of guesses
  // the sequence has kept (decayed), or < 0 before its first draft was judged.
  int choose(double acceptance, int suggested);

  // Whether some timed length in [1, suggested] beats a plain step at `acceptance` (pays(1.0, k): guessing
  // can pay on this machine at all, whatever the sequence's guesses are worth).
  bool pays(double acceptance, int suggested) const { return best(acceptance, suggested) > 0; }

  // Expected tokens of a step whose draft has `length` guesses each kept with probability `acceptance`.
  static double expected_tokens(double acceptance, int length);

 private:
  // The timed length in [0, suggested] with the most expected tokens per second (0: a plain step).
  int best(double acceptance, int suggested) const;

  std::array<std::array<double, kWindow>, kMaxLength + 1> recent_{};  // per length: a ring of step times
  std::array<int, kMaxLength + 1> samples_{};
  int64_t choices_ = 0;
};

}  // namespace kapitsa::runtime
