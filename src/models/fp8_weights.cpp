// FP8 E4M3 weights: scale layouts and the dequantization to bf16 (see fp8_weights.h).
#include "models/fp8_weights.h"

#include "base/thread_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace kapitsa::models {

Expected<Fp8Layout> fp8_layout(const std::vector<int64_t>& s, int64_t N, int64_t K, std::array<int64_t, 2> block) {
  int64_t numel = 1;
  for (int64_t d : s) numel *= d;
  if (numel == 1) return Fp8Layout{N, K};
  if ((s.size() == 1 && s[0] == N) || (s.size() == 2 && s[0] == N && s[1] == 1)) return Fp8Layout{1, K};
  const int64_t bn = (N + block[0] - 1) / block[0], bk = (K + block[1] - 1) / block[1];
  if (s.size() == 2 && s[0] == bn && s[1] == bk) return Fp8Layout{block[0], block[1]};
  std::string shape;
  for (int64_t d : s) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  return error("has shape [{}]; for a weight [{}, {}] expected [1] (per tensor), [{}, 1] (per row) or [{}, {}] (blocks of "
               "{}×{})", shape, N, K, N, bn, bk, block[0], block[1]);
}

Buffer dequantize_fp8(const Tensor& w, const std::vector<float>& scales, const Fp8Layout& layout) {
  const int64_t N = w.dim(0), K = w.dim(1), scale_cols = (K + layout.block_cols - 1) / layout.block_cols;
  Buffer out = Buffer::allocate(DType::bf16, {N, K});
  const uint8_t* codes = w.data_as<const uint8_t>();
  uint16_t* dst = out.tensor().data_as<uint16_t>();
  parallel_for(static_cast<size_t>(N), 16, [&](size_t begin, size_t end) {
    for (int64_t n = static_cast<int64_t>(begin); n < static_cast<int64_t>(end); ++n) {
      const float* row_scales = scales.data() + (n / layout.block_rows) * scale_cols;
      for (int64_t k = 0; k < K; ++k)
        dst[n * K + k] = f32_to_bf16(f8_e4m3_to_f32(codes[n * K + k]) * row_scales[k / layout.block_cols]);
    }
  });
  return out;
}

bool fp8_blocks_fit(const Fp8Layout& layout, int64_t K) { return K % 32 == 0 && layout.block_cols % 32 == 0; }

Buffer fp8_to_blocks(const Tensor& w, const std::vector<float>& scales, const Fp8Layout& layout) {
  const int64_t N = w.dim(0), K = w.dim(1), scale_cols = (K + layout.block_cols - 1) / layout.block_cols;
  const int64_t blocks = K / 32;
  Buffer out = Buffer::allocate(DType::u8, {N, blocks * 36});
  const uint8_t* codes = w.data_as<const uint8_t>();
  uint8_t* dst = out.tensor().data_as<uint8_t>();
  parallel_for(static_cast<size_t>(N), 16, [&](size_t begin, size_t end) {
    for (int64_t n = static_cast<int64_t>(begin); n < static_cast<int64_t>(end); ++n) {
      const float* row_scales = scales.data() + (n / layout.block_rows) * scale_cols;
      for (int64_t b = 0; b < blocks; ++b) {
        uint8_t* blk = dst + (n * blocks + b) * 36;
        std::memcpy(blk, &row_scales[b * 32 / layout.block_cols], 4);
        std::memcpy(blk + 4, codes + n * K + b * 32, 32);
      }
    }
  });
  return out;
}

int64_t first_nan_e4m3(const uint8_t* codes, int64_t n) {
  // Every code of a large checkpoint passes here once, at load: scanned in parallel chunks, the first
  // NaN of each chunk kept, the lowest of those returned.
  constexpr int64_t kChunk = int64_t{1} << 20;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<int64_t> first(static_cast<size_t>(chunks), -1);
  parallel_for(static_cast<size_t>(chunks), 1, [&](size_t begin, size_t end) {
    for (size_t c = begin; c < end; ++c) {
      const int64_t lo = static_cast<int64_t>(c) * kChunk, hi = std::min(n, lo + kChunk);
      for (int64_t i = lo; i < hi; ++i)
        if ((codes[i] & 0x7F) == 0x7F) {
          first[c] = i;
          break;
        }
    }
  });
  for (int64_t i : first)
    if (i >= 0) return i;
  return -1;
}

}  // namespace kapitsa::models
