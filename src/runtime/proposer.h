// Proposer: guesses the next tokens of a sequence for speculative decoding. The engine folds the
// guesses into the sequence's state in one forward step (checkpointing the recurrent state after each)
// and keeps the longest prefix the model itself chooses, plus the model's own next token; so output
// is exactly what decoding without proposals gives. A proposer only affects speed.
// NgramProposer ("prompt lookup"): the tokens that followed the most recent earlier occurrence of the
// sequence's last n tokens (longest n first) — agents re-emit code they just read.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace kapitsa::runtime {

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual std::string_view name() const = 0;
  // Up to max_tokens guesses of what follows `tokens` (the prompt and every emitted token) into `out`
  // (cleared first; empty: no guess). Called on the engine thread.
  virtual void propose(std::span<const int32_t> tokens, int max_tokens, std::vector<int32_t>& out) = 0;
};

class NgramProposer final : public Proposer {
 public:
  // Suffixes of max_ngram down to min_ngram tokens are looked up (both >= 1).
  explicit NgramProposer(int min_ngram = 2, int max_ngram = 5);
  std::string_view name() const override { return "ngram"; }
  void propose(std::span<const int32_t> tokens, int max_tokens, std::vector<int32_t>& out) override;

 private:
  int min_ngram_, max_ngram_;
};

}  // namespace kapitsa::runtime
