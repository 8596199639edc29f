// Memory on the device a model runs on, for the code above the ops (models, runtime, CLI): buffers,
// byte copies between any two devices, zeroing, and choosing/describing the device — the same calls for
// host and GPU memory, so model code asks the backend for memory and never includes a device runtime.
// Device::cpu is plain host memory (Buffer); Device::cuda goes to ops/cuda (the GPU chosen by
// select_device, cuda:0 unless told). Device work is queued in order with the ops; a copy into host
// memory waits for it unless told not to (then synchronize() before reading).
#pragma once

#include "base/status.h"
#include "tensor/tensor.h"

#include <cstddef>
#include <string>

namespace kapitsa::ops {

struct BackendTable;

// Where a model runs: cpu, or cuda with a device ordinal.
struct DeviceSpec {
  Device device = Device::cpu;
  int ordinal = 0;
};
// "cpu", "cuda", "cuda:1". Error naming the text otherwise.
Expected<DeviceSpec> parse_device(const std::string& text);
// "cpu" / "cuda:0".
std::string device_name(const DeviceSpec& spec);
// Makes `spec` the device later device memory and ops use (cuda: binds cuda:N; cpu: nothing). Errors say
// what is missing: a build without CUDA, no driver, no GPU, no such ordinal.
Status select_device(const DeviceSpec& spec);
// True when this build has the CUDA backend and a usable GPU is present.
bool cuda_usable();
// The GPU ("NVIDIA H200 (sm_90, …)") or why none is usable (no CUDA backend built, no driver, no device):
// what tests that need a GPU print when they skip.
std::string cuda_report();
// The backend whose ops run on `device` (cpu: the process default host backend), or null when none is
// registered for it.
const BackendTable* backend_for(Device device);

// Free and total bytes of the selected device's memory (cpu: zeros, unknown here).
struct DeviceMemoryInfo {
  size_t free_bytes = 0, total_bytes = 0;
};
DeviceMemoryInfo device_memory(Device device);

// Uninitialised memory for `shape` elements of `dtype` on `device`; `what` names it in the out-of-memory
// error (which says the bytes needed and the bytes free).
Buffer allocate(Device device, DType dtype, Shape shape, const char* what = "a buffer");
Buffer zeros(Device device, DType dtype, Shape shape, const char* what = "a buffer");
// Host memory for what is copied back from `device` every step (logits, hidden rows): page-locked for
// cuda (a copy into pageable memory runs through the driver's staging at a fraction of the speed: ~0.1
// ms of a 5-row verification step's 0.7 ms on an H100), plain for cpu.
Buffer allocate_host_for(Device device, DType dtype, Shape shape, const char* what = "a buffer");
// A copy of `src` (any device) on `device`, same dtype and shape.
Buffer copy_to(Device device, const Tensor& src, const char* what = "a buffer");

// dst := src byte for byte (same byte count; any devices). wait = false leaves a copy into host memory
// pending until synchronize().
void copy_bytes(const Tensor& dst, const Tensor& src, bool wait = true);
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes, bool wait = true);
// t := zeros.
void zero(const Tensor& t);
void zero_bytes(void* p, Device device, size_t bytes);
// Waits for the work queued on `device` (nothing on cpu).
void synchronize(Device device);

}  // namespace kapitsa::ops
