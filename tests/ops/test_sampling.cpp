// Tests of argmax_rows: the reference keeps the runtime's rule (the first maximum; a NaN never wins, one
// at index 0 gives 0; only the first `columns` count), and every backend equals it on random rows with
// planted ties, NaNs and -inf, up to a real vocabulary's width.
#include "op_test_helpers.h"

#include <cmath>
#include <limits>
#include <vector>

namespace kapitsa::ops {
namespace {
using test::Rng;

constexpr float kArgmaxNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kArgmaxInf = std::numeric_limits<float>::infinity();

TEST(ArgmaxRows, RefTakesTheFirstMaximumAndNeverANan) {
  const std::vector<std::vector<float>> rows = {
      {0, 3, 1, 3},          // tie: the first
      {kArgmaxNan, 5, 6, 1},       // NaN at 0: 0
      {1, kArgmaxNan, 0.5f, kArgmaxNan},  // NaN elsewhere never wins
      {-kArgmaxInf, -kArgmaxInf, -kArgmaxInf, -kArgmaxInf},
      {kArgmaxNan, kArgmaxNan, kArgmaxNan, kArgmaxNan},
      {-kArgmaxInf, kArgmaxNan, -2, -kArgmaxInf},
      {1, 2, 3, 9},          // with columns = 3 below: 2
  };
  const int32_t want[] = {1, 0, 0, 0, 0, 2, 2};
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<float> x = rows[i];
    int32_t out = -1;
    test::run(test::ref(), argmax_rows, Tensor(DType::f32, {1, 4}, x.data()), i + 1 == rows.size() ? 3 : 4,
              Tensor(DType::i32, {1}, &out));
    EXPECT_EQ(out, want[i]) << "row " << i;
  }
}

TEST_P(OnBackend, ArgmaxRowsMatchesRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (auto [R, V] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 7}, {5, 1031}, {17, 16384}, {4, 248320}}) {
    Buffer x = test::random_f32(r, {R, V}, -8, 8);
    std::uniform_int_distribution<int64_t> at(0, V - 1);
    for (int64_t row = 0; row < R; ++row) {
      float* p = x.f32() + row * V;
      switch (row % 5) {
        case 1: {  // the maximum three times
          const int64_t a = at(r.gen), b = at(r.gen), c = at(r.gen);
          p[a] = p[b] = p[c] = 9;
          break;
        }
        case 2:  // NaNs, one at the front
          for (int i = 0; i < 4; ++i) p[at(r.gen)] = kArgmaxNan;
          p[0] = kArgmaxNan;
          break;
        case 3:  // NaNs around a maximum
          p[at(r.gen)] = 20, p[at(r.gen)] = kArgmaxNan;
          break;
        case 4:  // nothing above -inf but NaNs
          for (int64_t i = 0; i < V; ++i) p[i] = i % 3 == 1 ? kArgmaxNan : -kArgmaxInf;
          break;
        default: break;
      }
    }
    for (int64_t columns : {V, (V + 1) / 2}) {
      SCOPED_TRACE(fmt::format("R={} V={} columns={}", R, V, columns));
      Buffer want = Buffer::zeros(DType::i32, {R}), got = Buffer::zeros(DType::i32, {R});
      test::run(test::ref(), argmax_rows, x, columns, want);
      test::run(backend(), argmax_rows, x, columns, got);
      for (int64_t row = 0; row < R; ++row) {
        EXPECT_EQ(got.tensor().data_as<int32_t>()[row], want.tensor().data_as<int32_t>()[row]) << "row " << row;
        EXPECT_LT(want.tensor().data_as<int32_t>()[row], columns);
      }
    }
  }
}

}  // namespace
}  // namespace kapitsa::ops
