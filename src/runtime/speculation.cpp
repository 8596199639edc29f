// Drafts and their verification (see speculation.h).
#include "runtime/speculation.h"

#include "models/state_slots.h"

#include <algorithm>
#include <limits>

namespace kapitsa::runtime {

void propose_drafts(std::span<Sequence* const> seqs, Proposer& proposer, int max_tokens, int64_t vocab_size,
                    DraftCostModel* cost, bool pad, int64_t max_guesses) {
  int64_t guesses_left = max_guesses == kAnyGuesses ? std::numeric_limits<int64_t>::max() : max_guesses;
  std::vector<DraftRequest> requests;
  std::vector<Sequence*> drafting;
  std::vector<int> lengths;  // per drafting sequence: the length a padded draft is filled up to
  for (Sequence* seq : seqs) {
    seq->draft.clear();
    seq->draft_q.clear();
    seq->draft_fillers = 0;
    if (!seq->state || seq->state->slot_pool() == nullptr) continue;
    if (seq->draft_pause > 0) {
      --seq->draft_pause;
      continue;
    }
    // Room: the scheduled token plus the draft fit the state; a draft past the token budget is wasted.
    const int64_t room = seq->state->capacity() - seq->state->n_past() - 1;
    const int64_t budget = seq->max_new - seq->generated - 1;
    const int most = static_cast<int>(std::min<int64_t>({max_tokens, room, budget, guesses_left}));
    const int wanted = seq->draft_length > 0 ? std::min(seq->draft_length, max_tokens) : max_tokens;
    int k = std::min(wanted, most);
    // A padded draft always costs `most` rows: the cost model only decides whether to guess at all.
    if (cost != nullptr && k > 0) {
      const double judged = seq->guesses_judged;
      const int suggested = pad ? most : k;
      k = std::min(k, cost->choose(judged >= kJudgedBeforeKnown ? seq->guesses_kept / judged : -1.0, suggested));
      // Kept plain by its acceptance (right guesses would pay): the acceptance goes stale.
      if (k <= 0 && cost->pays(1.0, suggested)) seq->guesses_judged *= kUnjudgedDecay, seq->guesses_kept *= kUnjudgedDecay;
    }
    if (k <= 0) continue;
    guesses_left -= pad ? most : k;
    requests.push_back({seq->id, seq->tokens, k, &seq->request.sampling, vocab_size, &seq->draft, &seq->draft_q,
                        seq->state.get()});
    drafting.push_back(seq);
    lengths.push_back(most);
  }
  if (requests.empty()) return;
  proposer.propose_batch(requests);
  for (size_t i = 0; i < drafting.size(); ++i) {
    Sequence& seq = *drafting[i];
    const size_t k = static_cast<size_t>(requests[i].max_tokens);
    if (seq.draft.size() > k) seq.draft.resize(k);
    // q goes row for row with the guesses, and only matters when the target samples. Random guesses
    // without their q cannot be verified exactly: then no draft.
    const size_t rows_q = seq.draft.size() * static_cast<size_t>(vocab_size);
    if (seq.request.sampling.temperature <= 0) seq.draft_q.clear();
    else if (!seq.draft_q.empty() && seq.draft_q.size() < rows_q) seq.draft.clear(), seq.draft_q.clear();
    else if (!seq.draft_q.empty()) seq.draft_q.resize(rows_q);
    // Fillers (the last guess again) are deterministic guesses like any other: verification keeps one
    // only where the model chooses it, so output is unchanged. Guesses drawn from a q are not padded.
    if (pad && !seq.draft.empty() && seq.draft_q.empty()) {
      const size_t most = static_cast<size_t>(lengths[i]);
      seq.draft_fillers = most > seq.draft.size() ? most - seq.draft.size() : 0;
      seq.draft.resize(std::max(most, seq.draft.size()), seq.draft.back());
    }
    if (!seq.draft.empty()) seq.checkpoints.reserve(*seq.state->slot_pool(), seq.draft.size() + 1);
  }
}

namespace {

void adapt_draft_length(Sequence& seq, size_t proposed, size_t accepted, int max_tokens) {
  const int current = seq.draft_length > 0 ? seq.draft_length : max_tokens;
  if (accepted == proposed) {
    seq.draft_length = std::min(current + 1, max_tokens);
  } else {
    seq.draft_length = std::max(1, static_cast<int>(accepted) + 1);
  }
  // A guess is judged when it is kept or is the first one refused (those after it are never looked at).
  const double judged = static_cast<double>(accepted) + (accepted < proposed ? 1 : 0);
  seq.guesses_judged = 0.9 * seq.guesses_judged + judged;
  seq.guesses_kept = 0.9 * seq.guesses_kept + static_cast<double>(accepted);
  if (accepted > 0) {
    seq.draft_misses = 0;
  } else if (++seq.draft_misses >= kMissesBeforePause) {
    seq.draft_misses = 0;
    seq.draft_pause = kPauseSteps;
  }
}

}  // namespace

Verified verify_draft(Sequence& seq, const StepExecutor& executor, size_t item, const TokenEmitter& emitter,
                      int max_tokens) {
  const size_t k = seq.draft.size();
  const size_t V = k > 0 ? seq.draft_q.size() / k : 0;
  const int64_t folded_from = seq.state->n_past() - static_cast<int64_t>(k) - 1;  // before the step
  Verified v;
  for (size_t j = 0; j <= k; ++j) {
    const bool against_q = j < k && !seq.draft_q.empty();
    std::variant<TokenEvent, Ending> choice =
        against_q ? choose_token_against_draft(seq, executor.logits(item, j), seq.draft[j],
                                               std::span<const float>(seq.draft_q).subspan(j * V, V))
                  : choose_next(seq, executor, item, j);
    if (const Ending* ending = std::get_if<Ending>(&choice)) {
      v.emission.ending = *ending;
      break;
    }
    const TokenEvent& token = std::get<TokenEvent>(choice);
    Emission one = emitter.emit(seq, std::span<const TokenEvent>(&token, 1));
    KAPITSA_CHECK(!one.events.empty() || one.ending, "token {} was sampled outside the grammar's mask", token.id);
    const bool matches = j < k && token.id == seq.draft[j];
    for (TokenEvent& e : one.events) v.emission.events.push_back(std::move(e));
    if (matches) ++v.accepted;
    if (one.ending) {
      v.emission.ending = std::move(one.ending);
      break;
    }
    if (!matches) break;
  }
  // The state keeps the scheduled token and the kept drafts but the newest kept token (which is folded
  // next step, as in plain decoding): checkpoint `keep` (the last one is the state itself).
  const size_t kept = v.emission.events.size();
  const size_t keep = kept == 0 ? 0 : kept - 1;
  int32_t slot = keep == k ? -1 : seq.checkpoints.ids()[keep];
  seq.state->rollback(folded_from + 1 + static_cast<int64_t>(keep), slot);
  if (slot >= 0) seq.checkpoints.ids()[keep] = slot;  // it now names the discarded state
  v.extra_folded = static_cast<int64_t>(keep);
  // Guesses proposed: the proposer's, and the engine's fillers only where they were kept (a padded
  // draft's rejected fillers would otherwise count as the proposer's misses).
  v.proposed = std::max(k - seq.draft_fillers, v.accepted);
  seq.stats.draft_tokens += static_cast<int>(v.proposed);
  seq.stats.draft_tokens_accepted += static_cast<int>(v.accepted);
  ++seq.stats.draft_steps;
  adapt_draft_length(seq, v.proposed, v.accepted, max_tokens);
  seq.draft.clear();
  seq.draft_q.clear();
  seq.draft_fillers = 0;
  return v;
}

}  // namespace kapitsa::runtime
