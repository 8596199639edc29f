// HybridState: KV pages by reference, recurrent state in one slot (see hybrid_state.h).
#include "models/hybrid_state.h"

#include <algorithm>

namespace kapitsa::models {

HybridState::HybridState(int64_t capacity, std::shared_ptr<KvPagePool> pool, std::shared_ptr<StateSlotPool> slots)
    : pool_(std::move(pool)), slots_(std::move(slots)) {
  capacity_ = capacity;
  if (slots_->layout().n_layers > 0) slot_ = slots_->allocate();
}

HybridState::~HybridState() {
  for (int32_t page : pages_) pool_->release(page);
  if (slot_ >= 0) slots_->release(slot_);
}

size_t HybridState::bytes() const {
  return own_bytes() + static_cast<size_t>(pool_->pages_for(capacity_)) * pool_->page_bytes();
}

std::unique_ptr<SequenceState> HybridState::resized(int64_t capacity) const {
  if (capacity < n_past_) return nullptr;
  return copy_with_capacity(capacity);
}

// New pages past the block table, plus one when the partly filled page the tokens continue is shared.
int64_t HybridState::kv_pages_needed(int64_t n) const {
  if (pool_->layout().n_layers == 0 || n <= 0) return 0;
  const int64_t fresh = std::max<int64_t>(0, pool_->pages_for(n_past_ + n) - static_cast<int64_t>(pages_.size()));
  return fresh + (shared_partial_page() ? 1 : 0);
}

void HybridState::rollback(int64_t n_past, int32_t& checkpoint_slot) {
  KAPITSA_CHECK(n_past >= 0 && n_past <= n_past_, "rollback to {} tokens of {}", n_past, n_past_);
  if (checkpoint_slot >= 0) {
    KAPITSA_CHECK(slot_ >= 0 && checkpoint_slot != slot_, "rollback to checkpoint slot {}", checkpoint_slot);
    std::swap(slot_, checkpoint_slot);
  }
  n_past_ = n_past;
  const size_t held = static_cast<size_t>(pool_->pages_for(n_past_));
  while (pages_.size() > held) {  // the invariant: exactly pages_for(n_past) pages
    pool_->release(pages_.back());
    pages_.pop_back();
  }
}

bool HybridState::prepare_kv(int64_t n) {
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

bool HybridState::shared_partial_page() const {
  const int64_t P = pool_->page_tokens();
  return n_past_ % P != 0 && pool_->refcount(pages_[static_cast<size_t>(n_past_ / P)]) > 1;
}

std::unique_ptr<HybridState> HybridState::copy_with_capacity(int64_t capacity) const {
  auto copy = std::make_unique<HybridState>(capacity, pool_, slots_);
  copy->n_past_ = n_past_;
  const size_t held = static_cast<size_t>(pool_->pages_for(n_past_));
  copy->pages_.assign(pages_.begin(), pages_.begin() + static_cast<std::ptrdiff_t>(std::min(held, pages_.size())));
  for (int32_t page : copy->pages_) pool_->retain(page);
  if (slot_ >= 0) slots_->copy_slot(slot_, copy->slot_);
  return copy;
}

Status prepare_kv_pages(std::span<const ForwardBatch::Sequence> sequences) {
  std::vector<std::pair<const KvPagePool*, int64_t>> needed;  // per pool
  for (const ForwardBatch::Sequence& s : sequences) {
    const auto& state = static_cast<const HybridState&>(*s.state);
    const int64_t n = state.kv_pages_needed(static_cast<int64_t>(s.ids.size()));
    auto it = std::find_if(needed.begin(), needed.end(), [&](const auto& p) { return p.first == &state.pool(); });
    if (it == needed.end()) needed.emplace_back(&state.pool(), n);
    else it->second += n;
  }
  for (const auto& [pool, n] : needed)
    if (n > pool->free_pages())
      return error("the KV page pool is full: this step needs {} more pages of {} tokens, {} of {} are in use", n,
                   pool->page_tokens(), pool->used_pages(), pool->max_pages());
  for (const ForwardBatch::Sequence& s : sequences) {
    auto& state = static_cast<HybridState&>(*s.state);
    KAPITSA_CHECK(state.prepare_kv(static_cast<int64_t>(s.ids.size())), "KV pages vanished during a step");
  }
  return ok_status();
}

}  // namespace kapitsa::models
