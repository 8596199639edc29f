// The CUDA backend's process-wide state: one non-blocking stream, one cuBLAS handle bound to it, the
// scratch slots, and the checks the ops share. Created on first use, never destroyed (the driver
// reclaims everything at exit; destroying it from a static destructor races the driver's own teardown).
#include "ops/cuda/cuda.h"
#include "ops/cuda/graph.h"
#include "ops/cuda/runtime.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <map>
#include <string>
#include <vector>

namespace kapitsa::ops::cuda {
namespace {

// The stream capture in progress (graph.h): whether it is still replayable, and why not. Nothing runs
// while capturing, so what a replay could not repeat is only recorded (and skipped); the step then runs
// eagerly.
struct Capture {
  bool active = false;
  bool usable = true;
  std::string why;
};
Capture& capture_state() {
  static Capture c;
  return c;
}
uint64_t g_generation = 1;

// The step's metadata mirror: host range, its pinned staging copy and its device copy.
struct Mirror {
  const unsigned char* host = nullptr;
  size_t bytes = 0;
  unsigned char* pinned = nullptr;
  size_t pinned_bytes = 0;
  unsigned char* device = nullptr;
  size_t device_bytes = 0;
  cudaEvent_t copied = nullptr;  // the last copy out of `pinned` has been done
};
Mirror& mirror_state() {
  static Mirror m;
  return m;
}

}  // namespace

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
    // A workspace of its own, allocated once (32 MiB: cuBLAS's recommendation for Hopper), so that a
    // GEMM captured into a decode step's graph (9-16 sequences) never allocates while capturing and
    // every replay finds its workspace where the capture put it.
    constexpr size_t kWorkspaceBytes = size_t{32} << 20;
    void* workspace = nullptr;
    check(cudaMalloc(&workspace, kWorkspaceBytes), "cudaMalloc (cuBLAS workspace)");
    check(cublasSetWorkspace(created, workspace, kWorkspaceBytes), "cublasSetWorkspace");
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
    if (capture_state().active) {  // nothing runs while capturing: give the capture up, allocate later
      capture_unrepeatable("scratch grew");
      return r.data;
    }
    if (r.data != nullptr) check(cudaFree(r.data), "cudaFree (scratch)");
    r.bytes = std::max<size_t>(bytes, 2 * r.bytes);
    check(cudaMalloc(&r.data, r.bytes), "cudaMalloc (scratch)");
    ++g_generation;  // graphs may point into the old region
  }
  return r.data;
}

const void* mirrored(const void* host, size_t bytes) {
  const Mirror& m = mirror_state();
  const auto* p = static_cast<const unsigned char*>(host);
  if (m.bytes == 0 || p < m.host || p + bytes > m.host + m.bytes) return nullptr;
  return m.device + (p - m.host);
}

void capture_unrepeatable(const char* why) {
  Capture& c = capture_state();
  if (!c.active || !c.usable) return;
  c.usable = false;
  c.why = why;
}

const void* upload_constant(const void* host, size_t bytes) {
  if (bytes == 0) return nullptr;
  // Keyed by content: the same bytes at another address share one copy.
  static std::map<std::string, void*> copies;
  std::string key(static_cast<const char*>(host), bytes);
  auto it = copies.find(key);
  if (it != copies.end()) return it->second;
  if (capture_state().active) {  // nothing runs while capturing: give the capture up, upload later
    capture_unrepeatable("a constant seen for the first time");
    return nullptr;
  }
  void* d = nullptr;
  check(cudaMalloc(&d, bytes), "cudaMalloc (constant)");
  check(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), "upload (constant)");
  copies.emplace(std::move(key), d);
  return d;
}

// The ring is never overwritten under a queued copy: regions are handed out in order, and wrapping
// around first waits for the stream (every earlier copy out of the ring has then completed). Larger
// copies than the ring go straight from the pageable source (cudaMemcpyAsync waits then).
void copy_host_to_device(void* device, const void* host, size_t bytes) {
  if (bytes == 0) return;
  if (capture_state().active) {  // a replay would copy stale ring bytes: give the capture up
    capture_unrepeatable("a host span outside the step's metadata");
    return;
  }
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

ChunksInPack add_chunks(HostPack& pack, std::span<const int64_t> row_offsets) {
  std::vector<int64_t> start;
  std::vector<int32_t> len, seq_first;
  for (size_t i = 0; i + 1 < row_offsets.size(); ++i) {
    seq_first.push_back(static_cast<int32_t>(start.size()));
    for (int64_t r = row_offsets[i]; r < row_offsets[i + 1]; r += kernels::kStateChunk) {
      start.push_back(r);
      len.push_back(static_cast<int32_t>(std::min(kernels::kStateChunk, row_offsets[i + 1] - r)));
    }
  }
  seq_first.push_back(static_cast<int32_t>(start.size()));
  ChunksInPack at;
  at.n = static_cast<int64_t>(start.size());
  at.start = pack.add(std::span<const int64_t>(start));  // add() copies
  at.len = pack.add(std::span<const int32_t>(len));
  at.seq_first = pack.add(std::span<const int32_t>(seq_first));
  return at;
}

kernels::ChunkList device_chunks(const HostPack& pack, const ChunksInPack& at) {
  return kernels::ChunkList{at.n, pack.at<int64_t>(at.start), pack.at<int32_t>(at.len), pack.at<int32_t>(at.seq_first)};
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
  return affine_fields(w);
}

kernels::AffineArgs affine_fields(const Linear& w) {
  return kernels::AffineArgs{static_cast<const uint32_t*>(w.weight().data()), w.scales().data(), w.biases().data(),
                             elem_type(w.scales().dtype()), w.bits(), w.group_size(), w.cols(), w.weight().dim(-1)};
}

const void* rounded_x_int8(const Tensor& x, int64_t B) {
  const int64_t T = rows_of(x), K = x.dim(-1);
  void* xq = scratch(Slot::temp0, kernels::ggml_int8_scratch_bytes(T, K, B));
  kernels::quantize_x_int8(x.f32(), T, K, B, xq, stream());
  return xq;
}

kernels::GgmlArgs ggml_args(const Linear& w, const char* op) {
  KAPITSA_CHECK(w.format() == WeightFormat::ggml && w.weight().rank() == 2 && w.weight().dtype() == DType::u8,
                "{}: weight format {} {} (a 2-D block weight)", op, weight_format_name(w.format()), w.weight().shape().str());
  const auto type = static_cast<uint32_t>(w.ggml_type());
  KAPITSA_CHECK(kernels::ggml_supported(type), "{}: the cuda backend has no kernel for {} blocks", op,
                ggml_type_name(w.ggml_type()));
  check_on_device(w.weight(), op, "blocks");
  return kernels::GgmlArgs{static_cast<const uint8_t*>(w.weight().data()), type, w.cols(), w.weight().dim(1)};
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

bool kernels::pdl_enabled() {
  // Hopper or newer (the launch attribute and griddepcontrol need sm_90), unless KAPITSA_CUDA_PDL=0.
  static const bool on = [] {
    const char* v = std::getenv("KAPITSA_CUDA_PDL");
    if (v != nullptr && std::strcmp(v, "0") == 0) return false;
    int major = 0;
    return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, current_device()) == cudaSuccess &&
           major >= 9;
  }();
  return on;
}

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

void synchronize() {
  if (capturing()) return detail::capture_unrepeatable("a wait for the stream");
  detail::check(cudaStreamSynchronize(detail::stream()), "cudaStreamSynchronize");
}

void set_mirror(const void* host, size_t bytes) {
  using detail::check;
  Mirror& m = mirror_state();
  m.host = nullptr, m.bytes = 0;
  if (bytes == 0) return;
  KAPITSA_CHECK(!capturing(), "cuda: step metadata mirrored during a capture");
  const cudaStream_t s = detail::stream();
  if (m.copied == nullptr) check(cudaEventCreateWithFlags(&m.copied, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventSynchronize(m.copied), "cudaEventSynchronize (metadata mirror)");  // pinned is free again
  if (m.pinned_bytes < bytes) {
    if (m.pinned != nullptr) check(cudaFreeHost(m.pinned), "cudaFreeHost (metadata mirror)");
    m.pinned_bytes = std::max(bytes, 2 * m.pinned_bytes);
    void* p = nullptr;
    check(cudaHostAlloc(&p, m.pinned_bytes, cudaHostAllocDefault), "cudaHostAlloc (metadata mirror)");
    m.pinned = static_cast<unsigned char*>(p);
  }
  if (m.device_bytes < bytes) {
    if (m.device != nullptr) check(cudaFree(m.device), "cudaFree (metadata mirror)");
    m.device_bytes = std::max(bytes, 2 * m.device_bytes);
    void* p = nullptr;
    check(cudaMalloc(&p, m.device_bytes), "cudaMalloc (metadata mirror)");
    m.device = static_cast<unsigned char*>(p);
    ++g_generation;
  }
  std::memcpy(m.pinned, host, bytes);
  check(cudaMemcpyAsync(m.device, m.pinned, bytes, cudaMemcpyHostToDevice, s), "upload (metadata mirror)");
  check(cudaEventRecord(m.copied, s), "cudaEventRecord (metadata mirror)");
  m.host = static_cast<const unsigned char*>(host), m.bytes = bytes;
}

void* mirror_device_copy(void* host, size_t bytes) { return const_cast<void*>(detail::mirrored(host, bytes)); }

void clear_mirror() { mirror_state().host = nullptr, mirror_state().bytes = 0; }

bool capturing() { return capture_state().active; }

void begin_capture() {
  Capture& c = capture_state();
  KAPITSA_CHECK(!c.active, "cuda: a graph capture inside another");
  detail::check(cudaStreamBeginCapture(detail::stream(), cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
  c.active = true, c.usable = true, c.why.clear();
}

void* end_capture() {
  Capture& c = capture_state();
  cudaGraph_t graph = nullptr;
  const cudaError_t err = cudaStreamEndCapture(detail::stream(), &graph);
  c.active = false;
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // the capture's error is not the next op's
    if (c.usable) c.usable = false, c.why = cudaGetErrorName(err);
  }
  cudaGraphExec_t exec = nullptr;
  if (c.usable) detail::check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  if (graph != nullptr) cudaGraphDestroy(graph);
  return exec;
}

const char* capture_failure() { return capture_state().why.c_str(); }

void launch_graph(void* exec) {
  detail::check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), detail::stream()), "cudaGraphLaunch");
}

void destroy_graph(void* exec) {
  if (exec != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
}

uint64_t generation() { return g_generation; }

}  // namespace kapitsa::ops::cuda
