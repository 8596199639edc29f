// DType tables and the float16 / fp8 conversions.
#include "tensor/dtype.h"

#include <cmath>

namespace kapitsa {
namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
  bool is_float;
};
constexpr DTypeInfo kTable[] = {
    {DType::f32, "F32", 4, true},      {DType::f16, "F16", 2, true},    {DType::bf16, "BF16", 2, true},
    {DType::f8_e4m3, "F8_E4M3", 1, true}, {DType::f64, "F64", 8, true}, {DType::u8, "U8", 1, false},
    {DType::i8, "I8", 1, false},       {DType::u16, "U16", 2, false},   {DType::i16, "I16", 2, false},
    {DType::u32, "U32", 4, false},     {DType::i32, "I32", 4, false},   {DType::i64, "I64", 8, false},
    {DType::boolean, "BOOL", 1, false},
};
const DTypeInfo& info(DType t) { return kTable[static_cast<size_t>(t)]; }
}  // namespace

size_t dtype_size(DType t) { return info(t).size; }
std::string_view dtype_name(DType t) { return info(t).name; }
bool dtype_is_float(DType t) { return info(t).is_float; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& entry : kTable)
    if (entry.name == name) return entry.type;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // zero or subnormal: value = mantissa × 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00u;
  if (a >= 65520.0f) return sign | 0x7c00u;  // rounds to infinity
  if (a < 6.103515625e-05f) {                // subnormal range: quantise to multiples of 2^-24
    const float scaled = a * 16777216.0f;    // 2^24
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t m = u & 0x7fffffffu;
  m += 0x0fffu + ((m >> 13) & 1u);  // round to nearest even at bit 13
  const uint32_t exponent = (m >> 23) - 112;
  return sign | static_cast<uint16_t>((exponent << 10) | ((m >> 13) & 0x3ffu));
}

float f8_e4m3_to_f32(uint8_t v) {
  // OCP E4M3 ("fn"): bias 7, no infinities, S.1111.111 is NaN.
  const bool negative = v & 0x80u;
  const int exponent = (v >> 3) & 0xf;
  const int mantissa = v & 0x7;
  float magnitude;
  if (exponent == 0xf && mantissa == 0x7) {
    magnitude = NAN;
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m/8 × 2^-6
  } else {
    magnitude = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  }
  return negative ? -magnitude : magnitude;
}

}  // namespace kapitsa
