// StateSlotPool: the recurrent state (conv windows + f32 SSM / DeltaNet states) of many sequences in
// slots, as KvPagePool holds their KV in pages. Slot id i is row i of every recurrent layer's
// [n_slots, …] conv and state arrays, so one id addresses a sequence's whole recurrent state; a
// snapshot or a speculative checkpoint is another slot. Not a policy: who holds which slot is the
// runtime's and the states' business.
// Invariants: the arrays grow on demand (doubling) by reallocation, so slot ids stay valid but Tensors
// from conv()/ssm() only until the next allocate(); allocation happens between forward steps.
#pragma once

#include "tensor/tensor.h"

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace kapitsa::models {

// What one sequence's recurrent state looks like: the runtime sizes memory from it.
struct RecurrentLayout {
  int64_t n_layers = 0;      // recurrent layers (0: none)
  Shape conv_window;         // per layer: [K-1, conv_dim]
  Shape ssm;                 // per layer: GDN [Hv, Dk, Dv], Mamba-2 [H, P, N]
  Device device = Device::cpu;  // where the slots live: the model's device (ops/memory.h)
  size_t bytes_per_slot() const {
    return static_cast<size_t>(n_layers * (conv_window.numel() + ssm.numel())) * sizeof(float);
  }
};

class StateSlotPool {
 public:
  explicit StateSlotPool(RecurrentLayout layout);
  StateSlotPool(const StateSlotPool&) = delete;
  StateSlotPool& operator=(const StateSlotPool&) = delete;

  const RecurrentLayout& layout() const { return layout_; }
  int64_t used_slots() const;

  // A slot with zeroed state (the state before any token), one owner.
  int32_t allocate();
  void release(int32_t slot);
  // Every layer's conv window and state of slot `from` into slot `to`.
  void copy_slot(int32_t from, int32_t to);

  // One recurrent layer's arrays (layer in [0, layout().n_layers)):  [capacity, …] f32.
  Tensor conv(int64_t layer) const { return conv_[static_cast<size_t>(layer)].tensor(); }
  Tensor ssm(int64_t layer) const { return ssm_[static_cast<size_t>(layer)].tensor(); }

 private:
  void grow(int64_t capacity);

  RecurrentLayout layout_;
  int64_t capacity_ = 0;
  std::vector<Buffer> conv_, ssm_;
  mutable std::mutex mu_;        // free_ and used_
  std::vector<int32_t> free_;    // LIFO
  int64_t used_ = 0;
};

}  // namespace kapitsa::models
