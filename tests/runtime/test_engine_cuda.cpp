// The Engine with its model on the GPU (weights, KV pages, recurrent-state and checkpoint slots, the
// step workspace all in device memory) against the CPU: eight greedy sequences batched give the ids the
// CPU model gives each alone; under memory pressure sequences are preempted and still complete with the
// CPU's ids and no leak; a prefix-cache resume equals a cold engine; speculative decoding (scripted
// guesses with one wrong in three, n-gram, and the demo's MTP head: per-token checkpoints and rollback on
// the device) gives the same ids as plain decoding, also with verification and MTP-head steps replayed
// as CUDA graphs (KAPITSA_CUDA_SPEC_GRAPHS, switched on by the tests); a restart resumes from the disk prefix cache like a cold engine. Near-ties
// aside (different summation order), greedy ids must be identical; the tests say where they allow one
// sequence to differ. Skipped visibly without a GPU.
#include "cuda_test.h"
#include "models/fingerprint.h"
#include "models/model.h"
#include "ops/step_graph.h"
#include "runtime/engine.h"
#include "runtime/mtp_proposer.h"
#include "runtime/proposer.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <string_view>

namespace kapitsa::runtime {
namespace {

std::unique_ptr<models::Model> load(const std::string& fixture, Device device) {
  models::LoadOptions o;
  o.device = device;
  auto model = models::load_model(testing::test_data_path("fixtures/" + fixture), o);
  if (!model.ok()) {
    ADD_FAILURE() << model.error().message;
    return nullptr;
  }
  return std::move(model).value();
}

// Greedy ids straight from Model::forward: the prompt in one call, then one token at a time.
std::vector<int32_t> model_greedy(const models::Model& m, const std::vector<int32_t>& prompt, int n) {
  const int64_t V = m.info().vocab_size;
  auto state = m.new_state(static_cast<int64_t>(prompt.size()) + n);
  Buffer logits = Buffer::allocate(DType::f32, {1, V});
  std::vector<int32_t> out;
  std::span<const int32_t> next = prompt;
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(m.forward(next, *state, logits).ok());
    const float* row = logits.f32();
    int32_t best = 0;
    for (int32_t v = 1; v < V; ++v)
      if (row[v] > row[best]) best = v;
    out.push_back(best);
    next = std::span<const int32_t>(&out.back(), 1);
  }
  return out;
}

GenerateRequest greedy_request(std::vector<int32_t> prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt_ids = std::move(prompt);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

std::vector<int32_t> random_prompt(std::mt19937_64& rng, size_t n, int64_t V) {
  std::vector<int32_t> p(n);
  for (int32_t& x : p) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(V - 1));
  return p;
}

// Sets the switch for speculative steps as CUDA graphs (ops/step_graph.h) for a scope (step graphs on).
class SpecGraphs {
 public:
  explicit SpecGraphs(bool on)
      : graphs_(ops::step_graphs_enabled(Device::cuda)), spec_(ops::spec_step_graphs_enabled(Device::cuda)) {
    ops::set_step_graphs(true);
    ops::set_spec_step_graphs(on);
  }
  ~SpecGraphs() {
    ops::set_step_graphs(graphs_);
    ops::set_spec_step_graphs(spec_);
  }
  SpecGraphs(const SpecGraphs&) = delete;
  SpecGraphs& operator=(const SpecGraphs&) = delete;

 private:
  bool graphs_, spec_;
};

struct EngineRun {
  std::vector<std::vector<int32_t>> ids;
  std::vector<FinishEvent> finishes;
  EngineCounters counters;
};

// Submits every request at once to an engine over `model` and drains them.
EngineRun run_engine(std::unique_ptr<models::Model> model, EngineOptions options, const std::vector<GenerateRequest>& requests) {
  EngineRun r;
  auto engine = Engine::create(std::move(model), nullptr, options);
  EXPECT_TRUE(engine.ok()) << (engine.ok() ? "" : engine.error().message);
  if (!engine.ok()) return r;
  std::vector<std::unique_ptr<Generation>> gens;
  for (const GenerateRequest& req : requests) {
    auto g = (*engine)->submit(req);
    EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message);
    if (g.ok()) gens.push_back(std::move(g).value());
  }
  for (auto& g : gens) {
    std::vector<int32_t> ids;
    FinishEvent finish;
    Event e;
    while (g->next(e)) {
      if (auto* t = std::get_if<TokenEvent>(&e)) ids.push_back(t->id);
      else finish = std::get<FinishEvent>(e);
    }
    r.ids.push_back(std::move(ids));
    r.finishes.push_back(std::move(finish));
  }
  r.counters = (*engine)->counters();
  return r;
}

class EngineOnCuda : public ::testing::TestWithParam<const char*> {};

TEST_P(EngineOnCuda, BatchedEqualsCpuAlone) {
  KAPITSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << GetParam() << " seed " << seed);
  std::mt19937_64 rng(seed);
  auto cpu = load(GetParam(), Device::cpu);
  ASSERT_NE(cpu, nullptr);
  const int64_t V = cpu->info().vocab_size;
  std::vector<GenerateRequest> requests;
  std::vector<std::vector<int32_t>> expected;
  for (int i = 0; i < 8; ++i) {
    requests.push_back(greedy_request(random_prompt(rng, 2 + rng() % 50, V), 8 + static_cast<int>(rng() % 24)));
    expected.push_back(model_greedy(*cpu, requests.back().prompt_ids, requests.back().max_tokens));
  }
  EngineOptions options;
  options.max_sequences = 8;
  options.prefill_chunk_tokens = 32;  // prompts longer than that are prefilled in chunks
  const EngineRun gpu = run_engine(load(GetParam(), Device::cuda), options, requests);
  ASSERT_EQ(gpu.ids.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(gpu.finishes[i].reason, FinishReason::length) << gpu.finishes[i].error;
    EXPECT_EQ(gpu.ids[i], expected[i]) << "sequence " << i;
  }
}

// Guesses the plain run's next tokens with every third guess wrong, so each verification keeps part of
// a draft: the checkpoint slots and the rollback (slot swap, KV truncation) run on the device.
class OneWrongProposer final : public Proposer {
 public:
  OneWrongProposer(std::vector<std::vector<int32_t>> prompts, std::vector<std::vector<int32_t>> outputs, int64_t V)
      : prompts_(std::move(prompts)), outputs_(std::move(outputs)), V_(V) {}
  std::string_view name() const override { return "one-wrong"; }
  void propose(std::span<const int32_t> tokens, int max_tokens, std::vector<int32_t>& out) override {
    out.clear();
    for (size_t i = 0; i < prompts_.size(); ++i) {
      const auto& p = prompts_[i];
      if (tokens.size() < p.size() || !std::equal(p.begin(), p.end(), tokens.begin())) continue;
      for (size_t j = tokens.size() - p.size(); j < outputs_[i].size() && out.size() < static_cast<size_t>(max_tokens); ++j)
        out.push_back(out.size() == 2 ? static_cast<int32_t>((outputs_[i][j] + 1) % V_) : outputs_[i][j]);
      return;
    }
  }

 private:
  std::vector<std::vector<int32_t>> prompts_, outputs_;
  int64_t V_;
};

// With the switch for speculative graphs on, the same again: the same ids, and verification steps
// replayed as graphs (a lone sequence as well, whose steps repeat their shape for sure).
TEST_P(EngineOnCuda, SpeculationEqualsPlain) {
  KAPITSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << GetParam() << " seed " << seed);
  std::mt19937_64 rng(seed);
  auto probe = load(GetParam(), Device::cpu);
  ASSERT_NE(probe, nullptr);
  const int64_t V = probe->info().vocab_size;
  std::vector<GenerateRequest> requests;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 5; ++i) {
    // Request 0 runs alone too: 40 tokens give it enough verification steps of one shape for a replay
    // whatever the seed (with 10 the nemotron fixture's lone run once replayed none).
    const int max_tokens = i == 0 ? 40 : 10 + static_cast<int>(rng() % 30);
    requests.push_back(greedy_request(random_prompt(rng, 5 + rng() % 40, V), max_tokens));
    prompts.push_back(requests.back().prompt_ids);
  }
  EngineOptions options;
  options.max_sequences = 8;
  options.context_tokens = 1024;
  const EngineRun plain = run_engine(load(GetParam(), Device::cuda), options, requests);
  ASSERT_EQ(plain.ids.size(), requests.size());
  for (const bool spec_graphs : {false, true}) {
    SCOPED_TRACE(spec_graphs ? "speculative steps as graphs" : "speculative steps op by op");
    const SpecGraphs scope(spec_graphs);
    const uint64_t verified0 = ops::step_graph_launches(ops::StepKind::verify);
    for (auto proposer : {std::shared_ptr<Proposer>(std::make_shared<OneWrongProposer>(prompts, plain.ids, V)),
                          std::shared_ptr<Proposer>(std::make_shared<NgramProposer>())}) {
      SCOPED_TRACE(std::string(proposer->name()));
      options.proposer = proposer;
      const EngineRun spec = run_engine(load(GetParam(), Device::cuda), options, requests);
      ASSERT_EQ(spec.ids.size(), requests.size());
      for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(spec.ids[i], plain.ids[i]) << "request " << i;
      EXPECT_EQ(spec.counters.running, 0);
      if (proposer->name() == "one-wrong") {
        EXPECT_GT(spec.counters.draft_tokens_accepted, 0);
        EXPECT_LT(spec.counters.draft_tokens_accepted, spec.counters.draft_tokens);
        const EngineRun alone = run_engine(load(GetParam(), Device::cuda), options, {requests[0]});
        ASSERT_EQ(alone.ids.size(), 1u);
        EXPECT_EQ(alone.ids[0], plain.ids[0]) << "request 0 alone";
      }
    }
    const uint64_t verified = ops::step_graph_launches(ops::StepKind::verify) - verified0;
    if (spec_graphs) EXPECT_GT(verified, 0u) << "no verification step was replayed as a graph";
    else EXPECT_EQ(verified, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineOnCuda,
                         ::testing::Values("qwen35-dense-tiny", "qwen35-moe-tiny", "nemotron-h-tiny"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

// The demo target's MTP head on the device (its KV one more layer of the sequence's pages, hidden rows
// handed from the target's step to the proposer): the same ids as plain decoding on the device.
TEST(EngineCuda, MtpHeadEqualsPlain) {
  KAPITSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  auto demo = [] {
    models::LoadOptions o;
    o.device = Device::cuda;
    auto m = models::load_model(testing::test_data_path("../models/demo/target"), o);
    EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
    return m.ok() ? std::move(m).value() : nullptr;
  };
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 5; ++i)
    requests.push_back(greedy_request(random_prompt(rng, 5 + rng() % 40, 16000), 20 + static_cast<int>(rng() % 20)));
  EngineOptions options;
  options.max_sequences = 8;
  options.context_tokens = 1024;
  // Two guesses: a GPU pads every draft to them, so a verification of all five sequences is 15 rows,
  // within what a step graph takes (16).
  options.spec_tokens = 2;
  const EngineRun plain = run_engine(demo(), options, requests);
  ASSERT_EQ(plain.ids.size(), requests.size());
  // Op by op, then with the target's steps (hidden rows, verifications) and the head's steps as graphs.
  for (const bool spec_graphs : {false, true}) {
    SCOPED_TRACE(spec_graphs ? "speculative steps as graphs" : "speculative steps op by op");
    const SpecGraphs scope(spec_graphs);
    const uint64_t verified0 = ops::step_graph_launches(ops::StepKind::verify);
    const uint64_t head0 = ops::step_graph_launches(ops::StepKind::mtp_head);
    options.proposer = std::make_shared<MtpProposer>(MtpProposer::Options{false, 5});
    const EngineRun spec = run_engine(demo(), options, requests);
    ASSERT_EQ(spec.ids.size(), requests.size());
    for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(spec.ids[i], plain.ids[i]) << "request " << i;
    EXPECT_GT(spec.counters.draft_tokens, 0);
    EXPECT_GT(spec.counters.draft_tokens_accepted, 0);
    const uint64_t verified = ops::step_graph_launches(ops::StepKind::verify) - verified0;
    const uint64_t head = ops::step_graph_launches(ops::StepKind::mtp_head) - head0;
    if (spec_graphs) {
      EXPECT_GT(verified, 0u) << "no step of the target was replayed as a graph";
      EXPECT_GT(head, 0u) << "no step of the MTP head was replayed as a graph";
    } else {
      EXPECT_EQ(verified + head, 0u);
    }
  }
}

TEST(EngineCuda, MemoryPressurePreemptsAndCompletesWithoutLeaks) {
  KAPITSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  auto cpu = load("qwen35-dense-tiny", Device::cpu);
  ASSERT_NE(cpu, nullptr);
  const int64_t V = cpu->info().vocab_size;
  const size_t small = cpu->new_state(256)->bytes();  // room for about two sequences; each grows past it
  EngineOptions options;
  options.max_sequences = 8;
  options.memory_budget_bytes = small * 5 / 2;
  options.decode_reserve_tokens = 16;
  options.prefix_cache_bytes = 0;
  const int n = 6, gen_tokens = 300;
  std::vector<GenerateRequest> requests;
  std::vector<std::vector<int32_t>> expected;
  for (int i = 0; i < n; ++i) {
    requests.push_back(greedy_request(random_prompt(rng, 5 + rng() % 30, V), gen_tokens));
    expected.push_back(model_greedy(*cpu, requests.back().prompt_ids, gen_tokens));
  }
  const EngineRun gpu = run_engine(load("qwen35-dense-tiny", Device::cuda), options, requests);
  ASSERT_EQ(gpu.ids.size(), static_cast<size_t>(n));
  int same = 0;
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(gpu.finishes[static_cast<size_t>(i)].reason, FinishReason::length);
    same += gpu.ids[static_cast<size_t>(i)] == expected[static_cast<size_t>(i)];
  }
  // Recomputation after a preemption folds tokens in other chunks: one near-tie may flip (as on the CPU).
  EXPECT_GE(same, n - 1);
  EXPECT_GT(gpu.counters.preemptions, 0);
  EXPECT_EQ(gpu.counters.running, 0);
  EXPECT_EQ(gpu.counters.sequence_bytes, 0);
  EXPECT_EQ(gpu.counters.kv_pages_used, 0);
}

// A follow-up turn on the GPU resumes from the prefix-cache snapshot (KV pages shared, state slot
// copied on the device): the same ids as a cold GPU engine, with the first turn's tokens reused.
TEST(EngineCuda, PrefixCacheResumeEqualsCold) {
  KAPITSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (const char* fixture : {"qwen35-dense-tiny", "nemotron-h-tiny"}) {
    SCOPED_TRACE(fixture);
    auto warm = Engine::create(load(fixture, Device::cuda), nullptr, EngineOptions{});
    ASSERT_TRUE(warm.ok());
    const int64_t V = (*warm)->model_info().vocab_size;
    const std::vector<int32_t> turn1 = random_prompt(rng, 40 + rng() % 40, V);
    std::vector<int32_t> reply;
    {
      auto g = (*warm)->submit(greedy_request(turn1, 10));
      ASSERT_TRUE(g.ok());
      Event e;
      while ((*g)->next(e))
        if (auto* t = std::get_if<TokenEvent>(&e)) reply.push_back(t->id);
    }
    std::vector<int32_t> turn2 = turn1;
    turn2.insert(turn2.end(), reply.begin(), reply.end());
    const std::vector<int32_t> user = random_prompt(rng, 5 + rng() % 20, V);
    turn2.insert(turn2.end(), user.begin(), user.end());
    const EngineRun cold = run_engine(load(fixture, Device::cuda), EngineOptions{}, {greedy_request(turn2, 8)});
    std::vector<int32_t> resumed;
    FinishEvent finish;
    {
      auto g = (*warm)->submit(greedy_request(turn2, 8));
      ASSERT_TRUE(g.ok());
      Event e;
      while ((*g)->next(e)) {
        if (auto* t = std::get_if<TokenEvent>(&e)) resumed.push_back(t->id);
        else finish = std::get<FinishEvent>(e);
      }
    }
    ASSERT_EQ(cold.ids.size(), 1u);
    EXPECT_EQ(resumed, cold.ids[0]);
    EXPECT_GT(finish.stats.cached_prompt_tokens, 0);
  }
}

// The disk prefix cache on the GPU: states are copied through the host both ways. An engine writes
// turn 1's snapshots and goes away; a restarted GPU engine resumes turn 2 from disk with the same ids
// as a cold GPU engine.
TEST(EngineCuda, DiskCacheRestartResumesLikeCold) {
  KAPITSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (const char* fixture : {"qwen35-dense-tiny", "nemotron-h-tiny"}) {
    SCOPED_TRACE(fixture);
    const std::filesystem::path cache =
        std::filesystem::temp_directory_path() / fmt::format("kapitsa-cuda-disk-cache-{}-{}", getpid(), fixture);
    std::filesystem::remove_all(cache);
    EngineOptions with_disk;
    with_disk.disk_cache.dir = cache.string();
    auto fingerprint = models::model_fingerprint(testing::test_data_path(std::string("fixtures/") + fixture));
    ASSERT_TRUE(fingerprint.ok());
    with_disk.disk_cache.fingerprint = *fingerprint;
    std::vector<int32_t> turn2;
    {
      auto warm = Engine::create(load(fixture, Device::cuda), nullptr, with_disk);
      ASSERT_TRUE(warm.ok());
      const int64_t V = (*warm)->model_info().vocab_size;
      turn2 = random_prompt(rng, 40 + rng() % 40, V);
      auto g = (*warm)->submit(greedy_request(turn2, 10));
      ASSERT_TRUE(g.ok());
      Event e;
      while ((*g)->next(e))
        if (auto* t = std::get_if<TokenEvent>(&e)) turn2.push_back(t->id);
      const std::vector<int32_t> user = random_prompt(rng, 5 + rng() % 20, V);
      turn2.insert(turn2.end(), user.begin(), user.end());
    }
    const EngineRun resumed = run_engine(load(fixture, Device::cuda), with_disk, {greedy_request(turn2, 8)});
    const EngineRun cold = run_engine(load(fixture, Device::cuda), EngineOptions{}, {greedy_request(turn2, 8)});
    ASSERT_EQ(resumed.ids.size(), 1u);
    ASSERT_EQ(cold.ids.size(), 1u);
    EXPECT_EQ(resumed.ids[0], cold.ids[0]);
    EXPECT_GT(resumed.finishes[0].stats.cached_prompt_tokens, 0);
    EXPECT_EQ(resumed.counters.prompt_tokens_from_disk, resumed.finishes[0].stats.cached_prompt_tokens);
    std::filesystem::remove_all(cache);
  }
}

}  // namespace
}  // namespace kapitsa::runtime
