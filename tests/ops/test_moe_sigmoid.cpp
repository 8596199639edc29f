// Tests of moe_route_sigmoid: cpu against ref (ids exact, weights 1e-6) for plain and group-limited
// routing with k up to 32, and hand checks that the bias only selects, groups limit the choice and the
// weights are normalised then scaled.
#include "op_test_helpers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

namespace kapitsa::ops {
namespace {

using kapitsa::testing::max_abs_diff;
using test::Rng;

TEST_P(OnBackend, MoeRouteSigmoidMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  struct Case {
    int64_t T, E;
    int k, n_group, topk_group;
    bool renorm;
    float scale;
  };
  for (const Case c : {Case{9, 8, 2, 1, 1, true, 2.5f}, Case{33, 16, 4, 4, 2, true, 2.5f},
                       Case{5, 128, 6, 1, 1, true, 2.5f}, Case{4, 512, 32, 8, 4, true, 5.0f},
                       Case{6, 64, 22, 1, 1, false, 1.0f}}) {
    SCOPED_TRACE("E=" + std::to_string(c.E) + " k=" + std::to_string(c.k));
    const Buffer logits = test::random_f32(r, {c.T, c.E}, -4.0f, 4.0f);
    const Buffer bias = test::random_f32(r, {c.E}, -0.3f, 0.3f);
    Buffer ids_ref = Buffer::allocate(DType::i32, {c.T, c.k}), ids_cpu = Buffer::allocate(DType::i32, {c.T, c.k});
    Buffer w_ref = Buffer::allocate(DType::f32, {c.T, c.k}), w_cpu = Buffer::allocate(DType::f32, {c.T, c.k});
    test::run(test::ref(), moe_route_sigmoid, logits, bias, c.k, c.n_group, c.topk_group, c.renorm, c.scale, ids_ref,
              w_ref);
    test::run(backend(), moe_route_sigmoid, logits, bias, c.k, c.n_group, c.topk_group, c.renorm, c.scale, ids_cpu,
              w_cpu);
    EXPECT_TRUE(test::bit_equal(ids_cpu, ids_ref));
    EXPECT_LE(max_abs_diff(w_cpu, w_ref), 1e-6 * c.scale);
    if (c.renorm)  // weights sum to the scaling factor
      for (int64_t t = 0; t < c.T; ++t) {
        double sum = 0;
        for (int j = 0; j < c.k; ++j) sum += w_ref.f32()[t * c.k + j];
        EXPECT_NEAR(sum, c.scale, 1e-5);
      }
  }
}

// Ties: logits from nine values and no bias, so many experts score the same; the choice must still be
// the reference's (ties to the lower index, in the order repeated argmax picks them), with groups too.
TEST_P(OnBackend, MoeRouteSigmoidTiesGoToTheLowerIndex) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (const auto& [E, k, n_group, topk_group] : {std::tuple{128, 6, 1, 1}, std::tuple{64, 8, 8, 3}}) {
    SCOPED_TRACE("E=" + std::to_string(E) + " groups " + std::to_string(n_group));
    const int64_t T = 7;
    Buffer logits = test::random_f32(r, {T, E}, -2.0f, 2.0f);
    for (int64_t i = 0; i < T * E; ++i) logits.f32()[i] = std::round(logits.f32()[i] * 2.0f) / 2.0f;
    const Buffer bias = Buffer::zeros(DType::f32, {E});
    Buffer ids_ref = Buffer::allocate(DType::i32, {T, k}), ids = Buffer::allocate(DType::i32, {T, k});
    Buffer w_ref = Buffer::allocate(DType::f32, {T, k}), w = Buffer::allocate(DType::f32, {T, k});
    test::run(test::ref(), moe_route_sigmoid, logits, bias, k, n_group, topk_group, true, 1.0f, ids_ref, w_ref);
    test::run(backend(), moe_route_sigmoid, logits, bias, k, n_group, topk_group, true, 1.0f, ids, w);
    EXPECT_TRUE(test::bit_equal(ids, ids_ref));
    EXPECT_LE(max_abs_diff(w, w_ref), 1e-6);
  }
}

// 4 experts in 2 groups. Scores s = sigmoid(l). The bias lifts expert 3 into the top 2 but its
// weight is its unbiased score; with 1 group of 2 kept, only the group with the larger top-2 sum counts.
TEST_P(OnBackend, MoeRouteSigmoidBiasSelectsOnlyAndGroupsLimit) {
  Buffer logits = Buffer::allocate(DType::f32, {1, 4}), bias = Buffer::zeros(DType::f32, {4});
  const float l[] = {2.0f, 1.0f, 0.0f, -1.0f};
  for (int i = 0; i < 4; ++i) logits.f32()[i] = l[i];
  bias.f32()[3] = 2.0f;  // biased scores: 0.881, 0.731, 0.5, 2.269
  auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  for (const BackendTable* b : {&test::ref(), &backend()}) {
    SCOPED_TRACE(std::string(b->name));
    Buffer ids = Buffer::allocate(DType::i32, {1, 2}), w = Buffer::allocate(DType::f32, {1, 2});
    auto route = [&](int n_group, int topk_group, bool renorm, float scale) {
      test::run(*b, moe_route_sigmoid, logits, bias, 2, n_group, topk_group, renorm, scale, ids, w);
    };
    route(1, 1, false, 1.0f);
    EXPECT_EQ(ids.tensor().data_as<int32_t>()[0], 3);
    EXPECT_EQ(ids.tensor().data_as<int32_t>()[1], 0);
    EXPECT_NEAR(w.f32()[0], sig(-1.0), 1e-6);  // unbiased
    EXPECT_NEAR(w.f32()[1], sig(2.0), 1e-6);
    route(1, 1, true, 2.5f);
    EXPECT_NEAR(w.f32()[0], 2.5 * sig(-1.0) / (sig(-1.0) + sig(2.0)), 1e-6);
    // Groups {0,1}: 0.881+0.731 = 1.612;  {2,3}: 0.5+2.269 = 2.769 → only experts 2 and 3 compete.
    route(2, 1, false, 1.0f);
    EXPECT_EQ(ids.tensor().data_as<int32_t>()[0], 3);
    EXPECT_EQ(ids.tensor().data_as<int32_t>()[1], 2);
  }
}

}  // namespace
}  // namespace kapitsa::ops
