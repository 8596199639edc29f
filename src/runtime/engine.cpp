// EngineImpl: the step loop. One background thread owns the model, every sequence, the scheduler and
// the prefix cache; submit() and Generation::cancel() only touch the inbox under its mutex.
// Per step: apply the scheduler's preemptions and admissions (restoring prefix-cache snapshots), run
// every scheduled chunk through Model::forward_batch, snapshot at boundaries, sample, stream events.
// All KV lives in one page pool (snapshots share pages); a step short of pages evicts snapshots, then
// preempts. Replies with end_of_turn_ids leave a queued end-of-turn prefill, run when idle.
#include "runtime/engine.h"

#include "base/log.h"
#include "runtime/constrained.h"
#include "runtime/generation.h"
#include "runtime/prefix_cache.h"
#include "runtime/sampler.h"
#include "runtime/scheduler.h"
#include "runtime/text_stream.h"
#include "text/tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <thread>

namespace kapitsa::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// A finished reply's end-of-turn ids, still to be folded (GenerateRequest::end_of_turn_ids).
struct TailJob {
  std::unique_ptr<models::SequenceState> state;  // after a prefix of `tokens`
  std::vector<int32_t> tokens;                   // the conversation up to the end of the turn
  std::string group;                             // the request's cache_key
};

struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<GenerateRequest, std::shared_ptr<Channel>>> submitted;
  bool stop = false;
  bool cancels = false;  // a Generation asked to stop
  int queued = 0;        // submitted, not yet taken by the engine thread

  void wake_for_cancel() {
    {
      std::lock_guard lock(mu);
      cancels = true;
    }
    cv.notify_all();
  }
};

struct Sequence {
  uint64_t id = 0;
  GenerateRequest request;
  std::shared_ptr<Channel> channel;
  std::vector<int32_t> tokens;  // prompt, then every sampled token
  size_t prompt_len = 0;
  int64_t max_new = 0;
  int64_t generated = 0;
  std::unique_ptr<models::SequenceState> state;
  Sampler sampler;
  TextStream text;
  std::unique_ptr<GrammarConstraint> constraint;  // request.grammar: masks every sample
  std::vector<int64_t> boundaries;  // snapshot positions in the prompt
  bool admitted_once = false;
  GenerationStats stats;
  Clock::time_point submitted, first_token, last_token;

  Sequence(GenerateRequest r, uint64_t seed, const text::Tokenizer* tok)
      : request(std::move(r)), sampler(request.sampling, seed), text(tok, request.stop_strings) {}
};

class EngineImpl final : public Engine {
 public:
  EngineImpl(std::unique_ptr<models::Model> model, std::shared_ptr<const text::Tokenizer> tokenizer,
             const EngineOptions& options)
      : model_(std::move(model)), tokenizer_(std::move(tokenizer)), options_(options),
        cache_(options.prefix_cache_bytes), inbox_(std::make_shared<Inbox>()),
        seeds_(options.seed != 0 ? options.seed : std::random_device{}()) {
    const auto& info = model_->info();
    if (info.max_position_embeddings > 0) options_.context_tokens = std::min(options_.context_tokens, info.max_position_embeddings);
    // Every state's KV lives in one page pool; the scheduler reserves, per running sequence, its own
    // (recurrent) bytes plus the KV of its capacity.
    const models::KvLayout layout = model_->kv_layout();
    const int64_t page_tokens = std::max<int64_t>(options_.kv_page_tokens, 1);
    const size_t page_bytes = std::max<size_t>(layout.bytes_per_token() * static_cast<size_t>(page_tokens), 1);
    const int64_t max_pages =
        options_.kv_pool_bytes == 0 ? 0 : std::max<int64_t>(1, static_cast<int64_t>(options_.kv_pool_bytes / page_bytes));
    pool_ = std::make_shared<models::KvPagePool>(layout, page_tokens, max_pages);
    SchedulerConfig sc;
    sc.max_sequences = std::max(options_.max_sequences, 1);
    sc.prefill_chunk_tokens = std::max<int64_t>(options_.prefill_chunk_tokens, 1);
    sc.memory_budget_bytes = options_.memory_budget_bytes;
    sc.state_bytes_per_token = layout.bytes_per_token();
    sc.state_fixed_bytes = model_->new_state(1, pool_)->own_bytes();
    sc.context_tokens = options_.context_tokens;
    sc.decode_reserve_tokens = std::max<int64_t>(options_.decode_reserve_tokens, 1);
    scheduler_ = std::make_unique<Scheduler>(sc);
    // States that can be resized are cached trimmed to what they hold and grow without recompute.
    resizable_ = model_->new_state(2, pool_)->resized(4) != nullptr;
    thread_ = std::thread([this] { loop(); });
  }

  ~EngineImpl() override {
    {
      std::lock_guard lock(inbox_->mu);
      inbox_->stop = true;
    }
    inbox_->cv.notify_all();
    thread_.join();
    for (auto& [id, seq] : seqs_) seq->channel->push(finish_event(*seq, FinishReason::cancelled, "", "the engine was shut down"));
    for (auto& [request, channel] : inbox_->submitted) {
      FinishEvent f;
      f.reason = FinishReason::cancelled;
      f.error = "the engine was shut down";
      channel->push(std::move(f));
    }
  }

  Expected<std::unique_ptr<Generation>> submit(GenerateRequest request) override {
    KAPITSA_RETURN_IF_ERROR(validate(request));
    request.max_tokens = static_cast<int>(
        std::min<int64_t>(request.max_tokens, options_.context_tokens - static_cast<int64_t>(request.prompt_ids.size())));
    auto channel = std::make_shared<Channel>();
    {
      std::lock_guard lock(inbox_->mu);
      inbox_->submitted.emplace_back(std::move(request), channel);
      ++inbox_->queued;
    }
    inbox_->cv.notify_all();
    std::weak_ptr<Inbox> inbox = inbox_;
    return std::unique_ptr<Generation>(std::make_unique<GenerationImpl>(channel, [inbox] {
      if (auto in = inbox.lock()) in->wake_for_cancel();
    }));
  }

  const models::ModelInfo& model_info() const override { return model_->info(); }
  const text::Tokenizer& tokenizer() const override {
    KAPITSA_CHECK(tokenizer_ != nullptr, "this engine was created without a tokenizer");
    return *tokenizer_;
  }
  bool has_tokenizer() const override { return tokenizer_ != nullptr; }
  const EngineOptions& options() const override { return options_; }
  EngineCounters counters() const override {
    std::lock_guard lock(counters_mu_);
    EngineCounters c = counters_;
    std::lock_guard in(inbox_->mu);
    c.queued += inbox_->queued;
    return c;
  }

 private:
  Status validate(const GenerateRequest& r) const {
    const int64_t V = model_->info().vocab_size, n = static_cast<int64_t>(r.prompt_ids.size());
    if (n == 0) return error("the prompt is empty");
    if (n >= options_.context_tokens)
      return error("prompt is too long: {} tokens > {} maximum (the context holds {} tokens, one is needed for the reply)",
                   n, options_.context_tokens - 1, options_.context_tokens);
    for (int64_t i = 0; i < n; ++i)
      if (r.prompt_ids[static_cast<size_t>(i)] < 0 || r.prompt_ids[static_cast<size_t>(i)] >= V)
        return error("prompt token id {} at index {} is outside the vocabulary [0, {})", r.prompt_ids[static_cast<size_t>(i)], i, V);
    if (r.max_tokens < 1) return error("max_tokens must be at least 1, got {}", r.max_tokens);
    const SamplingParams& s = r.sampling;
    if (!(s.temperature >= 0) || !std::isfinite(s.temperature)) return error("temperature must be >= 0, got {}", s.temperature);
    if (s.top_k < 0) return error("top_k must be >= 0, got {}", s.top_k);
    if (!(s.top_p > 0 && s.top_p <= 1)) return error("top_p must be in (0, 1], got {}", s.top_p);
    if (!(s.min_p >= 0 && s.min_p <= 1)) return error("min_p must be in [0, 1], got {}", s.min_p);
    if (!(s.repetition_penalty > 0) || !std::isfinite(s.repetition_penalty))
      return error("repetition_penalty must be > 0, got {}", s.repetition_penalty);
    if (!std::isfinite(s.presence_penalty) || !std::isfinite(s.frequency_penalty))
      return error("presence_penalty and frequency_penalty must be finite numbers");
    for (const auto& [id, bias] : s.logit_bias)
      if (id < 0 || id >= V) return error("logit_bias names token id {}, outside the vocabulary [0, {})", id, V);
    if (r.top_logprobs > 100) return error("top_logprobs must be at most 100, got {}", r.top_logprobs);
    for (size_t i = 0; i < r.end_of_turn_ids.size(); ++i)
      if (r.end_of_turn_ids[i] < 0 || r.end_of_turn_ids[i] >= V)
        return error("end_of_turn_ids[{}] = {} is outside the vocabulary [0, {})", i, r.end_of_turn_ids[i], V);
    if (r.grammar && !tokenizer_) return error("constrained decoding (a grammar) needs the engine's tokenizer");
    if (r.turn_boundary && *r.turn_boundary > r.prompt_ids.size())
      return error("turn_boundary {} is past the end of the {}-token prompt", *r.turn_boundary, n);
    return ok_status();
  }

  Status forward(std::span<const models::Model::BatchItem> items) {
    // The op thread pool serves one computing thread at a time: engines in one process take turns.
    static std::mutex compute;
    std::lock_guard lock(compute);
    return model_->forward_batch(items);
  }

  bool is_stop_token(const Sequence& seq, int32_t id) const {
    const auto& eos = model_->info().eos_token_ids;
    const auto& stop_ids = seq.request.stop_token_ids;
    return (!seq.request.ignore_eos && std::find(eos.begin(), eos.end(), id) != eos.end()) ||
           std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
  }

  // After a reply that ends a turn: queue its end-of-turn ids to be folded into (a share of) its state.
  void queue_end_of_turn(Sequence& seq, FinishReason reason) {
    const std::vector<int32_t>& eot = seq.request.end_of_turn_ids;
    if (eot.empty() || !seq.state || seq.state->n_past() == 0) return;
    std::vector<int32_t> tokens = seq.tokens;
    if (reason == FinishReason::stop && seq.generated > 0 && is_stop_token(seq, tokens.back())) tokens.pop_back();
    const int64_t n_past = seq.state->n_past();
    if (static_cast<int64_t>(tokens.size()) < n_past) return;  // (a stop token folded: nothing to continue)
    tokens.insert(tokens.end(), eot.begin(), eot.end());
    TailJob job;
    job.state = seq.state->resized(std::max<int64_t>(seq.state->capacity(), static_cast<int64_t>(tokens.size())));
    if (!job.state) return;
    job.tokens = std::move(tokens);
    job.group = seq.request.cache_key;
    tail_jobs_.push_back(std::move(job));
    // Low priority: a few per engine; the oldest give way.
    while (static_cast<int>(tail_jobs_.size()) > 2 * options_.max_sequences) tail_jobs_.pop_front();
  }

  // Folds every queued end-of-turn in one forward step and files the states in the prefix cache. Runs
  // when the engine is idle, or at once when an admitted prompt continues a queued conversation.
  void flush_tail_jobs() {
    std::deque<TailJob> jobs;
    jobs.swap(tail_jobs_);
    std::vector<models::Model::BatchItem> items;
    std::vector<TailJob*> running;
    int64_t pages = 0, folded = 0;
    for (TailJob& job : jobs) {
      const int64_t n = static_cast<int64_t>(job.tokens.size()) - job.state->n_past();
      const int64_t need = job.state->kv_pages_needed(n);
      if (pages + need > pool_->free_pages()) continue;  // no room: dropped (it was only a head start)
      pages += need;
      folded += n;
      running.push_back(&job);
    }
    if (running.empty()) return;
    Buffer logits = Buffer::allocate(DType::f32, {static_cast<int64_t>(running.size()), model_->info().vocab_size});
    for (size_t i = 0; i < running.size(); ++i) {
      TailJob& job = *running[i];
      items.push_back({std::span<const int32_t>(job.tokens).subspan(static_cast<size_t>(job.state->n_past())),
                       job.state.get(), logits.tensor().rows(static_cast<int64_t>(i), static_cast<int64_t>(i) + 1)});
    }
    if (Status s = forward(items); !s.ok()) {
      log::warn("end-of-turn prefill failed: {}", s.error().message);
      return;
    }
    for (TailJob* job : running)
      if (!cache_.contains(job->tokens)) cache_.insert(job->tokens, std::move(job->state), job->group);
    std::lock_guard lock(counters_mu_);
    counters_.end_of_turn_tokens += folded;
  }

  void loop() {
    for (;;) {
      std::vector<std::pair<GenerateRequest, std::shared_ptr<Channel>>> fresh;
      bool check_cancels = false;
      {
        std::unique_lock lock(inbox_->mu);
        inbox_->cv.wait(lock, [&] {
          return inbox_->stop || !inbox_->submitted.empty() || inbox_->cancels || !seqs_.empty() || !tail_jobs_.empty();
        });
        if (inbox_->stop) return;
        fresh.swap(inbox_->submitted);
        inbox_->queued = 0;
        check_cancels = inbox_->cancels;
        inbox_->cancels = false;
      }
      if (seqs_.empty()) flush_tail_jobs();  // idle: before anything new is admitted
      for (auto& [request, channel] : fresh) add(std::move(request), std::move(channel));
      if (check_cancels || !fresh.empty())
        for (auto it = seqs_.begin(); it != seqs_.end();) {
          Sequence& seq = *(it++)->second;  // finish() erases it
          if (seq.channel->cancel_requested) finish(seq, FinishReason::cancelled);
        }
      if (!seqs_.empty()) step();
      publish_counters();
    }
  }

  void add(GenerateRequest request, std::shared_ptr<Channel> channel) {
    auto seq = std::make_unique<Sequence>(std::move(request), seeds_(), tokenizer_.get());
    seq->id = next_id_++;
    seq->channel = std::move(channel);
    seq->tokens = seq->request.prompt_ids;
    seq->prompt_len = seq->tokens.size();
    seq->max_new = seq->request.max_tokens;
    seq->submitted = Clock::now();
    seq->stats.prompt_tokens = static_cast<int>(seq->prompt_len);
    seq->sampler.add_prompt(seq->tokens);
    if (seq->request.grammar) {
      std::vector<int32_t> end_ids = seq->request.stop_token_ids;
      if (!seq->request.ignore_eos)
        for (int32_t id : model_->info().eos_token_ids) end_ids.push_back(id);
      seq->constraint = std::make_unique<GrammarConstraint>(seq->request.grammar, token_vocabulary(tokenizer_),
                                                            std::move(end_ids), model_->info().vocab_size);
    }
    // Snapshot points: the turn boundary, and every N tokens of a long prompt.
    if (seq->request.turn_boundary && *seq->request.turn_boundary > 0) seq->boundaries.push_back(static_cast<int64_t>(*seq->request.turn_boundary));
    const int64_t every = options_.snapshot_interval_tokens;
    if (every > 0)
      for (int64_t p = every; p < static_cast<int64_t>(seq->prompt_len); p += every) seq->boundaries.push_back(p);
    std::sort(seq->boundaries.begin(), seq->boundaries.end());
    scheduler_->add(seq->id, static_cast<int64_t>(seq->prompt_len), seq->max_new);
    scheduler_->set_boundaries(seq->id, seq->boundaries);
    {
      std::lock_guard lock(counters_mu_);
      ++counters_.requests;
      counters_.prompt_tokens += static_cast<int64_t>(seq->prompt_len);
    }
    seqs_.emplace(seq->id, std::move(seq));
  }

  void admit(Sequence& seq, int64_t capacity, std::unique_ptr<models::SequenceState> outgrown) {
    const int64_t known = static_cast<int64_t>(seq.tokens.size());
    if (outgrown && resizable_) {
      // Growth: the same state in a larger buffer, nothing recomputed.
      seq.state = outgrown->resized(capacity);
      scheduler_->on_admitted(seq.id, seq.state->n_past(), seq.state->capacity());
      return;
    }
    // A queued end-of-turn of this very conversation: fold it now so the lookup below finds it.
    if (std::any_of(tail_jobs_.begin(), tail_jobs_.end(), [&](const TailJob& job) {
          return job.tokens.size() < seq.tokens.size() && std::equal(job.tokens.begin(), job.tokens.end(), seq.tokens.begin());
        }))
      flush_tail_jobs();
    // The last known token is always folded here: its logits choose the next token.
    PrefixCache::Hit hit = cache_.lookup(seq.tokens, known - 1, resizable_ ? 0 : capacity, seq.request.cache_key);
    if (hit.snapshot != nullptr) seq.state = resizable_ ? hit.snapshot->resized(capacity) : hit.snapshot->clone();
    else seq.state = model_->new_state(capacity, pool_);
    scheduler_->on_admitted(seq.id, hit.tokens, seq.state->capacity());
    if (!seq.admitted_once) {
      seq.admitted_once = true;
      seq.stats.cached_prompt_tokens = static_cast<int>(std::min<int64_t>(hit.tokens, static_cast<int64_t>(seq.prompt_len)));
      std::lock_guard lock(counters_mu_);
      counters_.prompt_tokens_reused += seq.stats.cached_prompt_tokens;
    }
  }

  void step() {
    Scheduler::Decision decision = scheduler_->schedule();
    std::map<uint64_t, std::unique_ptr<models::SequenceState>> dropped;
    for (uint64_t id : decision.preempt) dropped[id] = std::move(seqs_.at(id)->state);
    for (const Scheduler::Admission& a : decision.admit) {
      auto it = dropped.find(a.id);
      admit(*seqs_.at(a.id), a.capacity, it == dropped.end() ? nullptr : std::move(it->second));
    }
    dropped.clear();  // preempted for memory: freed before the step runs
    if (!decision.preempt.empty()) cache_.trim();  // pages they shared with snapshots are the cache's now
    std::vector<Scheduler::Work> work = scheduler_->batch();
    if (!make_room(work)) return;
    if (work.empty()) return;

    const int64_t V = model_->info().vocab_size, n = static_cast<int64_t>(work.size());
    if (logits_.tensor().empty() || logits_.tensor().dim(0) < n) logits_ = Buffer::allocate(DType::f32, {n, V});
    std::vector<models::Model::BatchItem> items;
    items.reserve(work.size());
    int64_t prefilled = 0;
    for (int64_t i = 0; i < n; ++i) {
      const Scheduler::Work& w = work[static_cast<size_t>(i)];
      Sequence& seq = *seqs_.at(w.id);
      const int64_t from = scheduler_->n_past(w.id);
      KAPITSA_CHECK(seq.state && seq.state->n_past() == from, "sequence {} state out of step", w.id);
      items.push_back({std::span<const int32_t>(seq.tokens).subspan(static_cast<size_t>(from), static_cast<size_t>(w.n_tokens)),
                       seq.state.get(), logits_.tensor().rows(i, i + 1)});
      prefilled += std::max<int64_t>(0, std::min<int64_t>(from + w.n_tokens, static_cast<int64_t>(seq.prompt_len)) - from);
    }
    Status status = forward(items);
    if (!status.ok()) {
      log::error("forward step failed: {}", status.error().message);
      for (const Scheduler::Work& w : work) finish(*seqs_.at(w.id), FinishReason::error, "", status.error().message);
      return;
    }
    {
      std::lock_guard lock(counters_mu_);
      counters_.prompt_tokens_prefilled += prefilled;
    }
    for (int64_t i = 0; i < n; ++i) {
      const Scheduler::Work& w = work[static_cast<size_t>(i)];
      Sequence& seq = *seqs_.at(w.id);
      scheduler_->advance(w.id, w.n_tokens);
      const int64_t at = scheduler_->n_past(w.id);
      if (std::binary_search(seq.boundaries.begin(), seq.boundaries.end(), at)) snapshot(seq, at);
      if (w.samples) sample(seq, std::span<const float>(logits_.tensor().rows(i, i + 1).f32(), static_cast<size_t>(V)));
    }
  }

  // The KV pages this step writes must be free in the pool: drop queued end-of-turns, evict prefix-cache
  // snapshots (least recently used first), then preempt the youngest running sequences (recomputed
  // later), until they are. False when even a lone sequence does not fit (it fails with an error).
  bool make_room(std::vector<Scheduler::Work>& work) {
    auto needed = [&] {
      int64_t n = 0;
      for (const Scheduler::Work& w : work) n += seqs_.at(w.id)->state->kv_pages_needed(w.n_tokens);
      return n;
    };
    while (needed() > pool_->free_pages()) {
      if (!tail_jobs_.empty()) {  // queued end-of-turns are only a head start
        tail_jobs_.clear();
        continue;
      }
      if (cache_.evict_lru()) continue;
      std::optional<uint64_t> victim = scheduler_->youngest_running();
      if (!victim || scheduler_->running() == 1) {
        const std::string message = fmt::format(
            "the KV page pool ({} pages of {} tokens) cannot hold this sequence; raise kv_pool_bytes",
            pool_->max_pages(), pool_->page_tokens());
        for (const Scheduler::Work& w : std::vector<Scheduler::Work>(work)) finish(*seqs_.at(w.id), FinishReason::error, "", message);
        return false;
      }
      scheduler_->preempt(*victim);
      scheduler_->hold_admissions(true);  // until a sequence finishes and returns pages
      seqs_.at(*victim)->state.reset();
      work = scheduler_->batch();
    }
    return true;
  }

  void snapshot(Sequence& seq, int64_t at) {
    const std::span<const int32_t> key(seq.tokens.data(), static_cast<size_t>(at));
    if (cache_.contains(key, resizable_ ? 0 : seq.state->capacity())) return;
    cache_.insert(key, resizable_ ? seq.state->resized(at) : seq.state->clone(), seq.request.cache_key);
  }

  void sample(Sequence& seq, std::span<const float> logits) {
    TokenEvent event;
    std::span<const uint8_t> allowed;
    if (seq.constraint) {
      allowed = seq.constraint->mask();
      if (allowed.empty()) {  // never emit a token outside the grammar
        if (seq.constraint->complete() && !seq.constraint->has_end_ids()) finish(seq, FinishReason::stop);
        else finish(seq, FinishReason::error, "", "grammar: no token can continue the output");
        return;
      }
    }
    const int32_t id = seq.sampler.sample(logits, seq.request.top_logprobs, &event, allowed);
    if (seq.constraint) seq.constraint->accept(id);
    event.id = id;
    seq.sampler.accept(id);
    seq.tokens.push_back(id);
    ++seq.generated;
    const Clock::time_point now = Clock::now();
    if (seq.generated == 1) seq.first_token = now;
    seq.last_token = now;
    {
      std::lock_guard lock(counters_mu_);
      ++counters_.completion_tokens;
    }
    const auto& eos = model_->info().eos_token_ids;
    const bool is_eos = !seq.request.ignore_eos && std::find(eos.begin(), eos.end(), id) != eos.end();
    const auto& stop_ids = seq.request.stop_token_ids;
    const bool is_stop_id = std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
    if (is_eos || is_stop_id) {
      // The stop token's own text is never shown; what was held back for stop strings is.
      event.text = seq.text.flush();
      seq.channel->push(std::move(event));
      std::string matched;
      if (is_stop_id && tokenizer_) matched = tokenizer_->decode(std::span<const int32_t>(&id, 1));
      finish(seq, FinishReason::stop, matched);
      return;
    }
    StopMatcher::Result r = seq.text.push(id);
    event.text = std::move(r.text);
    if (r.stopped) {
      seq.channel->push(std::move(event));
      finish(seq, FinishReason::stop, r.matched);
      return;
    }
    if (seq.generated >= seq.max_new) {
      event.text += seq.text.flush();
      seq.channel->push(std::move(event));
      finish(seq, FinishReason::length);
      return;
    }
    seq.channel->push(std::move(event));
    scheduler_->append(seq.id);
  }

  FinishEvent finish_event(Sequence& seq, FinishReason reason, const std::string& matched, const std::string& message) {
    FinishEvent f;
    f.reason = reason;
    f.matched_stop = matched;
    f.error = message;
    f.stats = seq.stats;
    f.stats.completion_tokens = static_cast<int>(seq.generated);
    if (seq.generated > 0) {
      f.stats.time_to_first_token_s = std::chrono::duration<double>(seq.first_token - seq.submitted).count();
      const double span = std::chrono::duration<double>(seq.last_token - seq.first_token).count();
      if (seq.generated > 1 && span > 0) f.stats.decode_tokens_per_s = static_cast<double>(seq.generated - 1) / span;
    }
    return f;
  }

  void finish(Sequence& seq, FinishReason reason, const std::string& matched = "", const std::string& message = "") {
    FinishEvent f = finish_event(seq, reason, matched, message);
    // A finished reply stays reusable: the state after prompt + reply (all but the last sampled
    // token, which was never folded) moves into the prefix cache without a copy.
    if ((reason == FinishReason::stop || reason == FinishReason::length) && seq.state && seq.state->n_past() > 0 &&
        scheduler_->has_state(seq.id)) {
      const std::span<const int32_t> key(seq.tokens.data(), static_cast<size_t>(seq.state->n_past()));
      if (!cache_.contains(key, resizable_ ? 0 : seq.state->capacity()))
        cache_.insert(key, resizable_ ? seq.state->resized(seq.state->n_past()) : std::move(seq.state), seq.request.cache_key);
    }
    if ((reason == FinishReason::stop || reason == FinishReason::length) && scheduler_->has_state(seq.id))
      queue_end_of_turn(seq, reason);
    scheduler_->remove(seq.id);
    scheduler_->hold_admissions(false);
    std::shared_ptr<Channel> channel = seq.channel;
    seqs_.erase(seq.id);
    cache_.trim();  // its pages that snapshots share now count for the cache
    // Counters first: a reader that has seen the FinishEvent sees the memory freed.
    publish_counters();
    channel->push(std::move(f));
  }

  void publish_counters() {
    std::lock_guard lock(counters_mu_);
    counters_.running = scheduler_->running();
    counters_.queued = scheduler_->waiting();
    counters_.preemptions = scheduler_->preemptions();
    counters_.snapshot_bytes = static_cast<int64_t>(cache_.bytes());
    counters_.snapshots = static_cast<int64_t>(cache_.snapshots());
    counters_.sequence_bytes = static_cast<int64_t>(scheduler_->used_bytes());
    counters_.kv_pages_used = pool_->used_pages();
    counters_.kv_page_bytes = static_cast<int64_t>(pool_->page_bytes());
  }

  std::unique_ptr<models::Model> model_;
  std::shared_ptr<const text::Tokenizer> tokenizer_;
  EngineOptions options_;
  std::shared_ptr<models::KvPagePool> pool_;  // KV of every state and snapshot
  PrefixCache cache_;
  std::unique_ptr<Scheduler> scheduler_;
  bool resizable_ = false;
  std::shared_ptr<Inbox> inbox_;
  std::mt19937_64 seeds_;
  std::map<uint64_t, std::unique_ptr<Sequence>> seqs_;  // engine thread only
  std::deque<TailJob> tail_jobs_;                        // engine thread only
  uint64_t next_id_ = 1;
  Buffer logits_;  // [n_items, V] of the current step
  mutable std::mutex counters_mu_;
  EngineCounters counters_;
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace

Expected<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<models::Model> model,
                                                 std::shared_ptr<const text::Tokenizer> tokenizer,
                                                 const EngineOptions& options) {
  if (!model) return error("Engine::create: no model");
  if (options.max_sequences < 1) return error("max_sequences must be at least 1, got {}", options.max_sequences);
  if (options.context_tokens < 2) return error("context_tokens must be at least 2, got {}", options.context_tokens);
  if (options.prefill_chunk_tokens < 1) return error("prefill_chunk_tokens must be at least 1, got {}", options.prefill_chunk_tokens);
  return std::unique_ptr<Engine>(std::make_unique<EngineImpl>(std::move(model), std::move(tokenizer), options));
}

}  // namespace kapitsa::runtime
