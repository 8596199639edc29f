// Tests of the Mamba-2 scan ops: the chunked SSD form against the token-by-token recurrence (lengths
// around and across chunk boundaries, non-zero initial state), cpu against ref, a sequence split into
// pieces against one call, the Δ clamp, and one hand-computed step. Fresh seed per test, printed.
#include "op_test_helpers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace kapitsa::ops {
namespace {

using kapitsa::testing::relative_error;
using test::Rng;

constexpr float kInf = std::numeric_limits<float>::infinity();

struct SsdInputs {
  int64_t T, H, P, G, N;
  Buffer x, dt, B, C, A_log, D, dt_bias, state;  // state: initial, never modified
};

SsdInputs make_inputs(Rng& r, int64_t T, int64_t H, int64_t P, int64_t G, int64_t N) {
  SsdInputs in{T, H, P, G, N, {}, {}, {}, {}, {}, {}, {}, {}};
  in.x = test::random_f32(r, {T, H, P});
  in.dt = test::random_f32(r, {T, H}, -4.0f, 2.0f);
  // A few raw dt above the softplus threshold (Δ = dt there).
  for (int64_t i = 0; i < T * H; i += 17) in.dt.f32()[i] = 21.0f + static_cast<float>(i % 3);
  in.B = test::random_f32(r, {T, G, N});
  in.C = test::random_f32(r, {T, G, N});
  in.A_log = test::random_f32(r, {H}, -1.0f, 2.0f);
  in.D = test::random_f32(r, {H}, 0.5f, 1.5f);
  in.dt_bias = test::random_f32(r, {H}, -2.0f, 0.5f);
  in.state = test::random_f32(r, {H, P, N}, -0.5f, 0.5f);
  return in;
}

struct SsdResult {
  Buffer y, state;
};

enum class Form { recurrent, chunked };

// Runs one form on backend b over the sequence in consecutive pieces (the last takes the rest),
// carrying the state.
SsdResult run(const BackendTable& b, Form form, const SsdInputs& in, const std::vector<int64_t>& pieces = {},
              int64_t chunk = 32, float dt_min = 0.0f, float dt_max = kInf) {
  SsdResult r{Buffer::zeros(DType::f32, {in.T, in.H, in.P}), test::clone(in.state)};
  int64_t t0 = 0;
  for (size_t p = 0; t0 < in.T; ++p) {
    const int64_t t1 = p < pieces.size() ? std::min(in.T, t0 + pieces[p]) : in.T;
    const Tensor x = in.x.tensor().rows(t0, t1), dt = in.dt.tensor().rows(t0, t1);
    const Tensor B = in.B.tensor().rows(t0, t1), C = in.C.tensor().rows(t0, t1), y = r.y.tensor().rows(t0, t1);
    switch (form) {
      case Form::recurrent:
        test::run(b, ssd_scan_recurrent, x, dt, B, C, in.A_log, in.D, in.dt_bias, dt_min, dt_max, r.state, y);
        break;
      case Form::chunked:
        test::run(b, ssd_scan_chunked, x, dt, B, C, in.A_log, in.D, in.dt_bias, dt_min, dt_max, chunk, r.state, y);
        break;
    }
    t0 = t1;
  }
  return r;
}

TEST(SsdScan, ChunkedMatchesRecurrentAroundChunkBoundaries) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (int64_t T : {1, 2, 31, 32, 33, 63, 64, 65, 100}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const SsdInputs in = make_inputs(r, T, 8, 16, 2, 16);
    const SsdResult step = run(test::ref(), Form::recurrent, in);
    const SsdResult chunked = run(test::ref(), Form::chunked, in, {}, 32);
    EXPECT_LE(relative_error(chunked.y, step.y), 1e-5);
    EXPECT_LE(relative_error(chunked.state, step.state), 1e-5);
  }
}

TEST(SsdScan, ChunkSizeDoesNotChangeTheResult) {
  Rng r;
  SCOPED_TRACE(r.trace());
  const SsdInputs in = make_inputs(r, 70, 4, 8, 4, 24);
  const SsdResult step = run(test::ref(), Form::recurrent, in);
  for (int64_t chunk : {1, 7, 16, 128}) {
    SCOPED_TRACE("chunk=" + std::to_string(chunk));
    const SsdResult chunked = run(test::ref(), Form::chunked, in, {}, chunk);
    EXPECT_LE(relative_error(chunked.y, step.y), 1e-5);
    EXPECT_LE(relative_error(chunked.state, step.state), 1e-5);
  }
}

TEST_P(OnBackend, SsdScanMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  // Odd sizes exercise the SIMD tails; 64 x 64 x 128 is Nemotron-3-Nano's layer. From 64 tokens the cuda
  // backend's chunked kernels run (N a multiple of 4): whole chunks and a short last one, P off the scan's
  // 32 columns, several heads a group; N = 19 falls back to the token-by-token kernel.
  struct Case {
    int64_t T, H, P, G, N;
  };
  for (const Case c : {Case{1, 8, 16, 2, 16}, Case{45, 6, 13, 3, 19}, Case{3, 64, 64, 8, 128}, Case{40, 8, 16, 1, 16},
                       Case{130, 8, 40, 2, 16}, Case{130, 64, 64, 8, 128}, Case{70, 6, 13, 3, 19}}) {
    SCOPED_TRACE("T=" + std::to_string(c.T) + " H=" + std::to_string(c.H) + " N=" + std::to_string(c.N));
    const SsdInputs in = make_inputs(r, c.T, c.H, c.P, c.G, c.N);
    const SsdResult ref_step = run(test::ref(), Form::recurrent, in);
    const SsdResult cpu_step = run(backend(), Form::recurrent, in);
    const SsdResult cpu_chunked = run(backend(), Form::chunked, in);
    EXPECT_LE(relative_error(cpu_step.y, ref_step.y), 1e-5);
    EXPECT_LE(relative_error(cpu_step.state, ref_step.state), 1e-5);
    EXPECT_LE(relative_error(cpu_chunked.y, ref_step.y), 1e-5);
    EXPECT_LE(relative_error(cpu_chunked.state, ref_step.state), 1e-5);
  }
}

TEST_P(OnBackend, SsdScanPiecesEqualOneCall) {
  Rng r;
  SCOPED_TRACE(r.trace());
  const SsdInputs in = make_inputs(r, 150, 8, 16, 2, 16);
  const std::vector<int64_t> pieces = {1, 7, 31, 33, 1, 1, 64};
  for (auto [b, form] : {std::pair{&test::ref(), Form::chunked}, std::pair{&backend(), Form::chunked},
                         std::pair{&backend(), Form::recurrent}}) {
    SCOPED_TRACE(std::string(b->name) + " form " + std::to_string(static_cast<int>(form)));
    const SsdResult whole = run(*b, form, in);
    const SsdResult split = run(*b, form, in, pieces);
    EXPECT_LE(relative_error(split.y, whole.y), 1e-5);
    EXPECT_LE(relative_error(split.state, whole.state), 1e-5);
  }
}

TEST_P(OnBackend, SsdScanDeltaClampApplies) {
  Rng r;
  SCOPED_TRACE(r.trace());
  const SsdInputs in = make_inputs(r, 20, 4, 8, 2, 8);
  const SsdResult free = run(test::ref(), Form::recurrent, in);
  const SsdResult ref = run(test::ref(), Form::recurrent, in, {}, 32, 0.05f, 1.5f);
  const SsdResult chunked = run(test::ref(), Form::chunked, in, {}, 8, 0.05f, 1.5f);
  const SsdResult cpu = run(backend(), Form::recurrent, in, {}, 32, 0.05f, 1.5f);
  EXPECT_GT(relative_error(ref.y, free.y), 1e-3);  // the clamp changes something
  EXPECT_LE(relative_error(chunked.y, ref.y), 1e-5);
  EXPECT_LE(relative_error(cpu.y, ref.y), 1e-5);
}

// One token, one head, P = N = 1: s1 = exp(-Δ·e^{A_log}) s0 + Δ x B;  y = s1 C + D x;  Δ = softplus(dt + b).
TEST_P(OnBackend, SsdScanHandComputedStep) {
  auto scalar = [](float v) {
    Buffer b = Buffer::allocate(DType::f32, {1, 1, 1});
    b.f32()[0] = v;
    return b;
  };
  const Buffer x = scalar(0.7f), dt = scalar(-0.3f), B = scalar(1.5f), C = scalar(-0.8f);
  const Buffer A_log = scalar(0.2f), D = scalar(0.9f), dt_bias = scalar(0.1f);
  const double delta = std::log1p(std::exp(-0.2)), A = -std::exp(0.2);
  const double s1 = std::exp(delta * A) * 0.25 + delta * 0.7 * 1.5;
  const double expect_y = s1 * -0.8 + 0.9 * 0.7;
  for (int which = 0; which < 2; ++which) {
    Buffer state = scalar(0.25f), y = scalar(0.0f);
    const Tensor dt2 = dt.tensor().reshape({1, 1}), A1 = A_log.tensor().reshape({1});
    const Tensor D1 = D.tensor().reshape({1}), b1 = dt_bias.tensor().reshape({1});
    if (which == 0)
      test::run(test::ref(), ssd_scan_recurrent, x, dt2, B, C, A1, D1, b1, 0.0f, kInf, state, y);
    else
      test::run(backend(), ssd_scan_chunked, x, dt2, B, C, A1, D1, b1, 0.0f, kInf, 4, state, y);
    EXPECT_NEAR(state.f32()[0], s1, 1e-6) << (which == 0 ? "ref" : backend().name);
    EXPECT_NEAR(y.f32()[0], expect_y, 1e-6) << (which == 0 ? "ref" : backend().name);
  }
}

}  // namespace
}  // namespace kapitsa::ops
