// Sampler tests: the distributions temperature / top-k / top-p / min-p draw from (chi-square against
// probabilities computed here independently, on fixed logits), seeded reproducibility, penalties,
// logit bias and logprobs.
#include "runtime/sampler.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace kapitsa::runtime {
namespace {

// Expected distribution, written straightforwardly: full sort, HF order (temperature, top-k, top-p, min-p).
std::vector<double> expected_distribution(const std::vector<float>& logits, const SamplingParams& p) {
  const size_t V = logits.size();
  std::vector<double> s(V);
  for (size_t i = 0; i < V; ++i) s[i] = logits[i] / p.temperature;
  std::vector<size_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return s[a] > s[b]; });
  std::vector<bool> keep(V, true);
  if (p.top_k > 0)
    for (size_t r = static_cast<size_t>(p.top_k); r < V; ++r) keep[order[r]] = false;
  auto probs = [&] {
    double m = s[order[0]], z = 0;
    std::vector<double> q(V, 0.0);
    for (size_t i = 0; i < V; ++i)
      if (keep[i]) z += (q[i] = std::exp(s[i] - m));
    for (double& v : q) v /= z;
    return q;
  };
  if (p.top_p < 1) {
    std::vector<double> q = probs();
    double above = 0;
    for (size_t r = 0; r < V; ++r) {
      if (!keep[order[r]]) continue;
      if (r > 0 && above >= p.top_p) keep[order[r]] = false;
      above += q[order[r]];
    }
  }
  if (p.min_p > 0) {
    std::vector<double> q = probs();
    for (size_t i = 0; i < V; ++i)
      if (keep[i] && q[i] < p.min_p * q[order[0]]) keep[i] = false;
  }
  return probs();
}

// Upper critical value of chi-square with `df` degrees of freedom at about 1e-6 (Wilson–Hilferty).
double chi_square_critical(int df) {
  const double z = 4.75, a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

void expect_distribution(const std::vector<float>& logits, const SamplingParams& params, uint64_t seed,
                         int draws = 200000) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const std::vector<double> expected = expected_distribution(logits, params);
  Sampler sampler(params, seed);
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) ++counts[static_cast<size_t>(sampler.sample(logits))];
  double chi2 = 0;
  int df = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (expected[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " should have been cut";
      continue;
    }
    const double e = expected[i] * draws;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++df;
  }
  if (df > 0) {
    EXPECT_LT(chi2, chi_square_critical(df)) << "df " << df;
  }
}

const std::vector<float> kLogits = {2.0f, 1.5f, 1.2f, 0.3f, 0.0f, -0.5f, -1.0f, -3.0f};

TEST(Sampler, GreedyIsArgmaxFirstMaximum) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p, 1);
  EXPECT_EQ(s.sample(kLogits), 0);
  std::vector<float> ties = {0.5f, 3.0f, 1.0f, 3.0f};
  EXPECT_EQ(s.sample(ties), 1);
}

// The greedy fast path (no copy, a lane-wise maximum) against the plain scan on fresh random logits of
// a real vocabulary's size: ties, NaNs (never chosen; one at id 0 stays), -inf and all-equal rows,
// with and without a grammar mask, and with a penalty (the adjusted copy's path).
TEST(Sampler, GreedyEqualsThePlainScanOnLargeVocabularies) {
  auto plain_argmax = [](const std::vector<float>& x, const std::vector<uint8_t>& allowed) {
    auto v = [&](size_t i) { return allowed.empty() || allowed[i] ? x[i] : -INFINITY; };
    size_t best = 0;
    for (size_t i = 1; i < x.size(); ++i)
      if (v(i) > v(best)) best = i;
    if (!allowed.empty() && !allowed[best]) best = static_cast<size_t>(std::find(allowed.begin(), allowed.end(), 1) - allowed.begin());
    return static_cast<int32_t>(best);
  };
  std::mt19937_64 rng(std::random_device{}());
  SamplingParams p;
  p.temperature = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const size_t V = 248320 - static_cast<size_t>(rng() % 37);  // odd tails past the 16 lanes
    std::vector<float> x(V);
    std::normal_distribution<float> normal(0, 4);
    for (float& v : x) v = std::round(normal(rng) * 4) / 4;  // coarse: many ties at the top
    if (trial % 3 == 1)
      for (int k = 0; k < 50; ++k) x[rng() % V] = NAN;
    if (trial % 5 == 2) x[0] = NAN;
    if (trial % 7 == 3) std::fill(x.begin(), x.end(), -INFINITY);
    if (trial % 11 == 4) std::fill(x.begin(), x.end(), 1.5f);
    if (trial % 4 == 0) x[V - 1 - rng() % 16] = 1e9f;  // the maximum in the tail
    std::vector<uint8_t> allowed;
    if (trial % 2 == 1) {
      allowed.resize(V);
      for (auto& a : allowed) a = rng() % 8 == 0;
      allowed[rng() % V] = 1;
    }
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    Sampler greedy(p, 1);
    EXPECT_EQ(greedy.sample(x, -1, nullptr, allowed), plain_argmax(x, allowed));
    // A repetition penalty of a token nobody scores: the adjusted copy's path, the same answer.
    SamplingParams penalised = p;
    penalised.repetition_penalty = 1.5f;
    Sampler copied(penalised, 1);
    EXPECT_EQ(copied.sample(x, -1, nullptr, allowed), plain_argmax(x, allowed));
  }
}

// Candidates are the tokens within 40 nats of the best after temperature (sampler.cpp): one 39 nats
// below keeps its exact probability, one 41 below has none; the rest of the distribution is as computed
// here over every token.
TEST(Sampler, TokensFortyNatsBelowTheBestAreNoCandidates) {
  SamplingParams p;
  p.temperature = 0.5f;
  std::vector<float> logits(1000, -30.0f);  // 60 nats below the best after temperature
  logits[3] = 10.0f;
  logits[500] = 9.0f;
  logits[7] = 10.0f - 39 * 0.5f;
  logits[999] = 10.0f - 41 * 0.5f;
  Sampler s(p, 1);
  std::vector<float> probs;
  s.distribution(logits, {}, probs);
  const double z = 1 + std::exp(-2.0) + std::exp(-39.0);
  EXPECT_NEAR(probs[3], 1 / z, 1e-7);
  EXPECT_NEAR(probs[500], std::exp(-2.0) / z, 1e-7);
  EXPECT_GT(probs[7], 0.0f);
  EXPECT_NEAR(probs[7] / (std::exp(-39.0) / z), 1.0, 1e-5);
  EXPECT_EQ(probs[999], 0.0f);
  EXPECT_EQ(probs[0], 0.0f);
}

TEST(Sampler, TemperatureChiSquare) {
  for (float t : {1.0f, 0.5f, 1.7f}) {
    SamplingParams p;
    p.temperature = t;
    expect_distribution(kLogits, p, testing::fresh_seed());
  }
}

TEST(Sampler, TopKChiSquare) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 3;
  expect_distribution(kLogits, p, testing::fresh_seed());
}

TEST(Sampler, TopPChiSquare) {
  for (float top_p : {0.5f, 0.8f, 0.95f}) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_p = top_p;
    expect_distribution(kLogits, p, testing::fresh_seed());
  }
}

TEST(Sampler, MinPChiSquare) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.2f;
  expect_distribution(kLogits, p, testing::fresh_seed());
}

TEST(Sampler, CombinedTruncationChiSquare) {
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 6;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  expect_distribution(kLogits, p, testing::fresh_seed());
}

TEST(Sampler, TopPOverLargeVocabularySortsPastTheHead) {
  // A flat distribution over 3000 tokens: the nucleus (~2700 tokens) is larger than the sorted head.
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-0.01f, 0.01f);
  std::vector<float> logits(3000);
  for (float& v : logits) v = u(rng);
  SamplingParams p;
  p.top_p = 0.9f;
  const std::vector<double> expected = expected_distribution(logits, p);
  size_t nucleus = 0;
  for (double e : expected) nucleus += e > 0;
  EXPECT_GT(nucleus, 2000u);
  Sampler s(p, seed);
  std::vector<int> seen(logits.size(), 0);
  for (int i = 0; i < 10000; ++i) ++seen[static_cast<size_t>(s.sample(logits))];
  size_t distinct = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (expected[i] == 0) EXPECT_EQ(seen[i], 0) << "token " << i << " is outside the nucleus";
    distinct += seen[i] > 0;
  }
  EXPECT_GT(distinct, nucleus * 8 / 10);  // 10000 draws over ~2700 tokens: ~97% seen
}

TEST(Sampler, SeededRunsAreReproducible) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.95f;
  p.seed = seed;
  Sampler a(p, 1), b(p, 2);  // the request's seed wins over the engine's
  SamplingParams q = p;
  q.seed = seed + 1;
  Sampler c(q, 1);
  int differ = 0;
  for (int i = 0; i < 500; ++i) {
    const int32_t x = a.sample(kLogits), y = b.sample(kLogits), z = c.sample(kLogits);
    EXPECT_EQ(x, y);
    differ += x != z;
  }
  EXPECT_GT(differ, 50);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  {
    Sampler s(p, 1);
    std::vector<float> logits = {3.0f, 2.0f};
    const int32_t prompt[] = {0};
    s.add_prompt(prompt);  // 3 / 2 = 1.5 < 2
    EXPECT_EQ(s.sample(logits), 1);
  }
  {
    Sampler s(p, 1);
    std::vector<float> logits = {-1.0f, -1.5f};
    s.accept(0);  // -1 * 2 = -2 < -1.5
    EXPECT_EQ(s.sample(logits), 1);
  }
}

TEST(Sampler, PresenceAndFrequencyPenaltiesCountGeneratedTokens) {
  SamplingParams p;
  p.temperature = 0;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  std::vector<float> logits = {1.0f, 0.1f};
  Sampler s(p, 1);
  const int32_t prompt[] = {0, 0, 0};
  s.add_prompt(prompt);  // the prompt does not count for presence/frequency
  EXPECT_EQ(s.sample(logits), 0);
  s.accept(0);  // 1 - 0.5 - 0.25 = 0.25 > 0.1
  EXPECT_EQ(s.sample(logits), 0);
  s.accept(0);  // 1 - 0.5 - 0.5 = 0 < 0.1
  EXPECT_EQ(s.sample(logits), 1);
}

TEST(Sampler, LogitBiasBansAndForces) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.logit_bias[0] = -INFINITY;
  p.logit_bias[7] = 100.0f;
  Sampler s(p, testing::fresh_seed());
  for (int i = 0; i < 200; ++i) EXPECT_EQ(s.sample(kLogits), 7);
  p.logit_bias.erase(7);
  Sampler t(p, testing::fresh_seed());
  for (int i = 0; i < 2000; ++i) EXPECT_NE(t.sample(kLogits), 0);
}

TEST(Sampler, LogprobsAreRawLogSoftmaxWithBestAlternatives) {
  SamplingParams p;
  p.temperature = 0.5f;
  p.logit_bias[3] = 50.0f;  // changes the choice, not the reported distribution
  Sampler s(p, 7);
  TokenEvent event;
  const int32_t id = s.sample(kLogits, 3, &event);
  EXPECT_EQ(id, 3);
  double z = 0;
  for (float v : kLogits) z += std::exp(static_cast<double>(v));
  EXPECT_NEAR(event.logprob, kLogits[3] - std::log(z), 1e-6);
  ASSERT_EQ(event.top.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(event.top[static_cast<size_t>(i)].id, i);
    EXPECT_NEAR(event.top[static_cast<size_t>(i)].logprob, kLogits[static_cast<size_t>(i)] - std::log(z), 1e-6);
  }
  TokenEvent none;
  s.sample(kLogits, -1, &none);
  EXPECT_TRUE(none.top.empty());
}

}  // namespace
}  // namespace kapitsa::runtime
