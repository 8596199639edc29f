// Tests of rms_norm_group_gated (Mamba-2 output norm, gate first): cpu against ref on random inputs,
// in place, and a hand check that groups are normalised separately and the gate comes first.
#include "op_test_helpers.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kapitsa::ops {
namespace {

using kapitsa::testing::relative_error;
using test::Rng;

TEST_P(OnBackend, RmsNormGroupGatedMatchesRefAndInPlace) {
  Rng r;
  SCOPED_TRACE(r.trace());
  struct Case {
    int64_t R, D, group;
  };
  // (cuda: groups of up to 512 and 1024 in registers, 2000 the loop kernel.)
  for (const Case c : {Case{1, 128, 64}, Case{7, 24, 3}, Case{5, 4096, 512}, Case{3, 40, 40}, Case{2, 4096, 1024},
                       Case{2, 4000, 2000}}) {
    SCOPED_TRACE("D=" + std::to_string(c.D) + " group=" + std::to_string(c.group));
    const Buffer x = test::random_f32(r, {c.R, c.D}, -3.0f, 3.0f), z = test::random_f32(r, {c.R, c.D}, -4.0f, 4.0f);
    const Buffer w = test::random_f32(r, {c.D}, 0.5f, 1.5f);
    Buffer y_ref = Buffer::allocate(DType::f32, {c.R, c.D}), y_cpu = Buffer::allocate(DType::f32, {c.R, c.D});
    test::run(test::ref(), rms_norm_group_gated, x, z, w, c.group, 1e-5f, y_ref);
    test::run(backend(), rms_norm_group_gated, x, z, w, c.group, 1e-5f, y_cpu);
    EXPECT_LE(relative_error(y_cpu, y_ref), 1e-6);
    Buffer inplace = test::clone(x);
    test::run(backend(), rms_norm_group_gated, inplace, z, w, c.group, 1e-5f, inplace);
    EXPECT_LE(relative_error(inplace, y_ref), 1e-6);
  }
}

// Two groups of two: u = x·silu(z); each group scaled by its own rsqrt(mean(u²) + eps).
TEST_P(OnBackend, RmsNormGroupGatedGroupsAreSeparateAndGateFirst) {
  Buffer x = Buffer::allocate(DType::f32, {1, 4}), z = Buffer::allocate(DType::f32, {1, 4});
  Buffer w = Buffer::allocate(DType::f32, {4}), y = Buffer::allocate(DType::f32, {1, 4});
  const float xs[] = {1.0f, 2.0f, 30.0f, -40.0f}, zs[] = {0.5f, -1.0f, 2.0f, 3.0f}, ws[] = {1.0f, 2.0f, 0.5f, 1.0f};
  for (int i = 0; i < 4; ++i) x.f32()[i] = xs[i], z.f32()[i] = zs[i], w.f32()[i] = ws[i];
  double u[4];
  for (int i = 0; i < 4; ++i) u[i] = xs[i] * zs[i] / (1.0 + std::exp(-zs[i]));
  for (const BackendTable* b : {&test::ref(), &backend()}) {
    test::run(*b, rms_norm_group_gated, x, z, w, 2, 1e-5f, y);
    for (int g = 0; g < 2; ++g) {
      const double inv = 1.0 / std::sqrt((u[2 * g] * u[2 * g] + u[2 * g + 1] * u[2 * g + 1]) / 2 + 1e-5);
      for (int i = 2 * g; i < 2 * g + 2; ++i) EXPECT_NEAR(y.f32()[i], u[i] * inv * ws[i], 1e-5) << b->name << " " << i;
    }
  }
}

}  // namespace
}  // namespace kapitsa::ops
