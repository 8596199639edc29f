// MLX affine weights on the cpu backend (internal to ops/cpu): the matmul and embedding kernels that
// matmul.cpp / layout.cpp hand a WeightFormat::affine Linear to. Arguments are checked in ops.cpp.
#pragma once

#include "ops/cpu/level.h"
#include "tensor/linear.h"

#include <cstdint>
#include <span>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {

// x: [T, K] f32;  w: affine [N, K];  y: [T, N] f32.
void matmul_affine(const Tensor& x, const Linear& w, const Tensor& y);
// table: affine [V, H];  out: [T, H] f32 (rows dequantized).
void embedding_affine(const Linear& table, std::span<const int32_t> ids, const Tensor& out);

// The int16-activation GEMV (matmul_affine_int16.cpp): x rounded to int16 per kActBlock inputs, each
// block with one scale max|x| / kActMax (constants in cpu.h).
// affine_int16_activations (declared for every level in cpu.h): whether matmul_affine takes the
// int16-activation path for these weights and token count — 4 or 8 bits, groups of a multiple of 64,
// at most 8 tokens, on the avx512 level or on AArch64 (NEON, every level); 4 bits only on the avx2 and
// avxvnni levels.
// y = x·wᵀ with x rounded to int16; only where affine_int16_activations(…, T) holds.
void matmul_affine_int16(const Tensor& x, const Linear& w, const Tensor& y, int64_t T);

// Element i of a scales / biases tensor (bf16, f16 or f32) as f32.
inline float affine_param(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::bf16: return bf16_to_f32(t.data_as<const uint16_t>()[i]);
    case DType::f16: return f16_to_f32(t.data_as<const uint16_t>()[i]);
    default: return t.data_as<const float>()[i];
  }
}

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
