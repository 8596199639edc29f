// KvPagePool: the attention KV of many sequences in fixed-size pages. A page holds P consecutive tokens'
// keys and values for every attention layer of a model (page id i is slot i of each layer's
// [n_pages, P, Hkv, D] K and V arrays), so one block table per sequence addresses all its layers.
// Pages are reference-counted: sequences and prefix-cache snapshots with a common prefix share them, and
// a page returns to the free list when its last reference goes. Not a cache policy: who holds what and
// when to evict is the runtime's business.
// Invariants: the arrays grow on demand up to max_pages (0: no limit) by reallocation, so page ids stay
// valid but Tensors from k()/v() only until the next allocate(); one computing thread at a time
// allocates and reads (as the op thread pool), while retain/release are safe from any thread.
// Memory: on KvLayout::device (host, or the GPU a model on cuda runs on; copies through ops/memory.h).
// Element type: the pool's KvLayout::dtype (f32, bf16 or f16), chosen when the pool is made; the model
// computes K and V in f32 and ops::write_paged_rows / copy round them into the pages, attention reads
// them back widened (docs/decisions.md, "KV cache dtype").
#pragma once

#include "tensor/tensor.h"

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace kapitsa::models {

// What one token's KV looks like in a model: the runtime sizes pools from it without naming an
// architecture. A model's kv_layout() says f32; whoever makes a pool may store narrower.
struct KvLayout {
  int64_t n_layers = 0;    // attention layers (0: the model keeps no KV)
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  DType dtype = DType::f32;  // element type of the pages: f32, bf16 or f16
  Device device = Device::cpu;  // where the pages live: the model's device (ops/memory.h)
  size_t bytes_per_token() const { return static_cast<size_t>(2 * n_layers * n_kv_heads * head_dim) * dtype_size(dtype); }
};

// The element types a KV page pool can hold.
bool is_kv_dtype(DType dtype);

// Tokens per page when nobody chooses: see docs/decisions.md ("KV pages of 16 tokens").
constexpr int64_t kDefaultPageTokens = 16;

class KvPagePool {
 public:
  // layout.dtype must be f32, bf16 or f16.
  KvPagePool(KvLayout layout, int64_t page_tokens = kDefaultPageTokens, int64_t max_pages = 0);
  KvPagePool(const KvPagePool&) = delete;
  KvPagePool& operator=(const KvPagePool&) = delete;

  const KvLayout& layout() const { return layout_; }
  DType dtype() const { return layout_.dtype; }
  int64_t page_tokens() const { return page_tokens_; }
  size_t page_bytes() const { return layout_.bytes_per_token() * static_cast<size_t>(page_tokens_); }
  int64_t pages_for(int64_t tokens) const { return (tokens + page_tokens_ - 1) / page_tokens_; }
  int64_t max_pages() const { return max_pages_; }  // 0: unbounded
  int64_t used_pages() const;
  // Pages allocate() can still hand out (a large number when unbounded).
  int64_t free_pages() const;
  size_t used_bytes() const { return static_cast<size_t>(used_pages()) * page_bytes(); }

  // A fresh page (contents undefined) with one reference; -1 when max_pages are in use.
  int32_t allocate();
  void retain(int32_t page);
  void release(int32_t page);
  int refcount(int32_t page) const;
  // Copies every layer's K and V rows of page `from` into page `to` (copy-on-write).
  void copy_page(int32_t from, int32_t to);

  // One attention layer's arrays (layer in [0, layout().n_layers)):  [capacity, P, Hkv, D] dtype().
  Tensor k(int64_t layer) const { return k_[static_cast<size_t>(layer)].tensor(); }
  Tensor v(int64_t layer) const { return v_[static_cast<size_t>(layer)].tensor(); }

 private:
  void grow(int64_t capacity);
  size_t layer_page_bytes() const;  // one page of one layer's K (or V) array

  KvLayout layout_;
  int64_t page_tokens_;
  int64_t max_pages_;
  int64_t capacity_ = 0;  // pages the arrays hold
  std::vector<Buffer> k_, v_;
  mutable std::mutex mu_;        // refs_ and free_
  std::vector<int32_t> refs_;    // per page id; 0: free
  std::vector<int32_t> free_;    // free page ids (LIFO: recently freed pages are warm in cache)
  int64_t used_ = 0;
};

}  // namespace kapitsa::models
