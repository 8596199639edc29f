// The CUDA backend's process-wide state: one non-blocking stream, one cuBLAS handle bound to it, the
// scratch slots, and the checks the ops share. Created on first use, never destroyed (the driver
// reclaims everything at exit; destroying it from a static destructor races the driver's own teardown).
#include "ops/cuda/cuda.h"
#include "ops/cuda/runtime.h"

#include <algorithm>
#include <array>
#include <fmt/format.h>

namespace kapitsa::ops::cuda {
namespace detail {

void check(cudaError_t err, const char* what) {
  KAPITSA_CHECK(err == cudaSuccess, "cuda: {} failed: {} ({})", what, cudaGetErrorName(err), cudaGetErrorString(err));
}

void check(cublasStatus_t status, const char* what) {
  KAPITSA_CHECK(status == CUBLAS_STATUS_SUCCESS, "cuda: {} failed: {} ({})", what, cublasGetStatusName(status),
                cublasGetStatusString(status));
}

void check_launch(const char* op) { check(cudaGetLastError(), op); }

cudaStream_t stream() {
  use_device();
  static cudaStream_t s = [] {
    cudaStream_t created = nullptr;
    check(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking), "cudaStreamCreate");
    return created;
  }();
  return s;
}

cublasHandle_t cublas() {
  use_device();
  static cublasHandle_t h = [] {
    cublasHandle_t created = nullptr;
    check(cublasCreate(&created), "cublasCreate");
    check(cublasSetStream(created, stream()), "cublasSetStream");
    // Default math: f32 GEMMs stay plain f32 (TF32 only when asked for), bf16/f16 ones use tensor cores.
    check(cublasSetMathMode(created, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    return created;
  }();
  return h;
}

void* scratch(Slot slot, size_t bytes) {
  struct Region {
    void* data = nullptr;
    size_t bytes = 0;
  };
  use_device();
  static std::array<Region, static_cast<size_t>(Slot::count)> regions;
  Region& r = regions[static_cast<size_t>(slot)];
  if (r.bytes < bytes) {
    if (r.data != nullptr) check(cudaFree(r.data), "cudaFree (scratch)");
    r.bytes = std::max<size_t>(bytes, 2 * r.bytes);
    check(cudaMalloc(&r.data, r.bytes), "cudaMalloc (scratch)");
  }
  return r.data;
}

// The ring is never overwritten under a queued copy: regions are handed out in order, and wrapping
// around first waits for the stream (every earlier copy out of the ring has then completed). Larger
// copies than the ring go straight from the pageable source (cudaMemcpyAsync waits then).
void copy_host_to_device(void* device, const void* host, size_t bytes) {
  if (bytes == 0) return;
  constexpr size_t kRing = size_t{32} << 20;
  static unsigned char* ring = [] {
    void* p = nullptr;
    check(cudaHostAlloc(&p, kRing, cudaHostAllocDefault), "cudaHostAlloc (staging ring)");
    return static_cast<unsigned char*>(p);
  }();
  static size_t next = 0;
  if (bytes > kRing) {
    check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream()), "upload");
    return;
  }
  size_t at = (next + 255) / 256 * 256;
  if (at + bytes > kRing) {
    check(cudaStreamSynchronize(stream()), "upload (staging ring wraps)");
    at = 0;
  }
  std::memcpy(ring + at, host, bytes);
  check(cudaMemcpyAsync(device, ring + at, bytes, cudaMemcpyHostToDevice, stream()), "upload");
  next = at + bytes;
}

void HostPack::upload() {
  if (bytes_.empty()) return;
  device_ = static_cast<unsigned char*>(scratch(Slot::pack, bytes_.size()));
  copy_host_to_device(device_, bytes_.data(), bytes_.size());
}

SeqsInPack add_seqs(HostPack& pack, const SeqBatch& batch) {
  KAPITSA_CHECK(batch.n_seqs() <= 65535, "cuda: a batch of {} sequences (at most 65535 per launch)", batch.n_seqs());
  SeqsInPack at{};
  at.rows = pack.add(batch.row_offsets);
  at.slots = pack.add(batch.state_slots);
  at.has_ckpts = !batch.ckpt_offsets.empty();
  at.ckpt_offsets = pack.add(batch.ckpt_offsets);
  at.ckpt_slots = pack.add(batch.ckpt_slots);
  return at;
}

kernels::Seqs device_seqs(const HostPack& pack, const SeqsInPack& at, const SeqBatch& batch) {
  kernels::Seqs s;
  s.n_seqs = batch.n_seqs();
  s.row_offsets = pack.at<int64_t>(at.rows);
  s.state_slots = pack.at<int32_t>(at.slots);
  if (at.has_ckpts) {
    s.ckpt_offsets = pack.at<int32_t>(at.ckpt_offsets);
    s.ckpt_slots = pack.at<int32_t>(at.ckpt_slots);
  }
  return s;
}

kernels::AffineArgs affine_args(const Linear& w, const char* op) {
  KAPITSA_CHECK(w.format() == WeightFormat::affine && w.weight().rank() == 2 && w.weight().dtype() == DType::u32,
                "{}: weight format {} {} (dense or a 2-D affine)", op, weight_format_name(w.format()),
                w.weight().shape().str());
  check_on_device(w.weight(), op, "codes"), check_on_device(w.scales(), op, "scales");
  check_on_device(w.biases(), op, "biases");
  KAPITSA_CHECK(is_weight_dtype(w.scales().dtype()) && w.biases().dtype() == w.scales().dtype(),
                "{}: affine scales {} and biases {} (f32, f16 or bf16)", op, dtype_name(w.scales().dtype()),
                dtype_name(w.biases().dtype()));
  return kernels::AffineArgs{static_cast<const uint32_t*>(w.weight().data()), w.scales().data(), w.biases().data(),
                             elem_type(w.scales().dtype()), w.bits(), w.group_size(), w.cols(), w.weight().dim(1)};
}

void check_on_device(const Tensor& t, const char* op, const char* name) {
  KAPITSA_CHECK(t.numel() == 0 || (t.device() == Device::cuda && t.data() != nullptr),
                "{}: {} must be a tensor on the cuda device", op, name);
}

void check_f32(const Tensor& t, const char* op, const char* name) {
  KAPITSA_CHECK(t.dtype() == DType::f32, "{}: {} must be F32, got {}", op, name, dtype_name(t.dtype()));
  check_on_device(t, op, name);
}

bool is_weight_dtype(DType d) { return d == DType::f32 || d == DType::f16 || d == DType::bf16; }

kernels::ElemType elem_type(DType d) {
  return d == DType::f16 ? kernels::ElemType::f16 : d == DType::bf16 ? kernels::ElemType::bf16 : kernels::ElemType::f32;
}

int64_t rows_of(const Tensor& t) {
  KAPITSA_CHECK(t.rank() >= 1, "tensor of rank 0");
  const int64_t cols = t.dim(-1);
  return cols == 0 ? 0 : t.numel() / cols;
}

}  // namespace detail

bool device_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::string device_description() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) return fmt::format("no CUDA device ({})", cudaGetErrorString(err));
  if (n == 0) return "no CUDA device";
  cudaDeviceProp p{};
  detail::check(cudaGetDeviceProperties(&p, current_device()), "cudaGetDeviceProperties");
  int driver = 0;
  cudaDriverGetVersion(&driver);
  return fmt::format("{} (sm_{}{}, {} SMs, {:.1f} GiB, driver {}.{})", p.name, p.major, p.minor, p.multiProcessorCount,
                     static_cast<double>(p.totalGlobalMem) / (1 << 30), driver / 1000, driver % 1000 / 10);
}

void synchronize() { detail::check(cudaStreamSynchronize(detail::stream()), "cudaStreamSynchronize"); }

}  // namespace kapitsa::ops::cuda
