// The per-step workspace: after warm-up, decode steps allocate no Buffer in the model (every scratch
// tensor comes from the workspace), for both families at batch 1 and batch 4; and the arena itself
// hands out aligned, non-overlapping scratch, growing to a step's peak once.
#include "models/model.h"
#include "models/workspace.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace kapitsa::testing {
namespace {

TEST(Workspace, ScratchIsAlignedDisjointAndSizedByThePeakStep) {
  models::Workspace ws;
  ws.begin_step();
  const Tensor a = ws.take(DType::f32, {3, 5});
  const Tensor b = ws.take(DType::f32, {7});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  EXPECT_NE(a.data(), b.data());
  {
    models::Workspace::Scope scope(ws);
    (void)ws.take(DType::f32, {1000});
  }
  ws.begin_step();  // the first step overflowed: the block now holds its peak
  const size_t capacity = ws.capacity_bytes();
  EXPECT_GE(capacity, (15 + 7 + 1000) * sizeof(float));
  const int64_t before = Buffer::allocation_count();
  const Tensor c = ws.take(DType::f32, {3, 5});
  {
    models::Workspace::Scope scope(ws);
    const Tensor d = ws.take(DType::f32, {1000});
    EXPECT_GE(static_cast<const char*>(d.data()), static_cast<const char*>(c.data()) + c.nbytes());
  }
  const Tensor e = ws.take(DType::f32, {7});  // reuses what the scope handed back
  EXPECT_GE(static_cast<const char*>(e.data()), static_cast<const char*>(c.data()) + c.nbytes());
  ws.begin_step();
  EXPECT_EQ(Buffer::allocation_count(), before);
  EXPECT_EQ(ws.capacity_bytes(), capacity);
}

class NoAllocationInDecode : public ::testing::TestWithParam<std::string> {};

TEST_P(NoAllocationInDecode, AtBatchOneAndFour) {
  auto loaded = models::load_model(test_data_path("fixtures/" + GetParam()));
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  const models::Model& model = **loaded;
  const int64_t V = model.info().vocab_size;
  for (int batch : {1, 4}) {
    std::vector<std::unique_ptr<models::SequenceState>> states;
    std::vector<Buffer> logits;
    std::vector<std::vector<int32_t>> prompts;
    for (int j = 0; j < batch; ++j) {
      states.push_back(model.new_state(64));
      logits.push_back(Buffer::allocate(DType::f32, {1, V}));
      prompts.push_back(std::vector<int32_t>(static_cast<size_t>(3 + 2 * j), 7 + j));
    }
    auto step = [&](bool prefill, int i) {
      std::vector<int32_t> next(static_cast<size_t>(batch));
      std::vector<models::Model::BatchItem> items;
      for (int j = 0; j < batch; ++j) {
        next[static_cast<size_t>(j)] = 11 + i + j;
        std::span<const int32_t> ids = prefill ? std::span<const int32_t>(prompts[static_cast<size_t>(j)])
                                               : std::span<const int32_t>(&next[static_cast<size_t>(j)], 1);
        items.push_back({ids, states[static_cast<size_t>(j)].get(), logits[static_cast<size_t>(j)].tensor()});
      }
      ASSERT_TRUE(model.forward_batch(items).ok());
    };
    const int64_t fresh = Buffer::allocation_count();
    step(true, 0);
    if (batch == 1) EXPECT_GT(Buffer::allocation_count(), fresh) << "the first step sizes the workspace (the count works)";
    step(false, 0);  // warm-up
    step(false, 1);
    const int64_t before = Buffer::allocation_count();
    for (int i = 2; i < 8; ++i) step(false, i);
    EXPECT_EQ(Buffer::allocation_count() - before, 0) << "batch " << batch;
  }
}

INSTANTIATE_TEST_SUITE_P(Qwen, NoAllocationInDecode,
                         ::testing::Values("qwen35-dense-tiny", "qwen35-moe-tiny", "qwen3-next-tiny"));
INSTANTIATE_TEST_SUITE_P(Nemotron, NoAllocationInDecode,
                         ::testing::Values("nemotron-h-tiny", "nemotron-h-latent-tiny"));

}  // namespace
}  // namespace kapitsa::testing
