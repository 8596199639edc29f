// GgmlType: the tensor types of llama.cpp's GGUF files (ggml's enum ggml_type, same numbers as stored
// in a file) and the block geometry of each: a row of K values is K / block_size blocks of block_bytes
// bytes, back to back. Which types Kapitsa decodes is ggml_type_supported(); the layout of each block
// is in docs/quantization.md and src/ops/ref/dequantize_ggml.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kapitsa {

enum class GgmlType : uint32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9,
  q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13, q6_k = 14, q8_k = 15,
  iq2_xxs = 16, iq2_xs = 17, iq3_xxs = 18, iq1_s = 19, iq4_nl = 20, iq3_s = 21, iq2_s = 22, iq4_xs = 23,
  i8 = 24, i16 = 25, i32 = 26, i64 = 27, f64 = 28, iq1_m = 29, bf16 = 30, tq1_0 = 34, tq2_0 = 35, mxfp4 = 39,
  // Kapitsa's own block types (no ggml number: a GGUF file naming them is refused, ggml_type_internal),
  // for checkpoints whose weights are floating-point codes with scales (FP8, NVFP4, MXFP8), kept at about
  // their stored size instead of widened to bf16 (docs/quantization.md):
  f8_e4m3_32 = 1000,  // f32 scale, then 32 FP8 E4M3 codes (36 bytes): w = e4m3(code) · scale
  fp4_e2m1_32 = 1001, // f32 scales of inputs 0-15 and 16-31, then 16 bytes of FP4 E2M1 codes, input 2i
                      // in the low nibble of byte i (24 bytes): w = e2m1(code) · scale of its half
};

struct GgmlTypeInfo {
  std::string_view name;  // as llama.cpp prints it ("Q4_K")
  int64_t block_size;     // values per block
  int64_t block_bytes;    // bytes per block
};

// The geometry of a type number read from a file; nullopt for a number ggml does not define. Defined in
// ggml_type.cpp, not inline: the cpu kernels include this header in files compiled once per instruction-set
// level, and an inline copy built with AVX could be the one the linker keeps for every caller
// (tests/ops/level_isolation_test.sh).
std::optional<GgmlTypeInfo> ggml_type_info(uint32_t type);

// Kapitsa's own block types (above): never read from a file.
inline bool ggml_type_internal(GgmlType t) { return t == GgmlType::f8_e4m3_32 || t == GgmlType::fp4_e2m1_32; }

// As llama.cpp prints it; "unknown" for a number ggml does not define (ggml_type.cpp).
std::string_view ggml_type_name(GgmlType t);

// Block types a quantized Linear (WeightFormat::ggml) may hold: what ref's dequantization decodes.
// F32 / F16 / BF16 tensors are loaded as dense weights instead.
inline bool ggml_type_supported(GgmlType t) {
  switch (t) {
    case GgmlType::q4_0: case GgmlType::q4_1: case GgmlType::q5_0: case GgmlType::q5_1: case GgmlType::q8_0:
    case GgmlType::q2_k: case GgmlType::q3_k: case GgmlType::q4_k: case GgmlType::q5_k: case GgmlType::q6_k:
    case GgmlType::iq4_nl: case GgmlType::iq4_xs: case GgmlType::mxfp4:
    case GgmlType::f8_e4m3_32: case GgmlType::fp4_e2m1_32:
      return true;
    default: return false;
  }
}

}  // namespace kapitsa
