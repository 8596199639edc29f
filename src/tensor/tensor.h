// Tensor: a non-owning view {dtype, shape, device, data} of contiguous row-major memory.
// Buffer: owns memory (64-byte-aligned host memory, or a device's, see adopt) and hands out Tensor views.
// Views are always contiguous (shape[last] is the fastest index); an op that needs a sub-block takes
// a view of whole leading rows (`rows`, `index`), which stay contiguous. Up to 4 dimensions.
#pragma once

#include "base/check.h"
#include "tensor/dtype.h"

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

namespace kapitsa {

enum class Device : uint8_t { cpu, cuda };

constexpr int kMaxRank = 4;

struct Shape {
  std::array<int64_t, kMaxRank> dims{};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  int64_t operator[](int i) const { return dims[static_cast<size_t>(i < 0 ? rank + i : i)]; }
  int64_t numel() const;
  bool operator==(const Shape& other) const;
  std::string str() const;  // "[2, 3, 4]"
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape, void* data, Device device = Device::cpu)
      : dtype_(dtype), shape_(shape), data_(data), device_(device) {}

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank; }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  Device device() const { return device_; }
  bool empty() const { return data_ == nullptr; }

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const { return static_cast<T*>(data_); }
  float* f32() const {
    KAPITSA_CHECK(dtype_ == DType::f32, "tensor is {}, not F32", dtype_name(dtype_));
    return static_cast<float*>(data_);
  }

  // Same memory, new shape with the same number of elements.
  Tensor reshape(Shape shape) const;
  // Rows [begin, end) of the first dimension.
  Tensor rows(int64_t begin, int64_t end) const;
  // Element `i` of the first dimension, with rank reduced by one.
  Tensor index(int64_t i) const;

 private:
  DType dtype_ = DType::f32;
  Shape shape_;
  void* data_ = nullptr;
  Device device_ = Device::cpu;
};

class Buffer {
 public:
  Buffer() = default;
  // Uninitialised memory for `shape` elements of `dtype`.
  static Buffer allocate(DType dtype, Shape shape);
  // Same, filled with zeros.
  static Buffer zeros(DType dtype, Shape shape);
  // A deep copy of a CPU tensor.
  static Buffer copy_of(const Tensor& t);
  // Buffers allocated so far in this process (any thread): tests assert a decode step allocates none.
  static int64_t allocation_count();
  // Takes ownership of memory allocated elsewhere (a device's: ops/memory.h), freed by `free` (counted
  // by allocation_count too). `view` says what it holds and where (its device).
  static Buffer adopt(const Tensor& view, void (*free)(void*));

  const Tensor& tensor() const { return view_; }
  Tensor& tensor() { return view_; }
  operator const Tensor&() const { return view_; }
  float* f32() const { return view_.f32(); }

 private:
  struct FreeDeleter {
    void (*free)(void*);  // null (value-initialised by unique_ptr): std::free
    void operator()(void* p) const;
  };
  std::unique_ptr<void, FreeDeleter> storage_;
  Tensor view_;
};

}  // namespace kapitsa
