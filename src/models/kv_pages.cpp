// KvPagePool: reference-counted KV pages in per-layer arrays that grow by doubling (see kv_pages.h).
#include "models/kv_pages.h"

#include "base/check.h"
#include "ops/memory.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace kapitsa::models {

bool is_kv_dtype(DType dtype) { return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16; }

KvPagePool::KvPagePool(KvLayout layout, int64_t page_tokens, int64_t max_pages)
    : layout_(layout), page_tokens_(page_tokens), max_pages_(max_pages) {
  KAPITSA_CHECK(page_tokens > 0 && max_pages >= 0, "KV pool: page of {} tokens, {} pages", page_tokens, max_pages);
  KAPITSA_CHECK(is_kv_dtype(layout.dtype), "KV pool: pages of {}; f32, bf16 or f16 only", dtype_name(layout.dtype));
  k_.resize(static_cast<size_t>(layout_.n_layers));
  v_.resize(static_cast<size_t>(layout_.n_layers));
}

size_t KvPagePool::layer_page_bytes() const {
  return static_cast<size_t>(page_tokens_ * layout_.n_kv_heads * layout_.head_dim) * dtype_size(layout_.dtype);
}

int64_t KvPagePool::used_pages() const {
  std::lock_guard lock(mu_);
  return used_;
}

int64_t KvPagePool::free_pages() const {
  std::lock_guard lock(mu_);
  return max_pages_ == 0 ? std::numeric_limits<int32_t>::max() - used_ : max_pages_ - used_;
}

void KvPagePool::grow(int64_t capacity) {
  // Existing pages move with their ids; the rows of free pages need not be copied but are (one memcpy).
  for (std::vector<Buffer>* arrays : {&k_, &v_})
    for (Buffer& b : *arrays) {
      Buffer bigger = ops::allocate(layout_.device, layout_.dtype, {capacity, page_tokens_, layout_.n_kv_heads, layout_.head_dim},
                                    "the KV page pool");
      if (capacity_ > 0)
        ops::copy_bytes(bigger.tensor().data(), layout_.device, b.tensor().data(), layout_.device,
                        static_cast<size_t>(capacity_) * layer_page_bytes());
      b = std::move(bigger);
    }
  refs_.resize(static_cast<size_t>(capacity), 0);
  for (int64_t id = capacity - 1; id >= capacity_; --id) free_.push_back(static_cast<int32_t>(id));
  capacity_ = capacity;
}

int32_t KvPagePool::allocate() {
  std::lock_guard lock(mu_);
  if (max_pages_ > 0 && used_ >= max_pages_) return -1;
  if (free_.empty()) {
    int64_t capacity = std::max<int64_t>(16, 2 * capacity_);
    if (max_pages_ > 0) capacity = std::min(capacity, max_pages_);
    KAPITSA_CHECK(capacity <= std::numeric_limits<int32_t>::max(), "KV pool: {} pages", capacity);
    grow(capacity);
  }
  const int32_t page = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(page)] = 1;
  ++used_;
  return page;
}

void KvPagePool::retain(int32_t page) {
  std::lock_guard lock(mu_);
  KAPITSA_CHECK(page >= 0 && page < capacity_ && refs_[static_cast<size_t>(page)] > 0, "KV pool: retain of free page {}", page);
  ++refs_[static_cast<size_t>(page)];
}

void KvPagePool::release(int32_t page) {
  std::lock_guard lock(mu_);
  KAPITSA_CHECK(page >= 0 && page < capacity_ && refs_[static_cast<size_t>(page)] > 0, "KV pool: release of free page {}", page);
  if (--refs_[static_cast<size_t>(page)] == 0) {
    free_.push_back(page);
    --used_;
  }
}

int KvPagePool::refcount(int32_t page) const {
  std::lock_guard lock(mu_);
  return page >= 0 && page < capacity_ ? refs_[static_cast<size_t>(page)] : 0;
}

void KvPagePool::copy_page(int32_t from, int32_t to) {
  KAPITSA_CHECK(from >= 0 && from < capacity_ && to >= 0 && to < capacity_, "KV pool: copy page {} → {}", from, to);
  // Bytes, whatever the element type: a page is contiguous in each layer's K and V array.
  const size_t bytes = layer_page_bytes();
  for (std::vector<Buffer>* arrays : {&k_, &v_})
    for (Buffer& b : *arrays) {
      std::byte* base = static_cast<std::byte*>(b.tensor().data());
      ops::copy_bytes(base + static_cast<size_t>(to) * bytes, layout_.device, base + static_cast<size_t>(from) * bytes,
                      layout_.device, bytes);
    }
}

}  // namespace kapitsa::models
