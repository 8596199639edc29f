// Tests of the data-movement ops (embedding, copy, split/concat columns): cpu must equal ref bit for
// bit (no arithmetic), plus ref pinned against hand-built tables.
#include "op_test_helpers.h"

#include <cstring>
#include <vector>

namespace kapitsa::ops {
namespace {
using test::Rng;

TEST(Embedding, RefPicksRowsAndWidens) {
  // bf16 0x3f80 = 1.0, 0x4000 = 2.0, 0xc040 = -3.0
  std::vector<uint16_t> table = {0x3f80, 0x4000, 0xc040, 0x0000, 0x4000, 0x3f80};
  Tensor t(DType::bf16, {3, 2}, table.data());
  Buffer out = Buffer::allocate(DType::f32, {3, 2});
  std::vector<int32_t> ids = {2, 0, 2};
  test::run(test::ref(), embedding, Linear(t), ids, out);
  const std::vector<float> want = {2, 1, 1, 2, 2, 1};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out.f32()[i], want[static_cast<size_t>(i)]) << i;
}

TEST_P(OnBackend, EmbeddingEqualsRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (int64_t H : {1, 7, 64, 1031}) {
      SCOPED_TRACE(fmt::format("{} H={}", dtype_name(dt), H));
      const int64_t V = 50;
      Buffer table = kapitsa::testing::random_buffer(r.gen, dt, {V, H});
      std::vector<int32_t> ids;
      std::uniform_int_distribution<int32_t> pick(0, V - 1);
      for (int i = 0; i < 13; ++i) ids.push_back(pick(r.gen));
      Buffer a = Buffer::zeros(DType::f32, {13, H}), b = Buffer::zeros(DType::f32, {13, H});
      test::run(test::ref(), embedding, Linear(table), ids, a);
      test::run(backend(), embedding, Linear(table), ids, b);
      EXPECT_TRUE(test::bit_equal(a, b));
      // ref widens exactly: re-read the table
      for (int64_t h = 0; h < H; ++h)
        ASSERT_EQ(a.f32()[3 * H + h], kapitsa::testing::element(table, ids[3] * H + h));
    }
}

TEST_P(OnBackend, CopySameAndConvertingDtypes) {
  Rng r;
  SCOPED_TRACE(r.trace());
  Buffer src = test::random_f32(r, {5, 33});
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    Buffer a = Buffer::zeros(dt, {33, 5}), b = Buffer::zeros(dt, {165});
    test::run(test::ref(), copy, src, a);
    test::run(backend(), copy, src, b);
    EXPECT_TRUE(test::bit_equal(a, b)) << dtype_name(dt);
    EXPECT_LT(kapitsa::testing::relative_error(a, src), dt == DType::f32 ? 0.0 + 1e-30 : 4e-3) << dtype_name(dt);
    Buffer back_ref = Buffer::zeros(DType::f32, {165}), back_cpu = Buffer::zeros(DType::f32, {165});
    test::run(test::ref(), copy, a, back_ref);
    test::run(backend(), copy, a, back_cpu);
    EXPECT_TRUE(test::bit_equal(back_ref, back_cpu)) << dtype_name(dt);
  }
}

// Column blocks of f32 and bf16 (odd widths: 2-byte elements not in 4-byte words), four blocks and
// eleven (more than a cuda launch takes), bit for bit against ref, and back.
TEST_P(OnBackend, SplitConcatEqualsRefAndRoundTrips) {
  Rng r;
  SCOPED_TRACE(r.trace());
  const std::vector<std::vector<int64_t>> block_sets = {{3, 16, 1, 29}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 2, 1}};
  for (DType dt : {DType::f32, DType::bf16})
    for (const auto& widths : block_sets)
      for (int64_t R : {1, 7, 65}) {
        SCOPED_TRACE(fmt::format("{} R={} blocks={}", dtype_name(dt), R, widths.size()));
        int64_t W = 0;
        for (int64_t w : widths) W += w;
        Buffer x = kapitsa::testing::random_buffer(r.gen, dt, {R, W});
        std::vector<Buffer> ra, ca;
        std::vector<Tensor> rv, cv;
        for (int64_t w : widths) {
          ra.push_back(Buffer::zeros(dt, {R, w}));
          ca.push_back(Buffer::zeros(dt, {R, w}));
          rv.push_back(ra.back());
          cv.push_back(ca.back());
        }
        test::run(test::ref(), split_columns, x, rv);
        test::run(backend(), split_columns, x, cv);
        for (size_t i = 0; i < widths.size(); ++i) EXPECT_TRUE(test::bit_equal(ra[i], ca[i])) << i;
        // column widths[0] of x is column 0 of the second block
        EXPECT_EQ(std::memcmp(ra[1].tensor().data(), static_cast<const char*>(x.tensor().data()) + widths[0] * dtype_size(dt),
                              dtype_size(dt)),
                  0);
        Buffer y_ref = Buffer::zeros(dt, {R, W}), y_dev = Buffer::zeros(dt, {R, W});
        test::run(test::ref(), concat_columns, rv, y_ref);
        test::run(backend(), concat_columns, cv, y_dev);
        EXPECT_TRUE(test::bit_equal(y_ref, x));
        EXPECT_TRUE(test::bit_equal(y_dev, x));
      }
}

}  // namespace
}  // namespace kapitsa::ops
