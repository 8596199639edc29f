// Device memory for code above the ops (ops/memory.h): allocation with an error that says how much was
// asked for and how much is free, byte copies in every direction and zeroing, all queued on the ops'
// stream, and the choice of GPU (cuda:N) before anything else touches the device.
#include "ops/cuda/cuda.h"
#include "ops/cuda/graph.h"
#include "ops/cuda/runtime.h"

#include <fmt/format.h>

namespace kapitsa::ops::cuda {
using detail::check;
using detail::stream;

namespace {
int g_device = 0;
bool g_device_used = false;  // some thread has used it: the device can no longer change
}  // namespace

// The current device is per host thread (the engine computes on its own thread): each thread that
// calls into the backend binds cuda:N once.
void detail::use_device() {
  thread_local bool bound = false;
  if (!bound) {
    check(cudaSetDevice(g_device), "cudaSetDevice");
    bound = true;
    g_device_used = true;
  }
}

namespace {
using detail::use_device;

std::string gib(size_t bytes) { return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1ull << 30)); }
}  // namespace

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

std::string select_device(int ordinal) {
  const int n = device_count();
  if (n == 0) return device_description();  // says why: no driver, no device
  if (ordinal < 0 || ordinal >= n) return fmt::format("cuda:{} does not exist: this machine has {} CUDA device{} (cuda:0{})",
                                                      ordinal, n, n == 1 ? "" : "s", n == 1 ? "" : fmt::format("..cuda:{}", n - 1));
  if (std::string why = detail::cublas_load_error(); !why.empty()) return why;
  if (g_device_used && ordinal != g_device)
    return fmt::format("cuda:{} asked for after cuda:{} was already in use (one GPU per process)", ordinal, g_device);
  g_device = ordinal;
  use_device();
  return {};
}

int current_device() { return g_device; }

MemoryInfo memory_info() {
  use_device();
  MemoryInfo m;
  check(cudaMemGetInfo(&m.free_bytes, &m.total_bytes), "cudaMemGetInfo");
  return m;
}

void* allocate_bytes(size_t bytes, const char* what) {
  if (bytes == 0) return nullptr;
  use_device();
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky allocation error
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    KAPITSA_CHECK(false, "cuda:{}: out of GPU memory: {} needs {} more, {} free of {} ({})", g_device, what, gib(bytes),
                  gib(free_bytes), gib(total_bytes), cudaGetErrorString(err));
  }
  return p;
}

void* allocate_host_bytes(size_t bytes, const char* what) {
  if (bytes == 0) return nullptr;
  use_device();
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  if (err != cudaSuccess) {
    cudaGetLastError();
    KAPITSA_CHECK(false, "cuda:{}: could not page-lock {} of host memory for {} ({})", g_device, gib(bytes), what,
                  cudaGetErrorString(err));
  }
  return p;
}

void free_host_bytes(void* p) {
  if (p == nullptr) return;
  cudaStreamSynchronize(stream());  // a queued copy may still write it
  cudaFreeHost(p);
}

void free_bytes(void* p) {
  if (p == nullptr) return;
  // Queued work may still read or write it (a pool's old arrays being copied into the grown ones).
  cudaStreamSynchronize(stream());
  cudaFree(p);
}

namespace {
bool on_device(const void* p) {
  cudaPointerAttributes a{};
  return cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeDevice;
}
}  // namespace

void copy_bytes(void* dst, const void* src, size_t bytes, bool wait) {
  if (bytes == 0) return;
  if (capturing() && (wait || !on_device(dst) || !on_device(src))) {
    // A replay would copy into this step's host memory again, or cannot wait: give the capture up.
    return detail::capture_unrepeatable("a copy to or from host memory");
  }
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream()), "cudaMemcpyAsync");
  if (wait) check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize (copy)");
}

void zero_bytes(void* p, size_t bytes) {
  if (bytes > 0) check(cudaMemsetAsync(p, 0, bytes, stream()), "cudaMemsetAsync");
}

}  // namespace kapitsa::ops::cuda
