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
    for (int64_t D : {1, 15, 128, 256, 1031, 9000}) {  // 9000: wider than cuda's row-in-registers kernel
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

// add_rms_norm: x becomes exactly x + delta (f32 sums, as add), y the RMSNorm of that (as rms_norm).
TEST_P(OnBackend, AddRmsNormIsAddThenNorm) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (int64_t R : {1, 3, 17})
    for (int64_t D : {1, 100, 2560, 4099, 9000})  // 9000: wider than the row-in-registers kernel
      for (float off : {0.0f, 1.0f}) {
        SCOPED_TRACE(fmt::format("R={} D={} offset={}", R, D, off));
        const Buffer x = test::random_f32(r, {R, D}, -3, 3), delta = test::random_f32(r, {R, D}, -3, 3);
        const Buffer w = test::random_f32(r, {D}, -0.5f, 1.5f);
        Buffer sum = Buffer::allocate(DType::f32, {R, D}), y_ref = Buffer::zeros(DType::f32, {R, D});
        for (int64_t i = 0; i < R * D; ++i) sum.f32()[i] = x.f32()[i] + delta.f32()[i];
        test::run(test::ref(), rms_norm, sum, w, 1e-6f, off, y_ref);
        for (const BackendTable* b : {&test::ref(), &backend()}) {
          Buffer xb = test::clone(x), y = Buffer::allocate(DType::f32, {R, D});
          for (int64_t i = 0; i < R * D; ++i) y.f32()[i] = std::nanf("");
          test::run(*b, add_rms_norm, xb, delta, w, 1e-6f, off, y);
          EXPECT_EQ(kapitsa::testing::max_abs_diff(xb, sum), 0.0) << b->name << ": x is not x + delta";
          EXPECT_LE(relative_error(y, y_ref), 1e-6) << b->name;
        }
      }
}

TEST(Norm, AddRmsNormRejectsAliasedTensors) {
  Rng r;
  Buffer x = test::random_f32(r, {2, 8}), w = test::random_f32(r, {8});
  EXPECT_DEATH(test::run(test::ref(), add_rms_norm, x, x, w, 1e-6f, 0.0f, x), "three different tensors");
}

}  // namespace
}  // namespace kapitsa::ops
