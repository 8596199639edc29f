// MLX affine weights on the cpu backend (internal to ops/cpu): the matmul and embedding kernels that
// matmul.cpp / layout.cpp hand a WeightFormat::affine Linear to. Arguments are checked in ops.cpp.
#pragma once

#include "tensor/linear.h"

#include <cstdint>
#include <span>

namespace kapitsa::ops::cpu {

// x: [T, K] f32;  w: affine [N, K];  y: [T, N] f32.
void matmul_affine(const Tensor& x, const Linear& w, const Tensor& y);
// table: affine [V, H];  out: [T, H] f32 (rows dequantized).
void embedding_affine(const Linear& table, std::span<const int32_t> ids, const Tensor& out);

}  // namespace kapitsa::ops::cpu
