// CUDA-specific tests (every op against ref is a shared op test in tests/ops, run on cuda through the
// backend table): the device report, the backend's registration, DeviceBuffer and the raw copies, the
// step-graph mechanism (metadata mirror, capture, replay), the error for a host tensor handed to the
// cuda backend, and cuBLAS opened on first use. Each test needing a GPU skips visibly without one.
#include "ops/backend.h"
#include "ops/cuda/cuda.h"
#include "ops/cuda/device_buffer.h"
#include "ops/cuda/runtime.h"
#include "ops/ops.h"
#include "ops/step_graph.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

namespace kapitsa::ops {
namespace {

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device: " << cuda::device_description();
  }
};

TEST(CudaBackend, ReportsItsDevice) {
  // Runs everywhere: says what it found, so a GPU run's log names the device and a CPU run says why not.
  const std::string what = cuda::device_description();
  std::printf("cuda: %s\n", what.c_str());
  EXPECT_EQ(cuda::device_available(), what.rfind("no CUDA device", 0) != 0);
  // Registered exactly when usable, so CPU-only machines see no cuda backend.
  EXPECT_EQ(find_backend("cuda") != nullptr, cuda::device_available());
}

// cuBLAS is opened on first use (cublas_library.cpp), not linked: a program with the CUDA backend does not
// load it at start (ldd lists what the loader would). Runs everywhere.
TEST(CublasLibrary, IsNotLoadedAtStart) {
  char self[4096] = {};
  ASSERT_GT(readlink("/proc/self/exe", self, sizeof(self) - 1), 0);
  std::string listed;
  FILE* ldd = popen(("ldd '" + std::string(self) + "' 2>&1").c_str(), "r");
  ASSERT_NE(ldd, nullptr);
  char buf[512];
  while (std::fgets(buf, sizeof(buf), ldd)) listed += buf;
  pclose(ldd);
  ASSERT_NE(listed.find("libc.so"), std::string::npos) << "ldd did not list this program: " << listed;
  EXPECT_EQ(listed.find("libcublas"), std::string::npos) << listed;
}

// Opening it and calling through needs no GPU: a status name comes from the library itself.
TEST(CublasLibrary, OpensOnFirstUse) {
  ASSERT_EQ(cuda::detail::cublas_load_error(), "") << "the CUDA toolkit's cuBLAS is installed where this build found it";
  EXPECT_DEATH(cuda::detail::check(CUBLAS_STATUS_NOT_INITIALIZED, "probe"),
               "probe failed: CUBLAS_STATUS_NOT_INITIALIZED");
}

TEST_F(Cuda, BackendFillsEveryEntry) {
  const BackendTable* b = find_backend("cuda");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->device, Device::cuda);
#define KAPITSA_OP(op) EXPECT_NE(b->op, nullptr) << "cuda lacks " #op;
#include "ops/op_names.inc"
#undef KAPITSA_OP
}

// Fresh random bytes survive upload → device-to-device copy (the copy op) → download, through both
// DeviceBuffer and the raw copies; zeros() is zero.
TEST_F(Cuda, DeviceBufferRoundTrips) {
  std::mt19937_64 gen(kapitsa::testing::fresh_seed());
  for (DType dt : {DType::f32, DType::bf16, DType::i32}) {
    SCOPED_TRACE(dtype_name(dt));
    Buffer host = kapitsa::testing::random_buffer(gen, dt == DType::i32 ? DType::f32 : dt, {37, 5});
    const Tensor bytes(dt, {37, 5}, host.tensor().data());
    cuda::DeviceBuffer a = cuda::DeviceBuffer::upload(bytes), b = cuda::DeviceBuffer::allocate(dt, {37, 5});
    ASSERT_EQ(a.tensor().device(), Device::cuda);
    {
      ScopedBackend on(find_backend("cuda"));
      ops::copy(a.tensor(), b.tensor());  // qualified: the cuda namespace has a copy too
    }
    Buffer back = Buffer::allocate(dt, {37, 5});
    b.download(back);
    EXPECT_EQ(std::memcmp(back.tensor().data(), host.tensor().data(), host.tensor().nbytes()), 0);
    std::vector<uint8_t> raw(host.tensor().nbytes());
    cuda::copy_to_device(b.tensor().data(), raw.data(), raw.size());  // zeros in
    cuda::copy_to_host(back.tensor().data(), b.tensor().data(), raw.size());
    EXPECT_EQ(std::memcmp(back.tensor().data(), raw.data(), raw.size()), 0);
    cuda::DeviceBuffer z = cuda::DeviceBuffer::zeros(dt, {3, 4});
    Buffer zb = Buffer::allocate(dt, {3, 4});
    std::memset(zb.tensor().data(), 0xff, zb.tensor().nbytes());
    z.download(zb);
    for (size_t i = 0; i < zb.tensor().nbytes(); ++i) ASSERT_EQ(static_cast<uint8_t*>(zb.tensor().data())[i], 0);
  }
}

// The decode-graph mechanism (ops/step_graph.h) on one op: an embedding given ids inside the mirrored
// step metadata reads the copy made when mirrored (the host bytes changed afterwards are not seen);
// the same embedding captured as a graph, replayed after each new mirror, gathers each mirror's fresh
// random ids; a capture that meets a host span outside the mirror yields no graph and says why.
TEST_F(Cuda, StepGraphReplaysMirroredMetadata) {
  std::mt19937_64 gen(kapitsa::testing::fresh_seed());
  constexpr int64_t V = 50, H = 24, T = 4;
  Buffer table = kapitsa::testing::random_buffer(gen, DType::f32, {V, H});
  cuda::DeviceBuffer d_table = cuda::DeviceBuffer::upload(table), out = cuda::DeviceBuffer::allocate(DType::f32, {T, H});
  const Linear w(d_table.tensor());
  ScopedBackend on(find_backend("cuda"));
  std::uniform_int_distribution<int32_t> pick(0, V - 1);
  std::vector<int32_t> meta(T);  // the step's metadata: written in place (the span below stays valid)
  const std::span<const int32_t> ids(meta);
  auto write = [&](const std::vector<int32_t>& v) { std::copy(v.begin(), v.end(), meta.begin()); };
  auto fresh_ids = [&] {
    std::vector<int32_t> v(T);
    for (int32_t& id : v) id = pick(gen);
    return v;
  };
  auto expect_rows = [&](const std::vector<int32_t>& want, const char* what) {
    Buffer back = Buffer::allocate(DType::f32, {T, H});
    std::memset(back.tensor().data(), 0xff, back.tensor().nbytes());
    out.download(back);
    for (int64_t t = 0; t < T; ++t)
      EXPECT_EQ(std::memcmp(back.tensor().rows(t, t + 1).data(), table.tensor().rows(want[t], want[t] + 1).data(),
                            H * sizeof(float)),
                0)
          << what << ": row " << t;
  };

  const std::vector<int32_t> mirrored = fresh_ids();
  write(mirrored);
  mirror_step_metadata(Device::cuda, meta.data(), meta.size() * sizeof(int32_t));
  write(fresh_ids());  // after the copy: not what the op reads
  ops::embedding(w, ids, out.tensor());
  expect_rows(mirrored, "mirrored");
  clear_step_metadata(Device::cuda);

  mirror_step_metadata(Device::cuda, meta.data(), meta.size() * sizeof(int32_t));
  begin_step_capture(Device::cuda);
  ops::embedding(w, ids, out.tensor());
  const std::unique_ptr<StepGraph> graph = end_step_capture(Device::cuda);
  clear_step_metadata(Device::cuda);
  ASSERT_NE(graph, nullptr) << step_capture_failure();
  for (int i = 0; i < 3; ++i) {
    const std::vector<int32_t> now = fresh_ids();
    write(now);
    mirror_step_metadata(Device::cuda, meta.data(), meta.size() * sizeof(int32_t));
    graph->launch();
    expect_rows(now, "replayed");
    clear_step_metadata(Device::cuda);
  }

  ops::embedding(w, ids, out.tensor());  // eagerly first: its scratch exists before the capture
  begin_step_capture(Device::cuda);
  ops::embedding(w, ids, out.tensor());  // no mirror: a per-call copy a replay would not repeat
  EXPECT_EQ(end_step_capture(Device::cuda), nullptr);
  EXPECT_STREQ(step_capture_failure(), "a host span outside the step's metadata");
}

TEST_F(Cuda, HostTensorIsAClearError) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  float a[4] = {1, 2, 3, 4}, y[4] = {};
  const Tensor ta(DType::f32, {2, 2}, a), ty(DType::f32, {2, 2}, y);
  ScopedBackend on(find_backend("cuda"));
  EXPECT_DEATH(ops::add(ta, ta, ty), "add: a is on cpu, backend cuda runs on cuda");
}

}  // namespace
}  // namespace kapitsa::ops
