// Tests of Linear (tensor/linear.h), the weight type matmul and embedding take: logical shape and byte
// counts of dense weights, explicit construction only, per-expert and row-range views of a stack that
// point into the same memory, and the error a kernel gives when handed a format it does not implement
// (only dense exists, so: the dense() accessor on dense data).
#include "op_test_helpers.h"
#include "ops/ops.h"

#include <type_traits>

namespace kapitsa::ops {
namespace {

// A weight is made a Linear on purpose (WeightLoader::linear), never by accident.
static_assert(!std::is_convertible_v<Tensor, Linear>);
static_assert(!std::is_convertible_v<const Buffer&, Linear>);

TEST(Linear, DenseShapeAndBytes) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    Buffer w = Buffer::zeros(dt, {12, 40});
    const Linear l(w);
    EXPECT_TRUE(l.is_dense());
    EXPECT_EQ(l.format(), WeightFormat::dense);
    EXPECT_EQ(l.rows(), 12);
    EXPECT_EQ(l.cols(), 40);
    EXPECT_EQ(l.experts(), 0);
    EXPECT_EQ(l.bits(), 0);
    EXPECT_TRUE(l.scales().empty() && l.biases().empty());
    EXPECT_EQ(l.bytes_per_row(), 40 * dtype_size(dt));
    EXPECT_EQ(l.nbytes(), 12 * 40 * dtype_size(dt));
    EXPECT_EQ(l.dense("test").data(), w.tensor().data());
  }
  const Linear none;
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.rows(), 0);
  EXPECT_EQ(none.nbytes(), 0u);
  EXPECT_EQ(none.bytes_per_row(), 0u);
  EXPECT_EQ(weight_format_name(WeightFormat::dense), "dense");
}

// A fused stack [E, 2I, H]: expert e is its own [2I, H] block, row_range splits gate and up; the stack
// counts every expert's bytes, each view only its own.
TEST(Linear, ExpertAndRowRangeViews) {
  const int64_t E = 3, I = 4, H = 5;
  Buffer w = Buffer::zeros(DType::bf16, {E, 2 * I, H});
  const Linear stack(w);
  EXPECT_EQ(stack.experts(), E);
  EXPECT_EQ(stack.rows(), 2 * I);
  EXPECT_EQ(stack.cols(), H);
  EXPECT_EQ(stack.nbytes(), static_cast<size_t>(E * 2 * I * H * 2));
  EXPECT_EQ(stack.bytes_per_row(), static_cast<size_t>(H * 2));
  const auto* base = static_cast<const uint8_t*>(w.tensor().data());
  for (int64_t e = 0; e < E; ++e) {
    const Linear ex = stack.expert(e);
    EXPECT_EQ(ex.experts(), 0);
    EXPECT_EQ(ex.weight().shape(), Shape({2 * I, H}));
    EXPECT_EQ(static_cast<const uint8_t*>(ex.weight().data()), base + e * 2 * I * H * 2);
    const Linear up = ex.row_range(I, 2 * I);
    EXPECT_EQ(up.rows(), I);
    EXPECT_EQ(up.cols(), H);
    EXPECT_EQ(static_cast<const uint8_t*>(up.weight().data()), base + (e * 2 * I + I) * H * 2);
    EXPECT_EQ(up.nbytes(), static_cast<size_t>(I * H * 2));
  }
  test::threadsafe_death_tests();
  EXPECT_DEATH(stack.expert(E), "Linear::expert\\(3\\)");
  EXPECT_DEATH(stack.expert(0).row_range(0, 2 * I + 1), "Linear::row_range");
}

TEST(Linear, MatmulTakesALinear) {
  float x[3] = {1, 2, 3}, w[6] = {1, 0, -1, 0.5f, 0.5f, 0.5f}, y[2] = {};
  const Tensor wt(DType::f32, {2, 3}, w);
  matmul(Tensor(DType::f32, {1, 3}, x), Linear(wt), Tensor(DType::f32, {1, 2}, y));
  EXPECT_FLOAT_EQ(y[0], -2);
  EXPECT_FLOAT_EQ(y[1], 3);
  // a row range is a weight of its own
  y[0] = y[1] = 0;
  matmul(Tensor(DType::f32, {1, 3}, x), Linear(wt).row_range(1, 2), Tensor(DType::f32, {1, 1}, y));
  EXPECT_FLOAT_EQ(y[0], 3);
}

}  // namespace
}  // namespace kapitsa::ops
