// Where the op before a 4-bit affine GEMV left the rounding of its output (see rounded_x.h).
#include "ops/cuda/rounded_x.h"

#include "ops/backend.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/runtime.h"

#include <atomic>

namespace kapitsa::ops::cuda::detail {
namespace {

std::atomic<bool> wanted{false};
std::atomic<uint64_t> reused{0};

struct Rounded {
  const void* x = nullptr;
  int64_t numel = 0;
  uint64_t op = 0;  // ops_called of the op that wrote or last used it
  const void* data = nullptr;
};
thread_local Rounded last;

}  // namespace

void* rounding_scratch(int64_t R, int64_t D) {
  if (!wanted.load(std::memory_order_relaxed) || R < 1 || R > kernels::kGemvMaxTokens || !kernels::norm_rounds(D))
    return nullptr;
  return scratch(Slot::rounded, kernels::affine_int16_scratch_bytes(R, D));
}

void rounded_written(const void* y, int64_t numel, void* rounded) {
  last = Rounded{y, numel, ops::detail::ops_called, rounded};
}

const void* rounded_ready(const void* x, int64_t numel) {
  const uint64_t now = ops::detail::ops_called;
  if (last.data == nullptr || last.x != x || last.numel != numel || last.op + 1 != now) return nullptr;
  last.op = now;
  reused.fetch_add(1, std::memory_order_relaxed);
  return last.data;
}

void rounding_wanted() { wanted.store(true, std::memory_order_relaxed); }

uint64_t roundings_reused() { return reused.load(std::memory_order_relaxed); }

}  // namespace kapitsa::ops::cuda::detail
