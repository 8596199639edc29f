// Speculative decoding in the engine step: before the forward, a decoding sequence gets a draft (the
// proposer's guesses, bounded by its state's room and its token budget); after it, the draft is
// verified row by row exactly as plain decoding would choose — token j is chosen from the logits after
// draft token j-1 with the sampler, penalties and grammar advanced over the tokens kept so far, and
// emitted; the run stops at the first choice that differs from the draft (that choice is kept: the
// model's own token) or at a stop. So greedy output is identical to decoding without a draft, and with
// a deterministic proposer sampling is too: sampling t ~ p and keeping it iff t equals the guess is
// speculative sampling's accept-with-min(1, p/q) rule for a one-hot q, and the rejected case samples
// from p without the guess. A proposer that drew its guesses from a distribution q (a draft model at
// temperature > 0) gets the general rule: keep guess g with probability min(1, p(g)/q(g)), otherwise
// draw from max(0, p − q) normalised — the kept tokens are distributed as plain sampling's. The state then rolls back to the checkpoint after the last kept token
// but one (the newest token is folded next step, as in plain decoding).
#pragma once

#include "runtime/draft_cost.h"
#include "runtime/proposer.h"
#include "runtime/sequence.h"
#include "runtime/step_executor.h"
#include "runtime/token_emitter.h"

#include <optional>
#include <span>
#include <vector>

namespace kapitsa::runtime {

// Sets each sequence's draft (seq.draft, and seq.draft_q when the proposer drew its guesses at random;
// empty: decode plainly) in one call of the proposer, and reserves their checkpoint slots. Only for
// sequences whose next step folds their one newest token and samples. The draft length adapts per
// sequence: up by one after a draft that was accepted whole, down to (accepted + 1) after one that was
// not; after kMissesBeforePause drafts in a row with nothing accepted, no guesses for kPauseSteps steps
// (wrong guesses cost extra rows in the step).
inline constexpr int kMissesBeforePause = 4;
inline constexpr int kPauseSteps = 16;
// The cost model gets a sequence's acceptance only once this many guesses were judged (decayed count);
// before, it drafts the suggested length. And a step the cost model keeps plain where right guesses
// would pay (DraftCostModel::pays at acceptance 1) decays the judged and kept counts by kUnjudgedDecay:
// what is not looked at goes stale, so a sequence probes again (after 3 plain steps from 5 judged
// guesses, 19 from 30); where guessing cannot pay (a CPU bound by arithmetic) nothing is probed. Without either, one refused first guess (a new
// sequence's first draft, right after its prompt) or a poor start read as a settled acceptance and kept
// the sequence plain until the cost model's next refresh, ~50 steps: a warm GPU engine's second
// request drafted 87 guesses where the first drafted 118 (session 33).
inline constexpr double kJudgedBeforeKnown = 4;
inline constexpr double kUnjudgedDecay = 0.9;
// cost (optional, for a step of one sequence): shortens the draft to the length with the most expected
// tokens per second, or to none (runtime/draft_cost.h). pad: a deterministic draft is filled up to
// max_tokens (bounded by room and budget) with its last guess repeated (seq.draft_fillers of them), so
// that every verification has one shape (EngineOptions::spec_pad_drafts). max_guesses (≥ 0): the most
// guesses of all drafts together (rows a padded draft fills count), handed out in sequence order; the
// engine keeps a step within the model's batch-invariant rows with it (Model::invariant_rows).
inline constexpr int64_t kAnyGuesses = -1;
void propose_drafts(std::span<Sequence* const> seqs, Proposer& proposer, int max_tokens, int64_t vocab_size,
                    DraftCostModel* cost = nullptr, bool pad = false, int64_t max_guesses = kAnyGuesses);

struct Verified {
  Emission emission;       // the kept tokens (at least one unless the generation ended), and the ending
  size_t proposed = 0;     // the proposer's guesses verified (and any engine filler that was kept)
  size_t accepted = 0;     // of them, kept
  int64_t extra_folded = 0;  // tokens the state keeps beyond the scheduled one (the scheduler advances them)
};

// After the step: chooses and emits the run for work item `item` of `executor` and rolls seq's state
// back to what it keeps; adapts the next draft's length (at most max_tokens). Clears seq.draft.
Verified verify_draft(Sequence& seq, const StepExecutor& executor, size_t item, const TokenEmitter& emitter,
                      int max_tokens);

}  // namespace kapitsa::runtime
