// Engine: owns a model and its tokenizer, runs many generations concurrently on a background
// thread (continuous batching, prefix cache), and hands each caller a Generation to read events from.
// Thread-safe: submit, cancel and reading events may happen from any thread.
#pragma once

#include "base/status.h"
#include "models/model.h"
#include "runtime/disk_cache.h"
#include "runtime/request.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace kapitsa::text {
class Tokenizer;
}

namespace kapitsa::runtime {

class Proposer;
using Event = std::variant<TokenEvent, FinishEvent>;

// A running generation. Events arrive in order; the last one is always a FinishEvent (also after
// cancel(), errors and length limits). Destroying the Generation cancels it.
class Generation {
 public:
  virtual ~Generation() = default;
  // Blocks until the next event; false once the FinishEvent has been returned.
  virtual bool next(Event& event) = 0;
  // Like next, but gives up after `timeout` (returns false with `timed_out` set).
  virtual bool next_for(Event& event, std::chrono::milliseconds timeout, bool& timed_out) = 0;
  // Stops the generation and frees its memory; a FinishEvent{cancelled} follows.
  virtual void cancel() = 0;
};

struct EngineOptions {
  int64_t context_tokens = 32768;      // per sequence
  int max_sequences = 16;              // decoded together in one step
  int prefill_chunk_tokens = 512;      // chunked prefill budget per step
  size_t prefix_cache_bytes = size_t{2} << 30;  // snapshots + KV kept for reuse
  // Sequence states (KV + recurrent) of running sequences; 0 → limited by max_sequences only. When a
  // sequence outgrows its state and the budget is full, younger sequences are preempted (recomputed
  // later), never failed.
  size_t memory_budget_bytes = 0;
  int64_t snapshot_interval_tokens = 4096;  // prefix-cache snapshots every N tokens of long prompts
  int64_t decode_reserve_tokens = 256;      // room for generated tokens a new state is given
  uint64_t seed = 0;                        // seeds requests without one; 0 → random
  // Attention KV lives in pages of kv_page_tokens tokens in one pool shared by every sequence and
  // prefix-cache snapshot (common prefixes share pages). kv_pool_bytes caps the pool (0: bounded only
  // by the two budgets above); when a step needs pages the pool lacks, cached snapshots are evicted,
  // then the youngest sequences preempted.
  int64_t kv_page_tokens = 16;
  size_t kv_pool_bytes = 0;
  // Element type of the KV pages: f32 (exact; the library default), bf16 (half the memory; what
  // `kapitsa run/chat/serve` use unless told otherwise) or f16. Accuracy: docs/decisions.md.
  DType kv_dtype = DType::f32;
  // Speculative decoding: guesses of each decoding sequence's next tokens (runtime/proposer.h),
  // verified in the same step; null: off. Output is the same either way; only speed changes.
  std::shared_ptr<Proposer> proposer;
  int spec_tokens = 4;  // the most guesses per sequence per step
  // Batch-1 steps draft the length with the most expected tokens per second, from their own timings
  // (runtime/draft_cost.h), down to none when guessing does not pay on this machine. Off: the length
  // follows the acceptance only (deterministic, as the speculation tests want). kapitsa run/chat/serve: on.
  bool spec_cost_aware = false;
  // Deterministic drafts lengthened with fillers to the most guesses (spec_tokens), so that every
  // verification step has one shape: on a GPU extra rows are nearly free and one shape is one captured
  // graph (docs/speculative-decoding.md, "Drafts of one length on a GPU"). Unset: for a step whose padded
  // rows fit one graph (Model::max_graph_rows: a GPU, up to 16 rows) and whose every sequence decodes.
  std::optional<bool> spec_pad_drafts;
  // Prefix-cache snapshots also written to disk and restored from there, across restarts
  // (runtime/disk_cache.h); dir "" → off. fingerprint: models::model_fingerprint of the model's folder.
  DiskCacheOptions disk_cache;
};

struct EngineCounters {
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t prompt_tokens_reused = 0;  // served from the prefix cache
  int64_t prompt_tokens_prefilled = 0;
  int64_t completion_tokens = 0;
  int64_t snapshot_bytes = 0;
  int queued = 0;
  int running = 0;
  int64_t preemptions = 0;      // states dropped for memory (recomputed later)
  int64_t snapshots = 0;        // snapshots held by the prefix cache
  int64_t sequence_bytes = 0;   // states of running sequences (reserved: own bytes + KV of their capacity)
  int64_t kv_pages_used = 0;    // pages in use in the KV pool (each once, however many share it)
  int64_t end_of_turn_tokens = 0;  // folded in the background (end_of_turn_ids, preload)
  int64_t end_of_turn_pending = 0;  // queued to fold or being folded (counted from preload() on; 0: all folded)
  int64_t kv_page_bytes = 0;
  int64_t disk_cache_bytes = 0;         // the cache directory's entries (0: none)
  int64_t prompt_tokens_from_disk = 0;  // tokens of snapshots restored from it
  // Fixed at creation: KV bytes one token takes in every attention layer (EngineOptions::kv_dtype),
  // and a sequence's bytes besides KV (recurrent state: conv windows + SSM/DeltaNet state).
  int64_t kv_bytes_per_token = 0;
  int64_t state_bytes_per_sequence = 0;
  // Speculative decoding, by the engine's one proposer (`proposer`: its name, empty when off).
  std::string proposer;
  int64_t draft_tokens = 0;           // proposed
  int64_t draft_tokens_accepted = 0;  // of them, kept
  int64_t draft_steps = 0;            // verifications of a draft (accepted / steps: mean accepted length)
};

class Engine {
 public:
  static Expected<std::unique_ptr<Engine>> create(std::unique_ptr<models::Model> model,
                                                  std::shared_ptr<const text::Tokenizer> tokenizer,
                                                  const EngineOptions& options = {});
  virtual ~Engine() = default;

  // Validates and queues a request (errors: empty prompt, prompt longer than the context, ids out of
  // the vocabulary — each named). max_tokens beyond the context is clamped, not rejected.
  virtual Expected<std::unique_ptr<Generation>> submit(GenerateRequest request) = 0;

  // Folds `ids` into the prefix cache in the background, when the engine is idle: a conversation's
  // history as its next request will render it (after a reply: the reply as the template shows it in
  // history, e.g. without its reasoning). The fold resumes from the deepest snapshot on the path of
  // `ids` (where they leave what is cached) and ends in a snapshot after all of them, so a next
  // request that starts with `ids` prefills only what follows. A request that continues a queued
  // preload waits for it. Only a head start: dropped when memory is short. Errors: ids out of the
  // vocabulary or not fitting the context (nothing queued).
  virtual Status preload(std::vector<int32_t> ids, std::string cache_key) { return ok_status(); }

  virtual const models::ModelInfo& model_info() const = 0;
  virtual const text::Tokenizer& tokenizer() const = 0;  // only when has_tokenizer()
  virtual bool has_tokenizer() const { return true; }  // false: created with a null tokenizer (ids only, no text)
  virtual EngineCounters counters() const = 0;
  virtual const EngineOptions& options() const = 0;
};

}  // namespace kapitsa::runtime
