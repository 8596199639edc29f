// DraftModelProposer: guesses from a small draft model, its states kept in step by rollback (see
// draft_proposer.h).
#include "runtime/draft_proposer.h"

#include "base/log.h"
#include "ops/memory.h"
#include "runtime/step_executor.h"

#include <algorithm>
#include <limits>
#include <random>

namespace kapitsa::runtime {

// One sequence's draft state: tokens[0, folded.size()) are folded into `state`; checkpoint slot i
// (i < n_checkpoints) holds the recurrent state after checkpoint_from + i tokens.
struct DraftModelProposer::Entry {
  std::unique_ptr<models::SequenceState> state;
  std::vector<int32_t> folded;
  std::vector<int32_t> slots;  // owned slots of state->slot_pool()
  int64_t checkpoint_from = 0;
  size_t n_checkpoints = 0;
  std::unique_ptr<Sampler> sampler;  // sampled drafts: q and the draws

  ~Entry() {
    if (state && state->slot_pool() != nullptr)
      for (int32_t s : slots) state->slot_pool()->release(s);
  }
};

// A sequence drafting in this call: what it folds in the next step, and how many guesses it still wants.
struct DraftModelProposer::Active {
  const DraftRequest* request = nullptr;
  Entry* entry = nullptr;
  int k = 0;
  std::vector<int32_t> pending;
};

DraftModelProposer::DraftModelProposer(std::unique_ptr<models::Model> draft, Options options)
    : model_(std::move(draft)), options_(options), next_seed_(options.seed != 0 ? options.seed : std::random_device{}()) {
  KAPITSA_CHECK(model_ != nullptr, "DraftModelProposer: no draft model");
  models::KvLayout layout = model_->kv_layout();
  layout.dtype = options_.kv_dtype;
  pool_ = std::make_shared<models::KvPagePool>(layout, std::max<int64_t>(options_.kv_page_tokens, 1), 0);
  if (options_.prefix_cache_bytes > 0) cache_ = std::make_unique<PrefixCache>(options_.prefix_cache_bytes);
}

DraftModelProposer::~DraftModelProposer() = default;

int64_t DraftModelProposer::folded_tokens() const {
  std::lock_guard lock(mu_);
  return folded_;
}

int64_t DraftModelProposer::rebuilds() const {
  std::lock_guard lock(mu_);
  return rebuilds_;
}

int64_t DraftModelProposer::cached_tokens() const {
  std::lock_guard lock(mu_);
  return cached_;
}

void DraftModelProposer::release(uint64_t sequence) {
  std::lock_guard lock(mu_);
  entries_.erase(sequence);
  if (cache_) cache_->trim();  // pages the sequence shared with snapshots are the cache's alone now
}

// A state for a sequence starting at `tokens`: a copy of the deepest cached snapshot on their path (at
// most all but the last token), whose tokens go to `folded`; else an empty one.
std::unique_ptr<models::SequenceState> DraftModelProposer::new_state(std::span<const int32_t> tokens,
                                                                     std::vector<int32_t>& folded) {
  folded.clear();
  if (cache_) {
    const PrefixCache::Hit hit = cache_->lookup(tokens, static_cast<int64_t>(tokens.size()) - 1, options_.context_tokens);
    if (hit.snapshot != nullptr) {
      folded.assign(tokens.begin(), tokens.begin() + hit.tokens);
      cached_ += hit.tokens;
      return hit.snapshot->clone();
    }
  }
  return model_->new_state(options_.context_tokens, pool_);
}

void DraftModelProposer::propose(std::span<const int32_t> tokens, int max_tokens, std::vector<int32_t>& out) {
  // A private id: a fresh state each time (released below), greedy.
  constexpr uint64_t kOneOff = std::numeric_limits<uint64_t>::max();
  DraftRequest r;
  r.sequence = kOneOff;
  r.tokens = tokens;
  r.max_tokens = max_tokens;
  r.vocab_size = model_->info().vocab_size;
  r.out = &out;
  propose_batch(std::span<const DraftRequest>(&r, 1));
  release(kOneOff);
}

Status DraftModelProposer::attach(const models::Model&) {
  if (model_->device() == Device::cpu) return ok_status();
  const int64_t folded = folded_;
  std::vector<int32_t> guesses;
  for (size_t n : {17, 2}) propose(std::vector<int32_t>(n, 0), 2, guesses);  // a prompt's rows; a step's 2 and 1
  std::lock_guard lock(mu_);
  folded_ = folded;  // the counters tell of requests only
  return ok_status();
}

// Brings the entry to the longest prefix of r.tokens it has folded (at most all but the last token:
// the last is folded by the first draft step, which needs its logits); `pending` gets the rest.
DraftModelProposer::Entry& DraftModelProposer::sync(const DraftRequest& r, std::vector<int32_t>& pending) {
  std::unique_ptr<Entry>& slot = entries_[r.sequence];
  if (!slot) slot = std::make_unique<Entry>();
  Entry& e = *slot;
  if (!e.state) e.state = new_state(r.tokens, e.folded);
  const size_t limit = std::min(e.folded.size(), r.tokens.size() - 1);
  size_t c = static_cast<size_t>(std::mismatch(e.folded.begin(), e.folded.begin() + static_cast<std::ptrdiff_t>(limit),
                                               r.tokens.begin()).first - e.folded.begin());
  if (c < e.folded.size()) {
    const int64_t at = static_cast<int64_t>(c);
    if (e.state->slot_pool() == nullptr) {
      int32_t none = -1;  // attention only: truncating the KV is the whole rollback
      e.state->rollback(at, none);
    } else if (at >= e.checkpoint_from && at < e.checkpoint_from + static_cast<int64_t>(e.n_checkpoints)) {
      int32_t& checkpoint = e.slots[static_cast<size_t>(at - e.checkpoint_from)];
      e.state->rollback(at, checkpoint);  // swaps slot ids: `checkpoint` now names the discarded state
    } else {
      // Diverged before every checkpoint (not in the engine's use: it only appends): start over.
      if (e.state->slot_pool() != nullptr)
        for (int32_t s : e.slots) e.state->slot_pool()->release(s);
      e.slots.clear();
      e.state = new_state(r.tokens, e.folded);
      c = e.folded.size();
      ++rebuilds_;
    }
    e.folded.resize(c);
  }
  e.n_checkpoints = 0;
  pending.assign(r.tokens.begin() + static_cast<std::ptrdiff_t>(c), r.tokens.end());
  return e;
}

// A long catch-up (the prompt, at the first proposal) is folded in chunks without logits, leaving at
// most prefill_chunk_tokens for the first draft step; with a prefix cache, a catch-up of at least
// kSnapshotMinTokens leaves only its last token, and the state before it becomes a snapshot. False
// when the forward failed.
bool DraftModelProposer::fold_long_catch_up(Entry& e, std::vector<int32_t>& pending) {
  const size_t chunk = static_cast<size_t>(std::max<int64_t>(options_.prefill_chunk_tokens, 1));
  const bool snapshot = cache_ && static_cast<int64_t>(pending.size()) > kSnapshotMinTokens;
  const size_t leave = snapshot ? 1 : chunk;
  size_t at = 0;
  while (pending.size() - at > leave) {
    const size_t n = std::min(chunk, pending.size() - at - leave);
    const models::ForwardBatch::Sequence seq{std::span<const int32_t>(pending).subspan(at, n), e.state.get()};
    if (Status s = run_forward(*model_, models::ForwardBatch{std::span(&seq, 1)}, models::ForwardOutputs{}); !s.ok()) {
      log::warn("draft model: {}", s.error().message);
      return false;
    }
    e.folded.insert(e.folded.end(), pending.begin() + static_cast<std::ptrdiff_t>(at),
                    pending.begin() + static_cast<std::ptrdiff_t>(at + n));
    folded_ += static_cast<int64_t>(n);
    at += n;
  }
  pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(at));
  if (snapshot && !cache_->contains(e.folded)) cache_->insert(e.folded, e.state->clone());
  return true;
}

// The guess after one row of draft logits: the argmax, or (sampling target) a draw from q, whose row
// is appended to r.q.
int32_t DraftModelProposer::choose(Entry& e, const DraftRequest& r, std::span<const float> logits) {
  // The draft's vocabulary may be padded differently: ids the target lacks are never guessed.
  const size_t V = static_cast<size_t>(r.vocab_size), common = std::min(V, logits.size());
  if (!r.sampled()) return argmax(logits.first(common));
  row_.assign(V, -std::numeric_limits<float>::infinity());
  std::copy(logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(common), row_.begin());
  if (!e.sampler) {
    // The request's truncation and bias; penalties track no history here (q need not match p for
    // speculative sampling to be exact; the closer, the more is accepted).
    SamplingParams params = *r.sampling;
    const uint64_t seed = params.seed ? *params.seed ^ 0x9e3779b97f4a7c15ull : next_seed_++;
    params.seed.reset();
    e.sampler = std::make_unique<Sampler>(params, seed);
  }
  const size_t at = r.q->size();
  r.q->resize(at + V);
  std::vector<float> q(V);
  e.sampler->distribution(row_, {}, q);
  std::copy(q.begin(), q.end(), r.q->begin() + static_cast<std::ptrdiff_t>(at));
  return e.sampler->draw(q);
}

// Every active sequence greedy with the same k (≥ 2): its k guesses from one chain. False (nothing
// changed) when they are not, or the model cannot chain: the caller then takes a step at a time.
bool DraftModelProposer::propose_chained(std::vector<Active>& active) {
  const int k = active.front().k;
  const int64_t V = active.front().request->vocab_size;
  if (k < 2) return false;
  for (const Active& a : active) {
    if (a.request->sampled() || a.k != k || a.request->vocab_size != V) return false;
  }
  const size_t n = active.size();
  const bool checkpoints = active.front().entry->state->slot_pool() != nullptr;
  std::vector<models::ForwardBatch::Sequence> seqs;
  std::vector<std::span<const int32_t>> slots;
  for (Active& a : active) {
    Entry& e = *a.entry;
    seqs.push_back({a.pending, e.state.get()});
    if (!checkpoints) continue;
    while (e.slots.size() + 1 < static_cast<size_t>(k)) e.slots.push_back(e.state->slot_pool()->allocate());
    slots.push_back(std::span<const int32_t>(e.slots).first(static_cast<size_t>(k) - 1));
  }
  std::vector<int32_t> guesses(n * static_cast<size_t>(k));
  // The draft's vocabulary may be padded differently: ids the target lacks are never guessed.
  const int64_t columns = std::min(V, model_->info().vocab_size);
  if (Status s = run_greedy_chain(*model_, models::ForwardBatch{seqs}, k, columns, slots, guesses); !s.ok()) {
    log::debug("draft model: no chain ({}); a step at a time", s.error().message);
    return false;
  }
  for (size_t i = 0; i < n; ++i) {
    Active& a = active[i];
    Entry& e = *a.entry;
    const auto first = guesses.begin() + static_cast<std::ptrdiff_t>(i) * k;
    e.checkpoint_from = static_cast<int64_t>(a.request->tokens.size());
    e.n_checkpoints = checkpoints ? static_cast<size_t>(k) - 1 : 0;
    e.folded.insert(e.folded.end(), a.pending.begin(), a.pending.end());
    e.folded.insert(e.folded.end(), first, first + k - 1);
    folded_ += static_cast<int64_t>(a.pending.size()) + k - 1;
    a.request->out->assign(first, first + k);
  }
  return true;
}

void DraftModelProposer::propose_batch(std::span<const DraftRequest> requests) {
  std::lock_guard lock(mu_);
  std::vector<Active> active;
  for (const DraftRequest& r : requests) {
    r.out->clear();
    if (r.q != nullptr) r.q->clear();
    const int64_t room = options_.context_tokens - static_cast<int64_t>(r.tokens.size()) + 1;
    const int k = static_cast<int>(std::min<int64_t>(r.max_tokens, room));
    if (k <= 0 || r.tokens.empty()) continue;
    Active a{&r, nullptr, k, {}};
    a.entry = &sync(r, a.pending);
    if (!fold_long_catch_up(*a.entry, a.pending)) {
      entries_.erase(r.sequence);
      continue;
    }
    active.push_back(std::move(a));
  }
  if (active.empty() || propose_chained(active)) return;
  const int64_t Vd = model_->info().vocab_size;
  std::vector<models::ForwardBatch::Sequence> seqs;
  std::vector<models::ForwardOutputs::Rows> rows;
  std::vector<models::ForwardOutputs::Checkpoints> checkpoints;
  std::vector<int32_t> last_rows;
  for (int step = 0; !active.empty(); ++step) {
    // Step s folds each sequence's pending tokens (its catch-up, then its newest guess) and gives the
    // logits of guess s+1; all but the last step checkpoint the state (a rollback target).
    seqs.clear();
    rows.clear();
    checkpoints.clear();
    last_rows.clear();
    for (Active& a : active) {
      Entry& e = *a.entry;
      if (step == 0) e.checkpoint_from = static_cast<int64_t>(a.request->tokens.size());
      last_rows.push_back(static_cast<int32_t>(a.pending.size()) - 1);
      if (step + 1 < a.k && e.state->slot_pool() != nullptr) {
        while (e.slots.size() <= static_cast<size_t>(step)) e.slots.push_back(e.state->slot_pool()->allocate());
      }
    }
    if (logits_.tensor().empty() || logits_.tensor().dim(0) < static_cast<int64_t>(active.size()))
      logits_ = ops::allocate_host_for(model_->device(), DType::f32, {static_cast<int64_t>(active.size()), Vd},
                                       "the draft model's logits");
    for (size_t i = 0; i < active.size(); ++i) {
      Active& a = active[i];
      seqs.push_back({a.pending, a.entry->state.get()});
      rows.push_back({i, std::span<const int32_t>(&last_rows[i], 1), logits_.tensor().rows(static_cast<int64_t>(i), static_cast<int64_t>(i) + 1)});
      if (step + 1 < a.k && a.entry->state->slot_pool() != nullptr)
        checkpoints.push_back({i, std::span<const int32_t>(a.entry->slots).subspan(static_cast<size_t>(step), 1)});
    }
    models::ForwardOutputs outputs;
    outputs.logits = rows;
    outputs.checkpoints = checkpoints;
    if (Status s = run_forward(*model_, models::ForwardBatch{seqs}, outputs); !s.ok()) {
      // Nothing was folded; no guesses this step, and the states start over next time.
      log::warn("draft model: {}", s.error().message);
      for (Active& a : active) {
        a.request->out->clear();
        if (a.request->q != nullptr) a.request->q->clear();
        entries_.erase(a.request->sequence);
      }
      return;
    }
    std::vector<Active> next;
    for (size_t i = 0; i < active.size(); ++i) {
      Active& a = active[i];
      Entry& e = *a.entry;
      e.folded.insert(e.folded.end(), a.pending.begin(), a.pending.end());
      folded_ += static_cast<int64_t>(a.pending.size());
      if (step + 1 < a.k && e.state->slot_pool() != nullptr) e.n_checkpoints = static_cast<size_t>(step) + 1;
      const int32_t guess = choose(e, *a.request, std::span<const float>(logits_.f32() + i * static_cast<size_t>(Vd), static_cast<size_t>(Vd)));
      a.request->out->push_back(guess);
      if (step + 1 < a.k) {
        a.pending.assign(1, guess);
        next.push_back(std::move(a));
      }
    }
    active.swap(next);
  }
}

}  // namespace kapitsa::runtime
