// StateSlotPool: recurrent-state slots in per-layer arrays that grow by doubling (see state_slots.h).
#include "models/state_slots.h"

#include "base/check.h"
#include "ops/memory.h"

#include <algorithm>
#include <cstring>

namespace kapitsa::models {
namespace {
Shape with_rows(int64_t rows, const Shape& s) {
  Shape out = s;
  out.rank = s.rank + 1;
  out.dims[0] = rows;
  for (int d = 0; d < s.rank; ++d) out.dims[static_cast<size_t>(d + 1)] = s.dims[static_cast<size_t>(d)];
  return out;
}
}  // namespace

StateSlotPool::StateSlotPool(RecurrentLayout layout) : layout_(layout) {
  conv_.resize(static_cast<size_t>(layout_.n_layers));
  ssm_.resize(static_cast<size_t>(layout_.n_layers));
}

int64_t StateSlotPool::used_slots() const {
  std::lock_guard lock(mu_);
  return used_;
}

void StateSlotPool::grow(int64_t capacity) {
  for (auto [arrays, shape] : {std::pair{&conv_, layout_.conv_window}, std::pair{&ssm_, layout_.ssm}})
    for (Buffer& b : *arrays) {
      Buffer bigger = ops::allocate(layout_.device, DType::f32, with_rows(capacity, shape), "the recurrent state slots");
      if (capacity_ > 0)
        ops::copy_bytes(bigger.tensor().data(), layout_.device, b.tensor().data(), layout_.device, b.tensor().nbytes());
      b = std::move(bigger);
    }
  for (int64_t id = capacity - 1; id >= capacity_; --id) free_.push_back(static_cast<int32_t>(id));
  capacity_ = capacity;
}

int32_t StateSlotPool::allocate() {
  std::lock_guard lock(mu_);
  if (free_.empty()) grow(std::max<int64_t>(8, 2 * capacity_));
  const int32_t slot = free_.back();
  free_.pop_back();
  ++used_;
  for (int64_t l = 0; l < layout_.n_layers; ++l)
    for (const Tensor& t : {conv(l).index(slot), ssm(l).index(slot)}) ops::zero(t);
  return slot;
}

void StateSlotPool::release(int32_t slot) {
  std::lock_guard lock(mu_);
  KAPITSA_CHECK(slot >= 0 && slot < capacity_, "state slot pool: release of slot {} of {}", slot, capacity_);
  free_.push_back(slot);
  --used_;
}

void StateSlotPool::copy_slot(int32_t from, int32_t to) {
  KAPITSA_CHECK(from >= 0 && from < capacity_ && to >= 0 && to < capacity_, "state slot pool: copy {} → {}", from, to);
  if (from == to) return;
  for (int64_t l = 0; l < layout_.n_layers; ++l) {
    ops::copy_bytes(conv(l).index(to), conv(l).index(from));
    ops::copy_bytes(ssm(l).index(to), ssm(l).index(from));
  }
}

}  // namespace kapitsa::models
