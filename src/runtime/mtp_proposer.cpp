// MtpProposer: the target's MTP head as a proposer (see mtp_proposer.h).
#include "runtime/mtp_proposer.h"

#include "base/log.h"
#include "ops/memory.h"
#include "runtime/step_executor.h"

#include <algorithm>
#include <limits>
#include <random>

namespace kapitsa::runtime {

// One sequence: the head's KV holds positions [0, filled); `hidden` the target's rows of positions
// [hidden_from, hidden_from + rows) as the engine handed them over (rows past the state's n_past were
// rolled back and are dropped at the next proposal).
struct MtpProposer::Entry {
  int64_t filled = 0;
  int64_t hidden_from = 0;
  std::vector<float> hidden;  // [rows, H]
  std::unique_ptr<Sampler> sampler;
};

MtpProposer::MtpProposer(Options options)
    : options_(options), next_seed_(options.seed != 0 ? options.seed : std::random_device{}()) {}

MtpProposer::~MtpProposer() = default;

Status MtpProposer::attach(const models::Model& target) {
  if (target.info().mtp_layers > 0) {
    target_ = &target;
    fallback_.reset();
    return ok_status();
  }
  if (!options_.or_ngram)
    return error("--spec mtp: {} has no multi-token-prediction head (no mtp.* tensors in the checkpoint)",
                 target.info().model_type);
  fallback_ = std::make_unique<NgramProposer>();
  return ok_status();
}

int64_t MtpProposer::head_rows() const {
  std::lock_guard lock(mu_);
  return head_rows_;
}

void MtpProposer::release(uint64_t sequence) {
  std::lock_guard lock(mu_);
  entries_.erase(sequence);
}

void MtpProposer::propose(std::span<const int32_t> tokens, int max_tokens, std::vector<int32_t>& out) {
  if (fallback_) return fallback_->propose(tokens, max_tokens, out);
  out.clear();
}

void MtpProposer::observe_hidden(uint64_t sequence, int64_t position0, std::span<const float> rows) {
  if (target_ == nullptr || rows.empty()) return;
  const size_t H = static_cast<size_t>(target_->info().hidden_size);
  std::lock_guard lock(mu_);
  std::unique_ptr<Entry>& slot = entries_[sequence];
  if (!slot) {
    slot = std::make_unique<Entry>();
    // First seen past position 0 (a prefix-cache resume): the head's KV before it is the snapshot's.
    slot->filled = slot->hidden_from = position0;
  }
  Entry& e = *slot;
  const int64_t held = static_cast<int64_t>(e.hidden.size() / H);
  if (position0 < e.hidden_from || position0 > e.hidden_from + held) {
    // Folded again from earlier (a preempted sequence recomputed) or after a gap: start there.
    e.filled = std::min(e.filled, position0);
    e.hidden_from = position0;
    e.hidden.clear();
  } else {
    e.hidden.resize(static_cast<size_t>(position0 - e.hidden_from) * H);  // drop rolled-back rows
  }
  e.hidden.insert(e.hidden.end(), rows.begin(), rows.end());
}

// The guess after one row of head logits (a sampling target's request: the head step brought back its
// logits, the greedy one's only their argmax): a draw from q, whose row is appended to r.q.
int32_t MtpProposer::choose(Entry& e, const DraftRequest& r, std::span<const float> logits) {
  if (!e.sampler) {
    // The request's truncation and bias; penalties track no history here (q need not match p for
    // speculative sampling to be exact; the closer, the more is accepted).
    SamplingParams params = *r.sampling;
    const uint64_t seed = params.seed ? *params.seed ^ 0x5bd1e9955bd1e995ull : next_seed_++;
    params.seed.reset();
    e.sampler = std::make_unique<Sampler>(params, seed);
  }
  std::vector<float> q;
  e.sampler->distribution(logits, {}, q);
  r.q->insert(r.q->end(), q.begin(), q.end());
  return e.sampler->draw(q);
}

void MtpProposer::propose_batch(std::span<const DraftRequest> requests) {
  if (fallback_) return fallback_->propose_batch(requests);
  std::lock_guard lock(mu_);
  KAPITSA_CHECK(target_ != nullptr, "MtpProposer used before Engine::create attached it to a model");
  const int64_t H = target_->info().hidden_size, V = target_->info().vocab_size;
  // Per drafting sequence: its request, entry, and the rows of the current head step.
  struct Active {
    const DraftRequest* r;
    Entry* e;
    std::vector<int32_t> ids;
    int64_t position0;
    const float* hidden;
  };
  std::vector<Active> active;
  for (const DraftRequest& r : requests) {
    r.out->clear();
    if (r.q != nullptr) r.q->clear();
    auto it = entries_.find(r.sequence);
    if (r.state == nullptr || r.max_tokens <= 0 || it == entries_.end()) continue;
    Entry& e = *it->second;
    const int64_t n = r.state->n_past();
    // The newest token (tokens[n]) is not folded yet: it is the first head row's input token.
    if (static_cast<int64_t>(r.tokens.size()) != n + 1) continue;
    const int64_t held = std::min<int64_t>(static_cast<int64_t>(e.hidden.size()) / H, n - e.hidden_from);
    e.hidden.resize(static_cast<size_t>(std::max<int64_t>(held, 0) * H));
    e.filled = std::min(e.filled, n);
    // Catch-up rows: positions [filled, n), token p+1 with the hidden row of p.
    if (e.filled < e.hidden_from || e.hidden_from + held < n || e.filled >= n) continue;
    Active a{&r, &e, {r.tokens.begin() + e.filled + 1, r.tokens.begin() + n + 1}, e.filled,
             e.hidden.data() + (e.filled - e.hidden_from) * H};
    active.push_back(std::move(a));
  }
  std::vector<models::Model::MtpRows> rows;
  // Rows of every head step (page-locked for a model on a GPU: each step copies them back).
  const int64_t most = static_cast<int64_t>(active.size());
  if (most == 0) return;
  if (logits_.tensor().empty() || logits_.tensor().dim(0) < most || logits_.tensor().dim(1) != V) {
    logits_ = ops::allocate_host_for(target_->device(), DType::f32, {most, V}, "the MTP head's logits");
    out_hidden_ = ops::allocate_host_for(target_->device(), DType::f32, {most, H}, "the MTP head's hidden rows");
    argmax_ = ops::allocate_host_for(target_->device(), DType::i32, {most, 1}, "the MTP head's argmaxes");
  }
  const Buffer& logits = logits_;
  const Buffer& out_hidden = out_hidden_;
  std::vector<float> carried;  // [next sequences, H]: the head's output rows the next step reads
  for (int step = 0; !active.empty(); ++step) {
    const int64_t m = static_cast<int64_t>(active.size());
    rows.clear();
    for (int64_t i = 0; i < m; ++i) {
      Active& a = active[static_cast<size_t>(i)];
      const int64_t n_rows = static_cast<int64_t>(a.ids.size());
      const bool by_argmax = !a.r->sampled();
      rows.push_back({a.r->state, a.position0, a.ids, Tensor(DType::f32, {n_rows, H}, const_cast<float*>(a.hidden)),
                      by_argmax ? Tensor() : logits.tensor().rows(i, i + 1), out_hidden.tensor().rows(i, i + 1),
                      by_argmax ? argmax_.tensor().rows(i, i + 1) : Tensor()});
      head_rows_ += n_rows;
    }
    if (Status s = run_mtp_forward(*target_, rows); !s.ok()) {
      // E.g. no free KV page ahead: the guesses made so far stand (each has its q row).
      log::debug("mtp proposer: {}", s.error().message);
      return;
    }
    std::vector<Active> next;
    for (int64_t i = 0; i < m; ++i) {
      Active& a = active[static_cast<size_t>(i)];
      if (step == 0) {
        // The head has now seen every folded position; keep only the rows it has not.
        a.e->filled = a.r->state->n_past();
        const int64_t drop = a.e->filled - a.e->hidden_from;
        a.e->hidden.erase(a.e->hidden.begin(), a.e->hidden.begin() + drop * H);
        a.e->hidden_from = a.e->filled;
      }
      const int32_t guess = a.r->sampled() ? choose(*a.e, *a.r, std::span<const float>(logits.f32() + i * V, static_cast<size_t>(V)))
                                          : argmax_.tensor().data_as<const int32_t>()[i];
      a.r->out->push_back(guess);
      if (static_cast<int>(a.r->out->size()) < a.r->max_tokens) {
        // Next row: the guess with the head's own output, one position on.
        a.position0 += static_cast<int64_t>(a.ids.size());
        a.ids.assign(1, guess);
        a.hidden = out_hidden.f32() + i * H;  // copied into `carried` below
        next.push_back(std::move(a));
      }
    }
    // out_hidden is overwritten by the next step: its rows move to `carried` first.
    std::vector<float> fresh(next.size() * static_cast<size_t>(H));
    for (size_t j = 0; j < next.size(); ++j)
      std::copy(next[j].hidden, next[j].hidden + H, fresh.begin() + static_cast<std::ptrdiff_t>(j * static_cast<size_t>(H)));
    carried.swap(fresh);
    for (size_t j = 0; j < next.size(); ++j) next[j].hidden = carried.data() + j * static_cast<size_t>(H);
    active.swap(next);
  }
}

}  // namespace kapitsa::runtime
