// Tests of Linear (tensor/linear.h), the weight type matmul and embedding take: logical shape and byte
// counts of dense weights, implicit conversion from Tensor/Buffer, and the error a kernel gives when
// handed a format it does not implement (only dense exists, so: the dense() accessor on dense data).
#include "op_test_helpers.h"
#include "ops/ops.h"

namespace kapitsa::ops {
namespace {

TEST(Linear, DenseShapeAndBytes) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    Buffer w = Buffer::zeros(dt, {12, 40});
    const Linear l = w;  // implicit, as every bare-Tensor caller relies on
    EXPECT_TRUE(l.is_dense());
    EXPECT_EQ(l.format(), WeightFormat::dense);
    EXPECT_EQ(l.rows(), 12);
    EXPECT_EQ(l.cols(), 40);
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

TEST(Linear, MatmulTakesTensorBufferOrLinear) {
  float x[3] = {1, 2, 3}, w[6] = {1, 0, -1, 0.5f, 0.5f, 0.5f}, y[2] = {};
  const Tensor wt(DType::f32, {2, 3}, w);
  const Linear l(wt);
  matmul(Tensor(DType::f32, {1, 3}, x), l, Tensor(DType::f32, {1, 2}, y));
  EXPECT_FLOAT_EQ(y[0], -2);
  EXPECT_FLOAT_EQ(y[1], 3);
  y[0] = y[1] = 0;
  matmul(Tensor(DType::f32, {1, 3}, x), wt, Tensor(DType::f32, {1, 2}, y));
  EXPECT_FLOAT_EQ(y[0], -2);
}

}  // namespace
}  // namespace kapitsa::ops
