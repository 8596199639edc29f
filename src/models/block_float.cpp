// Block floating-point weights (NVFP4, MXFP4, MXFP8): code and scale decoding, dequantization to bf16,
// and MXFP4's repacking into llama.cpp blocks (see block_float.h).
#include "models/block_float.h"

#include "base/thread_pool.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace kapitsa::models {

BlockFloatInfo block_float_info(BlockFloat f) {
  switch (f) {
    case BlockFloat::nvfp4: return {"nvfp4", 4, 16};
    case BlockFloat::mxfp4: return {"mxfp4", 4, 32};
    case BlockFloat::mxfp8: return {"mxfp8", 8, 32};
  }
  return {"?", 0, 0};
}

std::optional<BlockFloat> block_float_from_mode(std::string_view mode) {
  for (BlockFloat f : {BlockFloat::nvfp4, BlockFloat::mxfp4, BlockFloat::mxfp8})
    if (block_float_info(f).name == mode) return f;
  return std::nullopt;
}

float e2m1_to_f32(uint8_t code) {
  static constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMagnitude[code & 7];
  return (code & 8) ? -m : m;
}

float e8m0_to_f32(uint8_t e) {
  if (e == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(e) - 127);  // 2^-127 for e = 0: an f32 subnormal, exact
}

float block_scale_to_f32(BlockFloat f, uint8_t s) { return f == BlockFloat::nvfp4 ? f8_e4m3_to_f32(s) : e8m0_to_f32(s); }

int64_t first_nonfinite_scale(BlockFloat f, const uint8_t* scales, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(block_scale_to_f32(f, scales[i]))) return i;
  return -1;
}

Buffer dequantize_block_float(BlockFloat f, const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t K,
                              float global) {
  const BlockFloatInfo info = block_float_info(f);
  const int64_t groups = K / info.group, row_bytes = K * info.bits / 8;
  Buffer out = Buffer::allocate(DType::bf16, {rows, K});
  uint16_t* dst = out.tensor().data_as<uint16_t>();
  parallel_for(static_cast<size_t>(rows), 16, [&](size_t begin, size_t end) {
    for (int64_t n = static_cast<int64_t>(begin); n < static_cast<int64_t>(end); ++n) {
      const uint8_t* c = codes + n * row_bytes;
      for (int64_t k = 0; k < K; ++k) {
        const float code = info.bits == 4 ? e2m1_to_f32(static_cast<uint8_t>(c[k / 2] >> (4 * (k & 1)))) : f8_e4m3_to_f32(c[k]);
        const float scale = block_scale_to_f32(f, scales[n * groups + k / info.group]);
        dst[n * K + k] = f32_to_bf16(code * scale * global);
      }
    }
  });
  return out;
}

Buffer block_float_to_blocks(BlockFloat f, const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t K,
                             float global) {
  const BlockFloatInfo info = block_float_info(f);
  const bool fp4 = info.bits == 4;
  const int64_t blocks = K / 32, block_bytes = fp4 ? 24 : 36, code_bytes = fp4 ? 16 : 32, per_block = 32 / info.group;
  Buffer out = Buffer::allocate(DType::u8, {rows, blocks * block_bytes});
  uint8_t* dst = out.tensor().data_as<uint8_t>();
  parallel_for(static_cast<size_t>(rows), 16, [&](size_t begin, size_t end) {
    for (int64_t b = static_cast<int64_t>(begin) * blocks; b < static_cast<int64_t>(end) * blocks; ++b) {
      uint8_t* blk = dst + b * block_bytes;
      for (int64_t g = 0; g < per_block; ++g) {
        const float d = block_scale_to_f32(f, scales[b * per_block + g]) * global;
        std::memcpy(blk + 4 * g, &d, 4);
      }
      std::memcpy(blk + 4 * per_block, codes + b * code_bytes, static_cast<size_t>(code_bytes));
    }
  });
  return out;
}

Buffer mxfp4_to_ggml_blocks(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t K) {
  const int64_t blocks = K / 32;
  Buffer out = Buffer::allocate(DType::u8, {rows, blocks * 17});
  uint8_t* dst = out.tensor().data_as<uint8_t>();
  for (int64_t b = 0; b < rows * blocks; ++b) {
    const uint8_t* src = codes + b * 16;  // 32 codes, input 2i in the low nibble of byte i
    uint8_t* blk = dst + b * 17;
    blk[0] = scales[b];
    for (int j = 0; j < 16; ++j) {
      const auto code = [&](int k) { return static_cast<uint8_t>((src[k / 2] >> (4 * (k & 1))) & 0xF); };
      blk[1 + j] = static_cast<uint8_t>(code(j) | (code(16 + j) << 4));
    }
  }
  return out;
}

}  // namespace kapitsa::models
