// FP8 E4M3 weights with scales, as NVIDIA-style FP8 checkpoints store them: "M.weight" F8_E4M3 [N, K]
// with "M.weight_scale_inv" (block-FP8 releases, quant_method "fp8": one F32 scale per 128×128 block)
// or "M.weight_scale" (compressed-tensors "float-quantized" and ModelOpt FP8: one per tensor, per output
// row or per block). w[n, k] = e4m3(code[n, k]) · scale[n / block_rows, k / block_cols] (the "_inv" of
// block-FP8 names what the quantizer divided by: loading multiplies). On the cpu the codes are kept in
// blocks of 32 with an f32 scale (fp8_to_blocks, read by the block-weight kernels); on the GPU, or where
// 32 inputs do not share a scale, dequantized once to bf16.
#pragma once

#include "base/status.h"
#include "tensor/tensor.h"

#include <array>
#include <cstdint>
#include <vector>

namespace kapitsa::models {

struct Fp8Layout {
  int64_t block_rows = 0;  // output rows per scale (N for a per-tensor scale, 1 per row)
  int64_t block_cols = 0;  // inputs per scale (K unless block-wise)
};

// How a scale tensor of `scale_shape` covers a weight [N, K]: one scale ([] or [1]), one per row ([N]
// or [N, 1]), or one per block of `block` ([ceil(N / block[0]), ceil(K / block[1])]). Anything else is
// an error saying what was expected.
Expected<Fp8Layout> fp8_layout(const std::vector<int64_t>& scale_shape, int64_t N, int64_t K,
                               std::array<int64_t, 2> block);

// w: [N, K] F8_E4M3; scales: f32 values laid out as `layout` says. Returns bf16 [N, K], each value the
// f32 product rounded once to bf16 (the CUDA backend's copy, and where blocks do not fit).
Buffer dequantize_fp8(const Tensor& w, const std::vector<float>& scales, const Fp8Layout& layout);

// Whether every 32 inputs of a row share one scale (K % 32 == 0, scale blocks a multiple of 32 wide):
// then the cpu keeps the codes as stored, in Kapitsa's F8_E4M3_32 blocks (tensor/ggml_type.h).
bool fp8_blocks_fit(const Fp8Layout& layout, int64_t K);
// w, scales, layout as above, fp8_blocks_fit: F8_E4M3_32 blocks u8 [N, K/32 · 36], each block's codes
// as stored and its scale as f32 (1.125 bytes per weight resident).
Buffer fp8_to_blocks(const Tensor& w, const std::vector<float>& scales, const Fp8Layout& layout);
// Index of the first NaN among n E4M3 codes (0x7F or 0xFF), or −1.
int64_t first_nan_e4m3(const uint8_t* codes, int64_t n);

}  // namespace kapitsa::models
