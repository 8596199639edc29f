// ForwardOutputs::argmax (a step brings back each wanted row's argmax instead of its logits) against the
// logits of a twin step: the same ids as the first maximum of the logits, and the logits still asked for
// in the same step bit for bit those of a step that asked for logits only. Three sequences through a
// prompt step (17 rows: the eager path on a GPU too), plain decode steps (on a GPU captured, then
// replayed) and verification-like steps of three rows with checkpoints; sequence 0 asks for logits, the
// others for argmaxes. On the cpu and, where there is one, the GPU (skipped visibly without).
#include "cuda_test.h"
#include "models/model.h"
#include "ops/step_graph.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace kapitsa::testing {
namespace {

struct ArgmaxCase {
  const char* path;  // relative to tests/
  Device device;
};

void PrintTo(const ArgmaxCase& c, std::ostream* os) { *os << c.path << (c.device == Device::cuda ? " on cuda" : " on cpu"); }

class ArgmaxOutputs : public ::testing::TestWithParam<ArgmaxCase> {};

int32_t first_max(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return static_cast<int32_t>(best);
}

TEST_P(ArgmaxOutputs, EqualTheFirstMaximumOfTheLogits) {
  if (GetParam().device == Device::cuda) KAPITSA_SKIP_WITHOUT_GPU();
  models::LoadOptions options;
  options.device = GetParam().device;
  auto loaded = models::load_model(test_data_path(GetParam().path), options);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  const models::Model& model = **loaded;
  const int64_t V = model.info().vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5}, {9, 8, 7, 6, 5, 4, 3, 2, 1}, {11, 12, 13}};
  const size_t n = prompts.size();
  // Two sides fed the same ids: `mixed` asks sequence 0's logits and the others' argmaxes, `plain` every
  // sequence's logits.
  std::vector<std::unique_ptr<models::SequenceState>> mixed, plain;
  std::vector<std::vector<int32_t>> slots_mixed(n), slots_plain(n);
  for (size_t i = 0; i < n; ++i) {
    mixed.push_back(model.new_state(256)), plain.push_back(model.new_state(256));
    for (int j = 0; j < 3; ++j) {
      slots_mixed[i].push_back(mixed.back()->slot_pool()->allocate());
      slots_plain[i].push_back(plain.back()->slot_pool()->allocate());
    }
  }
  const uint64_t decode0 = ops::step_graph_launches(ops::StepKind::decode);
  const uint64_t verify0 = ops::step_graph_launches(ops::StepKind::verify);
  // One step on both sides: ids[i] after what each state holds, every row of the last `wanted` (with a
  // checkpoint a row when `checkpoints`).
  auto step = [&](const std::vector<std::vector<int32_t>>& ids, size_t wanted, bool checkpoints) {
    std::vector<std::vector<int32_t>> rows(n);
    for (size_t i = 0; i < n; ++i)
      for (size_t r = ids[i].size() - wanted; r < ids[i].size(); ++r) rows[i].push_back(static_cast<int32_t>(r));
    std::vector<Buffer> logits_plain, logits_mixed, best;
    for (size_t i = 0; i < n; ++i) {
      logits_plain.push_back(Buffer::allocate(DType::f32, {static_cast<int64_t>(wanted), V}));
      logits_mixed.push_back(Buffer::allocate(DType::f32, {static_cast<int64_t>(wanted), V}));
      best.push_back(Buffer::allocate(DType::i32, {static_cast<int64_t>(wanted), 1}));
    }
    auto run = [&](std::vector<std::unique_ptr<models::SequenceState>>& states, std::vector<std::vector<int32_t>>& slots,
                   bool with_argmax) {
      std::vector<models::ForwardBatch::Sequence> seqs;
      std::vector<models::ForwardOutputs::Rows> logit_rows, argmax_rows;
      std::vector<models::ForwardOutputs::Checkpoints> ckpts;
      for (size_t i = 0; i < n; ++i) {
        seqs.push_back({ids[i], states[i].get()});
        if (!with_argmax) logit_rows.push_back({i, rows[i], logits_plain[i].tensor()});
        else if (i == 0) logit_rows.push_back({i, rows[i], logits_mixed[i].tensor()});
        else argmax_rows.push_back({i, rows[i], best[i].tensor()});
        if (checkpoints) ckpts.push_back({i, std::span<const int32_t>(slots[i]).first(wanted)});
      }
      models::ForwardOutputs outputs;
      outputs.logits = logit_rows;
      outputs.argmax = argmax_rows;
      outputs.checkpoints = ckpts;
      ASSERT_TRUE(model.run_step(models::ForwardBatch{seqs}, outputs).ok());
    };
    run(plain, slots_plain, false);
    run(mixed, slots_mixed, true);
    for (size_t i = 0; i < n; ++i) {
      for (size_t r = 0; r < wanted; ++r) {
        const float* row = logits_plain[i].f32() + static_cast<int64_t>(r) * V;
        if (i == 0) {
          ASSERT_EQ(max_abs_diff(logits_mixed[0].tensor().rows(r, r + 1), logits_plain[0].tensor().rows(r, r + 1)), 0.0)
              << "row " << r;
        } else {
          ASSERT_EQ(best[i].tensor().data_as<int32_t>()[r], first_max(row, V)) << "sequence " << i << " row " << r;
        }
      }
    }
  };
  step(prompts, 1, false);
  for (int s = 0; s < 4; ++s) {
    SCOPED_TRACE(::testing::Message() << "decode step " << s);
    step({{int32_t(20 + s)}, {int32_t(30 + s)}, {int32_t(40 + s)}}, 1, false);
  }
  for (int s = 0; s < 4; ++s) {
    SCOPED_TRACE(::testing::Message() << "verification step " << s);
    step({{int32_t(50 + s), 51, 52}, {int32_t(60 + s), 61, 62}, {int32_t(70 + s), 71, 72}}, 3, true);
  }
  if (GetParam().device == Device::cuda && ops::step_graphs_enabled(Device::cuda)) {
    EXPECT_GT(ops::step_graph_launches(ops::StepKind::decode), decode0) << "no decode step was replayed as a graph";
    if (ops::spec_step_graphs_enabled(Device::cuda))
      EXPECT_GT(ops::step_graph_launches(ops::StepKind::verify), verify0) << "no verification was replayed as a graph";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ArgmaxOutputs,
                         ::testing::Values(ArgmaxCase{"../models/demo/draft", Device::cpu},
                                           ArgmaxCase{"fixtures/qwen35-moe-tiny", Device::cpu},
                                           ArgmaxCase{"fixtures/nemotron-h-tiny", Device::cpu},
                                           ArgmaxCase{"../models/demo/draft", Device::cuda},
                                           ArgmaxCase{"fixtures/qwen35-moe-tiny", Device::cuda},
                                           ArgmaxCase{"fixtures/nemotron-h-tiny", Device::cuda}));

}  // namespace
}  // namespace kapitsa::testing
