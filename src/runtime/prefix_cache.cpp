// Radix tree of state snapshots with LRU eviction; bytes count shared KV pages once (see prefix_cache.h).
#include "runtime/prefix_cache.h"

#include "base/check.h"

#include <algorithm>
#include <tuple>

namespace kapitsa::runtime {

PrefixCache::~PrefixCache() = default;

PrefixCache::Node* PrefixCache::find(std::span<const int32_t> ids, bool create) {
  Node* node = &root_;
  size_t i = 0;
  while (i < ids.size()) {
    auto it = node->children.find(ids[i]);
    if (it == node->children.end()) {
      if (!create) return nullptr;
      auto child = std::make_unique<Node>();
      child->edge.assign(ids.begin() + static_cast<std::ptrdiff_t>(i), ids.end());
      child->parent = node;
      Node* raw = child.get();
      node->children.emplace(ids[i], std::move(child));
      return raw;
    }
    Node* child = it->second.get();
    const size_t n = std::min(child->edge.size(), ids.size() - i);
    size_t common = 0;
    while (common < n && child->edge[common] == ids[i + common]) ++common;
    if (common < child->edge.size()) {
      if (!create) return nullptr;
      // Split the edge: parent → middle (the common part) → child (the rest).
      auto middle = std::make_unique<Node>();
      middle->edge.assign(child->edge.begin(), child->edge.begin() + static_cast<std::ptrdiff_t>(common));
      middle->parent = node;
      std::unique_ptr<Node> owned = std::move(it->second);
      owned->edge.erase(owned->edge.begin(), owned->edge.begin() + static_cast<std::ptrdiff_t>(common));
      owned->parent = middle.get();
      const int32_t first = owned->edge.front();
      middle->children.emplace(first, std::move(owned));
      it->second = std::move(middle);
      child = it->second.get();
    }
    node = child;
    i += common;
  }
  return node;
}

void PrefixCache::touch(Node* node, const std::string& group) {
  node->last_used = ++clock_;
  if (!node->group.empty()) group_used_[node->group] = clock_;
  if (!group.empty() && group != node->group) group_used_[group] = clock_;
}

uint64_t PrefixCache::recency(const Node* node) const {
  if (node->group.empty()) return node->last_used;
  auto it = group_used_.find(node->group);
  return it == group_used_.end() ? node->last_used : std::max(node->last_used, it->second);
}

PrefixCache::Hit PrefixCache::lookup(std::span<const int32_t> ids, int64_t max_tokens, int64_t min_capacity,
                                     const std::string& group) {
  Hit hit;
  Node* best = nullptr;
  const Node* node = &root_;
  size_t i = 0;
  while (i < ids.size()) {
    auto it = node->children.find(ids[i]);
    if (it == node->children.end()) break;
    const Node* child = it->second.get();
    if (child->edge.size() > ids.size() - i ||
        !std::equal(child->edge.begin(), child->edge.end(), ids.begin() + static_cast<std::ptrdiff_t>(i)))
      break;
    i += child->edge.size();
    if (static_cast<int64_t>(i) > max_tokens) break;
    if (child->snapshot && child->snapshot->capacity() >= min_capacity) {
      best = const_cast<Node*>(child);
      hit.tokens = static_cast<int64_t>(i);
    }
    node = child;
  }
  if (best != nullptr) {
    touch(best, group);
    hit.snapshot = best->snapshot.get();
  }
  return hit;
}

bool PrefixCache::contains(std::span<const int32_t> ids, int64_t min_capacity) const {
  Node* node = const_cast<PrefixCache*>(this)->find(ids, false);
  return node != nullptr && node->snapshot && node->snapshot->capacity() >= min_capacity;
}

bool PrefixCache::insert(std::span<const int32_t> ids, std::unique_ptr<models::SequenceState> snapshot,
                         const std::string& group) {
  KAPITSA_CHECK(snapshot && snapshot->n_past() == static_cast<int64_t>(ids.size()) && !ids.empty(),
                "prefix cache: a snapshot of {} tokens filed under {} ids", snapshot ? snapshot->n_past() : -1, ids.size());
  if (on_insert_) on_insert_(ids, *snapshot);
  // What it adds: its own bytes and the pages only snapshots will hold once it is in — those only it
  // references and those it shares with snapshots already here but no live state (a state folded on from
  // a snapshot's clone and moved in whole: the end-of-turn fold). The latter count as the cache's only
  // from now on. Eviction releases a snapshot's references and page_refs_ alike, so this stays what
  // it adds however many are evicted to make room.
  size_t size = snapshot->own_bytes();
  if (const models::KvPagePool* pool = snapshot->kv_pool())
    for (int32_t page : snapshot->kv_pages()) {
      const auto cached = page_refs_.find(page);
      const int in_cache = cached == page_refs_.end() || pool != pool_ ? 0 : cached->second;
      size += pool->refcount(page) == 1 + in_cache ? pool->page_bytes() : 0;
    }
  if (size > budget_) return false;
  if (Node* existing = find(ids, false); existing != nullptr && existing->snapshot) {
    touch(existing, group);
    if (existing->snapshot->capacity() >= snapshot->capacity()) return true;
    own_bytes_ -= existing->snapshot->own_bytes();
    add_pages(*existing->snapshot, -1);
    existing->snapshot.reset();
    with_snapshot_.erase(std::find(with_snapshot_.begin(), with_snapshot_.end(), existing));
  }
  // Make room, least recently used first. The target node is looked up only afterwards: eviction
  // prunes empty nodes, which could include it.
  while (recount() + size > budget_ && evict_lru()) {
  }
  Node* node = find(ids, true);
  own_bytes_ += snapshot->own_bytes();
  add_pages(*snapshot, +1);
  node->snapshot = std::move(snapshot);
  node->group = group;
  touch(node, group);
  with_snapshot_.push_back(node);
  recount();
  return true;
}

void PrefixCache::add_pages(const models::SequenceState& s, int delta) {
  const models::KvPagePool* pool = s.kv_pool();
  if (pool == nullptr) return;
  KAPITSA_CHECK(pool_ == nullptr || pool_ == pool || page_refs_.empty(), "prefix cache: snapshots from two KV pools");
  pool_ = pool;
  for (int32_t page : s.kv_pages()) {
    int& n = page_refs_[page];
    n += delta;
    if (n == 0) page_refs_.erase(page);
  }
}

size_t PrefixCache::recount() {
  size_t pages = 0;
  for (const auto& [page, n] : page_refs_) pages += pool_->refcount(page) == n;  // no one else holds it
  bytes_ = own_bytes_ + (pages == 0 ? 0 : pages * pool_->page_bytes());
  return bytes_;
}

void PrefixCache::trim() {
  while (recount() > budget_ && evict_lru()) {
  }
}

void PrefixCache::count_request(const std::string& group) {
  if (group.empty()) return;
  ++group_requests_[group];
  // Groups that never kept a snapshot would pile up: forget the one-request ones now and then.
  if (group_requests_.size() > 4096)
    std::erase_if(group_requests_, [&](const auto& g) { return g.second < 2 && !group_used_.contains(g.first); });
}

bool PrefixCache::long_lived(const Node* node) const {
  if (node->group.empty()) return false;
  auto it = group_requests_.find(node->group);
  return it != group_requests_.end() && it->second >= 2;
}

bool PrefixCache::evict_lru() {
  if (with_snapshot_.empty()) return false;
  // One-request groups and ungrouped snapshots first, then conversations; least recently used group
  // (or ungrouped snapshot) first; inside a group, its oldest snapshot.
  evict(*std::min_element(with_snapshot_.begin(), with_snapshot_.end(), [&](const Node* a, const Node* b) {
    return std::tuple(long_lived(a), recency(a), a->last_used) < std::tuple(long_lived(b), recency(b), b->last_used);
  }));
  return true;
}

void PrefixCache::evict(Node* node) {
  own_bytes_ -= node->snapshot->own_bytes();
  add_pages(*node->snapshot, -1);
  node->snapshot.reset();  // releases its pages
  with_snapshot_.erase(std::find(with_snapshot_.begin(), with_snapshot_.end(), node));
  if (!node->group.empty() &&
      std::none_of(with_snapshot_.begin(), with_snapshot_.end(), [&](const Node* n) { return n->group == node->group; })) {
    group_used_.erase(node->group);
    group_requests_.erase(node->group);
  }
  prune(node);
  recount();
}

void PrefixCache::prune(Node* node) {
  // Nodes that hold nothing and lead nowhere go.
  while (node != &root_ && !node->snapshot && node->children.empty()) {
    Node* parent = node->parent;
    parent->children.erase(node->edge.front());
    node = parent;
  }
}

size_t PrefixCache::count(const Node& node) {
  size_t n = 0;
  for (const auto& [first, child] : node.children) n += 1 + count(*child);
  return n;
}

size_t PrefixCache::nodes() const { return count(root_); }

void PrefixCache::clear() {
  root_.children.clear();
  with_snapshot_.clear();
  page_refs_.clear();
  group_used_.clear();
  group_requests_.clear();
  pool_ = nullptr;
  own_bytes_ = 0;
  bytes_ = 0;
}

}  // namespace kapitsa::runtime
