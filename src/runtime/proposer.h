// Proposer: guesses the next tokens of a sequence for speculative decoding. The engine folds the
// guesses into the sequence's state in one forward step (checkpointing the recurrent state after each)
// and keeps the longest prefix the model itself chooses, plus the model's own next token; so output
// is exactly what decoding without proposals gives (greedy: the same ids; sampling: the same
// distribution). A proposer only affects speed.
// NgramProposer ("prompt lookup"): the tokens that followed the most recent earlier occurrence of the
// sequence's last n tokens (longest n first) — agents re-emit code they just read.
// The draft-model proposer is in runtime/draft_proposer.h, the MTP-head one in runtime/mtp_proposer.h.
#pragma once

#include "base/status.h"
#include "runtime/request.h"

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace kapitsa::models {
class Model;
class SequenceState;
}  // namespace kapitsa::models

namespace kapitsa::runtime {

// One sequence's ask for guesses in an engine step.
struct DraftRequest {
  uint64_t sequence = 0;            // the engine's id of the sequence (stable while it runs)
  std::span<const int32_t> tokens;  // its prompt and every emitted token
  int max_tokens = 0;               // the most guesses wanted
  const SamplingParams* sampling = nullptr;  // how the target chooses (temperature 0: greedy)
  int64_t vocab_size = 0;           // the target's V (rows of q)
  std::vector<int32_t>* out = nullptr;  // the guesses (cleared first; empty: none)
  // [guesses, vocab_size] f32: the probabilities each guess was drawn from, for speculative sampling
  // (accept g with min(1, p(g)/q(g))). Left empty: the guesses are deterministic (a one-hot q), and
  // verification draws from p and keeps a guess iff it draws the same token.
  std::vector<float>* q = nullptr;
  // The sequence's target state (n_past folded tokens: all of `tokens` but the last), for a proposer
  // that runs part of the target on it (the MTP head writes its KV there).
  models::SequenceState* state = nullptr;

  // A sampling target's request: its guesses are draws from q (returned with them), not the argmax.
  bool sampled() const { return sampling != nullptr && sampling->temperature > 0 && q != nullptr; }
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual std::string_view name() const = 0;
  // Up to max_tokens guesses of what follows `tokens` (the prompt and every emitted token) into `out`
  // (cleared first; empty: no guess). Called on the engine thread.
  virtual void propose(std::span<const int32_t> tokens, int max_tokens, std::vector<int32_t>& out) = 0;
  // Every drafting sequence of one engine step at once (a model-based proposer batches its forwards).
  // The default asks propose() for each, with deterministic guesses.
  virtual void propose_batch(std::span<const DraftRequest> requests);
  // The sequence ended: drop whatever is kept for it (a draft model's state). Engine thread.
  virtual void release(uint64_t sequence) {}
  // Engine::create hands over the model the guesses are verified by; error: this proposer cannot serve it.
  virtual Status attach(const models::Model& target) { return ok_status(); }
  // True: after every step the engine passes observe_hidden the target's final-normed hidden rows of
  // the tokens it folded for each sequence (rows [n, H] of positions position0 .. position0 + n - 1;
  // those past the state's n_past at the next proposal were rolled back).
  virtual bool wants_hidden() const { return false; }
  virtual void observe_hidden(uint64_t sequence, int64_t position0, std::span<const float> rows) {}
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
