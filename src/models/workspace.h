// Workspace: the scratch arena of one forward step. Layers take their activations from it instead of
// allocating; a Scope hands back what was taken inside it (stack order). Sized by use: a step that
// needs more than the block holds gets the rest from the heap and the next step starts with a block
// as large as that step's peak, so after the first step of each shape nothing is allocated (which a
// CUDA graph capture will need). Not thread-safe: one forward at a time uses a workspace.
#pragma once

#include "tensor/tensor.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kapitsa::models {

class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // Starts a step: drops what the last step took and, if it overflowed, grows the block to its peak.
  void begin_step();

  // Uninitialised, 64-byte aligned scratch, valid until the enclosing Scope (or step) ends.
  Tensor take(DType dtype, Shape shape);
  template <typename T>
  std::span<T> take_span(size_t n) {
    return {static_cast<T*>(take_bytes(n * sizeof(T))), n};
  }

  // Everything taken while a Scope lives is handed back when it ends.
  class Scope {
   public:
    explicit Scope(Workspace& ws) : ws_(ws), used_(ws.used_) {}
    ~Scope() { ws_.used_ = used_; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Workspace& ws_;
    size_t used_;
  };

  size_t capacity_bytes() const { return block_bytes_; }

 private:
  void* take_bytes(size_t bytes);

  Buffer block_;
  size_t block_bytes_ = 0;
  size_t used_ = 0;                // bytes taken in the current scopes (overflow included)
  size_t peak_ = 0;                // most bytes in use at once this step
  std::vector<Buffer> overflow_;   // this step's takes that did not fit the block
};

// What a forward step needs besides its inputs and outputs.
struct ForwardContext {
  Workspace& workspace;
};

}  // namespace kapitsa::models
