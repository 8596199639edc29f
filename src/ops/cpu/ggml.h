// llama.cpp block weights (WeightFormat::ggml) on the cpu backend (internal to ops/cpu): the matmul and
// embedding that matmul.cpp / layout.cpp hand a ggml Linear to (matmul_ggml.cpp). Arguments are
// checked in ops.cpp.
#pragma once

#include "tensor/linear.h"

#include <cstdint>
#include <span>

namespace kapitsa::ops::cpu {

// x: [T, K] f32;  w: ggml [N, K];  y: [T, N] f32.
void matmul_ggml(const Tensor& x, const Linear& w, const Tensor& y);
// table: ggml [V, H];  out: [T, H] f32 (rows dequantized).
void embedding_ggml(const Linear& table, std::span<const int32_t> ids, const Tensor& out);
// One row of K values of blocks of `type` as f32 (cpu's decoder; ops/ref has the reference one).
void dequantize_ggml_row(GgmlType type, const uint8_t* row, int64_t K, float* out);

}  // namespace kapitsa::ops::cpu
