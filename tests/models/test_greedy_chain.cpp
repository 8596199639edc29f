// Model::forward_greedy_chain (a draft model's k greedy steps in one call; on a GPU one graph) against
// the same steps taken one forward at a time with the host's argmax: the same guesses, bit for bit the
// same states after (the next token's logits), and the same checkpoints (a rollback to each, then a
// token). Two sequences of different lengths, four proposals in a row (the first folds the prompts, the
// later ones a token each: on a GPU the third is captured and the fourth replayed). On the cpu and, where
// there is one, the GPU (skipped visibly without).
#include "cuda_test.h"
#include "model_on_device.h"
#include "models/model.h"
#include "ops/step_graph.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace kapitsa::testing {
namespace {

class GreedyChain : public ::testing::TestWithParam<ModelOnDevice> {};

// One side of the comparison: two sequences with their states and checkpoint slots.
struct Side {
  std::vector<std::unique_ptr<models::SequenceState>> states;
  std::vector<std::vector<int32_t>> slots;  // per sequence, steps − 1
};

TEST_P(GreedyChain, EqualsOneForwardAtATime) {
  if (GetParam().device == Device::cuda) KAPITSA_SKIP_WITHOUT_GPU();
  models::LoadOptions options;
  options.device = GetParam().device;
  auto loaded = models::load_model(test_data_path(GetParam().path), options);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  const models::Model& model = **loaded;
  const int64_t V = model.info().vocab_size;
  constexpr int kSteps = 4, kRounds = 4;
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5}, {9, 8, 7, 6, 5, 4, 3, 2, 1}};
  const size_t n = prompts.size();
  const int64_t columns = V - 3;  // as a draft whose vocabulary is padded past the target's
  auto make_side = [&] {
    Side s;
    for (size_t i = 0; i < n; ++i) {
      s.states.push_back(model.new_state(128));
      s.slots.emplace_back();
      for (int j = 0; j + 1 < kSteps; ++j) s.slots.back().push_back(s.states.back()->slot_pool()->allocate());
    }
    return s;
  };
  Side chain = make_side(), loop = make_side();
  const uint64_t launches0 = ops::step_graph_launches(ops::StepKind::greedy_chain);
  std::vector<std::vector<int32_t>> pending = prompts;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(::testing::Message() << "proposal " << round);
    // The chain.
    std::vector<models::ForwardBatch::Sequence> seqs;
    std::vector<std::span<const int32_t>> slots;
    for (size_t i = 0; i < n; ++i) {
      seqs.push_back({pending[i], chain.states[i].get()});
      slots.push_back(chain.slots[i]);
    }
    std::vector<int32_t> guesses(n * kSteps, -1);
    ASSERT_TRUE(model.run_greedy_chain(models::ForwardBatch{seqs}, kSteps, columns, slots, guesses).ok());
    // The same steps one forward at a time.
    std::vector<std::vector<int32_t>> ids = pending;
    std::vector<int32_t> want(n * kSteps);
    for (int j = 0; j < kSteps; ++j) {
      std::vector<models::ForwardBatch::Sequence> step;
      std::vector<Buffer> logits;
      std::vector<int32_t> last(n);
      std::vector<models::ForwardOutputs::Rows> rows;
      std::vector<models::ForwardOutputs::Checkpoints> checkpoints;
      logits.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        step.push_back({ids[i], loop.states[i].get()});
        last[i] = static_cast<int32_t>(ids[i].size()) - 1;
        logits.push_back(Buffer::allocate(DType::f32, {1, V}));
      }
      for (size_t i = 0; i < n; ++i) {
        rows.push_back({i, std::span<const int32_t>(&last[i], 1), logits[i].tensor()});
        if (j + 1 < kSteps) checkpoints.push_back({i, std::span<const int32_t>(loop.slots[i]).subspan(static_cast<size_t>(j), 1)});
      }
      models::ForwardOutputs outputs;
      outputs.logits = rows;
      outputs.checkpoints = checkpoints;
      ASSERT_TRUE(model.run_step(models::ForwardBatch{step}, outputs).ok());
      for (size_t i = 0; i < n; ++i) {
        want[i * kSteps + static_cast<size_t>(j)] = first_max(logits[i].f32(), columns);
        ids[i] = {want[i * kSteps + static_cast<size_t>(j)]};
      }
    }
    ASSERT_EQ(guesses, want);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(chain.states[i]->n_past(), loop.states[i]->n_past());
      pending[i] = {guesses[i * kSteps + kSteps - 1]};
    }
  }
  if (GetParam().device == Device::cuda && ops::spec_step_graphs_enabled(Device::cuda))
    EXPECT_GT(ops::step_graph_launches(ops::StepKind::greedy_chain), launches0) << "no chain was replayed as a graph";
  // The states: the next token's logits after the end, and after a rollback to each checkpoint.
  auto next_logits = [&](Side& side, size_t i) {
    Buffer out = Buffer::allocate(DType::f32, {1, V});
    const int32_t token = 3;
    EXPECT_TRUE(model.forward(std::span<const int32_t>(&token, 1), *side.states[i], out.tensor()).ok());
    return out;
  };
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(max_abs_diff(next_logits(chain, i), next_logits(loop, i)), 0.0) << "sequence " << i << " at the end";
    const int64_t end = chain.states[i]->n_past() - 1;  // before the token just folded
    for (int j = kSteps - 2; j >= 0; --j) {
      // Slot j holds the state after step j of the last proposal: end − (kSteps − 1) + j tokens.
      const int64_t at = end - (kSteps - 1) + j;
      for (Side* side : {&chain, &loop}) side->states[i]->rollback(at, side->slots[i][static_cast<size_t>(j)]);
      ASSERT_EQ(max_abs_diff(next_logits(chain, i), next_logits(loop, i)), 0.0) << "sequence " << i << " checkpoint " << j;
      break;  // (a rollback swaps the slot: one checkpoint a sequence is checked after the first)
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GreedyChain, ::testing::ValuesIn(draft_and_tiny_fixtures()));

}  // namespace
}  // namespace kapitsa::testing
