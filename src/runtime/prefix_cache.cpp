// Radix tree of state snapshots with LRU eviction (see prefix_cache.h).
#include "runtime/prefix_cache.h"

#include "base/check.h"

#include <algorithm>

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

PrefixCache::Hit PrefixCache::lookup(std::span<const int32_t> ids, int64_t max_tokens, int64_t min_capacity) {
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
    best->last_used = ++clock_;
    hit.snapshot = best->snapshot.get();
  }
  return hit;
}

bool PrefixCache::contains(std::span<const int32_t> ids, int64_t min_capacity) const {
  Node* node = const_cast<PrefixCache*>(this)->find(ids, false);
  return node != nullptr && node->snapshot && node->snapshot->capacity() >= min_capacity;
}

bool PrefixCache::insert(std::span<const int32_t> ids, std::unique_ptr<models::SequenceState> snapshot) {
  KAPITSA_CHECK(snapshot && snapshot->n_past() == static_cast<int64_t>(ids.size()) && !ids.empty(),
                "prefix cache: a snapshot of {} tokens filed under {} ids", snapshot ? snapshot->n_past() : -1, ids.size());
  const size_t size = snapshot->bytes();
  if (size > budget_) return false;
  if (Node* existing = find(ids, false); existing != nullptr && existing->snapshot) {
    existing->last_used = ++clock_;
    if (existing->snapshot->capacity() >= snapshot->capacity()) return true;
    bytes_ -= existing->snapshot->bytes();
    existing->snapshot.reset();
    with_snapshot_.erase(std::find(with_snapshot_.begin(), with_snapshot_.end(), existing));
  }
  // Make room, least recently used first. The target node is looked up only afterwards: eviction
  // prunes empty nodes, which could include it.
  while (bytes_ + size > budget_ && !with_snapshot_.empty()) {
    Node* oldest = *std::min_element(with_snapshot_.begin(), with_snapshot_.end(),
                                     [](const Node* a, const Node* b) { return a->last_used < b->last_used; });
    evict(oldest);
  }
  Node* node = find(ids, true);
  node->snapshot = std::move(snapshot);
  node->last_used = ++clock_;
  bytes_ += size;
  with_snapshot_.push_back(node);
  return true;
}

void PrefixCache::evict(Node* node) {
  bytes_ -= node->snapshot->bytes();
  node->snapshot.reset();
  with_snapshot_.erase(std::find(with_snapshot_.begin(), with_snapshot_.end(), node));
  prune(node);
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
  bytes_ = 0;
}

}  // namespace kapitsa::runtime
