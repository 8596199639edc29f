// Workspace: bump allocators over one block each (device tensors, host spans), with heap overflow that
// sizes the next step's block.
#include "models/workspace.h"

#include "ops/memory.h"

#include <algorithm>
#include <cstddef>

namespace kapitsa::models {
namespace {
constexpr size_t kAlign = 64;
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

void Workspace::set_device(Device device) {
  if (device == device_) return;
  device_ = device;
  tensors_ = Arena();
  tensors_.device = device;
}

void Workspace::begin_step() {
  tensors_.begin_step();
  host_.begin_step();
}

void Workspace::Arena::begin_step() {
  if (!overflow.empty() || peak > block_bytes) {
    overflow.clear();
    block = Buffer();
    block = ops::allocate(device, DType::u8, {static_cast<int64_t>(peak)}, "the step's workspace");
    block_bytes = peak;
  }
  used = 0;
  peak = 0;
}

// An overflow buffer remembers the level (offset) it was taken at: once a Scope has brought `used` back
// to or below that level it is dead, and the next overflow frees it first, so a step larger than the
// block keeps only what is live on the heap (as plain allocation would).
void* Workspace::Arena::take(size_t bytes) {
  const size_t at = round_up(used);
  used = at + round_up(bytes);
  peak = std::max(peak, used);
  if (used <= block_bytes) return static_cast<std::byte*>(block.tensor().data()) + at;
  while (!overflow.empty() && overflow.back().first >= at) overflow.pop_back();
  overflow.emplace_back(at, ops::allocate(device, DType::u8, {static_cast<int64_t>(round_up(bytes))}, "the step's workspace"));
  return overflow.back().second.tensor().data();
}

std::span<const std::byte> Workspace::host_taken() const {
  if (device_ == Device::cpu || !host_.overflow.empty() || host_.used == 0 || host_.used > host_.block_bytes) return {};
  return {static_cast<const std::byte*>(host_.block.tensor().data()), host_.used};
}

Tensor Workspace::take(DType dtype, Shape shape) {
  return Tensor(dtype, shape, tensors_.take(static_cast<size_t>(shape.numel()) * dtype_size(dtype)), device_);
}

}  // namespace kapitsa::models
