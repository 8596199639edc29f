// DeviceBuffer: cudaMalloc'd memory with Tensor views (see device_buffer.h).
#include "ops/cuda/device_buffer.h"

#include "ops/cuda/runtime.h"

namespace kapitsa::ops::cuda {
using detail::check;
using detail::stream;

void DeviceBuffer::FreeDeleter::operator()(void* p) const {
  // cudaFree synchronises the device, so no queued kernel still reads the memory.
  if (p != nullptr) cudaFree(p);
}

DeviceBuffer DeviceBuffer::allocate(DType dtype, Shape shape) {
  DeviceBuffer b;
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  void* p = nullptr;
  if (bytes > 0) check(cudaMalloc(&p, bytes), "cudaMalloc");
  b.storage_.reset(p);
  b.view_ = Tensor(dtype, shape, p, Device::cuda);
  return b;
}

DeviceBuffer DeviceBuffer::zeros(DType dtype, Shape shape) {
  DeviceBuffer b = allocate(dtype, shape);
  if (b.view_.nbytes() > 0) check(cudaMemsetAsync(b.view_.data(), 0, b.view_.nbytes(), stream()), "cudaMemset");
  return b;
}

DeviceBuffer DeviceBuffer::upload(const Tensor& host) {
  DeviceBuffer b = allocate(host.dtype(), host.shape());
  b.copy_from(host);
  return b;
}

void DeviceBuffer::copy_from(const Tensor& host) {
  KAPITSA_CHECK(host.device() == Device::cpu && host.dtype() == view_.dtype() && host.numel() == view_.numel(),
                "DeviceBuffer::copy_from: host {} {} into device {} {}", dtype_name(host.dtype()), host.shape().str(),
                dtype_name(view_.dtype()), view_.shape().str());
  if (view_.nbytes() > 0)
    check(cudaMemcpyAsync(view_.data(), host.data(), view_.nbytes(), cudaMemcpyHostToDevice, stream()), "upload");
}

void DeviceBuffer::download(const Tensor& host) const {
  KAPITSA_CHECK(host.device() == Device::cpu && host.dtype() == view_.dtype() && host.numel() == view_.numel(),
                "DeviceBuffer::download: device {} {} into host {} {}", dtype_name(view_.dtype()), view_.shape().str(),
                dtype_name(host.dtype()), host.shape().str());
  if (view_.nbytes() > 0)
    check(cudaMemcpyAsync(host.data(), view_.data(), view_.nbytes(), cudaMemcpyDeviceToHost, stream()), "download");
  check(cudaStreamSynchronize(stream()), "download (sync)");
}

void copy_to_device(void* device, const void* host, size_t bytes) {
  if (bytes > 0) check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream()), "copy_to_device");
}

void copy_to_host(void* host, const void* device, size_t bytes) {
  if (bytes > 0) check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream()), "copy_to_host");
  check(cudaStreamSynchronize(stream()), "copy_to_host (sync)");
}

}  // namespace kapitsa::ops::cuda
