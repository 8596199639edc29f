// Tests of the normalisations: ref pinned on hand-computed rows; cpu against ref on random rows
// (odd widths, zero-centred and plain weights, in place).
#include "op_test_helpers.h"

#include <cmath>

namespace kapitsa::ops {
namespace {
using kapitsa::testing::relative_error;
using test::Rng;

TEST(Norm, RefHandValues) {
  float x[4] = {1, -1, 1, -1}, w[4] = {0, 1, -0.5f, 2}, y[4];
  // mean(x²) = 1 -> x̂ = x / sqrt(1 + eps)
  test::run(test::ref(), rms_norm, Tensor(DType::f32, {1, 4}, x), Tensor(DType::f32, {4}, w), 0.0f, 1.0f,
            Tensor(DType::f32, {1, 4}, y));
  EXPECT_FLOAT_EQ(y[0], 1); EXPECT_FLOAT_EQ(y[1], -2); EXPECT_FLOAT_EQ(y[2], 0.5f); EXPECT_FLOAT_EQ(y[3], -3);
  test::run(test::ref(), rms_norm, Tensor(DType::f32, {1, 4}, x), Tensor(DType::f32, {4}, w), 0.0f, 0.0f,
            Tensor(DType::f32, {1, 4}, y));
  EXPECT_FLOAT_EQ(y[0], 0); EXPECT_FLOAT_EQ(y[1], -1); EXPECT_FLOAT_EQ(y[3], -2);
  float x2[2] = {3, 4}, y2[2];
  test::run(test::ref(), l2_norm, Tensor(DType::f32, {1, 2}, x2), 0.0f, 2.0f, Tensor(DType::f32, {1, 2}, y2));
  EXPECT_FLOAT_EQ(y2[0], 1.2f); EXPECT_FLOAT_EQ(y2[1], 1.6f);
  float z[4] = {0, 1, 2, -1}, w1[4] = {1, 1, 1, 1};
  test::run(test::ref(), rms_norm_gated, Tensor(DType::f32, {1, 4}, x), Tensor(DType::f32, {1, 4}, z),
            Tensor(DType::f32, {4}, w1), 0.0f, Tensor(DType::f32, {1, 4}, y));
  EXPECT_FLOAT_EQ(y[0], 0);
  EXPECT_NEAR(y[1], -1.0 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(y[2], 2.0 / (1 + std::exp(-2.0)), 1e-6);
}

TEST_P(OnBackend, NormMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (int64_t R : {1, 7, 65})
    for (int64_t D : {1, 15, 128, 256, 1031}) {
      SCOPED_TRACE(fmt::format("R={} D={}", R, D));
      Buffer x = test::random_f32(r, {R, D}, -3, 3), z = test::random_f32(r, {R, D}, -4, 4);
      Buffer w = test::random_f32(r, {D}, -0.5f, 1.5f);
      Buffer yr = Buffer::zeros(DType::f32, {R, D}), yc = Buffer::zeros(DType::f32, {R, D});
      for (float off : {0.0f, 1.0f}) {
        test::run(test::ref(), rms_norm, x, w, 1e-6f, off, yr);
        test::run(backend(), rms_norm, x, w, 1e-6f, off, yc);
        EXPECT_LE(relative_error(yc, yr), 1e-6) << "rms_norm offset " << off;
        Buffer xi = test::clone(x);
        test::run(backend(), rms_norm, xi, w, 1e-6f, off, xi);
        EXPECT_LE(relative_error(xi, yr), 1e-6) << "rms_norm in place";
      }
      test::run(test::ref(), rms_norm_gated, x, z, w, 1e-6f, yr);
      test::run(backend(), rms_norm_gated, x, z, w, 1e-6f, yc);
      EXPECT_LE(relative_error(yc, yr), 1e-6) << "rms_norm_gated";
      Buffer xi = test::clone(x);
      test::run(backend(), rms_norm_gated, xi, z, w, 1e-6f, xi);
      EXPECT_LE(relative_error(xi, yr), 1e-6) << "rms_norm_gated in place";
      test::run(test::ref(), l2_norm, x, 1e-6f, 0.125f, yr);
      test::run(backend(), l2_norm, x, 1e-6f, 0.125f, yc);
      EXPECT_LE(relative_error(yc, yr), 1e-6) << "l2_norm";
    }
}

}  // namespace
}  // namespace kapitsa::ops
