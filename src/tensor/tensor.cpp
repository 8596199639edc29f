// Tensor views and owning Buffers.
#include "tensor/tensor.h"

#include <atomic>

#include <fmt/format.h>

#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace kapitsa {

Shape::Shape(std::initializer_list<int64_t> d) {
  KAPITSA_CHECK(d.size() <= kMaxRank, "rank {} exceeds {}", d.size(), kMaxRank);
  for (int64_t v : d) dims[static_cast<size_t>(rank++)] = v;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[static_cast<size_t>(i)];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (rank != other.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (dims[static_cast<size_t>(i)] != other.dims[static_cast<size_t>(i)]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += fmt::format("{}{}", i ? ", " : "", dims[static_cast<size_t>(i)]);
  return s + "]";
}

Tensor Tensor::reshape(Shape shape) const {
  KAPITSA_CHECK(shape.numel() == numel(), "reshape {} -> {}", shape_.str(), shape.str());
  return Tensor(dtype_, shape, data_, device_);
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  KAPITSA_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= dim(0), "rows [{}, {}) of {}", begin, end,
                shape_.str());
  Shape s = shape_;
  s.dims[0] = end - begin;
  const size_t row_bytes = dim(0) == 0 ? 0 : nbytes() / static_cast<size_t>(dim(0));
  return Tensor(dtype_, s, static_cast<uint8_t*>(data_) + static_cast<size_t>(begin) * row_bytes, device_);
}

Tensor Tensor::index(int64_t i) const {
  KAPITSA_CHECK(rank() >= 2, "index() needs rank >= 2, got {}", shape_.str());
  Tensor r = rows(i, i + 1);
  Shape s;
  s.rank = rank() - 1;
  for (int d = 1; d < rank(); ++d) s.dims[static_cast<size_t>(d - 1)] = shape_.dims[static_cast<size_t>(d)];
  return Tensor(dtype_, s, r.data(), device_);
}

void Buffer::FreeDeleter::operator()(void* p) const {
  if (free != nullptr) free(p);
  else std::free(p);
}

namespace {
// Activations are allocated per op and freed at once; with glibc's defaults every large block is a
// fresh mmap whose pages the kernel must zero (11% of a prefill profile). Keeping large blocks in the
// heap lets the next step reuse them. Once per process.
void keep_large_blocks_in_heap() {
  static const bool done = [] {
    mallopt(M_MMAP_THRESHOLD, 512 << 20);
    mallopt(M_TRIM_THRESHOLD, 1024 << 20);
    return true;
  }();
  (void)done;
}

std::atomic<int64_t> g_buffer_allocations{0};
}  // namespace

int64_t Buffer::allocation_count() { return g_buffer_allocations.load(std::memory_order_relaxed); }

Buffer Buffer::allocate(DType dtype, Shape shape) {
  keep_large_blocks_in_heap();
  g_buffer_allocations.fetch_add(1, std::memory_order_relaxed);
  Buffer b;
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = rounded == 0 ? nullptr : std::aligned_alloc(64, rounded);
  KAPITSA_CHECK(rounded == 0 || p != nullptr, "out of memory allocating {} bytes", rounded);
  b.storage_.reset(p);
  b.view_ = Tensor(dtype, shape, p);
  return b;
}

Buffer Buffer::adopt(const Tensor& view, void (*free)(void*)) {
  g_buffer_allocations.fetch_add(1, std::memory_order_relaxed);
  Buffer b;
  b.storage_ = std::unique_ptr<void, FreeDeleter>(view.data(), FreeDeleter{free});
  b.view_ = view;
  return b;
}

Buffer Buffer::zeros(DType dtype, Shape shape) {
  Buffer b = allocate(dtype, shape);
  if (b.view_.data() != nullptr) std::memset(b.view_.data(), 0, b.view_.nbytes());
  return b;
}

Buffer Buffer::copy_of(const Tensor& t) {
  Buffer b = allocate(t.dtype(), t.shape());
  if (t.nbytes() > 0) std::memcpy(b.view_.data(), t.data(), t.nbytes());
  return b;
}

}  // namespace kapitsa
