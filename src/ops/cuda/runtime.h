// Internal to ops/cuda: the one stream and cuBLAS handle every op uses, error checks, and device scratch
// (grow-only, per slot) for the host spans an op receives and for temporaries such as a matmul's
// converted activations. Not thread-safe: ops are called from one thread, as on the cpu backend.
// Scratch grows by cudaFree + cudaMalloc (which synchronise), so a later call never frees memory that a
// queued kernel still reads; a fixed per-step workspace replaces this before CUDA graphs.
#pragma once

#include "ops/cuda/kernels.h"
#include "tensor/tensor.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <span>

namespace kapitsa::ops::cuda::detail {

cudaStream_t stream();
cublasHandle_t cublas();

// Stops with the CUDA error's name and text when `err` is not cudaSuccess.
void check(cudaError_t err, const char* what);
void check(cublasStatus_t status, const char* what);
// After a kernel launch: the launch error, if any (asynchronous faults surface at the next sync).
void check_launch(const char* op);

// Scratch slots: one per distinct temporary an op may hold at once.
enum class Slot { span0, span1, span2, temp0, count };
// At least `bytes` of device memory in `slot`, valid until the next call for the same slot.
void* scratch(Slot slot, size_t bytes);
// Copies a host span to the device (stream-ordered) and returns the device pointer.
template <typename T>
const T* upload(std::span<const T> host, Slot slot) {
  if (host.empty()) return nullptr;
  void* d = scratch(slot, host.size_bytes());
  check(cudaMemcpyAsync(d, host.data(), host.size_bytes(), cudaMemcpyHostToDevice, stream()), "upload span");
  return static_cast<const T*>(d);
}

// Argument checks every op shares: the tensor lives on the GPU (or is empty with no elements).
void check_on_device(const Tensor& t, const char* op, const char* name);
void check_f32(const Tensor& t, const char* op, const char* name);  // f32 and on the GPU
bool is_weight_dtype(DType d);  // f32, f16 or bf16: what matmul weights and embedding tables may be
kernels::ElemType elem_type(DType d);  // of a weight dtype
// Number of rows when t is taken as 2-D [rows, last dim].
int64_t rows_of(const Tensor& t);

}  // namespace kapitsa::ops::cuda::detail
