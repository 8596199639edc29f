// DraftCostModel (runtime/draft_cost.h): the expected tokens of a draft, the plain and suggested lengths
// timed first, a length's cost robust to its slow first steps, and the length with the most expected
// tokens per second once the costs are known — none
// where every row costs as much as a token (a CPU bound by arithmetic), all of them where extra rows are
// nearly free (a GPU bound by launches).
#include "runtime/draft_cost.h"

#include <gtest/gtest.h>

namespace kapitsa::runtime {
namespace {

TEST(DraftCost, ExpectedTokensOfADraft) {
  EXPECT_DOUBLE_EQ(DraftCostModel::expected_tokens(0.0, 4), 1.0);
  EXPECT_DOUBLE_EQ(DraftCostModel::expected_tokens(1.0, 4), 5.0);
  EXPECT_DOUBLE_EQ(DraftCostModel::expected_tokens(0.5, 2), 1.75);
  EXPECT_DOUBLE_EQ(DraftCostModel::expected_tokens(0.9, 0), 1.0);
}

// Seconds of a step with a draft of k guesses: base + per_row · k, each length timed kSamples times.
DraftCostModel timed(double base, double per_row, int max_k) {
  DraftCostModel m;
  for (int k = 0; k <= max_k; ++k)
    for (int i = 0; i < DraftCostModel::kSamples; ++i) m.record(k, base + per_row * k);
  return m;
}

// The choice after the first (refresh) turn of a cycle.
int steady_choice(DraftCostModel& m, double acceptance, int suggested) {
  int k = -1;
  for (int i = 0; i < 2; ++i) k = m.choose(acceptance, suggested);  // turn 0 of a cycle times a plain step
  return k;
}

TEST(DraftCost, TimesThePlainStepThenTheSuggestedLengthFirst) {
  DraftCostModel m;
  for (int i = 0; i < DraftCostModel::kSamples; ++i) {
    EXPECT_EQ(m.choose(0.9, 4), 0) << "no plain step timed yet";
    m.record(0, 1.0);
  }
  EXPECT_EQ(m.choose(0.9, 4), 4) << "length 4 not timed yet";
  EXPECT_EQ(m.choose(-1, 3), 3) << "no guess judged yet";
}

TEST(DraftCost, PicksTheLengthWithTheMostTokensPerSecond) {
  {
    DraftCostModel gpu = timed(1.0, 0.02, 4);  // extra rows nearly free: the whole draft
    EXPECT_EQ(steady_choice(gpu, 0.8, 4), 4);
  }
  {
    DraftCostModel cpu = timed(1.0, 1.0, 4);  // a row costs a step: guessing never pays
    EXPECT_EQ(steady_choice(cpu, 0.95, 4), 0);
  }
  {
    // Between: 0.8 acceptance, a row 0.3 of a step → 1.8/1.3, 2.44/1.6, 2.95/1.9, 3.36/2.2: three.
    DraftCostModel mid = timed(1.0, 0.3, 4);
    EXPECT_EQ(steady_choice(mid, 0.8, 4), 3);
    EXPECT_EQ(steady_choice(mid, 0.8, 2), 2) << "never past the suggested length";
    EXPECT_EQ(steady_choice(mid, 0.1, 4), 0) << "guesses rarely kept";
  }
}

TEST(DraftCost, RetimesPlainAndSuggestedStepsNowAndThen) {
  DraftCostModel cpu = timed(1.0, 1.0, 4);
  int plain = 0, suggested = 0;
  for (int i = 0; i < 2 * DraftCostModel::kRefreshEvery; ++i) {
    const int k = cpu.choose(0.95, 4);
    plain += k == 0;
    suggested += k == 4;
  }
  EXPECT_EQ(suggested, 4) << "the suggested length, twice in a row once a cycle (the second step is the one timed)";
  EXPECT_EQ(plain, 2 * DraftCostModel::kRefreshEvery - 4);
}

TEST(DraftCost, SlowFirstStepsOfALengthDoNotHideThatItPays) {
  // On a GPU the first steps of a new shape run eagerly, then capture their graph: milliseconds, where
  // a replay takes a fraction of a plain step's time per token. A mean held such outliers for dozens of
  // steps and switched a draft model that pays off.
  DraftCostModel m;
  for (int i = 0; i < DraftCostModel::kSamples; ++i) m.record(0, 1.0);
  m.record(4, 10.0);  // eager
  m.record(4, 8.0);   // graph capture
  m.record(4, 1.2);   // replays from here
  EXPECT_DOUBLE_EQ(m.cost(4), 1.2);
  EXPECT_EQ(steady_choice(m, 0.8, 4), 4) << "3.36 tokens in 1.2 s beat 1 in 1.0 s";
}

TEST(DraftCost, CostFollowsTheRecentSteps) {
  DraftCostModel m;
  for (int i = 0; i < DraftCostModel::kWindow; ++i) m.record(0, 1.0);
  EXPECT_DOUBLE_EQ(m.cost(0), 1.0);
  for (int i = 0; i < DraftCostModel::kWindow; ++i) m.record(0, 2.0);  // a longer context, a busier machine
  EXPECT_DOUBLE_EQ(m.cost(0), 2.0);
  m.record(0, 9.0);  // one hiccup moves nothing
  EXPECT_DOUBLE_EQ(m.cost(0), 2.0);
  EXPECT_DOUBLE_EQ(m.cost(3), 0.0) << "never timed";
}

TEST(DraftCost, PaysSaysWhetherAnyTimedLengthBeatsAPlainStep) {
  const DraftCostModel gpu = timed(1.0, 0.02, 4), cpu = timed(1.0, 1.0, 4);
  EXPECT_TRUE(gpu.pays(1.0, 4));
  EXPECT_TRUE(gpu.pays(0.5, 4));
  EXPECT_FALSE(gpu.pays(0.0, 4)) << "guesses never kept";
  EXPECT_FALSE(gpu.pays(1.0, 0));
  EXPECT_FALSE(cpu.pays(1.0, 4)) << "a row costs a step: even right guesses do not pay";
  EXPECT_FALSE(DraftCostModel().pays(1.0, 4)) << "nothing timed";
}

TEST(DraftCost, IgnoresLengthsOutOfRangeAndBadTimes) {
  DraftCostModel m = timed(1.0, 0.02, 2);
  m.record(-1, 1.0);
  m.record(DraftCostModel::kMaxLength + 1, 1.0);
  m.record(1, 0.0);
  m.record(1, -3.0);
  EXPECT_EQ(steady_choice(m, 0.8, 2), 2);
}

}  // namespace
}  // namespace kapitsa::runtime
