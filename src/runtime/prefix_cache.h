// PrefixCache: a radix tree over token ids whose nodes may hold a snapshot of a sequence's whole state
// (attention KV + every recurrent slot) after exactly the tokens on the path to them. Recurrent state
// cannot be truncated, so a request resumes only from a node that has a snapshot: the deepest one on
// its prompt's path. LRU eviction of snapshots under a byte budget; nodes left without snapshot and
// children are pruned. Not thread-safe (the engine thread owns it).
// Snapshots hold references to their KV pages (shared with the sequence they were taken from, with
// each other along one conversation, and with sequences resumed from them) plus their own copy of the
// recurrent state. What the cache costs — and what the budget bounds — is what evicting everything
// would free: every snapshot's own bytes, plus each page that only snapshots reference, counted once.
// Pages also held by running sequences are theirs (the scheduler counts them), so after sequences
// finish the engine calls trim().
// Groups (GenerateRequest::cache_key, one per conversation/session): using one snapshot of a group
// refreshes the whole group, so a conversation's snapshots age together and go least recently used
// group first (its oldest snapshot first); snapshots without a group age alone. A group that has
// served two requests or more (a conversation past its first turn) outranks one-request groups and
// ungrouped snapshots: an agent's side requests (opencode's title, Claude Code's small calls) are
// evicted before the main conversation's snapshots, however recent they are.
#pragma once

#include "models/model.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
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
  Hit lookup(std::span<const int32_t> ids, int64_t max_tokens, int64_t min_capacity, const std::string& group = "");

  // Stores `snapshot`, the state after exactly `ids` (snapshot->n_past() == ids.size()). An existing
  // snapshot there is kept unless the new one has a larger capacity. Evicts least recently used
  // snapshots to stay within the budget; false when the snapshot alone exceeds it (it is dropped).
  bool insert(std::span<const int32_t> ids, std::unique_ptr<models::SequenceState> snapshot,
              const std::string& group = "");
  // Called with every snapshot offered to insert, kept or not (the disk cache writes them through).
  using InsertListener = std::function<void(std::span<const int32_t> ids, const models::SequenceState& snapshot)>;
  void set_insert_listener(InsertListener listener) { on_insert_ = std::move(listener); }
  // A request of `group` was admitted (counts towards the group's rank; "" → nothing).
  void count_request(const std::string& group);
  // Whether a snapshot of at least `min_capacity` exists after exactly `ids`.
  bool contains(std::span<const int32_t> ids, int64_t min_capacity = 0) const;

  // Own bytes of every snapshot + pages referenced only by snapshots (each once). Recomputed at each
  // insert / evict / trim: pages change hands when sequences holding them end.
  size_t bytes() const { return bytes_; }
  // Evicts least recently used snapshots until bytes() is within the budget.
  void trim();
  // Evicts the least recently used snapshot; false when there is none.
  bool evict_lru();
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
    std::string group;  // cache_key of the request that stored it ("" → none)
  };
  // The node after exactly `ids`, creating and splitting edges when `create`; null when absent.
  Node* find(std::span<const int32_t> ids, bool create);
  void evict(Node* node);
  void prune(Node* node);
  static size_t count(const Node& node);
  void add_pages(const models::SequenceState& s, int delta);
  void touch(Node* node, const std::string& group);  // marks it (and its group) used now
  uint64_t recency(const Node* node) const;
  size_t recount();  // sets and returns bytes_

  size_t budget_;
  size_t bytes_ = 0;
  size_t own_bytes_ = 0;                          // Σ snapshots' own_bytes()
  const models::KvPagePool* pool_ = nullptr;      // of the snapshots' pages (one engine, one pool)
  std::unordered_map<int32_t, int> page_refs_;    // page → references from snapshots
  std::unordered_map<std::string, uint64_t> group_used_;  // group → when one of its snapshots was last used
  std::unordered_map<std::string, int64_t> group_requests_;  // group → requests admitted (while it has snapshots)
  bool long_lived(const Node* node) const;  // its group has served two requests or more
  uint64_t clock_ = 0;
  InsertListener on_insert_;
  Node root_;
  std::vector<Node*> with_snapshot_;
};

}  // namespace kapitsa::runtime
