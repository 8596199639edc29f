// The CUDA backend: every op of op_list.inc on an NVIDIA GPU, file names as in ops/ref (each .cpp checks
// its arguments and launches; its .cu twin holds the kernels, which see raw pointers only). Tensors must
// live on Device::cuda (see device_buffer.h); host spans (ids, positions, block tables, row lists) are
// copied to the device on each call. All work is queued on one stream, so stream order is the only
// ordering; reading results back (DeviceBuffer::download, synchronize) waits for it.
#pragma once

#include "ops/seq_batch.h"
#include "tensor/linear.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <span>
#include <string>

namespace kapitsa::ops {
struct BackendTable;
}

namespace kapitsa::ops::cuda {
#include "ops/op_list.inc"

// This backend's table (ops/backend.h), or nullptr when no usable GPU is present.
const BackendTable* backend();
// ops::matmul_invariant_rows for this backend's kernels (matmul.cpp).
int64_t matmul_invariant_rows(const Linear& w);

// True when a CUDA driver and at least one device are usable; false (never an abort) on a machine
// without a GPU, so callers can skip or fall back.
bool device_available();
// "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB, driver 13.0)", or why no device is usable.
std::string device_description();
// Waits until every queued op has finished; a kernel's asynchronous error stops here, naming it.
void synchronize();

// Device memory (memory.cpp), what ops/memory.h uses for Device::cuda.
int device_count();  // 0 without a driver or a device
// Makes cuda:`ordinal` the device every later call uses. Empty on success, else why not (no driver, no
// such device, another one already in use).
std::string select_device(int ordinal);
int current_device();
struct MemoryInfo {
  size_t free_bytes = 0, total_bytes = 0;
};
MemoryInfo memory_info();
// cudaMalloc; out of memory stops naming `what`, the bytes asked for and the bytes free.
void* allocate_bytes(size_t bytes, const char* what);
void free_bytes(void* p);
// Page-locked host memory (cudaHostAlloc): copies from the GPU into it run at full speed; free with
// free_host_bytes.
void* allocate_host_bytes(size_t bytes, const char* what);
void free_host_bytes(void* p);
// Any direction (host or device pointers, unified addressing), stream-ordered with the ops; `wait`:
// return only when it is done (needed before the host reads what was copied to it).
void copy_bytes(void* dst, const void* src, size_t bytes, bool wait);
void zero_bytes(void* p, size_t bytes);

}  // namespace kapitsa::ops::cuda
