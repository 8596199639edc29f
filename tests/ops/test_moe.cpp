// Tests of the MoE plumbing: softmax top-k routing (known picks, ties to the lower index,
// renormalisation), gather_rows and scale_add_rows (accumulating, repeated rows), and the device-routed
// pair matmul_experts / moe_combine; every backend against ref.
#include "op_test_helpers.h"

#include <algorithm>
#include <cmath>
#include <tuple>
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
    // 40 distinct rows of 64 in random order (an expert's tokens: the cuda kernel then spreads the rows
    // over blocks): each row receives one product.
    std::vector<int32_t> perm(64);
    for (int32_t i = 0; i < 64; ++i) perm[static_cast<size_t>(i)] = i;
    std::shuffle(perm.begin(), perm.end(), r.gen);
    const std::vector<int32_t> some(perm.begin(), perm.begin() + 40);
    std::vector<float> w40(40);
    for (float& w : w40) w = static_cast<float>(r.gen() % 1000) / 250.0f - 2.0f;
    Buffer src = test::random_f32(r, {40, H}), big = test::random_f32(r, {64, H});
    Buffer br = test::clone(big), bc = test::clone(big);
    test::run(test::ref(), scale_add_rows, src, some, w40, br);
    test::run(backend(), scale_add_rows, src, some, w40, bc);
    EXPECT_LE(kapitsa::testing::max_abs_diff(bc, br), 1e-5);  // |terms| ≤ 1 + 2
    EXPECT_GT(kapitsa::testing::max_abs_diff(br, big), 0.1);
  }
}

// Experts stacked as checkpoints store them ([E, N, K], one view per expert), random ids with repeats.
TEST_P(OnBackend, MoeMatmulExpertsMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  struct Case {
    int64_t T, k, E, K, N;
  };
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const Case& c : std::vector<Case>{{1, 1, 1, 8, 3}, {1, 6, 8, 64, 40}, {3, 2, 5, 33, 17}, {16, 8, 64, 256, 24},
                                           {2, 4, 4, 1024, 130}}) {
      SCOPED_TRACE(fmt::format("{} T={} k={} E={} K={} N={}", dtype_name(dt), c.T, c.k, c.E, c.K, c.N));
      Buffer x = test::random_f32(r, {c.T, c.K});
      Buffer stacked = kapitsa::testing::random_buffer(r.gen, dt, {c.E, c.N, c.K});
      std::vector<Linear> experts;
      for (int64_t e = 0; e < c.E; ++e) experts.push_back(Linear(stacked).expert(e));
      Buffer ids = Buffer::zeros(DType::i32, {c.T, c.k});
      for (int64_t i = 0; i < c.T * c.k; ++i) ids.tensor().data_as<int32_t>()[i] = static_cast<int32_t>(r.gen() % c.E);
      Buffer yr = Buffer::zeros(DType::f32, {c.T * c.k, c.N}), yc = Buffer::allocate(DType::f32, {c.T * c.k, c.N});
      for (int64_t i = 0; i < c.T * c.k * c.N; ++i) yc.f32()[i] = 1e30f;  // every row is written
      test::run(test::ref(), matmul_experts, x, experts, ids, yr);
      test::run(backend(), matmul_experts, x, experts, ids, yc);
      const double scale = std::sqrt(static_cast<double>(c.K) / 9.0) + 1e-3;  // as the matmul test
      EXPECT_LE(kapitsa::testing::max_abs_diff(yc, yr) / scale, 1e-5);
      // Row t·k + j is the plain matmul of x's row t with the chosen expert (independent of the op).
      const int64_t p = c.T * c.k - 1, t = p / c.k;
      Buffer row = Buffer::zeros(DType::f32, {1, c.N});
      test::run(test::ref(), matmul, x.tensor().rows(t, t + 1),
                experts[static_cast<size_t>(ids.tensor().data_as<int32_t>()[p])], row);
      for (int64_t n = 0; n < c.N; ++n) ASSERT_EQ(yr.f32()[p * c.N + n], row.f32()[n]);
    }
}

// matmul_experts_relu_squared is the backend's matmul_experts then relu_squared, bit for bit (cuda: relu²
// in the experts GEMV's stores), some outputs negative before (0 after).
TEST_P(OnBackend, MoeMatmulExpertsReluSquaredIsMatmulExpertsThenReluSquared) {
  Rng r;
  SCOPED_TRACE(r.trace());
  struct Case {
    int64_t T, k, E, K, N;
  };
  for (DType dt : {DType::f32, DType::bf16})
    for (const Case& c : std::vector<Case>{{1, 6, 8, 64, 40}, {3, 2, 5, 33, 17}, {2, 4, 4, 1024, 130}}) {
      SCOPED_TRACE(fmt::format("{} T={} k={} E={} K={} N={}", dtype_name(dt), c.T, c.k, c.E, c.K, c.N));
      const Buffer x = test::random_f32(r, {c.T, c.K});
      const Buffer stacked = kapitsa::testing::random_buffer(r.gen, dt, {c.E, c.N, c.K});
      std::vector<Linear> experts;
      for (int64_t e = 0; e < c.E; ++e) experts.push_back(Linear(stacked).expert(e));
      Buffer ids = Buffer::zeros(DType::i32, {c.T, c.k});
      for (int64_t i = 0; i < c.T * c.k; ++i) ids.tensor().data_as<int32_t>()[i] = static_cast<int32_t>(r.gen() % c.E);
      const int64_t n = c.T * c.k * c.N;
      Buffer plain = Buffer::zeros(DType::f32, {c.T * c.k, c.N}), expected = Buffer::zeros(DType::f32, {c.T * c.k, c.N});
      test::run(backend(), matmul_experts, x, experts, ids, plain);
      test::run(backend(), relu_squared, plain, expected);
      Buffer y = Buffer::allocate(DType::f32, {c.T * c.k, c.N});
      for (int64_t i = 0; i < n; ++i) y.f32()[i] = std::nanf("");
      test::run(backend(), matmul_experts_relu_squared, x, experts, ids, y);
      int64_t positive = 0;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(y.f32()[i], expected.f32()[i]) << "at " << i;
        positive += plain.f32()[i] > 0;
      }
      EXPECT_GT(positive, 0);
      EXPECT_LT(positive, n);
    }
}

TEST_P(OnBackend, MoeCombineMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  // (cuda: k ≤ 8 in registers, k = 10 the loop.)
  for (auto [T, k, H] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 1, 5}, {1, 6, 2688}, {16, 8, 1031}, {3, 10, 70}}) {
    SCOPED_TRACE(fmt::format("T={} k={} H={}", T, k, H));
    Buffer y = test::random_f32(r, {T * k, H});
    Buffer w = test::random_f32(r, {T, k}, 0.0f, 1.0f);
    Buffer outr = Buffer::zeros(DType::f32, {T, H}), outc = test::random_f32(r, {T, H});  // overwritten
    test::run(test::ref(), moe_combine, y, w, Tensor(), outr);
    test::run(backend(), moe_combine, y, w, Tensor(), outc);
    EXPECT_LE(kapitsa::testing::max_abs_diff(outc, outr), 1e-6 * static_cast<double>(k));

    // With an addend (the shared expert's rows): the sum, then the addend — the backend's own sum plus
    // the addend bit for bit, into a separate out and in place (out = addend).
    Buffer addend = test::random_f32(r, {T, H});
    Buffer with = test::random_f32(r, {T, H}), in_place = Buffer::copy_of(addend.tensor());
    test::run(backend(), moe_combine, y, w, addend, with);
    test::run(backend(), moe_combine, y, w, in_place, in_place);
    for (int64_t i = 0; i < T * H; ++i) {
      ASSERT_EQ(with.f32()[i], outc.f32()[i] + addend.f32()[i]) << "element " << i;
      ASSERT_EQ(in_place.f32()[i], with.f32()[i]) << "element " << i;
    }
  }
  // Known values: out[0] = 0.5·[1, 2] + 2·[3, -1];  out[1] = 1·[4, 4] − 1·[1, 0]; then + [1, 0, 0, -4].
  float yv[8] = {1, 2, 3, -1, 4, 4, 1, 0}, wv[4] = {0.5f, 2.0f, 1.0f, -1.0f}, ov[4] = {}, av[4] = {1, 0, 0, -4};
  test::run(backend(), moe_combine, Tensor(DType::f32, {4, 2}, yv), Tensor(DType::f32, {2, 2}, wv), Tensor(),
            Tensor(DType::f32, {2, 2}, ov));
  EXPECT_EQ(ov[0], 6.5f); EXPECT_EQ(ov[1], -1.0f); EXPECT_EQ(ov[2], 3.0f); EXPECT_EQ(ov[3], 4.0f);
  test::run(backend(), moe_combine, Tensor(DType::f32, {4, 2}, yv), Tensor(DType::f32, {2, 2}, wv),
            Tensor(DType::f32, {2, 2}, av), Tensor(DType::f32, {2, 2}, ov));
  EXPECT_EQ(ov[0], 7.5f); EXPECT_EQ(ov[1], -1.0f); EXPECT_EQ(ov[2], 3.0f); EXPECT_EQ(ov[3], 0.0f);
}

TEST(MoeMatmulExperts, HostIdsOutOfRangeAreRefused) {
  float x[4] = {}, w[8] = {}, y[4] = {};
  int32_t ids[2] = {0, 2};
  std::vector<Linear> experts = {Linear(Tensor(DType::f32, {2, 2}, w)), Linear(Tensor(DType::f32, {2, 2}, w + 4))};
  ScopedBackend on(test::ref());
  EXPECT_DEATH(matmul_experts(Tensor(DType::f32, {2, 2}, x), experts, Tensor(DType::i32, {2, 1}, ids),
                              Tensor(DType::f32, {2, 2}, y)),
               "matmul_experts: expert id 2 at 1 outside \\[0, 2\\)");
}

}  // namespace
}  // namespace kapitsa::ops
