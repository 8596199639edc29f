// llama.cpp block weights (WeightFormat::ggml) on the cpu backend (internal to ops/cpu): the matmul and
// embedding that matmul.cpp / layout.cpp hand a ggml Linear to (matmul_ggml.cpp), the int8-activation
// GEMV it takes for few tokens (matmul_ggml_int8.cpp) and the packed GEMM for many (matmul.cpp). Arguments are checked in ops.cpp.
#pragma once

#include "ops/cpu/level.h"
#include "tensor/linear.h"

#include <cstdint>
#include <span>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {

// x: [T, K] f32;  w: ggml [N, K];  y: [T, N] f32.
void matmul_ggml(const Tensor& x, const Linear& w, const Tensor& y);
// table: ggml [V, H];  out: [T, H] f32 (rows dequantized).
void embedding_ggml(const Linear& table, std::span<const int32_t> ids, const Tensor& out);
// One row of K values of blocks of `type` as f32 (cpu's decoder; ops/ref has the reference one).
void dequantize_ggml_row(GgmlType type, const uint8_t* row, int64_t K, float* out);

// Declared for every level in cpu.h (tests call them): the int8-activation GEMV — x rounded per block of
// ggml_int8_block(type) inputs to d·q, q = round(x/d) in [−127, 127], d = max|x| / 127 over the block;
// the block is 32 for Q8_0, 256 for Q4_K and Q6_K on levels with AVX2 + FMA + F16C (x86-64) or NEON
// (AArch64: every level), and there also 32 for Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 and 256 for Q2_K,
// Q3_K, Q5_K, IQ4_XS; 0 for other types (Kapitsa's float blocks) and levels. ggml_int8_activations: whether matmul_ggml takes that
// path (any token count: at 512 tokens it measured 1.4× (Q8_0) and 1.8× (Q4_K) faster than the packed
// GEMM on x86-64, docs/performance.md).
// ggml_int8_has_vnni: whether the level has VPDPBUSD (AVX-512 VNNI + VL, or AVX-VNNI) or SDOT (AArch64's
// dotprod level); matmul_ggml_int8 with vnni = false uses the AVX2 (or plain NEON) dot products even
// there (so tests cover both).
// matmul_ggml_packed: prefill of the other block types (matmul.cpp) — from ggml_packed_gemm(tokens)
// on, rows are decoded 32 at a time into a transposed f32 panel for the dense packed kernel.
bool ggml_packed_gemm(int64_t tokens);

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
