// Workspace: the scratch arena of one forward step. Layers take their activations from it instead of
// allocating; a Scope hands back what was taken inside it (stack order). Sized by use: a step that
// needs more than the block holds gets the rest from the heap and the next step starts with a block
// as large as that step's peak, so after the first step of each shape nothing is allocated (which a
// CUDA graph capture will need). Two arenas: tensors (take) live on the workspace's device — the GPU
// for a model on cuda, through ops/memory.h — and spans (take_span: ids, positions, block tables, the
// step's host-side metadata) always in host memory. Not thread-safe: one forward at a time uses it.
#pragma once

#include "tensor/tensor.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace kapitsa::models {

class Workspace {
 public:
  explicit Workspace(Device device = Device::cpu) : device_(device) { tensors_.device = device; }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // Where take() puts tensors. Changing it drops the tensor arena (between steps only).
  Device device() const { return device_; }
  void set_device(Device device);

  // Starts a step: drops what the last step took and, if it overflowed, grows the blocks to their peaks.
  void begin_step();

  // Uninitialised, 64-byte aligned scratch on device(), valid until the enclosing Scope (or step) ends.
  Tensor take(DType dtype, Shape shape);
  // The same in host memory (device() == cpu: the same arena as take).
  template <typename T>
  std::span<T> take_span(size_t n) {
    return {static_cast<T*>(host_arena().take(n * sizeof(T))), n};
  }

  // Everything taken while a Scope lives is handed back when it ends.
  class Scope {
   public:
    explicit Scope(Workspace& ws) : ws_(ws), host_used_(ws.host_.used), tensors_used_(ws.tensors_.used) {}
    ~Scope() { ws_.host_.used = host_used_, ws_.tensors_.used = tensors_used_; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Workspace& ws_;
    size_t host_used_, tensors_used_;
  };

  // Bytes of the tensor arena's block (on device()).
  size_t capacity_bytes() const { return tensors_.block_bytes; }
  // The tensor arena's block: with capacity_bytes(), what a captured step's addresses depend on.
  const void* tensor_block() const { return tensors_.block_bytes == 0 ? nullptr : tensors_.block.tensor().data(); }
  // Everything take_span() handed out this step so far, as one host range from the block's start (what a
  // step on a device mirrors there, ops/step_graph.h); empty when device() is the host or a span
  // overflowed the block.
  std::span<const std::byte> host_taken() const;
  // Whether this step took memory beyond the blocks (such addresses are not the next step's).
  bool overflowed() const { return !tensors_.overflow.empty() || !host_.overflow.empty(); }

 private:
  struct Arena {
    Device device = Device::cpu;
    Buffer block;
    size_t block_bytes = 0;
    size_t used = 0;   // bytes taken in the current scopes (overflow included)
    size_t peak = 0;   // most bytes in use at once this step
    std::vector<std::pair<size_t, Buffer>> overflow;  // this step's takes that did not fit: (level, memory)
    void begin_step();
    void* take(size_t bytes);
  };
  Arena& host_arena() { return device_ == Device::cpu ? tensors_ : host_; }

  Device device_;
  Arena tensors_;  // take(): on device_
  Arena host_;     // take_span() when device_ is not the host
};

// What a forward step needs besides its inputs and outputs.
struct ForwardContext {
  Workspace& workspace;
};

}  // namespace kapitsa::models
