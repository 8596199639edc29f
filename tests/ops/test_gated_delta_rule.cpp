// Tests of the Gated DeltaNet ops: the chunked (WY) form against the token-by-token recurrence, the cpu
// backend against ref, chaining calls with a carried state, and the gates (softplus threshold included).
// Inputs are realistic: q, k L2-normalised rows (q scaled by Dk^-0.5), g in [-2, 0) with some near 0,
// beta in (0, 1), a non-zero initial state. Every test draws a fresh seed and prints it on failure.
#include "op_test_helpers.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace kapitsa::ops {
namespace {

using kapitsa::testing::fresh_seed;
using kapitsa::testing::relative_error;

// A gated delta rule op bound to a backend (test::bound).
using GdnFn = std::function<void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                 const Tensor&, const Tensor&)>;

struct GdnInputs {
  int64_t T, Hk, Hv, Dk, Dv;
  Buffer q, k, v, g, beta, state;  // state: the initial state (never modified; runs copy it)
};

// Rows of N(0,1) values, L2-normalised, times `scale`.
Buffer normalised_rows(std::mt19937_64& rng, Shape shape, int64_t row, float scale) {
  Buffer b = Buffer::allocate(DType::f32, shape);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  float* p = b.f32();
  for (int64_t r = 0; r < shape.numel() / row; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < row; ++i) {
      p[r * row + i] = nd(rng);
      ss += double(p[r * row + i]) * p[r * row + i];
    }
    const float inv = static_cast<float>(scale / std::sqrt(ss + 1e-6));
    for (int64_t i = 0; i < row; ++i) p[r * row + i] *= inv;
  }
  return b;
}

GdnInputs make_inputs(std::mt19937_64& rng, int64_t T, int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv) {
  GdnInputs in{T, Hk, Hv, Dk, Dv, {}, {}, {}, {}, {}, {}};
  in.q = normalised_rows(rng, {T, Hk, Dk}, Dk, static_cast<float>(1.0 / std::sqrt(double(Dk))));
  in.k = normalised_rows(rng, {T, Hk, Dk}, Dk, 1.0f);
  in.v = kapitsa::testing::random_buffer(rng, DType::f32, {T, Hv, Dv}, -1.0f, 1.0f);
  in.g = kapitsa::testing::random_buffer(rng, DType::f32, {T, Hv}, -2.0f, -1e-3f);
  // About one g in four near 0 (almost no decay), so the state and chunk boundaries carry real weight.
  std::uniform_int_distribution<int> pick(0, 3);
  std::uniform_real_distribution<float> tiny(-1e-3f, 0.0f);
  for (int64_t i = 0; i < T * Hv; ++i)
    if (pick(rng) == 0) in.g.f32()[i] = tiny(rng);
  in.beta = kapitsa::testing::random_buffer(rng, DType::f32, {T, Hv}, 0.01f, 0.99f);
  in.state = kapitsa::testing::random_buffer(rng, DType::f32, {Hv, Dk, Dv}, -0.5f, 0.5f);
  return in;
}

struct GdnResult {
  Buffer o, state;
};

// Runs `fn` over the whole sequence in consecutive pieces of the given lengths (the last piece takes
// whatever is left), carrying the state from piece to piece.
GdnResult run_pieces(GdnFn fn, const GdnInputs& in, const std::vector<int64_t>& pieces) {
  GdnResult r{Buffer::zeros(DType::f32, {in.T, in.Hv, in.Dv}), Buffer::allocate(DType::f32, {in.Hv, in.Dk, in.Dv})};
  std::copy_n(in.state.f32(), in.state.tensor().numel(), r.state.f32());
  int64_t t0 = 0;
  for (size_t p = 0; t0 < in.T; ++p) {
    const int64_t t1 = p < pieces.size() ? std::min(in.T, t0 + pieces[p]) : in.T;
    fn(in.q.tensor().rows(t0, t1), in.k.tensor().rows(t0, t1), in.v.tensor().rows(t0, t1),
       in.g.tensor().rows(t0, t1), in.beta.tensor().rows(t0, t1), r.state, r.o.tensor().rows(t0, t1));
    t0 = t1;
  }
  return r;
}

GdnResult run(GdnFn fn, const GdnInputs& in) { return run_pieces(fn, in, {}); }

void expect_close(const GdnResult& got, const GdnResult& want, double tol) {
  EXPECT_LE(relative_error(got.o, want.o), tol) << "output";
  EXPECT_LE(relative_error(got.state, want.state), tol) << "final state";
}

// ---- chunked == recurrent (reference backend) ----------------------------------------------------

TEST(GatedDeltaRule, RefChunkedMatchesRefRecurrent) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (int64_t ratio : {1, 2, 3})
    for (int64_t T : {1, 7, 63, 64, 65, 130, 200}) {
      SCOPED_TRACE(::testing::Message() << "T=" << T << " Hv/Hk=" << ratio);
      const GdnInputs in = make_inputs(rng, T, 2, 2 * ratio, 32, 20);
      const GdnResult rec = run(test::bound(test::ref(), gated_delta_rule_recurrent), in);
      const GdnResult chk = run(test::bound(test::ref(), gated_delta_rule_chunked), in);
      expect_close(chk, rec, 1e-5);
      // The initial state must matter (so a chunked form that ignored it would fail above).
      EXPECT_GT(relative_error(rec.state, in.state), 1e-3);
    }
}

TEST(GatedDeltaRule, RefChunkedMatchesRefRecurrentAtModelHeadSize) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const GdnInputs in = make_inputs(rng, 130, 1, 2, 128, 128);
  expect_close(run(test::bound(test::ref(), gated_delta_rule_chunked), in),
               run(test::bound(test::ref(), gated_delta_rule_recurrent), in), 1e-5);
}

// Two tokens, one head, Dk = Dv = 2, worked by hand from S ← αS; δ = (v − Sᵀk)β; S ← S + kδᵀ; o = Sᵀq.
TEST_P(OnBackend, GatedDeltaRuleRefRecurrentHandComputed) {
  float q[] = {1, 0, 0, 1}, k[] = {1, 0, 0.6f, 0.8f}, v[] = {1, 2, 3, 4};
  float g[] = {std::log(0.5f), 0.0f}, beta[] = {0.5f, 1.0f};
  float s0[] = {2, 0, 0, 2};
  // t=0: S = [[1,0],[0,1]]; u = Sᵀk = (1,0); δ = ((1,2)−(1,0))·0.5 = (0,1); S = [[1,1],[0,1]]; o = Sᵀ(1,0) = (1,1)
  // t=1: S unchanged by α=1; u = Sᵀ(0.6,0.8) = (0.6, 1.4); δ = (3−0.6, 4−1.4) = (2.4, 2.6);
  //      S = [[1+1.44, 1+1.56], [1.92, 1+2.08]] = [[2.44, 2.56], [1.92, 3.08]]; o = Sᵀ(0,1) = (1.92, 3.08)
  const float want_o[] = {1, 1, 1.92f, 3.08f}, want_s[] = {2.44f, 2.56f, 1.92f, 3.08f};
  for (GdnFn fn : {GdnFn(test::bound(test::ref(), gated_delta_rule_recurrent)),
                   GdnFn(test::bound(test::ref(), gated_delta_rule_chunked)),
                   GdnFn(test::bound(backend(), gated_delta_rule_recurrent)),
                   GdnFn(test::bound(backend(), gated_delta_rule_chunked))}) {
    float s[4], o[4];
    std::copy_n(s0, 4, s);
    fn(Tensor(DType::f32, {2, 1, 2}, q), Tensor(DType::f32, {2, 1, 2}, k), Tensor(DType::f32, {2, 1, 2}, v),
       Tensor(DType::f32, {2, 1}, g), Tensor(DType::f32, {2, 1}, beta), Tensor(DType::f32, {1, 2, 2}, s),
       Tensor(DType::f32, {2, 1, 2}, o));
    for (int i = 0; i < 4; ++i) {
      EXPECT_NEAR(o[i], want_o[i], 1e-5) << "o[" << i << "]";
      EXPECT_NEAR(s[i], want_s[i], 1e-5) << "state[" << i << "]";
    }
  }
}

// ---- cpu backend against ref ---------------------------------------------------------------------

TEST_P(OnBackend, GatedDeltaRuleMatchesRef) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  struct Case {
    int64_t T, Hk, Hv, Dk, Dv;
  };
  for (const Case c : {Case{1, 2, 2, 32, 20}, Case{7, 1, 3, 32, 20}, Case{65, 2, 4, 16, 36}, Case{200, 2, 6, 32, 20},
                       Case{1, 2, 4, 128, 128}, Case{130, 1, 2, 128, 128}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << c.T << " Hk=" << c.Hk << " Hv=" << c.Hv << " Dk=" << c.Dk
                                    << " Dv=" << c.Dv);
    const GdnInputs in = make_inputs(rng, c.T, c.Hk, c.Hv, c.Dk, c.Dv);
    const GdnResult want = run(test::bound(test::ref(), gated_delta_rule_recurrent), in);
    {
      SCOPED_TRACE("cpu recurrent");
      expect_close(run(test::bound(backend(), gated_delta_rule_recurrent), in), want, 1e-5);
    }
    {
      SCOPED_TRACE("cpu chunked");
      expect_close(run(test::bound(backend(), gated_delta_rule_chunked), in), want, 1e-5);
    }
  }
}

// ---- chaining calls with a carried state ---------------------------------------------------------

TEST_P(OnBackend, GatedDeltaRulePiecesCarryState) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const GdnInputs in = make_inputs(rng, 200, 2, 4, 32, 20);
  const GdnResult whole = run(test::bound(test::ref(), gated_delta_rule_recurrent), in);
  const std::vector<std::vector<int64_t>> splits = {{7, 64}, {1, 7, 63, 64, 65}, {64, 64, 64}};
  for (GdnFn fn : {GdnFn(test::bound(test::ref(), gated_delta_rule_chunked)),
                   GdnFn(test::bound(test::ref(), gated_delta_rule_recurrent)),
                   GdnFn(test::bound(backend(), gated_delta_rule_chunked)),
                   GdnFn(test::bound(backend(), gated_delta_rule_recurrent))})
    for (const auto& pieces : splits) {
      SCOPED_TRACE(::testing::Message() << "pieces starting " << pieces[0] << ", " << pieces[1]);
      expect_close(run_pieces(fn, in, pieces), whole, 1e-5);
    }
  // Decode after prefill, as the model does it: chunked over a prompt, then recurrent token by token.
  GdnResult mixed{Buffer::zeros(DType::f32, {in.T, in.Hv, in.Dv}), Buffer::allocate(DType::f32, {in.Hv, in.Dk, in.Dv})};
  std::copy_n(in.state.f32(), in.state.tensor().numel(), mixed.state.f32());
  for (int64_t t0 = 0; t0 < in.T;) {
    const int64_t t1 = t0 == 0 ? 150 : t0 + 1;
    GdnFn fn = t0 == 0 ? GdnFn(test::bound(backend(), gated_delta_rule_chunked))
                       : GdnFn(test::bound(backend(), gated_delta_rule_recurrent));
    fn(in.q.tensor().rows(t0, t1), in.k.tensor().rows(t0, t1), in.v.tensor().rows(t0, t1), in.g.tensor().rows(t0, t1),
       in.beta.tensor().rows(t0, t1), mixed.state, mixed.o.tensor().rows(t0, t1));
    t0 = t1;
  }
  expect_close(mixed, whole, 1e-5);
}

// ---- gates ---------------------------------------------------------------------------------------

TEST_P(OnBackend, GdnGatesHandComputedAndThreshold) {
  // h0: A_log = ln 2, x = a + dt_bias = 1 → g = −2·ln(1 + e);  b = 0 → β = 0.5
  // h1: A_log = 0, x = 100 (beyond the threshold: softplus(x) = x, where exp(x) would overflow f32) → g = −100
  // h2: A_log = ln 0.5, x = −30 → softplus ≈ e^−30 → g ≈ −0.5·e^−30;  b = 40 → β = 1
  float a[] = {0.5f, 99.0f, -30.5f}, b[] = {0.0f, -3.0f, 40.0f};
  float A_log[] = {std::log(2.0f), 0.0f, std::log(0.5f)}, dt_bias[] = {0.5f, 1.0f, 0.5f};
  const double want_g[] = {-2.0 * std::log1p(std::exp(1.0)), -100.0, -0.5 * std::exp(-30.0)};
  const double want_beta[] = {0.5, 1.0 / (1.0 + std::exp(3.0)), 1.0};
  using GatesFn =
      std::function<void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&)>;
  for (GatesFn fn : {GatesFn(test::bound(test::ref(), gdn_gates)), GatesFn(test::bound(backend(), gdn_gates))}) {
    float g[3], beta[3];
    fn(Tensor(DType::f32, {1, 3}, a), Tensor(DType::f32, {1, 3}, b), Tensor(DType::f32, {3}, A_log),
       Tensor(DType::f32, {3}, dt_bias), Tensor(DType::f32, {1, 3}, g), Tensor(DType::f32, {1, 3}, beta));
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(g[i], want_g[i], 1e-6 * std::fabs(want_g[i])) << "g[" << i << "]";
      EXPECT_NEAR(beta[i], want_beta[i], 1e-6) << "beta[" << i << "]";
    }
  }
}

TEST_P(OnBackend, GdnGatesMatchesRef) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const int64_t T = 37, Hv = 19;  // odd sizes exercise SIMD remainders
  Buffer a = kapitsa::testing::random_buffer(rng, DType::f32, {T, Hv}, -30.0f, 60.0f);  // spans the threshold
  Buffer b = kapitsa::testing::random_buffer(rng, DType::f32, {T, Hv}, -20.0f, 20.0f);
  Buffer A_log = kapitsa::testing::random_buffer(rng, DType::f32, {Hv}, -1.0f, 2.8f);  // log U(0, 16)
  Buffer dt_bias = kapitsa::testing::random_buffer(rng, DType::f32, {Hv}, -2.0f, 2.0f);
  Buffer g_ref = Buffer::allocate(DType::f32, {T, Hv}), beta_ref = Buffer::allocate(DType::f32, {T, Hv});
  Buffer g_cpu = Buffer::allocate(DType::f32, {T, Hv}), beta_cpu = Buffer::allocate(DType::f32, {T, Hv});
  test::run(test::ref(), gdn_gates, a, b, A_log, dt_bias, g_ref, beta_ref);
  test::run(backend(), gdn_gates, a, b, A_log, dt_bias, g_cpu, beta_cpu);
  EXPECT_LE(relative_error(g_cpu, g_ref), 1e-6);
  EXPECT_LE(relative_error(beta_cpu, beta_ref), 1e-6);
  for (int64_t i = 0; i < T * Hv; ++i) {
    ASSERT_TRUE(std::isfinite(g_cpu.f32()[i])) << "g[" << i << "] a=" << a.f32()[i];
    ASSERT_NEAR(g_cpu.f32()[i], g_ref.f32()[i], 1e-5 * std::fabs(g_ref.f32()[i]) + 1e-30) << "g[" << i << "]";
    ASSERT_LE(g_cpu.f32()[i], 0.0f);
  }
}

}  // namespace
}  // namespace kapitsa::ops
