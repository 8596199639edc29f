// Tests of RoPE and causal GQA attention: ref pinned on hand-computed cases (a single key returns v,
// two keys mix by softmax weights, RoPE rotates by pos·inv_freq, future keys are ignored); cpu
// against ref on random inputs (odd head dims, GQA ratios, decode and prefill, queries split in
// pieces equal one call); paged attention (ref and cpu) against the contiguous op on shuffled pages.
#include "op_test_helpers.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <cmath>
#include <numeric>
#include <vector>

namespace kapitsa::ops {
namespace {
using kapitsa::testing::relative_error;
using test::Rng;

// inv_freq_i = theta^(-2i/rotary_dim), as models/layers/rope.h computes it (without bf16 rounding).
std::vector<float> inv_freq(int rotary_dim, float theta) {
  std::vector<float> f(static_cast<size_t>(rotary_dim / 2));
  for (int i = 0; i < rotary_dim / 2; ++i) f[static_cast<size_t>(i)] = static_cast<float>(std::pow(theta, -2.0 * i / rotary_dim));
  return f;
}

TEST(Rope, RefRotatesByKnownAngle) {
  // D = 6, rotary_dim = 4: pairs (0, 2) with inv_freq 1 and (1, 3) with inv_freq 100^(-1/2) = 0.1.
  float x[6] = {1, 1, 0, 0, 7, 8};
  int32_t pos[1] = {10};
  test::run(test::ref(), rope_neox, Tensor(DType::f32, {1, 1, 6}, x), std::span<const int32_t>(pos), inv_freq(4, 100.0f));
  EXPECT_NEAR(x[0], std::cos(10.0), 1e-6);
  EXPECT_NEAR(x[2], std::sin(10.0), 1e-6);
  EXPECT_NEAR(x[1], std::cos(1.0), 1e-6);
  EXPECT_NEAR(x[3], std::sin(1.0), 1e-6);
  EXPECT_EQ(x[4], 7.0f);  // beyond rotary_dim: untouched
  EXPECT_EQ(x[5], 8.0f);
}

TEST(Rope, RefPositionZeroIsIdentityAndNormPreserved) {
  Rng r;
  SCOPED_TRACE(r.trace());
  Buffer x = test::random_f32(r, {3, 2, 256});
  Buffer y = test::clone(x);
  std::vector<int32_t> pos = {0, 174, 100000};
  test::run(test::ref(), rope_neox, y, pos, inv_freq(64, 1e7f));
  for (int64_t i = 0; i < 2 * 256; ++i) ASSERT_EQ(y.f32()[i], x.f32()[i]);  // angle 0
  for (int64_t row = 2; row < 6; ++row) {  // rotation keeps each pair's norm
    double a = 0, b = 0;
    for (int i = 0; i < 256; ++i) {
      a += double(x.f32()[row * 256 + i]) * x.f32()[row * 256 + i];
      b += double(y.f32()[row * 256 + i]) * y.f32()[row * 256 + i];
    }
    EXPECT_NEAR(a, b, 1e-4 * a);
  }
}

TEST_P(OnBackend, RopeMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (auto [T, H, D, rd] : std::vector<std::array<int, 4>>{{1, 1, 8, 8}, {7, 3, 256, 64}, {65, 2, 128, 32}, {5, 4, 34, 18}}) {
    SCOPED_TRACE(fmt::format("T={} H={} D={} rd={}", T, H, D, rd));
    Buffer x = test::random_f32(r, {T, H, D});
    std::vector<int32_t> pos(static_cast<size_t>(T));
    std::uniform_int_distribution<int32_t> pick(0, 300000);
    for (auto& p : pos) p = pick(r.gen);
    pos[0] = 174;
    Buffer a = test::clone(x), b = test::clone(x);
    test::run(test::ref(), rope_neox, a, pos, inv_freq(rd, 1e7f));
    test::run(backend(), rope_neox, b, pos, inv_freq(rd, 1e7f));
    EXPECT_LE(relative_error(b, a), 1e-6);
    EXPECT_LE(kapitsa::testing::max_abs_diff(b, a), 1e-6);
  }
}

TEST(Attention, RefSingleKeyReturnsV) {
  float q[4] = {3, -1, 2, 0.5f}, k[2] = {0.3f, 9}, v[2] = {-4, 0.25f}, o[4];
  // Hq = 2, Hkv = 1, D = 2, one key
  test::run(test::ref(), attention, Tensor(DType::f32, {1, 2, 2}, q), Tensor(DType::f32, {1, 1, 2}, k),
            Tensor(DType::f32, {1, 1, 2}, v), 0, 0.7f, Tensor(DType::f32, {1, 2, 2}, o));
  EXPECT_FLOAT_EQ(o[0], -4); EXPECT_FLOAT_EQ(o[1], 0.25f); EXPECT_FLOAT_EQ(o[2], -4); EXPECT_FLOAT_EQ(o[3], 0.25f);
}

TEST(Attention, RefTwoKeysMixBySoftmaxAndIgnoresFuture) {
  // Query at position 1 sees keys 0 and 1 (key 2 exists but is in the future).
  float q[2] = {1, 0}, k[6] = {0, 0, 2, 0, 100, 0}, v[6] = {1, 0, 0, 1, 50, 50}, o[2];
  test::run(test::ref(), attention, Tensor(DType::f32, {1, 1, 2}, q), Tensor(DType::f32, {3, 1, 2}, k),
            Tensor(DType::f32, {3, 1, 2}, v), 1, 0.5f, Tensor(DType::f32, {1, 1, 2}, o));
  const double p1 = std::exp(1.0) / (1 + std::exp(1.0));  // scores 0 and 2·0.5
  EXPECT_NEAR(o[0], 1 - p1, 1e-6);
  EXPECT_NEAR(o[1], p1, 1e-6);
}

struct AttnCase {
  int64_t T, Hq, Hkv, D, q_pos0, extra_keys;
};

TEST_P(OnBackend, AttentionMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  const std::vector<AttnCase> cases = {{1, 1, 1, 8, 0, 0},     {1, 8, 2, 64, 37, 5},   {1, 16, 4, 256, 700, 0},
                                       {7, 6, 2, 33, 0, 3},    {7, 4, 4, 128, 11, 0},  {65, 4, 1, 64, 0, 0},
                                       {65, 6, 3, 256, 90, 7}, {200, 2, 2, 16, 5, 0},  {3, 3, 1, 1, 2, 1},
                                       // decode with few kv heads and long history: keys split across tasks
                                       {1, 4, 1, 64, 1000, 0}, {2, 2, 1, 32, 600, 3}, {1, 8, 2, 256, 3000, 0}};
  for (const AttnCase& c : cases) {
    SCOPED_TRACE(fmt::format("T={} Hq={} Hkv={} D={} pos0={}", c.T, c.Hq, c.Hkv, c.D, c.q_pos0));
    const int64_t S = c.q_pos0 + c.T + c.extra_keys;
    Buffer q = test::random_f32(r, {c.T, c.Hq, c.D}, -2, 2);
    Buffer k = test::random_f32(r, {S, c.Hkv, c.D}, -2, 2);
    Buffer v = test::random_f32(r, {S, c.Hkv, c.D});
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    Buffer orf = Buffer::zeros(DType::f32, {c.T, c.Hq, c.D}), oc = Buffer::zeros(DType::f32, {c.T, c.Hq, c.D});
    test::run(test::ref(), attention, q, k, v, c.q_pos0, scale, orf);
    test::run(backend(), attention, q, k, v, c.q_pos0, scale, oc);
    EXPECT_LE(relative_error(oc, orf), 1e-5);
    // Queries in pieces (with the matching q_pos0) equal one call.
    Buffer op = Buffer::zeros(DType::f32, {c.T, c.Hq, c.D});
    for (int64_t t0 = 0; t0 < c.T;) {
      const int64_t n = std::min<int64_t>(c.T - t0, 1 + (t0 % 5) * 3);
      test::run(backend(), attention, Tensor(q.tensor()).rows(t0, t0 + n), k, v, c.q_pos0 + t0, scale,
                Tensor(op.tensor()).rows(t0, t0 + n));
      t0 += n;
    }
    EXPECT_LE(relative_error(op, orf), 1e-5) << "in pieces";
    // Keys beyond the last query's position must not matter.
    if (c.extra_keys > 0) {
      for (int64_t i = (c.q_pos0 + c.T) * c.Hkv * c.D; i < S * c.Hkv * c.D; ++i) k.f32()[i] = 1e3f, v.f32()[i] = 1e3f;
      test::run(backend(), attention, q, k, v, c.q_pos0, scale, op);
      EXPECT_LE(relative_error(op, orf), 1e-5) << "future keys changed the result";
    }
  }
}

// Paged KV: the history of a random case scattered over shuffled pages of a larger pool (the other
// pages hold garbage) must give the contiguous result: ref paged vs ref contiguous ≤ 1e-6 (same
// arithmetic after a gather), cpu paged vs ref ≤ 1e-5 (as CpuMatchesRef), and cpu paged vs cpu
// contiguous ≤ 1e-6 (the same kernel; key tiles only stop at page boundaries).
TEST_P(OnBackend, AttentionPagedMatchesContiguous) {
  Rng r;
  SCOPED_TRACE(r.trace());
  struct PagedCase {
    int64_t T, Hq, Hkv, D, q_pos0, page;
  };
  const std::vector<PagedCase> cases = {{1, 1, 1, 8, 0, 16},    {1, 8, 2, 64, 37, 16},  {1, 16, 4, 256, 700, 16},
                                        {7, 6, 2, 33, 0, 3},    {7, 4, 4, 128, 11, 32}, {65, 4, 1, 64, 0, 16},
                                        {65, 6, 3, 128, 90, 7}, {3, 3, 1, 1, 2, 1},     {1, 4, 1, 64, 1000, 16},
                                        {2, 2, 1, 32, 600, 32}, {40, 8, 2, 64, 15, 16}, {1, 8, 2, 256, 3000, 16}};
  for (const PagedCase& c : cases) {
    SCOPED_TRACE(fmt::format("T={} Hq={} Hkv={} D={} pos0={} P={}", c.T, c.Hq, c.Hkv, c.D, c.q_pos0, c.page));
    const int64_t n_kv = c.q_pos0 + c.T, P = c.page, used = (n_kv + P - 1) / P, n_pages = 2 * used + 3;
    Buffer q = test::random_f32(r, {c.T, c.Hq, c.D}, -2, 2);
    Buffer k = test::random_f32(r, {n_kv, c.Hkv, c.D}, -2, 2);
    Buffer v = test::random_f32(r, {n_kv, c.Hkv, c.D});
    Buffer k_pages = test::random_f32(r, {n_pages, P, c.Hkv, c.D}, 50, 60);  // garbage outside the table
    Buffer v_pages = test::random_f32(r, {n_pages, P, c.Hkv, c.D}, 50, 60);
    std::vector<int32_t> ids(static_cast<size_t>(n_pages));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), r.gen);
    const std::vector<int32_t> table(ids.begin(), ids.begin() + used);
    const int64_t row = c.Hkv * c.D;
    for (int64_t s = 0; s < n_kv; ++s)
      for (int64_t i = 0; i < row; ++i) {
        const int64_t at = (table[static_cast<size_t>(s / P)] * P + s % P) * row + i;
        k_pages.f32()[at] = k.f32()[s * row + i];
        v_pages.f32()[at] = v.f32()[s * row + i];
      }
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    const Shape shape{c.T, c.Hq, c.D};
    Buffer o_ref = Buffer::zeros(DType::f32, shape), o_ref_paged = Buffer::zeros(DType::f32, shape);
    Buffer o_cpu = Buffer::zeros(DType::f32, shape), o_cpu_paged = Buffer::zeros(DType::f32, shape);
    test::run(test::ref(), attention, q, k, v, c.q_pos0, scale, o_ref);
    test::run(backend(), attention, q, k, v, c.q_pos0, scale, o_cpu);
    test::run(test::ref(), attention_paged, q, k_pages, v_pages, table, n_kv, c.q_pos0, scale, o_ref_paged);
    test::run(backend(), attention_paged, q, k_pages, v_pages, table, n_kv, c.q_pos0, scale, o_cpu_paged);
    EXPECT_LE(relative_error(o_ref_paged, o_ref), 1e-6);
    EXPECT_LE(relative_error(o_cpu_paged, o_ref), 1e-5);
    EXPECT_LE(relative_error(o_cpu_paged, o_cpu), 1e-6);
    // Queries in pieces against the same table (a prefill in chunks) equal one call.
    Buffer o_pieces = Buffer::zeros(DType::f32, shape);
    for (int64_t t0 = 0; t0 < c.T;) {
      const int64_t n = std::min<int64_t>(c.T - t0, 1 + (t0 % 4) * 5);
      test::run(backend(), attention_paged, Tensor(q.tensor()).rows(t0, t0 + n), k_pages, v_pages, table,
                c.q_pos0 + t0 + n, c.q_pos0 + t0, scale, Tensor(o_pieces.tensor()).rows(t0, t0 + n));
      t0 += n;
    }
    EXPECT_LE(relative_error(o_pieces, o_ref), 1e-5) << "in pieces";
  }
}

// write_paged_rows: rows land at positions pos0 … pos0 + T - 1 through a shuffled block table (starting
// mid-page, crossing pages), converted to the pages' dtype exactly as ref converts (bit for bit);
// every other page row is untouched.
TEST_P(OnBackend, WritePagedRowsEqualsRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (auto [T, pos0, P] : std::vector<std::array<int64_t, 3>>{{1, 0, 16}, {1, 37, 16}, {20, 5, 8}, {70, 13, 16}}) {
      SCOPED_TRACE(fmt::format("{} T={} pos0={} P={}", dtype_name(dt), T, pos0, P));
      const int64_t Hkv = 3, D = 24, used = (pos0 + T + P - 1) / P, n_pages = used + 4;
      Buffer rows = test::random_f32(r, {T, Hkv, D}, -3, 3);
      Buffer pages = kapitsa::testing::random_buffer(r.gen, dt, {n_pages, P, Hkv, D});
      std::vector<int32_t> ids(static_cast<size_t>(n_pages));
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), r.gen);
      const std::vector<int32_t> table(ids.begin(), ids.begin() + used);
      Buffer want = test::clone(pages), got = test::clone(pages);
      test::run(test::ref(), write_paged_rows, rows, want, table, pos0);
      test::run(backend(), write_paged_rows, rows, got, table, pos0);
      EXPECT_TRUE(test::bit_equal(got, want));
      // Each row where it belongs (widened back, within the dtype's rounding), the rest untouched.
      const int64_t row = Hkv * D, es = static_cast<int64_t>(dtype_size(dt));
      std::vector<bool> written(static_cast<size_t>(n_pages * P), false);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t pos = pos0 + t, slot = table[static_cast<size_t>(pos / P)] * P + pos % P;
        written[static_cast<size_t>(slot)] = true;
        Buffer back = Buffer::allocate(DType::f32, {row});
        test::run(test::ref(), copy, Tensor(dt, {row}, static_cast<uint8_t*>(got.tensor().data()) + slot * row * es),
                  back);
        for (int64_t i = 0; i < row; ++i)
          ASSERT_NEAR(back.f32()[i], rows.f32()[t * row + i], dt == DType::f32 ? 0.0 : 1e-2 * 3) << t << " " << i;
      }
      for (int64_t slot = 0; slot < n_pages * P; ++slot) {
        if (!written[static_cast<size_t>(slot)]) {
          ASSERT_EQ(std::memcmp(static_cast<uint8_t*>(got.tensor().data()) + slot * row * es,
                                static_cast<uint8_t*>(pages.tensor().data()) + slot * row * es,
                                static_cast<size_t>(row * es)),
                    0)
              << "slot " << slot;
        }
      }
    }
}

// KV cache in bf16 / f16: the same history written by write_paged_rows into pages of that dtype. The
// backend on those pages against ref on the same pages (same rounded data) ≤ 1e-5; against f32 pages,
// the rounding of K and V bounds the difference. The output is an average of V rows (|v| ≤ 1), so the
// bound is on the largest absolute difference, in units of max |v| = 1: ≤ 1e-2 for bf16, ≤ 4e-3 for f16
// (largest over 100 seeds × these cases × the three cpu levels: bf16 3.4e-3, f16 4.3e-4).
// (A relative norm failed once in CI: at D = 1 the averages can nearly cancel, leaving ‖o‖ tiny.)
TEST_P(OnBackend, AttentionPagedKvDtypes) {
  Rng r;
  SCOPED_TRACE(r.trace());
  struct Case {
    int64_t T, Hq, Hkv, D, q_pos0, page;
  };
  for (DType dt : {DType::bf16, DType::f16})
    for (const Case& c : std::vector<Case>{{1, 8, 2, 64, 37, 16},
                                           {7, 4, 4, 128, 11, 16},
                                           {65, 6, 3, 128, 90, 7},
                                           {1, 8, 2, 256, 3000, 16},
                                           {3, 3, 1, 1, 2, 1}}) {
      SCOPED_TRACE(fmt::format("{} T={} Hq={} Hkv={} D={} pos0={} P={}", dtype_name(dt), c.T, c.Hq, c.Hkv, c.D,
                               c.q_pos0, c.page));
      const int64_t n_kv = c.q_pos0 + c.T, P = c.page, used = (n_kv + P - 1) / P, n_pages = used + 2;
      Buffer q = test::random_f32(r, {c.T, c.Hq, c.D}, -2, 2);
      Buffer k = test::random_f32(r, {n_kv, c.Hkv, c.D}, -2, 2), v = test::random_f32(r, {n_kv, c.Hkv, c.D});
      std::vector<int32_t> table(static_cast<size_t>(used));
      std::iota(table.begin(), table.end(), 0);
      std::shuffle(table.begin(), table.end(), r.gen);
      Buffer k32 = Buffer::zeros(DType::f32, {n_pages, P, c.Hkv, c.D}),
             v32 = Buffer::zeros(DType::f32, {n_pages, P, c.Hkv, c.D});
      Buffer kh = Buffer::zeros(dt, {n_pages, P, c.Hkv, c.D}), vh = Buffer::zeros(dt, {n_pages, P, c.Hkv, c.D});
      test::run(test::ref(), write_paged_rows, k, k32, table, 0);
      test::run(test::ref(), write_paged_rows, v, v32, table, 0);
      test::run(backend(), write_paged_rows, k, kh, table, 0);
      test::run(backend(), write_paged_rows, v, vh, table, 0);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
      const Shape shape{c.T, c.Hq, c.D};
      Buffer o32 = Buffer::zeros(DType::f32, shape), o_ref = Buffer::zeros(DType::f32, shape);
      Buffer o = Buffer::zeros(DType::f32, shape);
      test::run(test::ref(), attention_paged, q, k32, v32, table, n_kv, c.q_pos0, scale, o32);
      test::run(test::ref(), attention_paged, q, kh, vh, table, n_kv, c.q_pos0, scale, o_ref);
      test::run(backend(), attention_paged, q, kh, vh, table, n_kv, c.q_pos0, scale, o);
      EXPECT_LE(kapitsa::testing::max_abs_diff(o, o_ref), 1e-5);
      const double bound = dt == DType::bf16 ? 1e-2 : 4e-3;
      EXPECT_LE(kapitsa::testing::max_abs_diff(o, o32), bound);
      EXPECT_GT(relative_error(o, o32), 0.0) << "the pages were not rounded";
    }
}

}  // namespace
}  // namespace kapitsa::ops
