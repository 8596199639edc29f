// Tests of the causal depthwise conv1d with a carried window: ref pinned by hand, chaining token by
// token (and in uneven pieces) equals one call, and cpu against ref.
#include "op_test_helpers.h"

#include <cmath>
#include <functional>
#include <vector>

namespace kapitsa::ops {
namespace {
using kapitsa::testing::relative_error;
using test::Rng;
using ConvFn = std::function<void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, const Tensor&)>;

TEST(Conv1d, RefHandValues) {
  // C = 1, K = 3, w = [1, 10, 100], window = [a, b] = [2, 3], x = [4, 5]
  float w[3] = {1, 10, 100}, win[2] = {2, 3}, x[2] = {4, 5}, y[2], bias[1] = {0.5f};
  test::run(test::ref(), conv1d_causal, Tensor(DType::f32, {2, 1}, x), Tensor(DType::f32, {1, 3}, w),
            Tensor(DType::f32, {1}, bias), Tensor(DType::f32, {2, 1}, win), false, Tensor(DType::f32, {2, 1}, y));
  EXPECT_FLOAT_EQ(y[0], 0.5f + 2 + 30 + 400);
  EXPECT_FLOAT_EQ(y[1], 0.5f + 3 + 40 + 500);
  EXPECT_EQ(win[0], 4.0f);
  EXPECT_EQ(win[1], 5.0f);
  // With SiLU and no bias, one token.
  float x1[1] = {-1};
  test::run(test::ref(), conv1d_causal, Tensor(DType::f32, {1, 1}, x1), Tensor(DType::f32, {1, 3}, w), Tensor(),
            Tensor(DType::f32, {2, 1}, win), true, Tensor(DType::f32, {1, 1}, y));
  const double pre = 4 + 50 - 100;
  EXPECT_NEAR(y[0], pre / (1 + std::exp(-pre)), 1e-5);
  EXPECT_EQ(win[0], 5.0f);
  EXPECT_EQ(win[1], -1.0f);
}

void check_chaining(const ConvFn& fn, std::string_view name, Rng& r) {
  for (int64_t K : {1, 2, 4})
    for (int64_t C : {1, 17, 64}) {
      SCOPED_TRACE(fmt::format("{} K={} C={}", name, K, C));
      const int64_t T = 23;
      Buffer x = test::random_f32(r, {T, C}), w = test::random_f32(r, {C, K}), b = test::random_f32(r, {C});
      Buffer win0 = test::random_f32(r, {K - 1, C});
      Buffer win_all = test::clone(win0), y_all = Buffer::zeros(DType::f32, {T, C});
      fn(x, w, b, win_all, true, y_all);
      Buffer win_step = test::clone(win0), y_step = Buffer::zeros(DType::f32, {T, C});
      for (int64_t t0 = 0; t0 < T;) {
        const int64_t n = std::min<int64_t>(T - t0, t0 < 5 ? 1 : 7);
        fn(Tensor(x.tensor()).rows(t0, t0 + n), w, b, win_step, true, Tensor(y_step.tensor()).rows(t0, t0 + n));
        t0 += n;
      }
      EXPECT_LE(kapitsa::testing::max_abs_diff(y_step, y_all), 1e-6 * (1 + K));
      EXPECT_TRUE(test::bit_equal(win_step, win_all));
      // After T ≥ K-1 tokens the window is the last K-1 inputs.
      for (int64_t i = 0; i < (K - 1) * C; ++i) ASSERT_EQ(win_all.f32()[i], x.f32()[(T - (K - 1)) * C + i]);
    }
}

TEST_P(OnBackend, Conv1dChainingEqualsOneCall) {
  Rng r;
  SCOPED_TRACE(r.trace());
  check_chaining(test::bound(test::ref(), conv1d_causal), "ref", r);
  check_chaining(test::bound(backend(), conv1d_causal), backend().name, r);
}

TEST_P(OnBackend, Conv1dMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (int64_t T : {1, 2, 7, 65})
    for (int64_t C : {1, 15, 64, 1031})
      for (int64_t K : {1, 3, 4})
        for (bool with_bias : {false, true})
          for (bool silu : {false, true}) {
            SCOPED_TRACE(fmt::format("T={} C={} K={} bias={} silu={}", T, C, K, with_bias, silu));
            Buffer x = test::random_f32(r, {T, C}, -2, 2), w = test::random_f32(r, {C, K});
            Buffer b = test::random_f32(r, {C}), win = test::random_f32(r, {K - 1, C}, -2, 2);
            Buffer win_r = test::clone(win), win_c = test::clone(win);
            Buffer yr = Buffer::zeros(DType::f32, {T, C}), yc = Buffer::zeros(DType::f32, {T, C});
            const Tensor bias = with_bias ? Tensor(b.tensor()) : Tensor();
            test::run(test::ref(), conv1d_causal, x, w, bias, win_r, silu, yr);
            test::run(backend(), conv1d_causal, x, w, bias, win_c, silu, yc);
            // Outputs can cancel to near zero, so bound the absolute error by the size of the terms
            // (|bias| + Σ|w·x| ≤ 1 + 2K), and the relative error only over many outputs.
            EXPECT_LE(kapitsa::testing::max_abs_diff(yc, yr), 1e-6 * (1 + 2 * K));
            if (T * C >= 256) {
              EXPECT_LE(relative_error(yc, yr), 1e-6);
            }
            EXPECT_TRUE(test::bit_equal(win_c, win_r));
            // In place (y = x: the op allows it): the same outputs and window as into a separate y.
            Buffer in_place = test::clone(x), win_i = test::clone(win);
            test::run(backend(), conv1d_causal, in_place, w, bias, win_i, silu, in_place);
            EXPECT_TRUE(test::bit_equal(in_place, yc)) << "in place";
            EXPECT_TRUE(test::bit_equal(win_i, win_c)) << "in place";
          }
}

}  // namespace
}  // namespace kapitsa::ops
