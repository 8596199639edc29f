// ForwardOutputs::argmax (a step brings back each wanted row's argmax instead of its logits) against the
// logits of a twin step: the same ids as the first maximum of the logits, and the logits still asked for
// in the same step bit for bit those of a step that asked for logits only. Three sequences through a
// prompt step (17 rows: the eager path on a GPU too), plain decode steps (on a GPU captured, then
// replayed) and verification-like steps of three rows with checkpoints; sequence 0 asks for logits, the
// others for argmaxes. The same for the MTP head's rows (MtpArgmax). On the cpu and, where there is one,
// the GPU (skipped visibly without).
#include "cuda_test.h"
#include "model_on_device.h"
#include "models/model.h"
#include "ops/step_graph.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

namespace kapitsa::testing {
namespace {

class ArgmaxOutputs : public ::testing::TestWithParam<ModelOnDevice> {};

// A host copy of a host tensor.
Buffer copy_of(const Tensor& t) {
  Buffer b = Buffer::allocate(t.dtype(), t.shape());
  std::memcpy(b.tensor().data(), t.data(), t.nbytes());
  return b;
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

// The MTP head's argmax rows (Model::MtpRows::argmax) against its logits rows: the demo target's head
// over the final-normed rows of a prompt (all rows, then the last row only), then recursive steps of one
// row on its own output, twice as a graph on a GPU. Two states fed the same rows.
class MtpArgmax : public ::testing::TestWithParam<Device> {};

TEST_P(MtpArgmax, EqualsTheFirstMaximumOfTheHeadsLogits) {
  if (GetParam() == Device::cuda) KAPITSA_SKIP_WITHOUT_GPU();
  models::LoadOptions options;
  options.device = GetParam();
  auto loaded = models::load_model(test_data_path("../models/demo/target"), options);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  const models::Model& model = **loaded;
  ASSERT_EQ(model.info().mtp_layers, 1);
  const int64_t V = model.info().vocab_size, H = model.info().hidden_size, L = model.info().n_layers;
  const std::vector<int32_t> prompt = {12, 400, 33, 1021, 7, 99, 5000, 71, 2, 640, 13};
  const int64_t n = static_cast<int64_t>(prompt.size()) - 1;
  auto with_logits = model.new_state(64), with_argmax = model.new_state(64);
  Buffer logits = Buffer::allocate(DType::f32, {n, V}), all = Buffer::allocate(DType::f32, {L + 1, n, H});
  for (auto* state : {&with_logits, &with_argmax})
    ASSERT_TRUE(model.forward(std::span<const int32_t>(prompt.data(), static_cast<size_t>(n)), **state, logits, all).ok());
  const Buffer hidden = copy_of(all.tensor().index(L));  // [n, H]: the head's input rows
  const std::span<const int32_t> next(prompt.data() + 1, static_cast<size_t>(n));
  // Catch-up rows, every row's output.
  Buffer head_logits = Buffer::allocate(DType::f32, {n, V}), best = Buffer::allocate(DType::i32, {n, 1});
  Buffer y_logits = Buffer::allocate(DType::f32, {n, H}), y_argmax = Buffer::allocate(DType::f32, {n, H});
  const models::Model::MtpRows a[] = {{with_logits.get(), 0, next, hidden, head_logits, y_logits, {}}};
  const models::Model::MtpRows b[] = {{with_argmax.get(), 0, next, hidden, {}, y_argmax, best}};
  ASSERT_TRUE(model.run_mtp(a).ok());
  ASSERT_TRUE(model.run_mtp(b).ok());
  ASSERT_EQ(max_abs_diff(y_logits, y_argmax), 0.0);
  for (int64_t r = 0; r < n; ++r)
    ASSERT_EQ(best.tensor().data_as<int32_t>()[r], first_max(head_logits.f32() + r * V, V)) << "row " << r;
  // Recursive steps: one row, the guess and the head's own output row, last-row outputs.
  int32_t guess = best.tensor().data_as<int32_t>()[n - 1];
  Buffer row_hidden = copy_of(y_argmax.tensor().rows(n - 1, n));
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE(::testing::Message() << "recursive step " << step);
    Buffer one_logits = Buffer::allocate(DType::f32, {1, V}), one_best = Buffer::allocate(DType::i32, {1, 1});
    Buffer out_a = Buffer::allocate(DType::f32, {1, H}), out_b = Buffer::allocate(DType::f32, {1, H});
    const std::span<const int32_t> id(&guess, 1);
    const models::Model::MtpRows ra[] = {{with_logits.get(), n + step, id, row_hidden, one_logits, out_a, {}}};
    const models::Model::MtpRows rb[] = {{with_argmax.get(), n + step, id, row_hidden, {}, out_b, one_best}};
    ASSERT_TRUE(model.run_mtp(ra).ok());
    ASSERT_TRUE(model.run_mtp(rb).ok());
    ASSERT_EQ(max_abs_diff(out_a, out_b), 0.0);
    ASSERT_EQ(one_best.tensor().data_as<int32_t>()[0], first_max(one_logits.f32(), V));
    guess = one_best.tensor().data_as<int32_t>()[0];
    row_hidden = copy_of(out_b.tensor());
  }
}

INSTANTIATE_TEST_SUITE_P(Models, MtpArgmax, ::testing::Values(Device::cpu, Device::cuda),
                         [](const ::testing::TestParamInfo<Device>& i) { return i.param == Device::cuda ? "cuda" : "cpu"; });

INSTANTIATE_TEST_SUITE_P(Models, ArgmaxOutputs, ::testing::ValuesIn(draft_and_tiny_fixtures()));

}  // namespace
}  // namespace kapitsa::testing
