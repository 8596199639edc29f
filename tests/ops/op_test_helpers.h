// Helpers for the op tests in this folder: a seeded RNG that prints its seed on failure, "run an op
// on a copy" so a backend and ref can be compared on identical inputs (ops may work in place), and the
// backend parameterisation: TEST_P(OnBackend, ...) runs once per registered backend other than ref
// (instantiated in test_backends.cpp), with backend() the one under test and run(b, op, args...)
// calling an op through ops.h (argument checks included) with b selected.
// Tests build every input on the host. For a backend whose tensors live on a device (cuda), run()
// mirrors the call there (DeviceMirror): each host memory range among the tensor arguments (Tensor,
// Buffer, Linear, lists of Tensors or Linears) is uploaded once — overlapping views share one device range, so
// in-place calls stay in place — the op runs on device views, and the ranges are downloaded back into
// host memory (only bytes that changed are written, so read-only inputs are never touched). A test
// thus reads results on the host whatever the backend.
#pragma once

#include "ops/backend.h"
#include "ops/cpu/cpu.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <ostream>
#include <span>
#include <type_traits>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace kapitsa::ops::test {

struct Rng {
  uint64_t seed = kapitsa::testing::fresh_seed();
  std::mt19937_64 gen{seed};
  std::string trace() const { return "seed " + std::to_string(seed); }
};

// Death tests in the "threadsafe" style (the child re-executes the test binary: the thread pool's
// threads make a plain fork unsafe), unless GTEST_DEATH_TEST_STYLE asks for another — under
// qemu-aarch64 (scripts/test-aarch64.sh) the child cannot execute an AArch64 binary and forks ("fast").
inline void threadsafe_death_tests() {
  const char* env = std::getenv("GTEST_DEATH_TEST_STYLE");
  ::testing::FLAGS_gtest_death_test_style = env != nullptr && *env != '\0' ? env : "threadsafe";
}

inline Buffer clone(const Tensor& t) {
  Buffer b = Buffer::allocate(t.dtype(), t.shape());
  if (t.nbytes() > 0) std::memcpy(b.tensor().data(), t.data(), t.nbytes());
  return b;
}

inline Buffer random_f32(Rng& r, Shape s, float lo = -1.0f, float hi = 1.0f) {
  return kapitsa::testing::random_buffer(r.gen, DType::f32, s, lo, hi);
}

// The oracle.
inline const BackendTable& ref() { return *find_backend("ref"); }

// The cuda backend's prefill over quantized weights (more than 8 tokens: ops/cuda/matmul.cpp,
// quantized_prefill) multiplies bf16 parts of x and of the weight and leaves out the smallest products:
// each x·w within 2^-15 of itself, so an output within 2^-15 of its Σ|x·w| (mag) of the exact sum.
inline double cuda_prefill_bound(const BackendTable& b, int64_t tokens, double mag) {
  return b.name == std::string_view("cuda") && tokens > 8 ? mag / 32768 : 0.0;
}
// The cuda backend's matmul over bf16 weights past 64 tokens (ops/cuda/matmul.cpp, kDenseExactMaxTokens)
// takes x to 16 bits: each x·w within 2^-16 of itself.
inline bool cuda_x16(const BackendTable& b, DType w, int64_t tokens) {
  return b.name == std::string_view("cuda") && w == DType::bf16 && tokens > 64;
}

// Every registered backend but ref, and the cpu backend's other levels this CPU runs ("cpu_avx2",
// "cpu_avxvnni", "cpu_baseline" beside the selected "cpu"; ops/cpu/cpu.h): what the op tests compare against ref.
inline std::vector<const BackendTable*> backends_under_test() {
  std::vector<const BackendTable*> v;
  for (const BackendTable* b : backends())
    if (b->name != "ref") v.push_back(b);
  for (cpu::Level l : cpu::kLevels)
    if (const BackendTable* b = cpu::backend_for(l); b != nullptr && l != cpu::selected_level()) v.push_back(b);
  return v;
}

// Why level l has no backend here, for a skip message: the CPU lacks a feature, or the build left the
// level out (KAPITSA_CPU_LEVELS, as the sanitizer pass does for levels this CPU does not run).
inline std::string level_skip_reason(cpu::Level l) {
  return cpu::level_compiled(l) ? "this CPU lacks " + cpu::missing_features(l)
                                : "this build has no " + std::string(cpu::level_name(l)) + " kernels";
}

// A device backend's memory as the tests reach it: allocation and byte copies. nullptr for host
// backends; device_memory.cpp registers one per device backend compiled in.
struct DeviceMemory {
  std::shared_ptr<void> (*allocate)(size_t bytes);  // .get() is the device address; freed with the last copy
  void (*upload)(void* device, const void* host, size_t bytes);
  void (*download)(void* host, const void* device, size_t bytes);  // waits for the backend's queued work
};
const DeviceMemory* device_memory(const BackendTable& b);

// The host memory of one op call mirrored on a device (see the header comment). Pass 1: note() every
// tensor; upload(); pass 2: view() gives each tensor's device view; download() after the op.
class DeviceMirror {
 public:
  explicit DeviceMirror(const DeviceMemory& m) : m_(m) {}
  DeviceMirror(const DeviceMirror&) = delete;
  DeviceMirror& operator=(const DeviceMirror&) = delete;
  void note(const Tensor& t);
  void upload();  // merges overlapping ranges, allocates and copies them
  Tensor view(const Tensor& t) const;
  void download() const;

 private:
  struct Range {
    uintptr_t begin, end;
    std::shared_ptr<void> device;
  };
  const DeviceMemory& m_;
  std::vector<Range> ranges_;
};

namespace detail {
template <class T>
using Plain = std::remove_cvref_t<T>;
template <class T>
constexpr bool is_tensor_like = std::is_same_v<Plain<T>, Tensor> || std::is_same_v<Plain<T>, Buffer>;
template <class T>
constexpr bool is_tensor_list = std::is_same_v<Plain<T>, std::vector<Tensor>> ||
                                std::is_same_v<Plain<T>, std::span<const Tensor>> ||
                                std::is_same_v<Plain<T>, std::span<Tensor>>;

template <class T>
constexpr bool is_linear_list = std::is_same_v<Plain<T>, std::vector<Linear>> ||
                                std::is_same_v<Plain<T>, std::span<const Linear>>;

template <class A>
void note(DeviceMirror& m, const A& a) {
  if constexpr (is_tensor_like<A>) m.note(static_cast<const Tensor&>(a));
  else if constexpr (std::is_same_v<Plain<A>, Linear>) {
    m.note(a.weight());
    m.note(a.scales()), m.note(a.biases());  // empty for dense
  }
  else if constexpr (is_tensor_list<A>)
    for (const Tensor& t : a) m.note(t);
  else if constexpr (is_linear_list<A>)
    for (const Linear& l : a) note(m, l);
}

// A weight as the device backend takes it: its tensors as device views. (A plain function, not a
// branch of on_device, so the list case below can call it: clang refuses a deduced-return-type
// function calling itself before its return type is known.)
inline Linear linear_on_device(const DeviceMirror& m, const Linear& a) {
  switch (a.format()) {
    case WeightFormat::dense: return Linear(m.view(a.weight()));
    case WeightFormat::affine:
      return Linear::affine(m.view(a.weight()), m.view(a.scales()), m.view(a.biases()), a.bits(), a.group_size());
    case WeightFormat::ggml: return Linear::ggml(m.view(a.weight()), a.ggml_type(), a.cols());
  }
  KAPITSA_CHECK(false, "DeviceMirror: weight format {} not mirrored yet", weight_format_name(a.format()));
  return Linear();
}

// The argument as the device backend takes it (tensors → device views; anything else unchanged).
template <class A>
decltype(auto) on_device(const DeviceMirror& m, A&& a) {
  if constexpr (is_tensor_like<A>) return m.view(static_cast<const Tensor&>(a));
  else if constexpr (std::is_same_v<Plain<A>, Linear>) return linear_on_device(m, a);
  else if constexpr (is_tensor_list<A>) {
    std::vector<Tensor> v;
    for (const Tensor& t : a) v.push_back(m.view(t));
    return v;
  } else if constexpr (is_linear_list<A>) {
    std::vector<Linear> v;
    for (const Linear& l : a) v.push_back(linear_on_device(m, l));
    return v;
  } else {
    return std::forward<A>(a);
  }
}
}  // namespace detail

// op(args...) with backend b selected on this thread (mirrored on b's device when it has one).
template <class Op, class... Args>
void run(const BackendTable& b, Op op, Args&&... args) {
  ScopedBackend on(b);
  const DeviceMemory* mem = device_memory(b);
  if (mem == nullptr) {
    op(std::forward<Args>(args)...);
    return;
  }
  DeviceMirror mirror(*mem);
  (detail::note(mirror, args), ...);
  mirror.upload();
  op(detail::on_device(mirror, std::forward<Args>(args))...);
  mirror.download();
}

// op as a callable that selects b first (for tests that take the op as a parameter).
template <class Op>
auto bound(const BackendTable& b, Op op) {
  return [&b, op](auto&&... args) { run(b, op, std::forward<decltype(args)>(args)...); };
}


inline bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && (a.nbytes() == 0 || std::memcmp(a.data(), b.data(), a.nbytes()) == 0);
}

}  // namespace kapitsa::ops::test

namespace kapitsa::ops {
// The fixture of every test that runs on each backend (TEST_P(OnBackend, ...)).
class OnBackend : public ::testing::TestWithParam<const BackendTable*> {
 protected:
  const BackendTable& backend() const { return *GetParam(); }
};
inline void PrintTo(const BackendTable* b, std::ostream* os) { *os << b->name; }
}  // namespace kapitsa::ops

