// The device seams that run without a GPU: --device parsing and its errors (a bad name; cuda where no
// usable GPU is present says what is missing), `kapitsa logits --device cpu` equal to the default, the
// ops/memory.h host paths (allocate, copy_bytes, zero on random bytes), and a model's pools and
// workspace living on the model's device. With a GPU, --device cuda on `logits` gives the CPU's logits
// (1e-4) and its greedy ids.
#include "cli_runner.h"
#include "cuda_test.h"
#include "models/model.h"
#include "ops/memory.h"
#include "test_util.h"
#include "weights/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

namespace kapitsa::testing {
namespace {

TEST(Device, ParseNamesAndErrors) {
  auto cpu = ops::parse_device("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->device, Device::cpu);
  auto cuda = ops::parse_device("cuda");
  ASSERT_TRUE(cuda.ok());
  EXPECT_EQ(cuda->device, Device::cuda);
  EXPECT_EQ(cuda->ordinal, 0);
  auto second = ops::parse_device("cuda:1");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->ordinal, 1);
  EXPECT_EQ(ops::device_name(*second), "cuda:1");
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:x", "cuda:1x", "CPU", ""}) {
    auto r = ops::parse_device(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().message.find("expected cpu, cuda or cuda:N"), std::string::npos) << r.error().message;
  }
}

TEST(Device, SelectingAMissingGpuSaysWhatIsMissing) {
  EXPECT_TRUE(ops::select_device({Device::cpu, 0}).ok());
  if (ops::cuda_usable()) {
    const Status s = ops::select_device({Device::cuda, 999});
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("cuda:999 does not exist"), std::string::npos) << s.error().message;
    return;
  }
  const Status s = ops::select_device({Device::cuda, 0});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("cuda:0"), std::string::npos) << s.error().message;
  // Without the backend built, or without a driver / device: the reason the CUDA report gives.
  EXPECT_NE(s.error().message.find(ops::cuda_report()), std::string::npos) << s.error().message;
}

TEST(Device, HostMemoryPathsMoveTheBytes) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  Buffer src = random_buffer(rng, DType::f32, {37, 5});
  Buffer dst = ops::allocate(Device::cpu, DType::f32, {37, 5});
  ops::copy_bytes(dst.tensor(), src.tensor());
  EXPECT_EQ(std::memcmp(dst.tensor().data(), src.tensor().data(), src.tensor().nbytes()), 0);
  Buffer copy = ops::copy_to(Device::cpu, src.tensor());
  EXPECT_EQ(std::memcmp(copy.tensor().data(), src.tensor().data(), src.tensor().nbytes()), 0);
  ops::zero(dst.tensor().rows(3, 9));
  for (int64_t i = 0; i < 37 * 5; ++i)
    EXPECT_EQ(dst.f32()[i], i >= 15 && i < 45 ? 0.0f : src.f32()[i]) << "element " << i;
}

// A model's KV pool, recurrent slots and workspace tensors live on its device (cpu here; cuda when
// loaded there), and spans stay on the host.
TEST(Device, PoolsAndWorkspaceFollowTheModel) {
  std::vector<Device> devices = {Device::cpu};
  if (ops::cuda_usable()) devices.push_back(Device::cuda);
  for (Device device : devices) {
    models::LoadOptions o;
    o.device = device;
    auto model = models::load_model(test_data_path("fixtures/qwen35-dense-tiny"), o);
    ASSERT_TRUE(model.ok()) << model.error().message;
    EXPECT_EQ((*model)->device(), device);
    EXPECT_EQ((*model)->kv_layout().device, device);
    auto state = (*model)->new_state(32);
    ASSERT_NE(state->slot_pool(), nullptr);
    EXPECT_EQ(state->slot_pool()->conv(0).device(), device);
    Buffer logits = Buffer::allocate(DType::f32, {1, (*model)->info().vocab_size});
    const int32_t ids[] = {1, 2, 3};
    ASSERT_TRUE((*model)->forward(ids, *state, logits).ok());
    EXPECT_EQ(state->kv_pool()->k(0).device(), device);
    models::Workspace ws(device);
    ws.begin_step();
    EXPECT_EQ(ws.take(DType::f32, {4, 4}).device(), device);
    std::span<int32_t> span = ws.take_span<int32_t>(3);
    span[2] = 7;  // host memory: writable here whatever the device
    EXPECT_EQ(span[2], 7);
  }
}

class DeviceCli : public ::testing::Test {
 protected:
  void SetUp() override { std::ofstream(dir_.path("ids.json")) << "[1, 2, 3, 4, 5, 6, 7]"; }
  CommandResult logits(const std::string& device, const std::string& out) {
    return run_kapitsa("logits --model " + test_data_path("fixtures/nemotron-h-tiny") + " --ids-file " +
                       dir_.path("ids.json") + " --generate 4 --out " + dir_.path(out) + device);
  }
  ScratchDir dir_;
};

TEST_F(DeviceCli, BadOrMissingDeviceIsAClearError) {
  CommandResult bad = logits(" --device tpu", "bad.safetensors");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("device 'tpu': expected cpu, cuda or cuda:N"), std::string::npos) << bad.output;
  if (ops::cuda_usable()) return;
  CommandResult missing = logits(" --device cuda", "missing.safetensors");
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find("--device cuda:0: "), std::string::npos) << missing.output;
}

TEST_F(DeviceCli, CudaLogitsEqualCpuLogits) {
  CommandResult cpu = logits(" --device cpu", "cpu.safetensors");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  KAPITSA_SKIP_WITHOUT_GPU();
  CommandResult gpu = logits(" --device cuda", "gpu.safetensors");
  ASSERT_EQ(gpu.exit_code, 0) << gpu.output;
  auto a = weights::Checkpoint::open(dir_.path("gpu.safetensors"));
  auto b = weights::Checkpoint::open(dir_.path("cpu.safetensors"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LE(relative_error(a->get_any_shape("logits").value(), b->get_any_shape("logits").value()), 1e-4);
  const Tensor ga = a->get_any_shape("greedy_ids", {DType::i32}).value(), gb = b->get_any_shape("greedy_ids", {DType::i32}).value();
  ASSERT_EQ(ga.numel(), gb.numel());
  EXPECT_EQ(std::memcmp(ga.data(), gb.data(), ga.nbytes()), 0);
}

}  // namespace
}  // namespace kapitsa::testing
