// EngineMemory: where sequence states come from and go to. Admission gives a sequence a state (grown
// from its outgrown one, resumed from the deepest prefix-cache snapshot, or fresh); a step short of
// KV pages makes room (drops queued end-of-turns, evicts snapshots least recently used first, then
// preempts the youngest running sequence); prompt boundaries and finished replies become snapshots;
// replies' end-of-turn ids and preloads are queued and folded when idle. Owns the KV page pool (every state's and
// snapshot's KV), the prefix cache and the end-of-turn queue. Engine thread only.
#pragma once

#include "models/model.h"
#include "runtime/disk_cache.h"
#include "runtime/end_of_turn.h"
#include "runtime/prefix_cache.h"
#include "runtime/scheduler.h"
#include "runtime/sequence.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kapitsa::runtime {

class EngineMemory {
 public:
  EngineMemory(const models::Model& model, std::shared_ptr<models::KvPagePool> pool, size_t prefix_cache_bytes,
               size_t end_of_turn_jobs, int64_t chunk_tokens, Scheduler& scheduler, Sequences& seqs,
               std::unique_ptr<DiskCache> disk = nullptr);

  // Gives `seq` a state of at least `capacity` tokens and tells the scheduler what it holds.
  // outgrown: its previous state when it is being grown (reused when states can be resized).
  void admit(Sequence& seq, int64_t capacity, std::unique_ptr<models::SequenceState> outgrown);
  // Until the pool has the pages `work` writes: drops drafts, queued end-of-turns, evicts snapshots, preempts
  // the youngest running sequence (updating `work`). An error message when even a lone sequence does
  // not fit (the caller fails the work's sequences).
  std::optional<std::string> make_room(std::vector<Scheduler::Work>& work);
  // A snapshot of `seq` after its first `at` tokens (its state holds exactly those).
  void snapshot(const Sequence& seq, int64_t at);
  // A reply that ended (stop or length) and still has its state: the state after prompt + reply moves
  // into the prefix cache, and its end-of-turn ids are queued. ends_with_stop_token: see EndOfTurnQueue.
  void keep_finished(Sequence& seq, bool ends_with_stop_token);
  // Pages of finished or preempted sequences that snapshots share now count for the cache.
  void trim() { cache_.trim(); }
  // Queues `ids` (a conversation's history as its next request will render it) to be folded from the
  // deepest snapshot on their path and filed in the cache under them; nothing when one is there already.
  void preload(std::vector<int32_t> ids, const std::string& group);
  bool has_end_of_turn_jobs() const { return !end_of_turn_.empty(); }
  int64_t end_of_turn_pending() const { return end_of_turn_.pending_tokens(); }
  // Folds queued end-of-turns and preloads; `interrupted` (may be empty) stops between chunks.
  void flush_end_of_turns(const std::function<bool()>& interrupted = {});

  const models::KvPagePool& pool() const { return *pool_; }
  const PrefixCache& cache() const { return cache_; }
  int64_t prompt_tokens_reused() const { return prompt_tokens_reused_; }  // since creation
  int64_t end_of_turn_tokens() const { return end_of_turn_tokens_; }      // since creation
  const DiskCache* disk() const { return disk_.get(); }                    // null: no cache directory
  int64_t tokens_from_disk() const { return tokens_from_disk_; }           // restored snapshots' tokens

 private:
  const models::Model& model_;
  std::shared_ptr<models::KvPagePool> pool_;
  PrefixCache cache_;
  EndOfTurnQueue end_of_turn_;
  // Snapshots go to disk as they enter cache_ (its insert listener); a lookup that disk can serve
  // deeper than memory restores that entry into cache_ first.
  std::unique_ptr<DiskCache> disk_;
  void restore_from_disk(std::span<const int32_t> ids, int64_t max_tokens, int64_t capacity, const std::string& group);
  Scheduler& scheduler_;
  Sequences& seqs_;
  int64_t chunk_tokens_;    // tokens per job per end-of-turn forward step
  bool resizable_ = false;  // states can be resized: snapshots are trimmed, growth copies nothing
  int64_t prompt_tokens_reused_ = 0;
  int64_t end_of_turn_tokens_ = 0;
  int64_t tokens_from_disk_ = 0;
};

}  // namespace kapitsa::runtime
