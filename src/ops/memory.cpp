// Device memory for the code above the ops (see memory.h): host memory directly, GPU memory through
// ops/cuda when this build has it.
#include "ops/memory.h"

#include "ops/backend.h"
#if KAPITSA_HAVE_CUDA
#include "ops/cuda/cuda.h"
#endif

#include <charconv>
#include <cstring>

namespace kapitsa::ops {

Expected<DeviceSpec> parse_device(const std::string& text) {
  if (text == "cpu") return DeviceSpec{Device::cpu, 0};
  if (text == "cuda") return DeviceSpec{Device::cuda, 0};
  if (text.rfind("cuda:", 0) == 0) {
    int n = -1;
    const char* first = text.data() + 5;
    const char* last = text.data() + text.size();
    const auto [end, ec] = std::from_chars(first, last, n);
    if (ec == std::errc() && end == last && first != last && n >= 0) return DeviceSpec{Device::cuda, n};
  }
  return error("device '{}': expected cpu, cuda or cuda:N (N = 0, 1, …)", text);
}

std::string device_name(const DeviceSpec& spec) {
  return spec.device == Device::cpu ? "cpu" : fmt::format("cuda:{}", spec.ordinal);
}

bool cuda_usable() {
#if KAPITSA_HAVE_CUDA
  return cuda::backend() != nullptr;
#else
  return false;
#endif
}

std::string cuda_report() {
#if KAPITSA_HAVE_CUDA
  return cuda::device_description();
#else
  return "this build has no CUDA backend (KAPITSA_CUDA=OFF or no nvcc)";
#endif
}

Status select_device(const DeviceSpec& spec) {
  if (spec.device == Device::cpu) return ok_status();
#if KAPITSA_HAVE_CUDA
  if (const std::string why = cuda::select_device(spec.ordinal); !why.empty())
    return error("{}: {}", device_name(spec), why);
  if (cuda::backend() == nullptr) return error("{}: no usable CUDA device ({})", device_name(spec), cuda::device_description());
  return ok_status();
#else
  return error("{}: {}; configure with KAPITSA_CUDA=ON on a machine with nvcc", device_name(spec), cuda_report());
#endif
}

const BackendTable* backend_for(Device device) {
  if (device == Device::cpu) {
    const BackendTable& current = current_backend();
    return current.device == Device::cpu ? &current : find_backend("cpu");
  }
  for (const BackendTable* b : backends())
    if (b->device == device) return b;
  return nullptr;
}

#if KAPITSA_HAVE_CUDA
#define KAPITSA_DEVICE_ONLY(...) __VA_ARGS__
#else
#define KAPITSA_DEVICE_ONLY(...) KAPITSA_CHECK(false, "device memory in a build without CUDA")
#endif

DeviceMemoryInfo device_memory(Device device) {
  if (device == Device::cpu) return {};
  DeviceMemoryInfo m;
  KAPITSA_DEVICE_ONLY(const cuda::MemoryInfo c = cuda::memory_info(); m.free_bytes = c.free_bytes;
                      m.total_bytes = c.total_bytes);
  return m;
}

Buffer allocate(Device device, DType dtype, Shape shape, const char* what) {
  if (device == Device::cpu) return Buffer::allocate(dtype, shape);
  [[maybe_unused]] const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  void* p = nullptr;
  void (*release)(void*) = nullptr;
  KAPITSA_DEVICE_ONLY(p = cuda::allocate_bytes(bytes, what); release = &cuda::free_bytes);
  return Buffer::adopt(Tensor(dtype, shape, p, device), release);
}

Buffer allocate_host_for(Device device, DType dtype, Shape shape, const char* what) {
  if (device == Device::cpu) return Buffer::allocate(dtype, shape);
  [[maybe_unused]] const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  void* p = nullptr;
  void (*release)(void*) = nullptr;
  KAPITSA_DEVICE_ONLY(p = cuda::allocate_host_bytes(bytes, what); release = &cuda::free_host_bytes);
  return Buffer::adopt(Tensor(dtype, shape, p, Device::cpu), release);
}

Buffer zeros(Device device, DType dtype, Shape shape, const char* what) {
  if (device == Device::cpu) return Buffer::zeros(dtype, shape);
  Buffer b = allocate(device, dtype, shape, what);
  zero(b.tensor());
  return b;
}

Buffer copy_to(Device device, const Tensor& src, const char* what) {
  Buffer b = allocate(device, src.dtype(), src.shape(), what);
  copy_bytes(b.tensor(), src);
  return b;
}

void copy_bytes(const Tensor& dst, const Tensor& src, bool wait) {
  KAPITSA_CHECK(dst.nbytes() == src.nbytes(), "copy_bytes: {} bytes ({} {}) into {} bytes ({} {})", src.nbytes(),
                dtype_name(src.dtype()), src.shape().str(), dst.nbytes(), dtype_name(dst.dtype()), dst.shape().str());
  copy_bytes(dst.data(), dst.device(), src.data(), src.device(), src.nbytes(), wait);
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes, bool wait) {
  if (bytes == 0) return;
  if (dst_device == Device::cpu && src_device == Device::cpu) {
    std::memmove(dst, src, bytes);
    return;
  }
  KAPITSA_DEVICE_ONLY(cuda::copy_bytes(dst, src, bytes, wait && dst_device == Device::cpu));
}

void zero(const Tensor& t) { zero_bytes(t.data(), t.device(), t.nbytes()); }

void zero_bytes(void* p, Device device, size_t bytes) {
  if (bytes == 0) return;
  if (device == Device::cpu) {
    std::memset(p, 0, bytes);
    return;
  }
  KAPITSA_DEVICE_ONLY(cuda::zero_bytes(p, bytes));
}

void synchronize(Device device) {
  if (device == Device::cpu) return;
  KAPITSA_DEVICE_ONLY(cuda::synchronize());
}

}  // namespace kapitsa::ops
