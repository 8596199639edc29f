// Tests of matmul (y = x·wᵀ): ref pinned on a hand-computed product; cpu against ref for f32/f16/bf16
// weights over shapes that hit every code path (T = 1 GEMV, small and large token blocks, K not a
// multiple of the SIMD width, N not a multiple of the row block).
#include "op_test_helpers.h"

#include <cmath>
#include <vector>

namespace kapitsa::ops {
namespace {
using kapitsa::testing::relative_error;
using test::Rng;

TEST(Matmul, RefHandValues) {
  float x[2 * 3] = {1, 2, 3, -1, 0, 2};
  float w[2 * 3] = {1, 0, -1, 0.5f, 0.5f, 0.5f};
  float y[4];
  test::run(test::ref(), matmul, Tensor(DType::f32, {2, 3}, x), Linear(Tensor(DType::f32, {2, 3}, w)),
            Tensor(DType::f32, {2, 2}, y));
  EXPECT_FLOAT_EQ(y[0], -2); EXPECT_FLOAT_EQ(y[1], 3); EXPECT_FLOAT_EQ(y[2], -3); EXPECT_FLOAT_EQ(y[3], 0.5f);
  // bf16 weights: 0x3f80 = 1, 0xc000 = -2
  uint16_t wb[3] = {0x3f80, 0xc000, 0x3f80};
  test::run(test::ref(), matmul, Tensor(DType::f32, {2, 3}, x), Linear(Tensor(DType::bf16, {1, 3}, wb)),
            Tensor(DType::f32, {2, 1}, y));
  EXPECT_FLOAT_EQ(y[0], 0); EXPECT_FLOAT_EQ(y[1], 1);
}

TEST_P(OnBackend, MatmulMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  struct Case {
    int64_t T, K, N;
  };
  const std::vector<Case> cases = {{1, 1, 1},    {1, 15, 3},   {1, 64, 17},   {1, 1031, 130}, {2, 33, 9},
                                   {3, 256, 31}, {7, 100, 65}, {8, 64, 64},   {16, 1000, 23}, {65, 129, 67},
                                   {64, 1024, 40}, {130, 48, 5}, {1, 4096, 300}, {1, 9224, 33}, {40, 2100, 35}};
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const Case& c : cases) {
      SCOPED_TRACE(fmt::format("{} T={} K={} N={}", dtype_name(dt), c.T, c.K, c.N));
      Buffer x = test::random_f32(r, {c.T, c.K});
      Buffer w = kapitsa::testing::random_buffer(r.gen, dt, {c.N, c.K});
      Buffer yr = Buffer::zeros(DType::f32, {c.T, c.N});
      Buffer yc = Buffer::allocate(DType::f32, {c.T, c.N});
      for (int64_t i = 0; i < c.T * c.N; ++i) yc.f32()[i] = 1e30f;  // garbage: y is written, not accumulated
      test::run(test::ref(), matmul, x, Linear(w), yr);
      test::run(backend(), matmul, x, Linear(w), yc);
      const double scale = std::sqrt(static_cast<double>(c.K) / 9.0) + 1e-3;  // of the dot products
      if (test::cuda_x16(backend(), dt, c.T)) {
        // x to 16 bits: each output within 2^-16 of its Σ|x·w| (and f32's accumulation) of ref's.
        for (int64_t t = 0; t < c.T; ++t)
          for (int64_t n = 0; n < c.N; ++n) {
            double mag = 0;
            for (int64_t k = 0; k < c.K; ++k)
              mag += std::abs(x.f32()[t * c.K + k] * kapitsa::testing::element(w.tensor(), n * c.K + k));
            ASSERT_NEAR(yc.f32()[t * c.N + n], yr.f32()[t * c.N + n], mag / 65536 + 1e-5 * scale) << "t=" << t << " n=" << n;
          }
        continue;
      }
      // f32 accumulation vs double: error grows like sqrt(K)·eps relative to the row norm.
      // Over many outputs: the relative error (few outputs may cancel to near zero).
      if (c.T * c.N >= 64) {
        EXPECT_LE(relative_error(yc, yr), 2e-6);
      }
      // every element, relative to the scale of the dot products (≈ sqrt(K/9))
      EXPECT_LE(kapitsa::testing::max_abs_diff(yc, yr) / scale, 1e-5);
    }
}

// Every token count of the decode GEMV (2 … 8 rows of x) with K a multiple of 8 (the 16-byte weight
// loads) but not of a warp's 256-element step, and N not a multiple of the 4 outputs a warp computes
// nor of a block's outputs: cuda's multi-row GEMV, its tails and its last partial warp against ref.
TEST_P(OnBackend, MatmulFewTokensMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (int64_t T = 2; T <= 8; ++T)
      for (const int64_t K : {int64_t{296}, int64_t{2056}}) {
        const int64_t N = 4 * 8 * 3 + T;  // 3 full blocks of 8 warps × 4 outputs, then T more
        SCOPED_TRACE(fmt::format("{} T={} K={} N={}", dtype_name(dt), T, K, N));
        Buffer x = test::random_f32(r, {T, K});
        Buffer w = kapitsa::testing::random_buffer(r.gen, dt, {N, K});
        Buffer yr = Buffer::zeros(DType::f32, {T, N});
        Buffer yc = Buffer::allocate(DType::f32, {T, N});
        for (int64_t i = 0; i < T * N; ++i) yc.f32()[i] = std::nanf("");  // every output must be written
        test::run(test::ref(), matmul, x, Linear(w), yr);
        test::run(backend(), matmul, x, Linear(w), yc);
        EXPECT_LE(relative_error(yc, yr), 2e-6);
        const double scale = std::sqrt(static_cast<double>(K) / 9.0);
        EXPECT_LE(kapitsa::testing::max_abs_diff(yc, yr) / scale, 1e-5);
      }
}

// matmul_many: several weights on one x equal one matmul each (ref). Five parts (cuda launches four at a
// time), row counts that are not multiples of a block's outputs (one has a single row), token counts of
// the one-token and the multi-row GEMV and of cuBLAS, K aligned for 16-byte loads and not; then weights
// of two dtypes (one matmul each). Outputs start as NaN: every one must be written.
TEST_P(OnBackend, MatmulManyEqualsOneMatmulEach) {
  Rng r;
  SCOPED_TRACE(r.trace());
  auto check = [&](int64_t T, int64_t K, const std::vector<DType>& dts, const std::vector<int64_t>& Ns) {
    SCOPED_TRACE(fmt::format("{} T={} K={} parts={}", dtype_name(dts[0]), T, K, Ns.size()));
    const Buffer x = test::random_f32(r, {T, K});
    std::vector<Buffer> wb, yrb, ycb;
    std::vector<Linear> w;
    std::vector<Tensor> yr, yc;
    for (size_t i = 0; i < Ns.size(); ++i) {
      wb.push_back(kapitsa::testing::random_buffer(r.gen, dts[i], {Ns[i], K}));
      yrb.push_back(Buffer::zeros(DType::f32, {T, Ns[i]}));
      ycb.push_back(Buffer::allocate(DType::f32, {T, Ns[i]}));
      for (int64_t j = 0; j < T * Ns[i]; ++j) ycb.back().f32()[j] = std::nanf("");
    }
    for (size_t i = 0; i < Ns.size(); ++i) w.push_back(Linear(wb[i])), yr.push_back(yrb[i].tensor()), yc.push_back(ycb[i].tensor());
    for (size_t i = 0; i < Ns.size(); ++i) test::run(test::ref(), matmul, x, w[i], yr[i]);
    test::run(backend(), matmul_many, x, w, yc);
    const double scale = std::sqrt(static_cast<double>(K) / 9.0);
    for (size_t i = 0; i < Ns.size(); ++i) {
      if (T * Ns[i] >= 64) {
        EXPECT_LE(relative_error(ycb[i], yrb[i]), 2e-6) << "part " << i;
      }
      EXPECT_LE(kapitsa::testing::max_abs_diff(ycb[i], yrb[i]) / scale, 1e-5) << "part " << i;
    }
  };
  const std::vector<int64_t> Ns = {70, 1, 33, 130, 9};
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (int64_t T : {1, 3, 8, 12})
      for (int64_t K : {264, 100}) check(T, K, std::vector<DType>(Ns.size(), dt), Ns);
  check(1, 256, {DType::bf16, DType::f32, DType::bf16}, {40, 24, 8});
}

// The cases of the matmuls with an activation (matmul_swiglu, matmul_relu_squared): each weight dtype; one
// token, a few and more than cuda's GEMVs take; K of whole 16-byte loads and not. run_case(dt, T, K, x)
// with x: [T, K] fresh random.
template <typename Case>
void for_each_activation_case(Rng& r, Case run_case) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (int64_t T : {1, 3, 12})
      for (int64_t K : {264, 3328, 100}) {
        SCOPED_TRACE(fmt::format("{} T={} K={}", dtype_name(dt), T, K));
        run_case(dt, T, K, test::random_f32(r, {T, K}));
      }
}

// [rows, cols] f32 of NaN: an output the op must overwrite everywhere.
Buffer nan_output(int64_t rows, int64_t cols) {
  Buffer y = Buffer::allocate(DType::f32, {rows, cols});
  for (int64_t j = 0; j < rows * cols; ++j) y.f32()[j] = std::nanf("");
  return y;
}

// matmul_swiglu against ref's matmul, matmul, silu_mul: one token (the GPU's fused GEMV; K of one round
// of loads and of several, a K that is not a multiple of 8: the fallback), a few tokens and a prefill
// batch (matmul_many and silu_mul), each weight dtype; matmul's relative tolerance.
TEST_P(OnBackend, MatmulSwigluMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for_each_activation_case(r, [&](DType dt, int64_t T, int64_t K, const Buffer& x) {
    const int64_t I = 75;
    const Buffer wg = kapitsa::testing::random_buffer(r.gen, dt, {I, K}), wu = kapitsa::testing::random_buffer(r.gen, dt, {I, K});
    Buffer g = Buffer::zeros(DType::f32, {T, I}), u = Buffer::zeros(DType::f32, {T, I});
    test::run(test::ref(), matmul, x, Linear(wg), g);
    test::run(test::ref(), matmul, x, Linear(wu), u);
    test::run(test::ref(), silu_mul, g, u, g);
    Buffer y = nan_output(T, I), scratch = Buffer::zeros(DType::f32, {T, I});
    test::run(backend(), matmul_swiglu, x, Linear(wg), Linear(wu), scratch, y);
    EXPECT_LE(relative_error(y, g), 2e-6);
    // Each output is a product of two dot products of ~√(K/3) each: errors scale with K, not √K.
    EXPECT_LE(kapitsa::testing::max_abs_diff(y, g) / (static_cast<double>(K) / 9.0), 5e-5);
  });
}

// matmul_relu_squared is the backend's own matmul then relu_squared, bit for bit (on cuda relu² in the
// GEMV's stores for 1 and 3 tokens, cuBLAS and the relu² pass for 12), each weight dtype; and relu² is
// applied: some products are negative (0 out), some positive.
TEST_P(OnBackend, MatmulReluSquaredIsMatmulThenReluSquared) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for_each_activation_case(r, [&](DType dt, int64_t T, int64_t K, const Buffer& x) {
    const int64_t N = 75;
    const Buffer w = kapitsa::testing::random_buffer(r.gen, dt, {N, K});
    Buffer plain = Buffer::zeros(DType::f32, {T, N}), expected = Buffer::zeros(DType::f32, {T, N});
    test::run(backend(), matmul, x, Linear(w), plain);
    test::run(backend(), relu_squared, plain, expected);
    Buffer y = nan_output(T, N);
    test::run(backend(), matmul_relu_squared, x, Linear(w), y);
    int64_t positive = 0;
    for (int64_t j = 0; j < T * N; ++j) {
      ASSERT_EQ(y.f32()[j], expected.f32()[j]) << "at " << j;
      positive += plain.f32()[j] > 0;
    }
    EXPECT_GT(positive, 0);
    EXPECT_LT(positive, T * N);
  });
}

// The AMX bf16 GEMM (the cpu's avx512 level on Intel CPUs with AMX, matmul_amx.cpp) called directly,
// against ref: token counts around its 16-token tiles and 64-token work items, rows around its 16-row
// tiles (a zero-padded last block, a single block), K of one and of many 32-wide steps; matmul's
// tolerances (x is split into three bf16 parts, so the f32 accuracy holds). Skips, saying why, on a CPU
// without usable AMX (every AMD CPU, Intel before Sapphire Rapids) — CI's machine; the GPU machine's
// Xeon has it (docs/decisions.md "AMX").
TEST(AmxBf16, GemmMatchesRef) {
#if defined(__x86_64__)
  using cpu::Level;
  if (cpu::backend_for(Level::avx512) == nullptr)
    GTEST_SKIP() << "no avx512 level here (" << test::level_skip_reason(Level::avx512) << ")";
  if (!KAPITSA_CPU_AT(Level::avx512, amx_bf16_usable)())
    GTEST_SKIP() << "AMX not usable here: " << KAPITSA_CPU_AT(Level::avx512, amx_status)();
  Rng r;
  SCOPED_TRACE(r.trace());
  struct Case {
    int64_t T, K, N;
  };
  for (const Case& c : std::vector<Case>{{16, 32, 16}, {17, 64, 33}, {64, 2560, 47}, {100, 96, 5}, {130, 1024, 100},
                                         {33, 4096, 64}, {1, 64, 20}}) {
    SCOPED_TRACE(fmt::format("T={} K={} N={}", c.T, c.K, c.N));
    const Buffer x = test::random_f32(r, {c.T, c.K});
    const Buffer w = kapitsa::testing::random_buffer(r.gen, DType::bf16, {c.N, c.K});
    Buffer yr = Buffer::zeros(DType::f32, {c.T, c.N});
    Buffer ya = Buffer::allocate(DType::f32, {c.T, c.N});
    for (int64_t i = 0; i < c.T * c.N; ++i) ya.f32()[i] = std::nanf("");  // every output must be written
    test::run(test::ref(), matmul, x, Linear(w), yr);
    KAPITSA_CPU_AT(Level::avx512, matmul_amx_bf16)(x.f32(), w.tensor().data_as<const uint16_t>(), ya.f32(), c.T, c.K, c.N);
    if (c.T * c.N >= 64) {
      EXPECT_LE(relative_error(ya, yr), 2e-6);
    }
    EXPECT_LE(kapitsa::testing::max_abs_diff(ya, yr) / (std::sqrt(static_cast<double>(c.K) / 9.0) + 1e-3), 1e-5);
  }
#else
  GTEST_SKIP() << "AMX is x86-64 only";
#endif
}

// Each row of a matmul over T tokens equals, bit for bit, the same token's row alone, for every dense
// weight dtype, so a speculative step gives exactly the logits of plain decoding: on cpu below 64
// tokens (the GEMV and the dot-product tiles sum each output in one order), on cuda up to
// kGemvMaxTokens (the GEMV kernels form each token's sums in the one-token order). K and N off every
// vector and tile width; on cuda also K a multiple of 16 bytes (the vectorised kernels) and N past a
// block's rows.
TEST_P(OnBackend, DenseRowsOfSeveralTokensEqualEachTokenAlone) {
  const bool cuda = backend().name == "cuda";
  const std::vector<int64_t> token_counts = cuda ? std::vector<int64_t>{2, 3, 5, 8} : std::vector<int64_t>{2, 5, 16, 17, 33, 63};
  Rng r;
  SCOPED_TRACE(r.trace());
  for (DType dt : {DType::bf16, DType::f32, DType::f16})
    for (int64_t T : token_counts)
      for (bool vectorised : {false, true}) {
        if (vectorised && !cuda) continue;
        int64_t K = 64 + static_cast<int64_t>(r.gen() % 1100), N = 1 + static_cast<int64_t>(r.gen() % 70);
        if (vectorised) K = 8 * (8 + static_cast<int64_t>(r.gen() % 600)), N += 40;
        SCOPED_TRACE(fmt::format("{} T={} K={} N={}", dtype_name(dt), T, K, N));
        const Buffer x = test::random_f32(r, {T, K});
        const Buffer w = kapitsa::testing::random_buffer(r.gen, dt, {N, K});
        // What the backend claims (ops::matmul_invariant_rows: the engine keeps speculative steps within
        // it) is what this test checks.
        ASSERT_EQ(backend().matmul_invariant_rows(Linear(w)), token_counts.back());
        Buffer y = Buffer::allocate(DType::f32, {T, N}), alone = Buffer::allocate(DType::f32, {1, N});
        test::run(backend(), matmul, x, Linear(w), y);
        for (int64_t t = 0; t < T; ++t) {
          test::run(backend(), matmul, x.tensor().rows(t, t + 1), Linear(w), alone);
          for (int64_t n = 0; n < N; ++n) ASSERT_EQ(y.f32()[t * N + n], alone.f32()[n]) << "t=" << t << " n=" << n;
        }
      }
}

// The same for the decode step's fused forms, matmul_many (on cuda several weights in one launch; one
// token: two rows a warp for short rows) and matmul_swiglu (on cuda for one token gate and up in one
// kernel with the activation in its epilogue; more: matmul_many and silu_mul), 2–8 tokens against each
// token alone.
TEST_P(OnBackend, DenseFusedRowsOfSeveralTokensEqualEachTokenAlone) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (int64_t K : {int64_t{2560}, 8 * (8 + static_cast<int64_t>(r.gen() % 800))})
    for (int64_t T : {2, 4, 7, 8}) {
      const int64_t N = 33 + static_cast<int64_t>(r.gen() % 300), N2 = 1 + static_cast<int64_t>(r.gen() % 40);
      SCOPED_TRACE(fmt::format("T={} K={} N={} N2={}", T, K, N, N2));
      const Buffer x = test::random_f32(r, {T, K});
      const Buffer wa = kapitsa::testing::random_buffer(r.gen, DType::bf16, {N, K});
      const Buffer wb = kapitsa::testing::random_buffer(r.gen, DType::bf16, {N, K});
      const Buffer wc = kapitsa::testing::random_buffer(r.gen, DType::bf16, {N2, K});
      Buffer ya = Buffer::allocate(DType::f32, {T, N}), yc = Buffer::allocate(DType::f32, {T, N2});
      Buffer ys = Buffer::allocate(DType::f32, {T, N}), up = Buffer::allocate(DType::f32, {T, N});
      Buffer a1 = Buffer::allocate(DType::f32, {1, N}), c1 = Buffer::allocate(DType::f32, {1, N2});
      Buffer s1 = Buffer::allocate(DType::f32, {1, N}), up1 = Buffer::allocate(DType::f32, {1, N});
      const Linear many[] = {Linear(wa), Linear(wc)};
      test::run(backend(), matmul_many, x, std::span<const Linear>(many), std::vector<Tensor>{ya.tensor(), yc.tensor()});
      test::run(backend(), matmul_swiglu, x, Linear(wa), Linear(wb), up, ys);
      for (int64_t t = 0; t < T; ++t) {
        const Tensor xt = x.tensor().rows(t, t + 1);
        test::run(backend(), matmul_many, xt, std::span<const Linear>(many), std::vector<Tensor>{a1.tensor(), c1.tensor()});
        test::run(backend(), matmul_swiglu, xt, Linear(wa), Linear(wb), up1, s1);
        for (int64_t n = 0; n < N; ++n) {
          ASSERT_EQ(ya.f32()[t * N + n], a1.f32()[n]) << "matmul_many t=" << t << " n=" << n;
          ASSERT_EQ(ys.f32()[t * N + n], s1.f32()[n]) << "matmul_swiglu t=" << t << " n=" << n;
        }
        for (int64_t n = 0; n < N2; ++n) ASSERT_EQ(yc.f32()[t * N2 + n], c1.f32()[n]) << "matmul_many (2nd) t=" << t << " n=" << n;
      }
    }
}

TEST_P(OnBackend, MatmulAcceptsFlattenedLeadingDims) {
  Rng r;
  SCOPED_TRACE(r.trace());
  Buffer x = test::random_f32(r, {3, 5, 40});
  Buffer w = kapitsa::testing::random_buffer(r.gen, DType::bf16, {24, 40});
  Buffer yr = Buffer::zeros(DType::f32, {3, 5, 24}), yc = Buffer::zeros(DType::f32, {15, 24});
  test::run(test::ref(), matmul, x, Linear(w), yr);
  test::run(backend(), matmul, x, Linear(w), yc);
  EXPECT_LE(relative_error(yc, yr), 2e-6);
}

}  // namespace
}  // namespace kapitsa::ops
