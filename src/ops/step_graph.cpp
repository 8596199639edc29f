// Decode-step graphs (see step_graph.h): the backend-neutral face of ops/cuda/graph.h.
#include "ops/step_graph.h"

#include "base/check.h"

#if KAPITSA_HAVE_CUDA
#include "ops/cuda/graph.h"
#endif

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace kapitsa::ops {
namespace {
std::array<std::atomic<uint64_t>, 4> g_launches{};  // by StepKind
std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> on = [] {
    const char* v = std::getenv("KAPITSA_CUDA_GRAPHS");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}
std::atomic<bool>& spec_enabled_flag() {
  static std::atomic<bool> on = [] {
    const char* v = std::getenv("KAPITSA_CUDA_SPEC_GRAPHS");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}
}  // namespace

bool step_graphs_enabled(Device device) {
#if KAPITSA_HAVE_CUDA
  return device == Device::cuda && enabled_flag().load();
#else
  (void)device;
  return false;
#endif
}

void set_step_graphs(bool enabled) { enabled_flag() = enabled; }
bool spec_step_graphs_enabled(Device device) { return step_graphs_enabled(device) && spec_enabled_flag().load(); }
void set_spec_step_graphs(bool enabled) { spec_enabled_flag() = enabled; }
uint64_t step_graph_launches() {
  uint64_t n = 0;
  for (const auto& k : g_launches) n += k.load();
  return n;
}
uint64_t step_graph_launches(StepKind kind) { return g_launches[static_cast<size_t>(kind)].load(); }

#if KAPITSA_HAVE_CUDA
void mirror_step_metadata(Device device, const void* data, size_t bytes) {
  if (device == Device::cuda) cuda::set_mirror(data, bytes);
}
void clear_step_metadata(Device device) {
  if (device == Device::cuda) cuda::clear_mirror();
}
uint64_t step_graph_generation(Device device) { return device == Device::cuda ? cuda::generation() : 0; }
Tensor step_metadata_tensor(Device device, std::span<int32_t> ids) {
  const Shape shape{static_cast<int64_t>(ids.size())};
  if (device != Device::cuda) return Tensor(DType::i32, shape, ids.data());
  void* copy = cuda::mirror_device_copy(ids.data(), ids.size_bytes());
  KAPITSA_CHECK(copy != nullptr, "step_metadata_tensor: {} ids outside the step's mirrored metadata", ids.size());
  return Tensor(DType::i32, shape, copy, Device::cuda);
}
StepGraph::~StepGraph() { cuda::destroy_graph(exec_); }
void StepGraph::launch() const {
  cuda::launch_graph(exec_);
  ++g_launches[static_cast<size_t>(kind_)];
}
void begin_step_capture(Device device) {
  if (device == Device::cuda) cuda::begin_capture();
}
std::unique_ptr<StepGraph> end_step_capture(Device device, StepKind kind) {
  if (device != Device::cuda) return nullptr;
  void* exec = cuda::end_capture();
  return exec == nullptr ? nullptr : std::unique_ptr<StepGraph>(new StepGraph(exec, kind));
}
const char* step_capture_failure() { return cuda::capture_failure(); }
bool capturing_step(Device device) { return device == Device::cuda && cuda::capturing(); }
#else
void mirror_step_metadata(Device, const void*, size_t) {}
void clear_step_metadata(Device) {}
uint64_t step_graph_generation(Device) { return 0; }
Tensor step_metadata_tensor(Device, std::span<int32_t> ids) {
  return Tensor(DType::i32, Shape{static_cast<int64_t>(ids.size())}, ids.data());
}
StepGraph::~StepGraph() = default;
void StepGraph::launch() const {}
void begin_step_capture(Device) {}
std::unique_ptr<StepGraph> end_step_capture(Device, StepKind) { return nullptr; }
const char* step_capture_failure() { return "no CUDA backend in this build"; }
bool capturing_step(Device) { return false; }
#endif

}  // namespace kapitsa::ops
