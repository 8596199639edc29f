// HybridState: the per-sequence memory of a hybrid model, for both families — attention KV in pages of
// a shared KvPagePool (one block table serves every attention layer) and the recurrent state of every
// recurrent layer in one slot of a shared StateSlotPool. Copies (snapshots, resized) share the KV pages
// by reference count and copy the slot; before a write, prepare_kv copies a shared, partly filled page
// (copy-on-write).
// Invariant: outside a forward pass the block table holds exactly pages_for(n_past) pages.
#pragma once

#include "models/kv_pages.h"
#include "models/model.h"
#include "models/state_slots.h"

#include <memory>
#include <vector>

namespace kapitsa::models {

class HybridState final : public SequenceState {
 public:
  // A fresh state (no tokens): a zeroed slot when the model has recurrent layers.
  HybridState(int64_t capacity, std::shared_ptr<KvPagePool> pool, std::shared_ptr<StateSlotPool> slots);
  ~HybridState() override;
  HybridState(const HybridState&) = delete;
  HybridState& operator=(const HybridState&) = delete;

  size_t own_bytes() const override { return slots_->layout().bytes_per_slot(); }
  size_t bytes() const override;
  std::span<const int32_t> kv_pages() const override { return pages_; }
  const KvPagePool* kv_pool() const override { return pool_.get(); }
  int32_t state_slot() const override { return slot_; }
  StateSlotPool* slot_pool() const override { return slots_.get(); }
  std::unique_ptr<SequenceState> clone() const override { return copy_with_capacity(capacity_); }
  std::unique_ptr<SequenceState> resized(int64_t capacity) const override;
  int64_t kv_pages_needed(int64_t n) const override;
  void rollback(int64_t n_past, int32_t& checkpoint_slot) override;

  // Makes positions [n_past, n_past + n) writable by this state alone. False (nothing changed) when the
  // pool has too few free pages.
  bool prepare_kv(int64_t n);
  KvPagePool& pool() const { return *pool_; }
  StateSlotPool& slots() const { return *slots_; }
  void advance(int64_t n) { n_past_ += n; }

 private:
  bool shared_partial_page() const;
  std::unique_ptr<HybridState> copy_with_capacity(int64_t capacity) const;

  std::shared_ptr<KvPagePool> pool_;
  std::shared_ptr<StateSlotPool> slots_;
  std::vector<int32_t> pages_;  // the block table: page i holds positions [i·P, (i+1)·P)
  int32_t slot_ = -1;           // in slots_ (-1: no recurrent layers)
};

// Before a forward pass over `sequences` (HybridStates): gives every state the KV pages its new tokens
// need. Error, changing nothing, when a pool has too few free pages.
Status prepare_kv_pages(std::span<const ForwardBatch::Sequence> sequences);

}  // namespace kapitsa::models
