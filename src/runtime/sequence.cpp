// Sequence setup, the next-token choice and the closing event (see sequence.h).
#include "runtime/sequence.h"

#include "models/state_slots.h"

#include <algorithm>

namespace kapitsa::runtime {

std::unique_ptr<Sequence> make_sequence(uint64_t id, GenerateRequest request, std::shared_ptr<Channel> channel,
                                        uint64_t seed, const SequenceSetup& setup) {
  auto seq = std::make_unique<Sequence>(std::move(request), seed, setup.tokenizer.get());
  seq->id = id;
  seq->channel = std::move(channel);
  seq->tokens = seq->request.prompt_ids;
  seq->prompt_len = seq->tokens.size();
  seq->max_new = seq->request.max_tokens;
  seq->submitted = Clock::now();
  seq->stats.prompt_tokens = static_cast<int>(seq->prompt_len);
  seq->sampler.add_prompt(seq->tokens);
  if (seq->request.grammar) {
    std::vector<int32_t> end_ids = seq->request.stop_token_ids;
    if (!seq->request.ignore_eos) end_ids.insert(end_ids.end(), setup.eos_token_ids.begin(), setup.eos_token_ids.end());
    seq->constraint = std::make_unique<GrammarConstraint>(seq->request.grammar, token_vocabulary(setup.tokenizer),
                                                          std::move(end_ids), setup.vocab_size);
  }
  // Snapshot points: the turn boundary, and every N tokens of a long prompt.
  if (seq->request.turn_boundary && *seq->request.turn_boundary > 0)
    seq->boundaries.push_back(static_cast<int64_t>(*seq->request.turn_boundary));
  const int64_t every = setup.snapshot_interval_tokens;
  if (every > 0)
    for (int64_t p = every; p < static_cast<int64_t>(seq->prompt_len); p += every) seq->boundaries.push_back(p);
  std::sort(seq->boundaries.begin(), seq->boundaries.end());
  return seq;
}

CheckpointSlots::~CheckpointSlots() {
  for (int32_t slot : ids_) pool_->release(slot);
}

void CheckpointSlots::reserve(models::StateSlotPool& pool, size_t n) {
  KAPITSA_CHECK(pool_ == nullptr || pool_ == &pool, "checkpoint slots from two state slot pools");
  pool_ = &pool;
  while (ids_.size() < n) ids_.push_back(pool.allocate());
}

namespace {

// The grammar's mask for the next token (empty span: no grammar), or the Ending when nothing is allowed.
std::variant<std::span<const uint8_t>, Ending> grammar_mask(Sequence& seq) {
  if (!seq.constraint) return std::span<const uint8_t>();
  std::span<const uint8_t> allowed = seq.constraint->mask();
  if (allowed.empty()) {  // never emit a token outside the grammar
    if (seq.constraint->complete() && !seq.constraint->has_end_ids()) return Ending{FinishReason::stop, "", ""};
    return Ending{FinishReason::error, "", "grammar: no token can continue the output"};
  }
  return allowed;
}

}  // namespace

std::variant<TokenEvent, Ending> choose_token_against_draft(Sequence& seq, std::span<const float> logits, int32_t guess,
                                                            std::span<const float> q) {
  auto mask = grammar_mask(seq);
  if (const Ending* ending = std::get_if<Ending>(&mask)) return *ending;
  const std::span<const uint8_t> allowed = std::get<std::span<const uint8_t>>(mask);
  std::vector<float> p;
  seq.sampler.distribution(logits, allowed, p);
  const size_t g = static_cast<size_t>(guess);
  TokenEvent event;
  // Accept with min(1, p/q): u·q(g) < p(g) for u uniform in [0, 1).
  if (g < p.size() && q[g] > 0 && seq.sampler.uniform() * static_cast<double>(q[g]) < static_cast<double>(p[g])) {
    event.id = guess;
  } else {
    std::vector<float> residual(p.size());
    double mass = 0;
    for (size_t i = 0; i < p.size(); ++i) mass += residual[i] = std::max(0.0f, p[i] - q[i]);
    // Rounding can leave no mass only when p and q are (nearly) equal: then p itself.
    event.id = seq.sampler.draw(mass > 0 ? std::span<const float>(residual) : std::span<const float>(p));
  }
  if (seq.request.top_logprobs >= 0) {
    event.logprob = token_logprob(logits, event.id);
    if (seq.request.top_logprobs > 0) event.top = top_logprobs(logits, seq.request.top_logprobs);
  }
  return event;
}

std::variant<TokenEvent, Ending> choose_token(Sequence& seq, std::span<const float> logits) {
  auto mask = grammar_mask(seq);
  if (const Ending* ending = std::get_if<Ending>(&mask)) return *ending;
  const std::span<const uint8_t> allowed = std::get<std::span<const uint8_t>>(mask);
  TokenEvent event;
  event.id = seq.sampler.sample(logits, seq.request.top_logprobs, &event, allowed);
  return event;
}

bool chooses_argmax(const Sequence& seq) {
  return seq.sampler.plain_greedy() && !seq.constraint && seq.request.top_logprobs < 0;
}

FinishEvent finish_event(const Sequence& seq, const Ending& ending) {
  FinishEvent f;
  f.reason = ending.reason;
  f.matched_stop = ending.matched;
  f.error = ending.error;
  f.stats = seq.stats;
  f.stats.completion_tokens = static_cast<int>(seq.generated);
  if (seq.generated > 0) {
    f.stats.time_to_first_token_s = std::chrono::duration<double>(seq.first_token - seq.submitted).count();
    const double span = std::chrono::duration<double>(seq.last_token - seq.first_token).count();
    if (seq.generated > 1 && span > 0) f.stats.decode_tokens_per_s = static_cast<double>(seq.generated - 1) / span;
  }
  return f;
}

}  // namespace kapitsa::runtime
