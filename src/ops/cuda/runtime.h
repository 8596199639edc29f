// Internal to ops/cuda: the one stream and cuBLAS handle every op uses, error checks, and device scratch
// (grow-only, per slot) for the host spans an op receives and for temporaries such as a matmul's
// converted activations. Not thread-safe: ops are called from one thread, as on the cpu backend.
// Scratch grows by cudaFree + cudaMalloc (which synchronise), so a later call never frees memory that a
// queued kernel still reads; a fixed per-step workspace replaces this before CUDA graphs.
#pragma once

#include "ops/cuda/kernels.h"
#include "tensor/linear.h"
#include "tensor/tensor.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "ops/seq_batch.h"

#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace kapitsa::ops::cuda::detail {

// Binds this host thread to the selected device (cuda:N, memory.cpp) on its first call.
void use_device();
// The ops' stream (binds the calling thread first).
cudaStream_t stream();
cublasHandle_t cublas();
// cuBLAS is opened on first use (cublas_library.cpp): empty when it can be, else why not.
std::string cublas_load_error();

// Stops with the CUDA error's name and text when `err` is not cudaSuccess.
void check(cudaError_t err, const char* what);
void check(cublasStatus_t status, const char* what);
// After a kernel launch: the launch error, if any (asynchronous faults surface at the next sync).
void check_launch(const char* op);

// Scratch slots: one per distinct temporary an op may hold at once.
enum class Slot { span0, span1, span2, temp0, temp1, pack, count };
// At least `bytes` of device memory in `slot`, valid until the next call for the same slot.
void* scratch(Slot slot, size_t bytes);
// Host memory → device, stream-ordered, through a pinned staging ring: the copy is queued without waiting
// (a pageable source would make it wait for the stream), so host spans cost no sync per op.
void copy_host_to_device(void* device, const void* host, size_t bytes);
// The device copy of host bytes inside this step's metadata mirror (graph.h), or null.
const void* mirrored(const void* host, size_t bytes);
// While capturing: records that the capture cannot be replayed (`why`, logged at debug level).
void capture_unrepeatable(const char* why);
// A device copy of constant host bytes (rope frequencies, expert pointer tables), uploaded once per
// distinct content and kept for the process: no copy per call, and a captured graph may read it.
const void* upload_constant(const void* host, size_t bytes);
// Copies a host span to the device (stream-ordered) and returns the device pointer; a span inside the
// step's metadata mirror is not copied (its device copy is returned).
template <typename T>
const T* upload(std::span<const T> host, Slot slot) {
  if (host.empty()) return nullptr;
  if (const void* m = mirrored(host.data(), host.size_bytes())) return static_cast<const T*>(m);
  void* d = scratch(slot, host.size_bytes());
  copy_host_to_device(d, host.data(), host.size_bytes());
  return static_cast<const T*>(d);
}

// Several host arrays (an op's batch metadata) copied to the device in one transfer: add() each, then
// upload() once into Slot::pack; at(i) is then array i's device pointer (valid until the next pack).
// Arrays inside the step's metadata mirror are not copied: at(i) is their device copy.
class HostPack {
 public:
  template <typename T>
  size_t add(std::span<const T> v) {
    if (const void* m = v.empty() ? nullptr : mirrored(v.data(), v.size_bytes())) {
      offsets_.push_back(kMirrored);
      mirrored_.push_back(static_cast<const unsigned char*>(m));
      return offsets_.size() - 1;
    }
    const size_t at = (bytes_.size() + 7) / 8 * 8;  // 8-byte aligned arrays
    bytes_.resize(at + v.size_bytes());
    if (!v.empty()) std::memcpy(bytes_.data() + at, v.data(), v.size_bytes());
    offsets_.push_back(at);
    mirrored_.push_back(nullptr);
    return offsets_.size() - 1;
  }
  void upload();
  template <typename T>
  const T* at(size_t i) const {
    return reinterpret_cast<const T*>(offsets_[i] == kMirrored ? mirrored_[i] : device_ + offsets_[i]);
  }

 private:
  static constexpr size_t kMirrored = ~size_t{0};
  std::vector<unsigned char> bytes_;
  std::vector<size_t> offsets_;
  std::vector<const unsigned char*> mirrored_;
  unsigned char* device_ = nullptr;
};

// The device form of a SeqBatch's recurrent-layer metadata (rows, state and checkpoint slots), packed
// into `pack` (uploaded by the caller).
struct SeqsInPack {
  size_t rows, slots, ckpt_offsets, ckpt_slots;
  bool has_ckpts;
};
SeqsInPack add_seqs(HostPack& pack, const SeqBatch& batch);
kernels::Seqs device_seqs(const HostPack& pack, const SeqsInPack& at, const SeqBatch& batch);

// Each sequence's rows [row_offsets[i], row_offsets[i+1]) cut into chunks of kStateChunk rows (the last
// shorter) for the chunked scans, added to `pack`; device_chunks after pack.upload().
struct ChunksInPack {
  int64_t n = 0;
  size_t start = 0, len = 0, seq_first = 0;
};
ChunksInPack add_chunks(HostPack& pack, std::span<const int64_t> row_offsets);
kernels::ChunkList device_chunks(const HostPack& pack, const ChunksInPack& at);

// An MLX affine Linear's kernel arguments (dequantize.cu), after checking that its codes, scales and
// biases live on the GPU. `op` names the caller in errors.
kernels::AffineArgs affine_args(const Linear& w, const char* op);
// The same fields unchecked (w may be a host weight): for questions about its shape, not for kernels.
kernels::AffineArgs affine_fields(const Linear& w);
// The kernels' view of a 2-D llama.cpp block weight (WeightFormat::ggml) on the device, or an error naming
// the op and the block type when the device has no decoder for it.
kernels::GgmlArgs ggml_args(const Linear& w, const char* op);
// x: [T, K] f32 rounded for the int8-activation GGUF GEMVs (quantize_x_int8, blocks of B inputs) into
// Slot::temp0: valid until that slot's next use. One rounding serves every weight on the same x.
const void* rounded_x_int8(const Tensor& x, int64_t B);

// Argument checks every op shares: the tensor lives on the GPU (or is empty with no elements).
void check_on_device(const Tensor& t, const char* op, const char* name);
void check_f32(const Tensor& t, const char* op, const char* name);  // f32 and on the GPU
bool is_weight_dtype(DType d);  // f32, f16 or bf16: what matmul weights and embedding tables may be
kernels::ElemType elem_type(DType d);  // of a weight dtype
// Number of rows when t is taken as 2-D [rows, last dim].
int64_t rows_of(const Tensor& t);

}  // namespace kapitsa::ops::cuda::detail
