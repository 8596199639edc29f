// FNV-1a, 64 bits: a short, stable hash for names and identities (model fingerprints, token prefixes),
// not for bulk data (the disk cache's checksums are zlib's crc32) nor for anything adversarial.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace kapitsa {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;

// Continues `h` over `bytes` (start from kFnvOffset).
inline uint64_t fnv1a(std::span<const std::byte> bytes, uint64_t h = kFnvOffset) {
  for (std::byte b : bytes) h = (h ^ static_cast<uint8_t>(b)) * 1099511628211ull;
  return h;
}
inline uint64_t fnv1a(std::string_view text, uint64_t h = kFnvOffset) {
  return fnv1a(std::as_bytes(std::span<const char>(text.data(), text.size())), h);
}
template <typename T>
uint64_t fnv1a_values(std::span<const T> values, uint64_t h = kFnvOffset) {
  return fnv1a(std::as_bytes(values), h);
}

}  // namespace kapitsa
