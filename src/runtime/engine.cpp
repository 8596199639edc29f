// EngineImpl: the step loop. One background thread owns the model, every sequence, the scheduler and
// the memory; submit() and Generation::cancel() only touch the inbox under its mutex. Per step: apply
// the scheduler's preemptions and admissions (EngineMemory), make room in the KV pool, run the batch
// (StepExecutor), choose each sampling sequence's next token and emit it (TokenEmitter), finish what
// ended. Queued end-of-turns are folded when the engine is idle.
#include "runtime/engine.h"

#include "base/log.h"
#include "base/thread_pool.h"
#include "runtime/engine_memory.h"
#include "runtime/generation.h"
#include "runtime/scheduler.h"
#include "runtime/sequence.h"
#include "runtime/speculation.h"
#include "runtime/step_executor.h"
#include "runtime/token_emitter.h"
#include "text/tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <thread>

namespace kapitsa::runtime {
namespace {

struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<GenerateRequest, std::shared_ptr<Channel>>> submitted;
  std::vector<std::pair<std::vector<int32_t>, std::string>> preloads;  // (ids, cache_key)
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

// Every state's KV lives in one page pool of kv_page_tokens-token pages, capped by kv_pool_bytes.
std::shared_ptr<models::KvPagePool> make_kv_pool(const models::Model& model, const EngineOptions& options) {
  models::KvLayout layout = model.kv_layout();
  layout.dtype = options.kv_dtype;
  const int64_t page_tokens = std::max<int64_t>(options.kv_page_tokens, 1);
  const size_t page_bytes = std::max<size_t>(layout.bytes_per_token() * static_cast<size_t>(page_tokens), 1);
  const int64_t max_pages =
      options.kv_pool_bytes == 0 ? 0 : std::max<int64_t>(1, static_cast<int64_t>(options.kv_pool_bytes / page_bytes));
  return std::make_shared<models::KvPagePool>(layout, page_tokens, max_pages);
}

// The scheduler reserves, per running sequence, its own (recurrent) bytes plus the KV of its capacity.
SchedulerConfig scheduler_config(const models::Model& model, const EngineOptions& options,
                                 const std::shared_ptr<models::KvPagePool>& pool) {
  SchedulerConfig sc;
  sc.max_sequences = std::max(options.max_sequences, 1);
  sc.prefill_chunk_tokens = std::max<int64_t>(options.prefill_chunk_tokens, 1);
  sc.memory_budget_bytes = options.memory_budget_bytes;
  sc.state_bytes_per_token = pool->layout().bytes_per_token();
  sc.state_fixed_bytes = model.new_state(1, pool)->own_bytes();
  sc.context_tokens = options.context_tokens;
  sc.decode_reserve_tokens = std::max<int64_t>(options.decode_reserve_tokens, 1);
  return sc;
}

class EngineImpl final : public Engine {
 public:
  EngineImpl(std::unique_ptr<models::Model> model, std::shared_ptr<const text::Tokenizer> tokenizer,
             const EngineOptions& options)
      : model_(std::move(model)), tokenizer_(std::move(tokenizer)), options_(clamped(options, model_->info())),
        inbox_(std::make_shared<Inbox>()), seeds_(options.seed != 0 ? options.seed : std::random_device{}()),
        executor_(*model_), emitter_(model_->info().eos_token_ids, tokenizer_.get()) {
    std::shared_ptr<models::KvPagePool> pool = make_kv_pool(*model_, options_);
    const SchedulerConfig sc = scheduler_config(*model_, options_, pool);
    counters_.kv_bytes_per_token = static_cast<int64_t>(sc.state_bytes_per_token);
    counters_.state_bytes_per_sequence = static_cast<int64_t>(sc.state_fixed_bytes);
    counters_.kv_page_bytes = static_cast<int64_t>(pool->page_bytes());
    if (options_.proposer) counters_.proposer = std::string(options_.proposer->name());
    if (options_.proposer && options_.proposer->wants_hidden()) executor_.observe_hidden(options_.proposer.get());
    scheduler_ = std::make_unique<Scheduler>(sc);
    std::unique_ptr<DiskCache> disk;
    if (!options_.disk_cache.dir.empty()) disk = std::make_unique<DiskCache>(options_.disk_cache, *model_, pool);
    memory_ = std::make_unique<EngineMemory>(*model_, std::move(pool), options_.prefix_cache_bytes,
                                             2 * static_cast<size_t>(std::max(options_.max_sequences, 1)),
                                             std::max<int64_t>(options_.prefill_chunk_tokens, 1), *scheduler_, seqs_,
                                             std::move(disk));
    setup_ = SequenceSetup{tokenizer_, model_->info().eos_token_ids, model_->info().vocab_size,
                           options_.snapshot_interval_tokens};
    thread_ = std::thread([this] { loop(); });
  }

  ~EngineImpl() override {
    {
      std::lock_guard lock(inbox_->mu);
      inbox_->stop = true;
    }
    inbox_->cv.notify_all();
    thread_.join();
    for (auto& [id, seq] : seqs_) {
      if (options_.proposer) options_.proposer->release(id);  // it may outlive the engine
      seq->channel->push(finish_event(*seq, Ending{FinishReason::cancelled, "", "the engine was shut down"}));
    }
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

  Status preload(std::vector<int32_t> ids, std::string cache_key) override {
    const int64_t V = model_->info().vocab_size, n = static_cast<int64_t>(ids.size());
    if (n == 0) return ok_status();
    if (n >= options_.context_tokens)
      return error(ErrorKind::context_too_long, "preload: {} tokens do not fit the {}-token context", n, options_.context_tokens);
    for (int64_t i = 0; i < n; ++i)
      if (ids[static_cast<size_t>(i)] < 0 || ids[static_cast<size_t>(i)] >= V)
        return error("preload: token id {} at index {} is outside the vocabulary [0, {})", ids[static_cast<size_t>(i)], i, V);
    {
      std::lock_guard lock(inbox_->mu);
      inbox_->preloads.emplace_back(std::move(ids), std::move(cache_key));
      // Counted as pending at once (at most n: the loop's next publish, after it takes this from the
      // inbox, gives what is really left), so a client waiting for the folds to end cannot miss it.
      std::lock_guard counters_lock(counters_mu_);
      counters_.end_of_turn_pending += n;
    }
    inbox_->cv.notify_all();
    return ok_status();
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
      return error(ErrorKind::context_too_long, "prompt is too long: {} tokens > {} maximum (the context holds {} tokens, one is needed for the reply)",
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

  static EngineOptions clamped(EngineOptions options, const models::ModelInfo& info) {
    if (info.max_position_embeddings > 0) options.context_tokens = std::min(options.context_tokens, info.max_position_embeddings);
    return options;
  }

  void loop() {
    for (;;) {
      std::vector<std::pair<GenerateRequest, std::shared_ptr<Channel>>> fresh;
      std::vector<std::pair<std::vector<int32_t>, std::string>> preloads;
      bool check_cancels = false;
      {
        std::unique_lock lock(inbox_->mu);
        inbox_->cv.wait(lock, [&] {
          return inbox_->stop || !inbox_->submitted.empty() || !inbox_->preloads.empty() || inbox_->cancels ||
                 !seqs_.empty() || memory_->has_end_of_turn_jobs();
        });
        if (inbox_->stop) return;
        fresh.swap(inbox_->submitted);
        preloads.swap(inbox_->preloads);
        inbox_->queued = 0;
        check_cancels = inbox_->cancels;
        inbox_->cancels = false;
      }
      // Preloads queue before the requests that came with them: such a request finds them.
      for (auto& [ids, key] : preloads) memory_->preload(std::move(ids), key);
      // Idle: fold before anything new is admitted; a request arriving meanwhile stops the fold
      // between chunks (it resumes at the next idle moment).
      if (seqs_.empty() && fresh.empty() && memory_->has_end_of_turn_jobs()) {
        {  // seen before the fold starts: a client waiting for the engine to be idle knows it is not
          std::lock_guard lock(counters_mu_);
          counters_.end_of_turn_pending = memory_->end_of_turn_pending();
        }
        memory_->flush_end_of_turns([this] {
          std::lock_guard lock(inbox_->mu);
          return !inbox_->submitted.empty() || inbox_->stop;
        });
      }
      for (auto& [request, channel] : fresh) add(std::move(request), std::move(channel));
      if (check_cancels || !fresh.empty())
        for (auto it = seqs_.begin(); it != seqs_.end();) {
          Sequence& seq = *(it++)->second;  // finish() erases it
          if (seq.channel->cancel_requested) finish(seq, Ending{FinishReason::cancelled, "", ""});
        }
      if (!seqs_.empty()) step();
      publish_counters();
    }
  }

  void add(GenerateRequest request, std::shared_ptr<Channel> channel) {
    std::unique_ptr<Sequence> seq = make_sequence(next_id_++, std::move(request), std::move(channel), seeds_(), setup_);
    scheduler_->add(seq->id, static_cast<int64_t>(seq->prompt_len), seq->max_new);
    scheduler_->set_boundaries(seq->id, seq->boundaries);
    {
      std::lock_guard lock(counters_mu_);
      ++counters_.requests;
      counters_.prompt_tokens += static_cast<int64_t>(seq->prompt_len);
    }
    seqs_.emplace(seq->id, std::move(seq));
  }

  void step() {
    Scheduler::Decision decision = scheduler_->schedule();
    std::map<uint64_t, std::unique_ptr<models::SequenceState>> dropped;
    for (uint64_t id : decision.preempt) dropped[id] = std::move(seqs_.at(id)->state);
    for (const Scheduler::Admission& a : decision.admit) {
      auto it = dropped.find(a.id);
      memory_->admit(*seqs_.at(a.id), a.capacity, it == dropped.end() ? nullptr : std::move(it->second));
    }
    dropped.clear();  // preempted for memory: freed before the step runs
    if (!decision.preempt.empty()) memory_->trim();  // pages they shared with snapshots are the cache's now
    std::vector<Scheduler::Work> work = scheduler_->batch();
    const Clock::time_point started = Clock::now();
    int timed_draft = -1;  // a batch-1 decode step's draft length, timed for the cost model
    if (options_.proposer) {
      std::vector<Sequence*> decoding;
      for (const Scheduler::Work& w : work) {
        Sequence& seq = *seqs_.at(w.id);
        seq.draft.clear();
        seq.draft_q.clear();
        if (w.samples && w.n_tokens == 1) decoding.push_back(&seq);
      }
      DraftCostModel* cost = options_.spec_cost_aware && work.size() == 1 && decoding.size() == 1 ? &draft_cost_ : nullptr;
      // Padding pays where the padded verification runs as one captured graph: on a GPU, while every
      // sequence of the step decodes and their padded rows fit one (more rows: other kernels, no graph).
      const int64_t graph_rows = model_->max_graph_rows();
      const bool pad = options_.spec_pad_drafts.value_or(
          decoding.size() == work.size() &&
          static_cast<int64_t>(work.size()) * (1 + options_.spec_tokens) <= graph_rows);
      // Where a greedy sequence decodes: guesses only up to the rows where each row still gets the logits
      // it would get alone (greedy output is promised bit for bit; sampling in distribution, which a
      // rounding-level change of the logits leaves as it is), unless the step is past them without
      // guesses (then plain decoding's rows are not its alone-rows either).
      int64_t plain_rows = 0;
      for (const Scheduler::Work& w : work) plain_rows += w.n_tokens;
      bool greedy = false;
      for (const Sequence* seq : decoding) greedy = greedy || seq->request.sampling.temperature <= 0;
      const int64_t invariant = model_->invariant_rows();
      const int64_t max_guesses =
          greedy && invariant > 0 && plain_rows <= invariant ? invariant - plain_rows : kAnyGuesses;
      propose_drafts(decoding, *options_.proposer, options_.spec_tokens, model_->info().vocab_size, cost, pad,
                     max_guesses);
      if (cost != nullptr) timed_draft = static_cast<int>(decoding.front()->draft.size());
    }
    if (std::optional<std::string> no_room = memory_->make_room(work)) {
      fail(work, *no_room);
      return;
    }
    if (work.empty()) return;
    Expected<int64_t> prefilled = executor_.run(work, seqs_, *scheduler_, *memory_);
    if (!prefilled.ok()) {
      log::error("forward step failed: {}", prefilled.error().message);
      fail(work, prefilled.error().message);
      return;
    }
    {
      std::lock_guard lock(counters_mu_);
      counters_.prompt_tokens_prefilled += *prefilled;
    }
    // The next token of every sequence without a draft, chosen in parallel: each reads only its own
    // logits row, sampler and grammar matcher, and a choice over a 248k vocabulary (a grammar mask,
    // a temperature draw, logprobs) costs up to milliseconds of host time that the device waits out.
    std::vector<size_t> plain;
    for (size_t i = 0; i < work.size(); ++i)
      if (work[i].samples && seqs_.at(work[i].id)->draft.empty()) plain.push_back(i);
    std::vector<std::variant<TokenEvent, Ending>> choices(work.size());
    parallel_for(plain.size(), 1, [&](size_t begin, size_t end) {
      for (size_t k = begin; k < end; ++k)
        choices[plain[k]] = choose_next(*seqs_.at(work[plain[k]].id), executor_, plain[k]);
    });
    for (size_t i = 0; i < work.size(); ++i) {
      if (!work[i].samples) continue;
      Sequence& seq = *seqs_.at(work[i].id);
      if (!seq.draft.empty()) {
        verified(seq, verify_draft(seq, executor_, i, emitter_, options_.spec_tokens));
        continue;
      }
      const std::variant<TokenEvent, Ending>& choice = choices[i];
      if (const Ending* ending = std::get_if<Ending>(&choice)) {
        finish(seq, *ending);
        continue;
      }
      const TokenEvent& token = std::get<TokenEvent>(choice);
      const size_t kept = emit(seq, std::span<const TokenEvent>(&token, 1));
      KAPITSA_CHECK(kept == 1, "token {} was sampled outside the grammar's mask", token.id);
    }
    // A draft right after a plain step is not timed: a proposer that keeps its own state (a draft
    // model) first folds the token it missed, so that step overstates what guessing costs.
    if (timed_draft == 0 || (timed_draft > 0 && drafted_last_step_))
      draft_cost_.record(timed_draft, std::chrono::duration<double>(Clock::now() - started).count());
    drafted_last_step_ = timed_draft > 0;
  }

  // Streams a run of chosen tokens of `seq` (TokenEmitter) and finishes it when the run ended it; the
  // scheduler learns of the kept ones otherwise. Returns how many were kept.
  size_t emit(Sequence& seq, std::span<const TokenEvent> run) {
    Emission emission = emitter_.emit(seq, run);
    const size_t kept = emission.events.size();
    {
      std::lock_guard lock(counters_mu_);
      counters_.completion_tokens += static_cast<int64_t>(kept);
    }
    for (TokenEvent& event : emission.events) seq.channel->push(std::move(event));
    if (emission.ending) finish(seq, *emission.ending);
    else scheduler_->append(seq.id, static_cast<int64_t>(kept));
    return kept;
  }

  // Streams a verified draft's run; the scheduler learns of the kept tokens and the extra folded ones.
  void verified(Sequence& seq, Verified v) {
    {
      std::lock_guard lock(counters_mu_);
      counters_.completion_tokens += static_cast<int64_t>(v.emission.events.size());
      counters_.draft_tokens += static_cast<int64_t>(v.proposed);
      counters_.draft_tokens_accepted += static_cast<int64_t>(v.accepted);
      ++counters_.draft_steps;
    }
    for (TokenEvent& event : v.emission.events) seq.channel->push(std::move(event));
    if (v.emission.ending) {
      finish(seq, *v.emission.ending);
      return;
    }
    scheduler_->append(seq.id, static_cast<int64_t>(v.emission.events.size()));
    scheduler_->advance(seq.id, v.extra_folded);
  }

  void fail(const std::vector<Scheduler::Work>& work, const std::string& message) {
    for (const Scheduler::Work& w : std::vector<Scheduler::Work>(work)) finish(*seqs_.at(w.id), Ending{FinishReason::error, "", message});
  }

  void finish(Sequence& seq, const Ending& ending) {
    FinishEvent f = finish_event(seq, ending);
    if (ending.reason == FinishReason::stop || ending.reason == FinishReason::length)
      memory_->keep_finished(seq, ending.reason == FinishReason::stop && seq.generated > 0 &&
                                      emitter_.is_stop_token(seq, seq.tokens.back()));
    scheduler_->remove(seq.id);
    scheduler_->hold_admissions(false);
    if (options_.proposer) options_.proposer->release(seq.id);
    std::shared_ptr<Channel> channel = seq.channel;
    seqs_.erase(seq.id);
    memory_->trim();  // its pages that snapshots share now count for the cache
    // Counters first: a reader that has seen the FinishEvent sees the memory freed.
    publish_counters();
    channel->push(std::move(f));
  }

  void publish_counters() {
    std::lock_guard lock(counters_mu_);
    counters_.running = scheduler_->running();
    counters_.queued = scheduler_->waiting();
    counters_.preemptions = scheduler_->preemptions();
    counters_.snapshot_bytes = static_cast<int64_t>(memory_->cache().bytes());
    counters_.snapshots = static_cast<int64_t>(memory_->cache().snapshots());
    if (const DiskCache* disk = memory_->disk()) counters_.disk_cache_bytes = static_cast<int64_t>(disk->bytes());
    counters_.prompt_tokens_from_disk = memory_->tokens_from_disk();
    counters_.sequence_bytes = static_cast<int64_t>(scheduler_->used_bytes());
    counters_.kv_pages_used = memory_->pool().used_pages();
    counters_.kv_page_bytes = static_cast<int64_t>(memory_->pool().page_bytes());
    counters_.prompt_tokens_reused = memory_->prompt_tokens_reused();
    counters_.end_of_turn_tokens = memory_->end_of_turn_tokens();
    counters_.end_of_turn_pending = memory_->end_of_turn_pending();
  }

  std::unique_ptr<models::Model> model_;
  std::shared_ptr<const text::Tokenizer> tokenizer_;
  EngineOptions options_;
  std::shared_ptr<Inbox> inbox_;
  std::mt19937_64 seeds_;
  std::unique_ptr<Scheduler> scheduler_;
  Sequences seqs_;                        // engine thread only
  std::unique_ptr<EngineMemory> memory_;  // KV pool, prefix cache, end-of-turn queue
  StepExecutor executor_;
  TokenEmitter emitter_;
  DraftCostModel draft_cost_;  // engine thread only (options_.spec_cost_aware)
  bool drafted_last_step_ = false;  // the last timed batch-1 step had a draft
  SequenceSetup setup_;
  uint64_t next_id_ = 1;
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
  if (!models::is_kv_dtype(options.kv_dtype))
    return error("kv_dtype must be f32, bf16 or f16, got {}", dtype_name(options.kv_dtype));
  if (!options.disk_cache.dir.empty()) KAPITSA_RETURN_IF_ERROR(DiskCache::prepare_dir(options.disk_cache.dir));
  if (options.proposer) KAPITSA_RETURN_IF_ERROR(options.proposer->attach(*model));
  return std::unique_ptr<Engine>(std::make_unique<EngineImpl>(std::move(model), std::move(tokenizer), options));
}

}  // namespace kapitsa::runtime
