// CUDA backend vs ref, basic ops: elementwise, layout (embedding, copy, split/concat), matmul (GEMV and
// cuBLAS paths, f32/f16/bf16 weights), norms, MoE routing and row gather/scatter. Tolerances are
// stated per test; f32 kernels land near f32 rounding, cuBLAS on bf16/f16 carries the activations'
// rounding to the weight dtype (matmul.cpp).
#include "cuda_test_helpers.h"

#include <cmath>
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

TEST_F(Cuda, ElementwiseMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (Shape s : {Shape{1, 1}, Shape{7, 33}, Shape{129, 1000}}) {
    SCOPED_TRACE(s.str());
    Buffer a = test::random_f32(r, s, -4, 4), b = test::random_f32(r, s, -4, 4);
    Buffer y = Buffer::allocate(DType::f32, s);
    auto da = to_device(a), db = to_device(b);
    auto dy = poisoned(s);
    ref::add(a, b, y), cuda::add(da, db, dy);
    EXPECT_LE(max_abs_diff(to_host(dy), y), 0.0) << "add";
    ref::silu_mul(a, b, y), cuda::silu_mul(da, db, dy);
    EXPECT_LE(relative_error(to_host(dy), y), 1e-6) << "silu_mul";
    ref::relu_squared(a, y), cuda::relu_squared(da, dy);
    EXPECT_LE(max_abs_diff(to_host(dy), y), 0.0) << "relu_squared";
    ref::mul_sigmoid(a, b, y), cuda::mul_sigmoid(da, db, dy);
    EXPECT_LE(relative_error(to_host(dy), y), 1e-6) << "mul_sigmoid";
    Buffer g = test::random_f32(r, {s[0], 1}, -4, 4);  // one gate per row
    ref::mul_sigmoid(a, g, y), cuda::mul_sigmoid(da, to_device(g), dy);
    EXPECT_LE(relative_error(to_host(dy), y), 1e-6) << "mul_sigmoid broadcast";
    ref::silu_mul(a, b, a), cuda::silu_mul(da, db, da);  // in place
    EXPECT_LE(relative_error(to_host(da), a), 1e-6) << "silu_mul in place";
  }
}

TEST_F(Cuda, EmbeddingAndCopyMatchRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    Buffer table = kapitsa::testing::random_buffer(r.gen, dt, {50, 72});
    std::vector<int32_t> ids = {0, 49, 7, 7, 31};
    Buffer out = Buffer::allocate(DType::f32, {5, 72});
    auto dout = poisoned({5, 72});
    ref::embedding(Linear(table), ids, out);
    cuda::embedding(Linear(to_device(table).tensor()), ids, dout);
    EXPECT_LE(max_abs_diff(to_host(dout), out), 0.0) << "embedding";
    // copy: same dtype, and each conversion (round to nearest even when narrowing)
    Buffer src = test::random_f32(r, {3, 1001}, -100, 100);
    Buffer dst = Buffer::allocate(dt, {3, 1001});
    auto ddst = cuda::DeviceBuffer::allocate(dt, {3, 1001});
    ref::copy(src, dst), cuda::copy(to_device(src), ddst);
    EXPECT_TRUE(test::bit_equal(to_host(ddst), dst)) << "copy f32 -> " << dtype_name(dt);
    Buffer back = Buffer::allocate(DType::f32, {3, 1001});
    auto dback = poisoned({3, 1001});
    ref::copy(dst, back), cuda::copy(ddst, dback);
    EXPECT_TRUE(test::bit_equal(to_host(dback), back)) << "copy " << dtype_name(dt) << " -> f32";
  }
}

TEST_F(Cuda, SplitAndConcatColumnsMatchRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  Buffer x = test::random_f32(r, {9, 2, 30});
  Buffer a = Buffer::allocate(DType::f32, {18, 7}), b = Buffer::allocate(DType::f32, {18, 3}),
         c = Buffer::allocate(DType::f32, {18, 20});
  auto dx = to_device(x);
  auto da = poisoned({18, 7}), db = poisoned({18, 3}), dc = poisoned({18, 20});
  const Tensor outs[] = {a, b, c}, douts[] = {da, db, dc};
  ref::split_columns(x, outs), cuda::split_columns(dx, douts);
  EXPECT_TRUE(test::bit_equal(to_host(da), a) && test::bit_equal(to_host(db), b) && test::bit_equal(to_host(dc), c));
  auto dy = poisoned({9, 2, 30});
  cuda::concat_columns(douts, dy);
  EXPECT_TRUE(test::bit_equal(to_host(dy), x)) << "concat(split(x)) == x";
}

// GEMV (T ≤ 8): f32 accumulation as cpu, so cpu's bounds. cuBLAS (T > 8): plain f32 SGEMM for f32
// weights; bf16/f16 weights multiply x rounded to that dtype: relative error ≈ its unit roundoff.
TEST_F(Cuda, MatmulMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  struct Case {
    int64_t T, K, N;
  };
  const std::vector<Case> cases = {{1, 1, 1},     {1, 15, 3},    {1, 64, 17},   {1, 1031, 130}, {2, 33, 9},
                                   {3, 256, 31},  {7, 100, 65},  {8, 64, 64},   {9, 64, 64},    {16, 1000, 23},
                                   {65, 129, 67}, {64, 1024, 40}, {130, 48, 5}, {1, 4096, 300}, {300, 2048, 512}};
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const Case& c : cases) {
      SCOPED_TRACE(fmt::format("{} T={} K={} N={}", dtype_name(dt), c.T, c.K, c.N));
      Buffer x = test::random_f32(r, {c.T, c.K});
      Buffer w = kapitsa::testing::random_buffer(r.gen, dt, {c.N, c.K});
      Buffer yr = Buffer::zeros(DType::f32, {c.T, c.N});
      auto dy = poisoned({c.T, c.N});
      ref::matmul(x, Linear(w), yr);
      cuda::matmul(to_device(x), Linear(to_device(w).tensor()), dy);
      const Buffer y = to_host(dy);
      const bool gemv = c.T <= 8;
      const double tol = gemv || dt == DType::f32 ? 2e-6 : dt == DType::f16 ? 1e-3 : 5e-3;
      if (c.T * c.N >= 64) {
        EXPECT_LE(relative_error(y, yr), tol);
      }
      const double scale = std::sqrt(static_cast<double>(c.K) / 9.0) + 1e-3;
      EXPECT_LE(max_abs_diff(y, yr) / scale, gemv || dt == DType::f32 ? 1e-5 : 10 * tol);
    }
}

TEST_F(Cuda, NormsMatchRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (auto [R, D, group] : std::vector<std::array<int64_t, 3>>{{1, 8, 8}, {5, 128, 64}, {33, 1000, 250}, {3, 4096, 1024}}) {
    SCOPED_TRACE(fmt::format("R={} D={} group={}", R, D, group));
    Buffer x = test::random_f32(r, {R, D}, -3, 3), z = test::random_f32(r, {R, D}, -3, 3);
    Buffer w = test::random_f32(r, {D});
    Buffer y = Buffer::allocate(DType::f32, {R, D});
    auto dx = to_device(x), dz = to_device(z), dw = to_device(w);
    auto dy = poisoned({R, D});
    ref::rms_norm(x, w, 1e-6f, 1.0f, y), cuda::rms_norm(dx, dw, 1e-6f, 1.0f, dy);
    EXPECT_LE(relative_error(to_host(dy), y), 1e-6) << "rms_norm";
    ref::rms_norm_gated(x, z, w, 1e-6f, y), cuda::rms_norm_gated(dx, dz, dw, 1e-6f, dy);
    EXPECT_LE(relative_error(to_host(dy), y), 1e-6) << "rms_norm_gated";
    ref::l2_norm(x, 1e-6f, 0.5f, y), cuda::l2_norm(dx, 1e-6f, 0.5f, dy);
    EXPECT_LE(relative_error(to_host(dy), y), 1e-6) << "l2_norm";
    ref::rms_norm_group_gated(x, z, w, group, 1e-5f, y), cuda::rms_norm_group_gated(dx, dz, dw, group, 1e-5f, dy);
    EXPECT_LE(relative_error(to_host(dy), y), 1e-6) << "rms_norm_group_gated";
    ref::rms_norm(x, w, 1e-6f, 0.0f, x), cuda::rms_norm(dx, dw, 1e-6f, 0.0f, dx);  // in place
    EXPECT_LE(relative_error(to_host(dx), x), 1e-6) << "rms_norm in place";
  }
}

// Routing in double as ref: the same experts (exactly) and weights within f32 rounding.
TEST_F(Cuda, MoeRoutingMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  struct Case {
    int64_t T, E;
    int k, n_group, topk_group;
    bool renormalize, bias;
  };
  for (const Case& c : std::vector<Case>{{1, 8, 2, 1, 1, true, false}, {37, 128, 8, 1, 1, false, true},
                                         {64, 256, 8, 8, 4, true, true}, {5, 512, 10, 1, 1, true, false}}) {
    SCOPED_TRACE(fmt::format("T={} E={} k={} groups={}/{}", c.T, c.E, c.k, c.topk_group, c.n_group));
    Buffer logits = test::random_f32(r, {c.T, c.E}, -4, 4);
    Buffer bias = test::random_f32(r, {c.E}, -0.1f, 0.1f);
    auto dlogits = to_device(logits);
    Buffer ids = Buffer::allocate(DType::i32, {c.T, c.k}), w = Buffer::allocate(DType::f32, {c.T, c.k});
    auto dids = cuda::DeviceBuffer::zeros(DType::i32, {c.T, c.k});
    auto dw = poisoned({c.T, c.k});
    ref::moe_route_softmax(logits, c.k, c.renormalize, ids, w);
    cuda::moe_route_softmax(dlogits, c.k, c.renormalize, dids, dw);
    EXPECT_TRUE(test::bit_equal(to_host(dids), ids)) << "softmax: experts";
    EXPECT_LE(relative_error(to_host(dw), w), 1e-6) << "softmax: weights";
    const Tensor no_bias;
    ref::moe_route_sigmoid(logits, c.bias ? bias.tensor() : no_bias, c.k, c.n_group, c.topk_group, c.renormalize, 2.5f,
                           ids, w);
    cuda::DeviceBuffer dbias = to_device(bias);
    cuda::moe_route_sigmoid(dlogits, c.bias ? dbias.tensor() : no_bias, c.k, c.n_group, c.topk_group, c.renormalize,
                            2.5f, dids, dw);
    EXPECT_TRUE(test::bit_equal(to_host(dids), ids)) << "sigmoid: experts";
    EXPECT_LE(relative_error(to_host(dw), w), 1e-6) << "sigmoid: weights";
  }
}

// Gather is a copy (exact); the scatter-add walks rows in ref's order without fma (exact too).
TEST_F(Cuda, GatherAndScaleAddRowsMatchRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  const int64_t T = 20, H = 300;
  std::vector<int32_t> rows = {3, 0, 19, 3, 3, 7, 12, 0};  // repeats accumulate
  std::vector<float> weights = {0.5f, -1.25f, 2, 0.1f, 0.3f, 1, -0.7f, 0.01f};
  const int64_t R = static_cast<int64_t>(rows.size());
  Buffer x = test::random_f32(r, {T, H});
  Buffer out = Buffer::allocate(DType::f32, {R, H});
  auto dout = poisoned({R, H});
  ref::gather_rows(x, rows, out), cuda::gather_rows(to_device(x), rows, dout);
  EXPECT_LE(max_abs_diff(to_host(dout), out), 0.0) << "gather_rows";
  Buffer dst = test::random_f32(r, {T, H});
  auto ddst = to_device(dst);
  ref::scale_add_rows(out, rows, weights, dst), cuda::scale_add_rows(dout, rows, weights, ddst);
  EXPECT_LE(max_abs_diff(to_host(ddst), dst), 0.0) << "scale_add_rows";
}

TEST(CudaBackend, ReportsItsDevice) {
  // Runs everywhere: says what it found, so a GPU run's log names the device and a CPU run says why not.
  const std::string what = cuda::device_description();
  std::printf("cuda: %s\n", what.c_str());
  EXPECT_EQ(cuda::device_available(), what.rfind("no CUDA device", 0) != 0);
}

}  // namespace
}  // namespace kapitsa::ops
