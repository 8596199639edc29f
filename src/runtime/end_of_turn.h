// EndOfTurnQueue: finished replies whose end-of-turn ids (GenerateRequest::end_of_turn_ids) are still
// to be folded into a share of the reply's state and filed in the prefix cache, so that the next turn
// of the conversation prefills only what is new. Only a head start, never waited for: at most `limit`
// jobs (the oldest give way), and a job whose KV pages the pool lacks is dropped. Engine thread only.
#pragma once

#include "models/model.h"
#include "runtime/prefix_cache.h"
#include "runtime/sequence.h"

#include <cstdint>
#include <deque>
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
  // Whether `tokens` continue a queued conversation (then flush first, so the prefix cache has it).
  bool continued_by(std::span<const int32_t> tokens) const;
  // Folds every queued job in one forward step and files the states in `cache`; returns the tokens
  // folded. Runs when the engine is idle, or at once when an admitted prompt continues a conversation.
  int64_t flush(const models::Model& model, const models::KvPagePool& pool, PrefixCache& cache);
  bool empty() const { return jobs_.empty(); }
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
