// Workspace: a bump allocator over one block, with heap overflow that sizes the next step's block.
#include "models/workspace.h"

#include <algorithm>
#include <cstddef>

namespace kapitsa::models {
namespace {
constexpr size_t kAlign = 64;
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

void Workspace::begin_step() {
  if (!overflow_.empty() || peak_ > block_bytes_) {
    overflow_.clear();
    block_ = Buffer();
    block_ = Buffer::allocate(DType::u8, {static_cast<int64_t>(peak_)});
    block_bytes_ = peak_;
  }
  used_ = 0;
  peak_ = 0;
}

// An overflow buffer starts with a header holding the level (offset) it was taken at: once a Scope has
// brought used_ back to or below that level it is dead, and the next overflow frees it first, so a step
// larger than the block keeps only what is live on the heap (as plain allocation would).
void* Workspace::take_bytes(size_t bytes) {
  const size_t at = round_up(used_);
  used_ = at + round_up(bytes);
  peak_ = std::max(peak_, used_);
  if (used_ <= block_bytes_) return static_cast<std::byte*>(block_.tensor().data()) + at;
  while (!overflow_.empty() && *static_cast<const size_t*>(overflow_.back().tensor().data()) >= at) overflow_.pop_back();
  overflow_.push_back(Buffer::allocate(DType::u8, {static_cast<int64_t>(kAlign + round_up(bytes))}));
  *static_cast<size_t*>(overflow_.back().tensor().data()) = at;
  return static_cast<std::byte*>(overflow_.back().tensor().data()) + kAlign;
}

Tensor Workspace::take(DType dtype, Shape shape) {
  return Tensor(dtype, shape, take_bytes(static_cast<size_t>(shape.numel()) * dtype_size(dtype)));
}

}  // namespace kapitsa::models
