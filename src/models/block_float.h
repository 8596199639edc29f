// Block floating-point weights: small float codes sharing one scale per group of inputs, as NVIDIA's
// ModelOpt NVFP4 releases and mlx's "mxfp4" / "nvfp4" / "mxfp8" quantization modes store them.
//   NVFP4: FP4 E2M1 codes, one FP8 E4M3 scale per 16 inputs (ModelOpt adds an F32 per-tensor factor,
//          "weight_scale_2"; mlx has none).
//   MXFP4: FP4 E2M1 codes, one E8M0 scale (a power of two, 2^(e − 127)) per 32 inputs.
//   MXFP8: FP8 E4M3 codes, one E8M0 scale per 32 inputs.
// 4-bit codes are packed two per byte along the inputs, input 2i in the low nibble of byte i (ModelOpt's
// U8 [N, K/2]; mlx's U32 [N, K/8] words hold the same little-endian bytes). Value of input k of a row:
// code(k) · scale(k / group) · global, in f32 in that order.
// On the cpu NVFP4 and MXFP8 are repacked into Kapitsa's own blocks of 32 (codes as stored, f32 scales:
// 0.75 / 1.125 bytes per weight resident, block_float_to_blocks); on the GPU they are dequantized once at
// load to bf16 (each value rounded once). MXFP4 is repacked into llama.cpp's MXFP4 blocks (identical values: ggml's
// block is the same E8M0 byte plus 16 bytes of E2M1 codes, input j in the low nibble of byte j and
// input 16 + j in its high nibble), so the GGUF kernels (ref and cpu, tests/ops/test_ggml.cpp) run it
// at 4.25 bits per weight.
#pragma once

#include "tensor/tensor.h"

#include <cstdint>
#include <optional>
#include <string_view>

namespace kapitsa::models {

enum class BlockFloat { nvfp4, mxfp4, mxfp8 };

struct BlockFloatInfo {
  std::string_view name;  // "nvfp4", as mlx spells the mode
  int bits;               // per code
  int group;              // inputs per scale
};
BlockFloatInfo block_float_info(BlockFloat f);
// The format of an mlx quantization mode ("mxfp4", "nvfp4", "mxfp8"); nullopt for any other.
std::optional<BlockFloat> block_float_from_mode(std::string_view mode);

// FP4 E2M1 (sign, 2 exponent bits with bias 1, 1 mantissa bit; no Inf/NaN): ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}.
float e2m1_to_f32(uint8_t code);
// E8M0 (exponent only, bias 127): 2^(e − 127); 0xFF is NaN.
float e8m0_to_f32(uint8_t e);
// A scale code of format f as a float: E4M3 for NVFP4, E8M0 for the MX formats.
float block_scale_to_f32(BlockFloat f, uint8_t s);

// Index of the first of n scale codes that is not finite (E4M3 0x7F / 0xFF, E8M0 0xFF), or −1.
int64_t first_nonfinite_scale(BlockFloat f, const uint8_t* scales, int64_t n);

// codes: rows × K values packed as above;  scales: [rows, K / group] codes;  global: the per-tensor factor
// (1 where the format has none). Returns bf16 [rows, K] (the caller reshapes).
Buffer dequantize_block_float(BlockFloat f, const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t K,
                              float global);

// NVFP4 / MXFP8 rows (codes and scales as above, K % 32 == 0) as Kapitsa's FP4_E2M1_32 / F8_E4M3_32 blocks
// (tensor/ggml_type.h): u8 [rows, K / 32 · 24 | 36], the codes as stored and each group's scale as f32
// (NVFP4: the E4M3 scale times global; MXFP8: 2^(e − 127)). What the cpu keeps: 0.75 / 1.125 bytes per weight.
Buffer block_float_to_blocks(BlockFloat f, const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t K,
                             float global);
// MXFP4 rows (codes and E8M0 scales as above) as llama.cpp MXFP4 blocks: u8 [rows, K / 32 · 17].
Buffer mxfp4_to_ggml_blocks(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t K);

}  // namespace kapitsa::models
