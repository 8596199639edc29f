// PrefixCache: a radix tree over token ids whose nodes may hold a snapshot of a sequence's whole state
// (attention KV + every recurrent slot) after exactly the tokens on the path to them. Recurrent state
// cannot be truncated, so a request resumes only from a node that has a snapshot: the deepest one on
// its prompt's path. LRU eviction of snapshots under a byte budget; nodes left without snapshot and
// children are pruned. Not thread-safe (the engine thread owns it).
// Snapshots are SequenceState deep copies (trimmed to the tokens they hold when the model can resize
// states), not paged KV with shared pages: two snapshots of one conversation each hold their own copy
// of the common KV.
#pragma once

#include "models/model.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

namespace kapitsa::runtime {

class PrefixCache {
 public:
  explicit PrefixCache(size_t budget_bytes) : budget_(budget_bytes) {}
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  struct Hit {
    const models::SequenceState* snapshot = nullptr;  // valid until the next insert/clear
    int64_t tokens = 0;                               // how many leading ids it covers
  };
  // The deepest snapshot after a prefix of `ids` of at most `max_tokens` tokens whose capacity is at
  // least `min_capacity`; marks it used. No hit: snapshot == nullptr.
  Hit lookup(std::span<const int32_t> ids, int64_t max_tokens, int64_t min_capacity);

  // Stores `snapshot`, the state after exactly `ids` (snapshot->n_past() == ids.size()). An existing
  // snapshot there is kept unless the new one has a larger capacity. Evicts least recently used
  // snapshots to stay within the budget; false when the snapshot alone exceeds it (it is dropped).
  bool insert(std::span<const int32_t> ids, std::unique_ptr<models::SequenceState> snapshot);
  // Whether a snapshot of at least `min_capacity` exists after exactly `ids`.
  bool contains(std::span<const int32_t> ids, int64_t min_capacity = 0) const;

  size_t bytes() const { return bytes_; }
  size_t budget() const { return budget_; }
  size_t snapshots() const { return with_snapshot_.size(); }
  size_t nodes() const;  // tree nodes besides the root (tests: pruning)
  void clear();

 private:
  struct Node {
    std::vector<int32_t> edge;  // ids from the parent to here
    Node* parent = nullptr;
    std::map<int32_t, std::unique_ptr<Node>> children;  // by the first id of their edge
    std::unique_ptr<models::SequenceState> snapshot;
    uint64_t last_used = 0;
  };
  // The node after exactly `ids`, creating and splitting edges when `create`; null when absent.
  Node* find(std::span<const int32_t> ids, bool create);
  void evict(Node* node);
  void prune(Node* node);
  static size_t count(const Node& node);

  size_t budget_;
  size_t bytes_ = 0;
  uint64_t clock_ = 0;
  Node root_;
  std::vector<Node*> with_snapshot_;
};

}  // namespace kapitsa::runtime
