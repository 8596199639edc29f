// DeviceBuffer: owns cudaMalloc'd memory and hands out Tensor views of it with Device::cuda, as Buffer
// does for host memory. Copies to and from host tensors (same dtype and element count). Move-only;
// the memory is freed when it goes out of scope. Copies are stream-ordered with the ops; download
// waits for them, so its host tensor is ready on return.
#pragma once

#include "tensor/tensor.h"

#include <memory>

namespace kapitsa::ops::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Uninitialised device memory for `shape` elements of `dtype`.
  static DeviceBuffer allocate(DType dtype, Shape shape);
  static DeviceBuffer zeros(DType dtype, Shape shape);
  // A device copy of a host tensor (same dtype and shape).
  static DeviceBuffer upload(const Tensor& host);

  // Host tensor `host` (same dtype and element count) := this buffer's contents. Synchronises.
  void download(const Tensor& host) const;
  // This buffer := host tensor `host` (same dtype and element count).
  void copy_from(const Tensor& host);

  const Tensor& tensor() const { return view_; }
  operator const Tensor&() const { return view_; }  // NOLINT(google-explicit-constructor)

 private:
  struct FreeDeleter {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, FreeDeleter> storage_;
  Tensor view_;
};

// Raw byte copies between host and device memory, stream-ordered with the ops; copy_to_host waits for
// them (for code that manages its own device ranges, e.g. the op tests' mirrors of host arguments).
void copy_to_device(void* device, const void* host, size_t bytes);
void copy_to_host(void* host, const void* device, size_t bytes);

}  // namespace kapitsa::ops::cuda
