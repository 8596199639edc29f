// Tests of the MoE plumbing: softmax top-k routing (known picks, ties to the lower index,
// renormalisation), gather_rows and scale_add_rows (accumulating, repeated rows); cpu against ref.
#include "op_test_helpers.h"

#include <cmath>
#include <vector>

namespace kapitsa::ops {
namespace {
using kapitsa::testing::relative_error;
using test::Rng;

TEST(MoeRoute, RefPicksKnownExperts) {
  // Row 0: expert 3 best, then 1; row 1: ties between 0, 2 and 4 -> lower indices first.
  float logits[2 * 5] = {0, 2, -1, 3, 1, 5, 1, 5, 0, 5};
  int32_t ids[4];
  float w[4];
  test::run(test::ref(), moe_route_softmax, Tensor(DType::f32, {2, 5}, logits), 2, false,
            Tensor(DType::i32, {2, 2}, ids), Tensor(DType::f32, {2, 2}, w));
  EXPECT_EQ(ids[0], 3); EXPECT_EQ(ids[1], 1); EXPECT_EQ(ids[2], 0); EXPECT_EQ(ids[3], 2);
  double z0 = 0;
  for (int e = 0; e < 5; ++e) z0 += std::exp(logits[e]);
  EXPECT_NEAR(w[0], std::exp(3.0) / z0, 1e-6);
  EXPECT_NEAR(w[1], std::exp(2.0) / z0, 1e-6);
  test::run(test::ref(), moe_route_softmax, Tensor(DType::f32, {2, 5}, logits), 2, true,
            Tensor(DType::i32, {2, 2}, ids), Tensor(DType::f32, {2, 2}, w));
  EXPECT_NEAR(w[0], std::exp(3.0) / (std::exp(3.0) + std::exp(2.0)), 1e-6);
  EXPECT_NEAR(w[2], 0.5, 1e-6); EXPECT_NEAR(w[3], 0.5, 1e-6);
}

TEST_P(OnBackend, MoeRouteMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (int64_t T : {1, 7, 65})
    for (auto [E, k] : std::vector<std::pair<int64_t, int>>{{4, 1}, {8, 2}, {64, 8}, {256, 8}, {512, 10}, {33, 33}})
      for (bool renorm : {false, true}) {
        SCOPED_TRACE(fmt::format("T={} E={} k={} renorm={}", T, E, k, renorm));
        Buffer logits = test::random_f32(r, {T, E}, -4, 4);
        if (E >= 8) logits.f32()[1] = logits.f32()[5];  // a tie
        Buffer ir = Buffer::zeros(DType::i32, {T, k}), ic = Buffer::zeros(DType::i32, {T, k});
        Buffer wr = Buffer::zeros(DType::f32, {T, k}), wc = Buffer::zeros(DType::f32, {T, k});
        test::run(test::ref(), moe_route_softmax, logits, k, renorm, ir, wr);
        test::run(backend(), moe_route_softmax, logits, k, renorm, ic, wc);
        EXPECT_TRUE(test::bit_equal(ic, ir));
        EXPECT_LE(relative_error(wc, wr), 1e-6);
      }
}

TEST_P(OnBackend, MoeRowsGatherAndScaleAdd) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (int64_t H : {1, 15, 1031}) {
    const int64_t T = 9;
    Buffer x = test::random_f32(r, {T, H});
    std::vector<int32_t> rows = {4, 0, 8, 4, 4, 2};
    std::vector<float> weights = {0.5f, -1.0f, 2.0f, 0.25f, 1.0f, 0.0f};
    const int64_t R = static_cast<int64_t>(rows.size());
    Buffer gr = Buffer::zeros(DType::f32, {R, H}), gc = Buffer::zeros(DType::f32, {R, H});
    test::run(test::ref(), gather_rows, x, rows, gr);
    test::run(backend(), gather_rows, x, rows, gc);
    EXPECT_TRUE(test::bit_equal(gr, gc));
    for (int64_t h = 0; h < H; ++h) ASSERT_EQ(gr.f32()[2 * H + h], x.f32()[8 * H + h]);
    Buffer dr = test::clone(x), dc = test::clone(x);
    test::run(test::ref(), scale_add_rows, gr, rows, weights, dr);
    test::run(backend(), scale_add_rows, gc, rows, weights, dc);
    EXPECT_LE(kapitsa::testing::max_abs_diff(dc, dr), 1e-5);  // |terms| ≤ 1 + 3.75
    // row 4 received 0.5 + 0.25 + 1.0 = 1.75 times itself
    for (int64_t h = 0; h < H; ++h) ASSERT_NEAR(dr.f32()[4 * H + h], 2.75f * x.f32()[4 * H + h], 1e-5);
    // row 1 untouched
    for (int64_t h = 0; h < H; ++h) ASSERT_EQ(dr.f32()[1 * H + h], x.f32()[1 * H + h]);
  }
}

}  // namespace
}  // namespace kapitsa::ops
