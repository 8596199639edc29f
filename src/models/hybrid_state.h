// HybridState: the per-sequence memory of a hybrid model, written once for both families — per layer
// either attention KV (pages of a shared KvPagePool; one block table serves every attention layer) or a
// recurrent state (conv window + f32 SSM/DeltaNet state; Recurrent is GdnState or Mamba2State, both
// {conv_window, ssm}). Copies (snapshots, resized) share the KV pages by reference count and copy the
// recurrent state; before a write, prepare_kv copies a shared, partly filled page (copy-on-write).
// Invariant: outside a forward pass the block table holds exactly pages_for(n_past) pages.
#pragma once

#include "models/kv_pages.h"
#include "models/layers/attention.h"
#include "models/model.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

namespace kapitsa::models {

template <typename Recurrent>
class HybridState final : public SequenceState {
 public:
  std::vector<int> kv_layer;                         // per layer: its index among the pool's layers, or -1
  std::vector<std::optional<Recurrent>> recurrent;  // per layer (recurrent layers only)

  HybridState(int64_t capacity, std::shared_ptr<KvPagePool> pool) : pool_(std::move(pool)) { capacity_ = capacity; }
  ~HybridState() override {
    for (int32_t page : pages_) pool_->release(page);
  }
  HybridState(const HybridState&) = delete;
  HybridState& operator=(const HybridState&) = delete;

  size_t own_bytes() const override {
    size_t total = 0;
    for (const auto& s : recurrent)
      if (s) total += s->conv_window.tensor().nbytes() + s->ssm.tensor().nbytes();
    return total;
  }
  size_t bytes() const override {
    return own_bytes() + static_cast<size_t>(pool_->pages_for(capacity_)) * pool_->page_bytes();
  }
  std::span<const int32_t> kv_pages() const override { return pages_; }
  const KvPagePool* kv_pool() const override { return pool_.get(); }

  std::unique_ptr<SequenceState> clone() const override { return copy_with_capacity(capacity_); }
  std::unique_ptr<SequenceState> resized(int64_t capacity) const override {
    if (capacity < n_past_) return nullptr;
    return copy_with_capacity(capacity);
  }

  // Pages the pool must supply before n more tokens are folded: new pages past the block table, plus
  // one when the partly filled page the tokens continue is shared.
  int64_t kv_pages_needed(int64_t n) const override {
    if (pool_->layout().n_layers == 0 || n <= 0) return 0;
    const int64_t fresh = std::max<int64_t>(0, pool_->pages_for(n_past_ + n) - static_cast<int64_t>(pages_.size()));
    return fresh + (shared_partial_page() ? 1 : 0);
  }
  // Makes positions [n_past, n_past + n) writable by this state alone. False (nothing changed) when the
  // pool has too few free pages.
  bool prepare_kv(int64_t n) {
    const int64_t needed = kv_pages_needed(n);
    if (needed == 0) return true;
    if (needed > pool_->free_pages()) return false;
    if (shared_partial_page()) {
      int32_t& page = pages_[static_cast<size_t>(n_past_ / pool_->page_tokens())];
      const int32_t own = pool_->allocate();
      pool_->copy_page(page, own);
      pool_->release(page);
      page = own;
    }
    while (static_cast<int64_t>(pages_.size()) < pool_->pages_for(n_past_ + n)) pages_.push_back(pool_->allocate());
    return true;
  }
  // Attention layer `layer`'s KV (valid until the pool next allocates).
  KvPages kv(size_t layer) const {
    const int l = kv_layer[layer];
    return KvPages{pool_->k(l), pool_->v(l), pages_};
  }
  const KvPagePool& pool() const { return *pool_; }

  void advance(int64_t n) { n_past_ += n; }

 private:
  bool shared_partial_page() const {
    const int64_t P = pool_->page_tokens();
    return n_past_ % P != 0 && pool_->refcount(pages_[static_cast<size_t>(n_past_ / P)]) > 1;
  }

  std::unique_ptr<HybridState> copy_with_capacity(int64_t capacity) const {
    auto copy = std::make_unique<HybridState>(capacity, pool_);
    copy->n_past_ = n_past_;
    copy->kv_layer = kv_layer;
    const size_t held = static_cast<size_t>(pool_->pages_for(n_past_));
    copy->pages_.assign(pages_.begin(), pages_.begin() + static_cast<std::ptrdiff_t>(std::min(held, pages_.size())));
    for (int32_t page : copy->pages_) pool_->retain(page);
    for (const auto& s : recurrent)
      copy->recurrent.push_back(
          s ? std::optional<Recurrent>(Recurrent{Buffer::copy_of(s->conv_window), Buffer::copy_of(s->ssm)}) : std::nullopt);
    return copy;
  }

  std::shared_ptr<KvPagePool> pool_;
  std::vector<int32_t> pages_;  // the block table: page i holds positions [i·P, (i+1)·P)
};

// Before a forward pass over `items` (states of type State): gives every state the KV pages its new
// tokens need. Error, changing nothing, when a pool has too few free pages.
template <typename State>
Status prepare_kv_pages(std::span<const Model::BatchItem> items) {
  std::vector<std::pair<const KvPagePool*, int64_t>> needed;  // per pool
  for (const Model::BatchItem& item : items) {
    const auto& state = static_cast<const State&>(*item.state);
    const int64_t n = state.kv_pages_needed(static_cast<int64_t>(item.ids.size()));
    auto it = std::find_if(needed.begin(), needed.end(), [&](const auto& p) { return p.first == &state.pool(); });
    if (it == needed.end()) needed.emplace_back(&state.pool(), n);
    else it->second += n;
  }
  for (const auto& [pool, n] : needed)
    if (n > pool->free_pages())
      return error("the KV page pool is full: this step needs {} more pages of {} tokens, {} of {} are in use", n,
                   pool->page_tokens(), pool->used_pages(), pool->max_pages());
  for (const Model::BatchItem& item : items) {
    auto& state = static_cast<State&>(*item.state);
    KAPITSA_CHECK(state.prepare_kv(static_cast<int64_t>(item.ids.size())), "KV pages vanished during a step");
  }
  return ok_status();
}

}  // namespace kapitsa::models
