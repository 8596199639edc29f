// Admission, room in the KV pool, snapshots and end-of-turn folds (see engine_memory.h).
#include "runtime/engine_memory.h"

#include <fmt/format.h>

namespace kapitsa::runtime {

EngineMemory::EngineMemory(const models::Model& model, std::shared_ptr<models::KvPagePool> pool,
                           size_t prefix_cache_bytes, size_t end_of_turn_jobs, int64_t chunk_tokens,
                           Scheduler& scheduler, Sequences& seqs, std::unique_ptr<DiskCache> disk)
    : model_(model), pool_(std::move(pool)), cache_(prefix_cache_bytes), end_of_turn_(end_of_turn_jobs),
      disk_(std::move(disk)), scheduler_(scheduler), seqs_(seqs), chunk_tokens_(chunk_tokens) {
  if (disk_)
    cache_.set_insert_listener([this](std::span<const int32_t> ids, const models::SequenceState& s) { disk_->save(ids, s); });
  // States that can be resized are cached trimmed to what they hold and grow without recompute.
  resizable_ = model_.new_state(2, pool_)->resized(4) != nullptr;
}

void EngineMemory::admit(Sequence& seq, int64_t capacity, std::unique_ptr<models::SequenceState> outgrown) {
  const int64_t known = static_cast<int64_t>(seq.tokens.size());
  if (outgrown && resizable_) {
    // Growth: the same state in a larger buffer, nothing recomputed.
    seq.state = outgrown->resized(capacity);
    scheduler_.on_admitted(seq.id, seq.state->n_past(), seq.state->capacity());
    return;
  }
  // A queued end-of-turn of this very conversation: fold it now so the lookup below finds it.
  if (end_of_turn_.continued_by(seq.tokens)) flush_end_of_turns();
  // The last known token is always folded here: its logits choose the next token.
  if (disk_) restore_from_disk(seq.tokens, known - 1, capacity, seq.request.cache_key);
  PrefixCache::Hit hit = cache_.lookup(seq.tokens, known - 1, resizable_ ? 0 : capacity, seq.request.cache_key);
  if (hit.snapshot != nullptr) seq.state = resizable_ ? hit.snapshot->resized(capacity) : hit.snapshot->clone();
  else seq.state = model_.new_state(capacity, pool_);
  scheduler_.on_admitted(seq.id, hit.tokens, seq.state->capacity());
  if (!seq.admitted_once) {
    seq.admitted_once = true;
    cache_.count_request(seq.request.cache_key);
    seq.stats.cached_prompt_tokens = static_cast<int>(std::min<int64_t>(hit.tokens, static_cast<int64_t>(seq.prompt_len)));
    prompt_tokens_reused_ += seq.stats.cached_prompt_tokens;
  }
}

std::optional<std::string> EngineMemory::make_room(std::vector<Scheduler::Work>& work) {
  auto needed = [&] {
    int64_t n = 0;
    for (const Scheduler::Work& w : work) {
      const Sequence& seq = *seqs_.at(w.id);
      n += seq.state->kv_pages_needed(w.n_tokens + static_cast<int64_t>(seq.draft.size()));
    }
    return n;
  };
  while (needed() > pool_->free_pages()) {
    bool drafted = false;  // drafts are only a speed-up: dropped first
    for (const Scheduler::Work& w : work) {
      drafted = drafted || !seqs_.at(w.id)->draft.empty();
      seqs_.at(w.id)->draft.clear();
    }
    if (drafted) continue;
    if (!end_of_turn_.empty()) {  // queued end-of-turns are only a head start
      end_of_turn_.clear();
      cache_.trim();  // pages the dropped folds shared with snapshots are the cache's now
      continue;
    }
    if (cache_.evict_lru()) continue;
    std::optional<uint64_t> victim = scheduler_.youngest_running();
    if (!victim || scheduler_.running() == 1)
      return fmt::format("the KV page pool ({} pages of {} tokens) cannot hold this sequence; raise kv_pool_bytes",
                         pool_->max_pages(), pool_->page_tokens());
    scheduler_.preempt(*victim);
    scheduler_.hold_admissions(true);  // until a sequence finishes and returns pages
    seqs_.at(*victim)->state.reset();
    work = scheduler_.batch();
  }
  return std::nullopt;
}

void EngineMemory::restore_from_disk(std::span<const int32_t> ids, int64_t max_tokens, int64_t capacity,
                                     const std::string& group) {
  const int64_t min_capacity = resizable_ ? 0 : capacity;
  const PrefixCache::Hit hit = cache_.lookup(ids, max_tokens, min_capacity, group);
  DiskCache::Loaded loaded = disk_->load_deepest(ids, max_tokens, hit.tokens, min_capacity);
  if (!loaded.state) return;
  const int64_t tokens = loaded.tokens;
  if (cache_.insert(ids.first(static_cast<size_t>(tokens)), std::move(loaded.state), group)) tokens_from_disk_ += tokens;
}

void EngineMemory::snapshot(const Sequence& seq, int64_t at) {
  const std::span<const int32_t> key(seq.tokens.data(), static_cast<size_t>(at));
  if (cache_.contains(key, resizable_ ? 0 : seq.state->capacity())) return;
  cache_.insert(key, resizable_ ? seq.state->resized(at) : seq.state->clone(), seq.request.cache_key);
}

void EngineMemory::keep_finished(Sequence& seq, bool ends_with_stop_token) {
  if (!scheduler_.has_state(seq.id)) return;
  // A finished reply stays reusable: the state after prompt + reply (all but the last sampled token,
  // which was never folded) moves into the prefix cache without a copy.
  if (seq.state && seq.state->n_past() > 0) {
    const std::span<const int32_t> key(seq.tokens.data(), static_cast<size_t>(seq.state->n_past()));
    if (!cache_.contains(key, resizable_ ? 0 : seq.state->capacity()))
      cache_.insert(key, resizable_ ? seq.state->resized(seq.state->n_past()) : std::move(seq.state), seq.request.cache_key);
  }
  end_of_turn_.queue(seq, ends_with_stop_token);
}

void EngineMemory::preload(std::vector<int32_t> ids, const std::string& group) {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n == 0 || cache_.contains(ids, resizable_ ? 0 : n) || end_of_turn_.queued(ids)) return;
  // Where the history as it will be rendered leaves what is cached (a template that drops an earlier
  // reply's reasoning diverges at that reply): fold from the deepest snapshot before it.
  if (disk_) {
    restore_from_disk(ids, n, n, group);
    if (cache_.contains(ids, resizable_ ? 0 : n)) return;
  }
  PrefixCache::Hit hit = cache_.lookup(ids, n, resizable_ ? 0 : n, group);
  std::unique_ptr<models::SequenceState> state;
  if (hit.snapshot != nullptr) state = resizable_ ? hit.snapshot->resized(n) : hit.snapshot->clone();
  else state = model_.new_state(n, pool_);
  end_of_turn_.queue(std::move(state), std::move(ids), group);
}

void EngineMemory::flush_end_of_turns(const std::function<bool()>& interrupted) {
  end_of_turn_tokens_ += end_of_turn_.flush(model_, *pool_, cache_, chunk_tokens_, interrupted);
  cache_.trim();  // pages finished folds shared with snapshots are the cache's now
}

}  // namespace kapitsa::runtime
