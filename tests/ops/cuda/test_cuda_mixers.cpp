// CUDA backend vs ref, sequence mixers: RoPE, attention (contiguous and paged on shuffled pages), causal
// conv1d (chained calls carry the window), Gated DeltaNet (gates, recurrent and chunked) and the Mamba-2
// scan (recurrent and chunked), outputs and carried states. Inputs as the cpu tests draw them.
#include "cuda_test_helpers.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

namespace kapitsa::ops {
namespace {
using kapitsa::testing::max_abs_diff;
using kapitsa::testing::relative_error;
using test::Cuda;
using test::poisoned;
using test::Rng;
using test::to_device;
using test::to_host;

std::vector<float> inv_freq(int rotary_dim, float theta) {
  std::vector<float> f(static_cast<size_t>(rotary_dim / 2));
  for (int i = 0; i < rotary_dim / 2; ++i) f[static_cast<size_t>(i)] = static_cast<float>(std::pow(theta, -2.0 * i / rotary_dim));
  return f;
}

// Same float arithmetic and the same double cos/sin as ref: equal to the last bit but for libm vs
// CUDA's cos/sin rounding (both correctly rounded to f32 in practice).
TEST_F(Cuda, RopeMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (auto [T, H, D, rd] : std::vector<std::array<int, 4>>{{1, 1, 8, 8}, {7, 3, 256, 64}, {65, 2, 128, 32}, {5, 4, 34, 18}}) {
    SCOPED_TRACE(fmt::format("T={} H={} D={} rd={}", T, H, D, rd));
    Buffer x = test::random_f32(r, {T, H, D});
    std::vector<int32_t> pos(static_cast<size_t>(T));
    std::uniform_int_distribution<int32_t> pick(0, 300000);
    for (auto& p : pos) p = pick(r.gen);
    auto dx = to_device(x);
    ref::rope_neox(x, pos, inv_freq(rd, 1e7f));
    cuda::rope_neox(dx, pos, inv_freq(rd, 1e7f));
    EXPECT_LE(max_abs_diff(to_host(dx), x), 1e-6);
  }
}

struct AttnCase {
  int64_t T, Hq, Hkv, D, q_pos0, page;
};

// f32 online softmax vs ref's double two-pass: 1e-5 as cpu. Paged: the history scattered over shuffled
// pages of a larger pool (other pages hold garbage) gives the contiguous result. Decode cases with few
// query heads and many keys take the split-K path (attention.cpp: choose_splits).
TEST_F(Cuda, AttentionMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  const std::vector<AttnCase> cases = {{1, 1, 1, 8, 0, 16},    {1, 8, 2, 64, 37, 16},  {1, 16, 4, 256, 700, 16},
                                       {7, 6, 2, 33, 0, 3},    {7, 4, 4, 128, 11, 32}, {65, 4, 1, 64, 0, 16},
                                       {65, 6, 3, 256, 90, 7}, {200, 2, 2, 16, 5, 1},  {3, 3, 1, 1, 2, 1},
                                       {1, 4, 1, 64, 1000, 16}, {1, 8, 2, 256, 3000, 16}, {40, 16, 2, 80, 15, 16},
                                       // split-K: several queries; early queries end before the last range
                                       {3, 4, 2, 128, 2000, 16}, {200, 1, 1, 64, 100, 16}};
  for (const AttnCase& c : cases) {
    SCOPED_TRACE(fmt::format("T={} Hq={} Hkv={} D={} pos0={} P={}", c.T, c.Hq, c.Hkv, c.D, c.q_pos0, c.page));
    const int64_t n_kv = c.q_pos0 + c.T, P = c.page, used = (n_kv + P - 1) / P, n_pages = 2 * used + 3;
    Buffer q = test::random_f32(r, {c.T, c.Hq, c.D}, -2, 2);
    Buffer k = test::random_f32(r, {n_kv, c.Hkv, c.D}, -2, 2);
    Buffer v = test::random_f32(r, {n_kv, c.Hkv, c.D});
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    const Shape shape{c.T, c.Hq, c.D};
    Buffer o_ref = Buffer::zeros(DType::f32, shape);
    ref::attention(q, k, v, c.q_pos0, scale, o_ref);
    auto dq = to_device(q);
    auto o = poisoned(shape);
    cuda::attention(dq, to_device(k), to_device(v), c.q_pos0, scale, o);
    EXPECT_LE(relative_error(to_host(o), o_ref), 1e-5) << "contiguous";

    Buffer k_pages = test::random_f32(r, {n_pages, P, c.Hkv, c.D}, 50, 60);
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
    auto dk_pages = to_device(k_pages), dv_pages = to_device(v_pages);
    auto op = poisoned(shape);
    cuda::attention_paged(dq, dk_pages, dv_pages, table, n_kv, c.q_pos0, scale, op);
    EXPECT_LE(relative_error(to_host(op), o_ref), 1e-5) << "paged";
    // Queries in pieces against the same table (a prefill in chunks) equal one call.
    auto pieces = poisoned(shape);
    for (int64_t t0 = 0; t0 < c.T;) {
      const int64_t n = std::min<int64_t>(c.T - t0, 1 + (t0 % 4) * 5);
      cuda::attention_paged(dq.tensor().rows(t0, t0 + n), dk_pages, dv_pages, table, c.q_pos0 + t0 + n, c.q_pos0 + t0,
                            scale, pieces.tensor().rows(t0, t0 + n));
      t0 += n;
    }
    EXPECT_LE(relative_error(to_host(pieces), o_ref), 1e-5) << "paged, in pieces";
  }
}

TEST_F(Cuda, Conv1dMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (auto [T, C, K, with_bias, silu] : std::vector<std::array<int64_t, 5>>{
           {1, 8, 4, 1, 1}, {1, 8192, 4, 0, 1}, {2, 100, 4, 1, 0}, {37, 300, 4, 1, 1}, {5, 64, 1, 0, 0}, {9, 70, 8, 1, 1}}) {
    SCOPED_TRACE(fmt::format("T={} C={} K={} bias={} silu={}", T, C, K, with_bias, silu));
    Buffer x = test::random_f32(r, {T, C}, -2, 2), w = test::random_f32(r, {C, K});
    Buffer bias = test::random_f32(r, {C});
    Buffer window = test::random_f32(r, {std::max<int64_t>(K - 1, 1), C});
    const Tensor win = window.tensor().rows(0, K - 1);
    const Tensor no_bias;
    auto dx = to_device(x), dw = to_device(w), dbias = to_device(bias), dwindow = to_device(window);
    const Tensor dwin = dwindow.tensor().rows(0, K - 1);
    // Two chained calls (first token alone, then the rest) against one ref call.
    Buffer y = Buffer::allocate(DType::f32, {T, C});
    auto dy = poisoned({T, C});
    ref::conv1d_causal(x, w, with_bias ? bias.tensor() : no_bias, win, silu != 0, y);
    for (auto [t0, t1] : {std::pair<int64_t, int64_t>{0, 1}, {1, T}}) {
      if (t0 >= t1) continue;
      cuda::conv1d_causal(dx.tensor().rows(t0, t1), dw, with_bias ? dbias.tensor() : no_bias, dwin, silu != 0,
                          dy.tensor().rows(t0, t1));
    }
    EXPECT_LE(relative_error(to_host(dy), y), 1e-6) << "y";
    EXPECT_LE(max_abs_diff(to_host(dwindow), window), 0.0) << "window";
  }
}

// q, k rows L2-normalised (q scaled by Dk^-0.5), g in [-2, 0) with some near 0, beta in (0, 1), a
// non-zero initial state: the inputs the model gives the op.
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

TEST_F(Cuda, GatedDeltaRuleMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (auto [T, Hk, Hv, Dk, Dv] : std::vector<std::array<int64_t, 5>>{
           {1, 1, 1, 16, 16}, {1, 4, 8, 128, 128}, {7, 2, 4, 32, 100}, {70, 2, 2, 128, 64}, {130, 1, 3, 200, 40}}) {
    SCOPED_TRACE(fmt::format("T={} Hk={} Hv={} Dk={} Dv={}", T, Hk, Hv, Dk, Dv));
    Buffer q = normalised_rows(r.gen, {T, Hk, Dk}, Dk, static_cast<float>(1.0 / std::sqrt(double(Dk))));
    Buffer k = normalised_rows(r.gen, {T, Hk, Dk}, Dk, 1.0f);
    Buffer v = test::random_f32(r, {T, Hv, Dv});
    Buffer g = test::random_f32(r, {T, Hv}, -2.0f, -1e-3f);
    for (int64_t i = 0; i < T * Hv; i += 4) g.f32()[i] = -1e-4f;  // almost no decay: the state carries weight
    Buffer beta = test::random_f32(r, {T, Hv}, 0.01f, 0.99f);
    Buffer state0 = test::random_f32(r, {Hv, Dk, Dv}, -0.5f, 0.5f);
    Buffer o_ref = Buffer::allocate(DType::f32, {T, Hv, Dv});
    Buffer s_ref = test::clone(state0);
    ref::gated_delta_rule_recurrent(q, k, v, g, beta, s_ref, o_ref);
    auto dq = to_device(q), dk = to_device(k), dv = to_device(v), dg = to_device(g), dbeta = to_device(beta);
    for (auto fn : {&cuda::gated_delta_rule_recurrent, &cuda::gated_delta_rule_chunked}) {
      auto ds = to_device(state0);
      auto o = poisoned({T, Hv, Dv});
      fn(dq, dk, dv, dg, dbeta, ds, o);
      EXPECT_LE(relative_error(to_host(o), o_ref), 1e-5) << (fn == &cuda::gated_delta_rule_chunked ? "chunked" : "recurrent");
      EXPECT_LE(relative_error(to_host(ds), s_ref), 1e-5) << "state";
    }
  }
  // Gates, softplus threshold included (a + dt_bias > 20 is linear).
  Buffer a = test::random_f32(r, {9, 6}, -30, 30), b = test::random_f32(r, {9, 6}, -8, 8);
  Buffer A_log = test::random_f32(r, {6}, -2, 2), dt_bias = test::random_f32(r, {6}, -1, 1);
  Buffer g = Buffer::allocate(DType::f32, {9, 6}), beta = Buffer::allocate(DType::f32, {9, 6});
  auto dg = poisoned({9, 6}), dbeta = poisoned({9, 6});
  ref::gdn_gates(a, b, A_log, dt_bias, g, beta);
  cuda::gdn_gates(to_device(a), to_device(b), to_device(A_log), to_device(dt_bias), dg, dbeta);
  EXPECT_LE(relative_error(to_host(dg), g), 1e-6) << "g";
  EXPECT_LE(relative_error(to_host(dbeta), beta), 1e-6) << "beta";
}

TEST_F(Cuda, SsdScanMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (auto [T, H, P, G, N] : std::vector<std::array<int64_t, 5>>{
           {1, 1, 4, 1, 8}, {1, 8, 64, 2, 128}, {7, 4, 16, 4, 16}, {70, 6, 64, 2, 128}, {33, 3, 40, 1, 200}}) {
    SCOPED_TRACE(fmt::format("T={} H={} P={} G={} N={}", T, H, P, G, N));
    Buffer x = test::random_f32(r, {T, H, P}), dt = test::random_f32(r, {T, H}, -4, 1);
    Buffer B = test::random_f32(r, {T, G, N}), C = test::random_f32(r, {T, G, N});
    Buffer A_log = test::random_f32(r, {H}, -1, 1.5f), D = test::random_f32(r, {H}), dt_bias = test::random_f32(r, {H}, -1, 1);
    Buffer state0 = test::random_f32(r, {H, P, N}, -0.5f, 0.5f);
    Buffer y_ref = Buffer::allocate(DType::f32, {T, H, P});
    Buffer s_ref = test::clone(state0);
    const float dt_min = 0.001f, dt_max = 5.0f;
    ref::ssd_scan_recurrent(x, dt, B, C, A_log, D, dt_bias, dt_min, dt_max, s_ref, y_ref);
    auto dx = to_device(x), ddt = to_device(dt), dB = to_device(B), dC = to_device(C), dA = to_device(A_log),
         dD = to_device(D), dbias = to_device(dt_bias);
    for (bool chunked : {false, true}) {
      auto ds = to_device(state0);
      auto y = poisoned({T, H, P});
      if (chunked) cuda::ssd_scan_chunked(dx, ddt, dB, dC, dA, dD, dbias, dt_min, dt_max, 16, ds, y);
      else cuda::ssd_scan_recurrent(dx, ddt, dB, dC, dA, dD, dbias, dt_min, dt_max, ds, y);
      EXPECT_LE(relative_error(to_host(y), y_ref), 1e-5) << (chunked ? "chunked" : "recurrent");
      EXPECT_LE(relative_error(to_host(ds), s_ref), 1e-5) << "state";
    }
  }
}

}  // namespace
}  // namespace kapitsa::ops
