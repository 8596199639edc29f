// DType: element types of tensors in checkpoint files and in memory, and scalar conversions
// between the 16/8-bit float formats and float32. Conversions are exact (widening) or round to
// nearest even (narrowing), matching PyTorch.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace kapitsa {

enum class DType : uint8_t { f32, f16, bf16, f8_e4m3, f64, u8, i8, u16, i16, u32, i32, i64, boolean };

size_t dtype_size(DType t);
// Safetensors spelling ("F32", "BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view safetensors_name);
bool dtype_is_float(DType t);

inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float f8_e4m3_to_f32(uint8_t v);

}  // namespace kapitsa
