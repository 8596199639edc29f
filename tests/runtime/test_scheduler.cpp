// Scheduler tests, without a model: FIFO admission under max_sequences and a memory budget, step plans
// (decode tokens always, prompt chunks sharing the chunk budget, chunks ending at snapshot points),
// growth with preemption of the youngest, and a randomized simulation that must finish every
// sequence, keep within the budget and leak nothing.
#include "runtime/scheduler.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace kapitsa::runtime {
namespace {

SchedulerConfig config(size_t budget = 0) {
  SchedulerConfig c;
  c.max_sequences = 4;
  c.prefill_chunk_tokens = 16;
  c.memory_budget_bytes = budget;
  c.state_fixed_bytes = 100;
  c.state_bytes_per_token = 1;
  c.context_tokens = 1024;
  c.decode_reserve_tokens = 8;
  c.min_capacity_tokens = 16;
  return c;
}

// Plays the engine: applies admissions (no cache), folds the planned work, samples when told.
// Returns the number of steps until every sequence is gone.
int run_to_completion(Scheduler& s, std::map<uint64_t, int64_t>& left_to_generate, int max_steps = 100000) {
  int steps = 0;
  while (!left_to_generate.empty() && steps < max_steps) {
    ++steps;
    Scheduler::Decision d = s.schedule();
    for (const auto& a : d.admit) s.on_admitted(a.id, 0, a.capacity);
    const auto work = s.batch();
    EXPECT_FALSE(work.empty()) << "no progress at step " << steps;
    for (const auto& w : work) {
      s.advance(w.id, w.n_tokens);
      if (!w.samples) continue;
      if (--left_to_generate[w.id] == 0) {
        s.remove(w.id);
        left_to_generate.erase(w.id);
      } else {
        s.append(w.id);
      }
    }
  }
  return steps;
}

TEST(Scheduler, AdmitsInArrivalOrderUpToMaxSequences) {
  Scheduler s(config());
  for (uint64_t id = 1; id <= 6; ++id) s.add(id, 10, 5);
  Scheduler::Decision d = s.schedule();
  ASSERT_EQ(d.admit.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(d.admit[i].id, i + 1);
  EXPECT_EQ(d.admit[0].capacity, 16);  // 10 + min(5, 8) in the smallest bucket
  EXPECT_EQ(s.running(), 4);
  EXPECT_EQ(s.waiting(), 2);
  s.remove(2);
  d = s.schedule();
  ASSERT_EQ(d.admit.size(), 1u);
  EXPECT_EQ(d.admit[0].id, 5u);
}

TEST(Scheduler, MemoryBudgetLimitsAdmissionButALoneSequenceAlwaysRuns) {
  // A state of capacity 16 costs 116 bytes: two fit in 250.
  Scheduler s(config(250));
  for (uint64_t id = 1; id <= 3; ++id) s.add(id, 10, 5);
  Scheduler::Decision d = s.schedule();
  EXPECT_EQ(d.admit.size(), 2u);
  EXPECT_EQ(s.used_bytes(), 232u);
  Scheduler big(config(50));
  big.add(1, 10, 5);
  EXPECT_EQ(big.schedule().admit.size(), 1u);
}

TEST(Scheduler, BatchesDecodeTokensAndSharesThePrefillBudget) {
  Scheduler s(config());
  s.add(1, 1, 100);  // decodes right away
  s.add(2, 40, 5);
  s.add(3, 30, 5);
  s.set_boundaries(3, {5});
  for (const auto& a : s.schedule().admit) s.on_admitted(a.id, 0, a.capacity);
  auto work = s.batch();
  ASSERT_EQ(work.size(), 2u);  // seq 2 takes the whole chunk budget of 16
  EXPECT_EQ(work[0].id, 1u);
  EXPECT_EQ(work[0].n_tokens, 1);
  EXPECT_TRUE(work[0].samples);
  EXPECT_EQ(work[1].id, 2u);
  EXPECT_EQ(work[1].n_tokens, 16);
  EXPECT_FALSE(work[1].samples);
  s.advance(1, 1);
  s.append(1);
  s.advance(2, 16);
  s.advance(2, 16);  // pretend: seq 2 is at 32 of 40
  work = s.batch();
  ASSERT_EQ(work.size(), 3u);
  EXPECT_EQ(work[1].n_tokens, 8);  // the rest of seq 2's prompt …
  EXPECT_TRUE(work[1].samples);
  EXPECT_EQ(work[2].id, 3u);  // … and seq 3's first chunk stops at its snapshot point
  EXPECT_EQ(work[2].n_tokens, 5);
}

TEST(Scheduler, ChunksStopAtEveryBoundary) {
  Scheduler s(config());
  s.add(1, 30, 5);
  s.set_boundaries(1, {5, 12, 29});
  for (const auto& a : s.schedule().admit) s.on_admitted(a.id, 0, a.capacity);
  std::vector<int64_t> ends;
  while (true) {
    auto work = s.batch();
    ASSERT_EQ(work.size(), 1u);
    s.advance(1, work[0].n_tokens);
    ends.push_back(s.n_past(1));
    if (work[0].samples) break;
  }
  EXPECT_EQ(ends, (std::vector<int64_t>{5, 12, 28, 29, 30}));
}

TEST(Scheduler, GrowthPreemptsTheYoungest) {
  // Capacity 16 → 116 bytes; 32 → 132. Budget 240: two small states fit, a grown one and a small do not.
  Scheduler s(config(240));
  s.add(1, 6, 20);
  s.add(2, 6, 20);
  for (const auto& a : s.schedule().admit) s.on_admitted(a.id, 0, a.capacity);
  EXPECT_EQ(s.used_bytes(), 232u);
  s.advance(1, 6);
  s.advance(2, 6);
  for (int i = 0; i < 10; ++i) {  // both reach 16 known tokens, all folded
    s.append(1);
    s.append(2);
    s.advance(1, 1);
    s.advance(2, 1);
  }
  s.append(1);  // a 17th token: seq 1 outgrows capacity 16
  Scheduler::Decision d = s.schedule();
  EXPECT_EQ(d.preempt, (std::vector<uint64_t>{1, 2}));  // 1 regrows, 2 (younger) gives way
  ASSERT_EQ(d.admit.size(), 1u);
  EXPECT_EQ(d.admit[0].id, 1u);
  EXPECT_EQ(d.admit[0].capacity, 32);
  EXPECT_EQ(s.preemptions(), 1);
  EXPECT_FALSE(s.has_state(2));
  EXPECT_EQ(s.known(2), 16);  // it keeps its tokens and recomputes them later
}

TEST(Scheduler, RandomWorkloadsFinishWithinBudgetAndLeakNothing) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    SchedulerConfig c = config(400 + rng() % 400);
    c.max_sequences = 1 + static_cast<int>(rng() % 6);
    c.prefill_chunk_tokens = 1 + static_cast<int64_t>(rng() % 40);
    Scheduler s(c);
    std::map<uint64_t, int64_t> left;
    for (uint64_t id = 1; id <= 12; ++id) {
      const int64_t prompt = 1 + static_cast<int64_t>(rng() % 100), gen = 1 + static_cast<int64_t>(rng() % 150);
      s.add(id, prompt, gen);
      left[id] = gen;
    }
    // The budget holds unless a lone sequence needs more.
    int steps = 0;
    while (!left.empty() && steps < 100000) {
      ++steps;
      Scheduler::Decision d = s.schedule();
      for (const auto& a : d.admit) s.on_admitted(a.id, 0, a.capacity);
      if (s.running() > 1) {
        EXPECT_LE(s.used_bytes(), c.memory_budget_bytes);
      }
      const auto work = s.batch();
      ASSERT_FALSE(work.empty());
      for (const auto& w : work) {
        s.advance(w.id, w.n_tokens);
        if (!w.samples) continue;
        if (--left[w.id] == 0) {
          s.remove(w.id);
          left.erase(w.id);
        } else {
          s.append(w.id);
        }
      }
    }
    EXPECT_TRUE(left.empty());
    EXPECT_EQ(s.used_bytes(), 0u);
    EXPECT_EQ(s.running() + s.waiting(), 0);
  }
}

TEST(Scheduler, SimulationHelperCompletes) {
  Scheduler s(config(300));
  std::map<uint64_t, int64_t> left;
  for (uint64_t id = 1; id <= 5; ++id) {
    s.add(id, 20, 60);
    left[id] = 60;
  }
  run_to_completion(s, left);
  EXPECT_TRUE(left.empty());
  EXPECT_GT(s.preemptions(), 0);
  EXPECT_EQ(s.used_bytes(), 0u);
}

// Held admissions (the engine preempted for KV pages): nobody new starts while anything runs; when
// nothing runs, the oldest waiting sequence starts anyway.
TEST(Scheduler, HeldAdmissionsWaitWhileAnythingRuns) {
  Scheduler s(config());
  s.add(1, 4, 8);
  for (const auto& a : s.schedule().admit) s.on_admitted(a.id, 0, a.capacity);
  ASSERT_EQ(s.running(), 1);
  s.hold_admissions(true);
  s.add(2, 4, 8);
  EXPECT_TRUE(s.schedule().admit.empty());
  EXPECT_EQ(s.waiting(), 1);
  s.remove(1);
  const auto d = s.schedule();
  ASSERT_EQ(d.admit.size(), 1u);
  EXPECT_EQ(d.admit[0].id, 2u);
}

}  // namespace
}  // namespace kapitsa::runtime
