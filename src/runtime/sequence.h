// Sequence: one generation as the engine thread sees it — the request, its token ids (prompt, then
// every emitted token), its model state, sampler, text stream and grammar, and its timings; plus the
// choice of its next token from a row of logits. Engine thread only; nothing here is thread-safe.
// Invariant: tokens[0, state->n_past()) are folded into `state` (when it has one).
#pragma once

#include "models/model.h"
#include "runtime/constrained.h"
#include "runtime/generation.h"
#include "runtime/request.h"
#include "runtime/sampler.h"
#include "runtime/text_stream.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace kapitsa::text {
class Tokenizer;
}

namespace kapitsa::runtime {

using Clock = std::chrono::steady_clock;

// Scratch slots of the model's state slot pool that receive a sequence's per-token recurrent-state
// checkpoints while its guesses are verified (speculative decoding). Kept between steps (a fresh slot
// is zeroed, which costs a whole state's bytes); returned to the pool with the sequence.
class CheckpointSlots {
 public:
  CheckpointSlots() = default;
  CheckpointSlots(const CheckpointSlots&) = delete;
  CheckpointSlots& operator=(const CheckpointSlots&) = delete;
  ~CheckpointSlots();
  // At least n slots of `pool` (a sequence's states all come from one pool).
  void reserve(models::StateSlotPool& pool, size_t n);
  std::vector<int32_t>& ids() { return ids_; }

 private:
  models::StateSlotPool* pool_ = nullptr;
  std::vector<int32_t> ids_;
};

struct Sequence {
  uint64_t id = 0;
  GenerateRequest request;
  std::shared_ptr<Channel> channel;
  std::vector<int32_t> tokens;  // prompt, then every emitted token
  size_t prompt_len = 0;
  int64_t max_new = 0;
  int64_t generated = 0;
  std::unique_ptr<models::SequenceState> state;
  Sampler sampler;
  TextStream text;
  std::unique_ptr<GrammarConstraint> constraint;  // request.grammar: masks every sample
  std::vector<int64_t> boundaries;                // snapshot positions in the prompt, ascending
  std::vector<int32_t> draft;                     // this step's guesses of the tokens after `tokens`
  std::vector<float> draft_q;                     // [draft.size(), V] what they were drawn from; empty: deterministic
  CheckpointSlots checkpoints;                    // draft.size() + 1 of them while it has a draft
  size_t draft_fillers = 0;  // guesses at the draft's end that the engine added (spec_pad_drafts), not the proposer
  int draft_length = 0;  // guesses to ask for next (adapted to how many were accepted; 0: the most)
  int draft_misses = 0;  // drafts in a row of which nothing was accepted
  int draft_pause = 0;   // steps left without guesses (they did not pay)
  // Guesses judged and kept, decayed (the recent drafts count most): their ratio is the per-guess
  // acceptance the cost-aware draft length uses (runtime/draft_cost.h).
  double guesses_judged = 0, guesses_kept = 0;
  bool admitted_once = false;
  GenerationStats stats;
  Clock::time_point submitted, first_token, last_token;

  Sequence(GenerateRequest r, uint64_t seed, const text::Tokenizer* tokenizer)
      : request(std::move(r)), sampler(request.sampling, seed), text(tokenizer, request.stop_strings) {}
};

using Sequences = std::map<uint64_t, std::unique_ptr<Sequence>>;  // by id

// What a new sequence needs from its engine.
struct SequenceSetup {
  std::shared_ptr<const text::Tokenizer> tokenizer;  // null: ids only (no text, no grammar)
  std::vector<int32_t> eos_token_ids;                // the model's
  int64_t vocab_size = 0;                            // the model's
  int64_t snapshot_interval_tokens = 0;              // 0: no periodic snapshots of long prompts
};

// A sequence for a validated request: prompt ids, sampler primed with the prompt, grammar constraint,
// snapshot boundaries (the turn boundary and every snapshot_interval_tokens of the prompt).
std::unique_ptr<Sequence> make_sequence(uint64_t id, GenerateRequest request, std::shared_ptr<Channel> channel,
                                        uint64_t seed, const SequenceSetup& setup);

// How a generation ends.
struct Ending {
  FinishReason reason = FinishReason::stop;
  std::string matched;  // the stop string or the stop token's text
  std::string error;    // for FinishReason::error
};

// The next token of `seq` drawn from `logits` ([V]) under its grammar's mask, with logprobs when the
// request asked for them (TokenEvent::text empty); an Ending when the grammar allows no token.
std::variant<TokenEvent, Ending> choose_token(Sequence& seq, std::span<const float> logits);

// True when choose_token's choice for `seq` is the argmax of the logits and nothing else is read from
// them (greedy, no bias or penalty, no grammar, no logprobs): the step may bring back only the argmax.
bool chooses_argmax(const Sequence& seq);

// Speculative sampling against a guess drawn from q ([V]): keeps `guess` with probability
// min(1, p(guess)/q(guess)), where p is what choose_token would draw from; otherwise draws from
// max(0, p − q) normalised. Either way the token is distributed as p (Leviathan et al. 2023).
std::variant<TokenEvent, Ending> choose_token_against_draft(Sequence& seq, std::span<const float> logits, int32_t guess,
                                                            std::span<const float> q);

// The FinishEvent closing `seq`: the ending plus its stats.
FinishEvent finish_event(const Sequence& seq, const Ending& ending);

}  // namespace kapitsa::runtime
