// Tests of the elementwise ops (add, silu_mul, mul_sigmoid incl. row broadcast, relu²): ref pinned on
// hand-computed values, cpu against ref on random inputs of odd sizes, and in-place use.
#include "op_test_helpers.h"

#include <cmath>

namespace kapitsa::ops {
namespace {
using kapitsa::testing::relative_error;
using test::Rng;

TEST(Elementwise, RefHandValues) {
  float a[3] = {1, -2, 0.5f}, b[3] = {2, 1, 0}, y[3];
  Tensor ta(DType::f32, {3}, a), tb(DType::f32, {3}, b), ty(DType::f32, {3}, y);
  test::run(test::ref(), add, ta, tb, ty);
  EXPECT_FLOAT_EQ(y[0], 3); EXPECT_FLOAT_EQ(y[1], -1); EXPECT_FLOAT_EQ(y[2], 0.5f);
  test::run(test::ref(), silu_mul, ta, tb, ty);  // silu(1)*2, silu(-2)*1
  EXPECT_NEAR(y[0], 2.0 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(y[1], -2.0 / (1 + std::exp(2.0)), 1e-6);
  EXPECT_EQ(y[2], 0.0f);
  test::run(test::ref(), mul_sigmoid, tb, ta, ty);  // b * sigmoid(a)
  EXPECT_NEAR(y[0], 2.0 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(y[1], 1.0 / (1 + std::exp(2.0)), 1e-6);
  test::run(test::ref(), relu_squared, ta, ty);
  EXPECT_FLOAT_EQ(y[0], 1); EXPECT_FLOAT_EQ(y[1], 0); EXPECT_FLOAT_EQ(y[2], 0.25f);
  // row-broadcast gate: [2, 3] x with [2, 1] gate
  float x6[6] = {1, 2, 3, 4, 5, 6}, g2[2] = {0, 100}, y6[6];
  test::run(test::ref(), mul_sigmoid, Tensor(DType::f32, {2, 3}, x6), Tensor(DType::f32, {2, 1}, g2),
            Tensor(DType::f32, {2, 3}, y6));
  EXPECT_FLOAT_EQ(y6[0], 0.5f); EXPECT_FLOAT_EQ(y6[2], 1.5f); EXPECT_FLOAT_EQ(y6[5], 6.0f);
}

TEST_P(OnBackend, ElementwiseMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (int64_t R : {1, 7, 65})
    for (int64_t C : {1, 15, 64, 1031}) {
      SCOPED_TRACE(fmt::format("R={} C={}", R, C));
      Buffer a = test::random_f32(r, {R, C}, -6, 6), b = test::random_f32(r, {R, C}, -6, 6);
      Buffer g1 = test::random_f32(r, {R, 1}, -6, 6);
      Buffer yr = Buffer::zeros(DType::f32, {R, C}), yc = Buffer::zeros(DType::f32, {R, C});
      test::run(test::ref(), add, a, b, yr), test::run(backend(), add, a, b, yc);
      EXPECT_TRUE(test::bit_equal(yr, yc)) << "add";
      test::run(test::ref(), silu_mul, a, b, yr), test::run(backend(), silu_mul, a, b, yc);
      EXPECT_LE(relative_error(yc, yr), 1e-6) << "silu_mul";
      test::run(test::ref(), mul_sigmoid, a, b, yr), test::run(backend(), mul_sigmoid, a, b, yc);
      EXPECT_LE(relative_error(yc, yr), 1e-6) << "mul_sigmoid";
      test::run(test::ref(), mul_sigmoid, a, g1, yr), test::run(backend(), mul_sigmoid, a, g1, yc);
      EXPECT_LE(relative_error(yc, yr), 1e-6) << "mul_sigmoid broadcast";
      test::run(test::ref(), relu_squared, a, yr), test::run(backend(), relu_squared, a, yc);
      EXPECT_TRUE(test::bit_equal(yr, yc)) << "relu_squared";
      // In place: y aliases the first input.
      Buffer ai = test::clone(a);
      test::run(backend(), silu_mul, ai, b, ai);
      test::run(test::ref(), silu_mul, a, b, yr);
      EXPECT_LE(relative_error(ai, yr), 1e-6) << "silu_mul in place";
      Buffer ax = test::clone(a);
      test::run(backend(), mul_sigmoid, ax, b, ax);
      test::run(test::ref(), mul_sigmoid, a, b, yr);
      EXPECT_LE(relative_error(ax, yr), 1e-6) << "mul_sigmoid in place";
      Buffer aa = test::clone(a);
      test::run(backend(), add, aa, b, aa);
      test::run(test::ref(), add, a, b, yr);
      EXPECT_TRUE(test::bit_equal(aa, yr)) << "add in place";
    }
}

}  // namespace
}  // namespace kapitsa::ops
