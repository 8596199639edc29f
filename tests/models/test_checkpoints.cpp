// Per-token recurrent-state checkpoints (ForwardOutputs::checkpoints): checkpoint j of a step over n
// tokens equals the recurrent state of running the first n - k + j + 1 tokens alone, for both families,
// the ref and cpu backends, k in {1, 2, 5, 16}, with the window straddling a scan chunk boundary (GDN
// chunks of 64, the fixtures' Mamba-2 chunks of 32); the last checkpoint is the state itself. Also: the
// outputs return logits and hidden rows for chosen positions equal to a full pass's.
#include "models/model.h"
#include "ops/ops.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <numeric>

namespace kapitsa::testing {
namespace {

struct CheckpointCase {
  std::string fixture;
  ops::Backend backend;
  int k;
  int n;  // tokens in the step
};

void PrintTo(const CheckpointCase& c, std::ostream* os) {
  *os << c.fixture << (c.backend == ops::Backend::ref ? "/ref" : "/cpu") << "/k" << c.k << "/n" << c.n;
}

class Checkpoints : public ::testing::TestWithParam<CheckpointCase> {
 protected:
  void SetUp() override { ops::set_backend(GetParam().backend); }
  void TearDown() override { ops::set_backend(ops::Backend::cpu); }
};

std::vector<int32_t> prompt(int n, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % vocab);
  return ids;
}

TEST_P(Checkpoints, SlotJHoldsTheStateAfterItsToken) {
  const CheckpointCase& c = GetParam();
  auto loaded = models::load_model(test_data_path("fixtures/" + c.fixture));
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  const models::Model& model = **loaded;
  const std::vector<int32_t> ids = prompt(c.n, model.info().vocab_size);

  auto state = model.new_state(c.n);
  models::StateSlotPool& pool = *state->slot_pool();
  ASSERT_GT(pool.layout().n_layers, 0);
  std::vector<int32_t> slots;
  for (int j = 0; j < c.k; ++j) slots.push_back(pool.allocate());
  const models::ForwardBatch::Sequence sequence{ids, state.get()};
  const models::ForwardOutputs::Checkpoints checkpoints{0, slots};
  models::ForwardOutputs outputs;
  outputs.checkpoints = std::span(&checkpoints, 1);
  models::Workspace workspace;
  models::ForwardContext ctx{workspace};
  ASSERT_TRUE(model.forward(models::ForwardBatch{std::span(&sequence, 1)}, outputs, ctx).ok());

  for (int j = 0; j < c.k; ++j) {
    const int tokens = c.n - c.k + j + 1;
    auto alone = model.new_state(tokens);
    Buffer logits = Buffer::allocate(DType::f32, {1, model.info().vocab_size});
    ASSERT_TRUE(model.forward(std::span(ids).first(static_cast<size_t>(tokens)), *alone, logits).ok());
    for (int64_t l = 0; l < pool.layout().n_layers; ++l) {
      EXPECT_LE(relative_error(pool.conv(l).index(slots[static_cast<size_t>(j)]), pool.conv(l).index(alone->state_slot())),
                1e-5)
          << "conv window, layer " << l << ", checkpoint " << j;
      EXPECT_LE(relative_error(pool.ssm(l).index(slots[static_cast<size_t>(j)]), pool.ssm(l).index(alone->state_slot())),
                1e-4)
          << "state, layer " << l << ", checkpoint " << j;
    }
  }
  for (int64_t l = 0; l < pool.layout().n_layers; ++l)
    EXPECT_EQ(relative_error(pool.ssm(l).index(slots.back()), pool.ssm(l).index(state->state_slot())), 0.0);
  for (int32_t slot : slots) pool.release(slot);
}

std::vector<CheckpointCase> cases() {
  std::vector<CheckpointCase> all;
  for (const char* fixture : {"qwen35-dense-tiny", "nemotron-h-tiny"})
    for (ops::Backend backend : {ops::Backend::ref, ops::Backend::cpu})
      for (int k : {1, 2, 5, 16}) all.push_back({fixture, backend, k, 70});  // window inside [54, 70): 64 inside
  all.push_back({"qwen3-next-tiny", ops::Backend::cpu, 5, 66});
  all.push_back({"nemotron-h-latent-tiny", ops::Backend::cpu, 16, 40});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Both, Checkpoints, ::testing::ValuesIn(cases()));

// Logits and hidden rows for chosen positions of several sequences equal those of full passes.
TEST(ForwardOutputs, ChosenRowsOfSeveralSequences) {
  for (const char* fixture : {"qwen35-moe-tiny", "nemotron-h-tiny"}) {
    auto loaded = models::load_model(test_data_path(std::string("fixtures/") + fixture));
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    const models::Model& model = **loaded;
    const int64_t V = model.info().vocab_size, H = model.info().hidden_size, L = model.info().n_layers;
    const std::vector<int32_t> a = prompt(9, V), b = prompt(20, V);

    // Full passes: every row's logits and the final-normed hidden rows.
    std::vector<Buffer> full_logits, full_hidden;
    for (const auto* ids : {&a, &b}) {
      const int64_t T = static_cast<int64_t>(ids->size());
      auto state = model.new_state(T);
      full_logits.push_back(Buffer::allocate(DType::f32, {T, V}));
      Buffer hidden = Buffer::allocate(DType::f32, {L + 1, T, H});
      ASSERT_TRUE(model.forward(*ids, *state, full_logits.back(), hidden).ok());
      full_hidden.push_back(Buffer::copy_of(hidden.tensor().index(L)));
    }

    auto sa = model.new_state(9), sb = model.new_state(20);
    const models::ForwardBatch::Sequence sequences[] = {{a, sa.get()}, {b, sb.get()}};
    const int32_t a_rows[] = {8}, b_rows[] = {15, 16, 17, 18, 19}, b_hidden_rows[] = {3, 19};
    Buffer la = Buffer::allocate(DType::f32, {1, V}), lb = Buffer::allocate(DType::f32, {5, V});
    Buffer hb = Buffer::allocate(DType::f32, {2, H});
    const models::ForwardOutputs::Rows logits[] = {{0, a_rows, la}, {1, b_rows, lb}};
    const models::ForwardOutputs::Rows hidden[] = {{1, b_hidden_rows, hb}};
    models::ForwardOutputs outputs;
    outputs.logits = logits;
    outputs.hidden = hidden;
    models::Workspace workspace;
    models::ForwardContext ctx{workspace};
    ASSERT_TRUE(model.forward(models::ForwardBatch{sequences}, outputs, ctx).ok());
    EXPECT_LE(relative_error(la, full_logits[0].tensor().rows(8, 9)), 1e-5) << fixture;
    EXPECT_LE(relative_error(lb, full_logits[1].tensor().rows(15, 20)), 1e-5) << fixture;
    EXPECT_LE(relative_error(hb.tensor().rows(0, 1), full_hidden[1].tensor().rows(3, 4)), 1e-5) << fixture;
    EXPECT_LE(relative_error(hb.tensor().rows(1, 2), full_hidden[1].tensor().rows(19, 20)), 1e-5) << fixture;
    EXPECT_EQ(sa->n_past(), 9);
    EXPECT_EQ(sb->n_past(), 20);
  }
}

}  // namespace
}  // namespace kapitsa::testing
