// EndOfTurnQueue: conversations to fold into the prefix cache while the engine is idle, so that the
// next turn prefills only what is new. Two sources: a finished reply whose end-of-turn ids
// (GenerateRequest::end_of_turn_ids) follow its content, and a preload (Engine::preload: the history
// as the next request will render it, resumed from the deepest snapshot on its path). A job folds its
// tokens and files the state in the cache under them. Only a head start, never waited for: at most
// `limit` jobs (the oldest give way), a job whose KV pages the pool lacks is dropped, and a fold stops
// between chunks when a request arrives (the job keeps its progress). Engine thread only.
#pragma once

#include "models/model.h"
#include "runtime/prefix_cache.h"
#include "runtime/sequence.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kapitsa::runtime {

class EndOfTurnQueue {
 public:
  explicit EndOfTurnQueue(size_t limit) : limit_(limit) {}

  // After a reply that ended (stop or length) with its state: queues its conversation up to the end
  // of the turn. ends_with_stop_token: the last token is EOS / a stop id, which is not content.
  void queue(const Sequence& seq, bool ends_with_stop_token);
  // Queues `tokens` to be folded from `state` (which holds a prefix of them; capacity ≥ tokens.size()).
  void queue(std::unique_ptr<models::SequenceState> state, std::vector<int32_t> tokens, std::string group);
  // Whether `tokens` continue a queued conversation (then flush first, so the prefix cache has it).
  bool continued_by(std::span<const int32_t> tokens) const;
  // Whether a job already folds exactly `tokens`.
  bool queued(std::span<const int32_t> tokens) const;
  // Folds the queued jobs together, `chunk_tokens` per job per forward step, and files each finished
  // state in `cache`; returns the tokens folded. Between steps, `interrupted()` (may be empty) true
  // stops early: unfinished jobs stay queued with their progress. Runs when the engine is idle, or
  // at once (uninterrupted) when an admitted prompt continues a conversation.
  int64_t flush(const models::Model& model, const models::KvPagePool& pool, PrefixCache& cache, int64_t chunk_tokens,
                const std::function<bool()>& interrupted = {});
  bool empty() const { return jobs_.empty(); }
  int64_t pending_tokens() const;  // tokens the queued jobs have left to fold
  void clear() { jobs_.clear(); }

 private:
  struct Job {
    std::unique_ptr<models::SequenceState> state;  // after a prefix of `tokens`
    std::vector<int32_t> tokens;                   // the conversation up to the end of the turn
    std::string group;                             // the request's cache_key
  };
  size_t limit_;
  std::deque<Job> jobs_;
};

}  // namespace kapitsa::runtime
