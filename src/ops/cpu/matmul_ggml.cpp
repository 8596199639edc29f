// llama.cpp block weights (WeightFormat::ggml, GGUF) on the cpu backend: each block is unpacked into
// unsigned integer codes (non-uniform levels and signed codes biased to be unsigned) plus a (scale,
// offset) per run of 16 or 32 values, then y = scale·q + offset in one
// loop the compiler vectorizes; rows are decoded kTileR at a time into an f32 panel and multiplied with
// the dense register tiles (dot_tile.h): the path for few tokens of the types without an int8 kernel.
// Q8_0 / Q4_K / Q6_K go to the fused int8-activation kernel of matmul_ggml_int8.cpp (any token
// count), the other types at many tokens (prefill) to the packed GEMM of matmul.cpp. Compared with ops/ref in tests/ops/test_ggml.cpp.
#include "ops/cpu/level.h"
#include "ops/cpu/dot_tile.h"
#include "ops/cpu/ggml.h"

#include "base/thread_pool.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {
namespace {

float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// A block unpacked: codes q[i] and, per run of `run` values, y = scale·q + offset.
struct Unpacked {
  uint8_t q[256];
  float scale[16];
  float offset[16];
  int run = 32;
  bool direct = false;  // the values are in `values` instead (MXFP4)
  float values[32];
};

// 32 nibbles of a 16-byte array: low nibbles are values 0..15, high nibbles 16..31.
void nibbles32(const uint8_t* qs, uint8_t* q) {
  for (int j = 0; j < 16; ++j) q[j] = qs[j] & 0xF, q[j + 16] = qs[j] >> 4;
}
// Bit j of qh (32 bits) as bit 4 of value j.
void fifth_bits32(const uint8_t* qh, uint8_t* q) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  for (int j = 0; j < 32; ++j) q[j] |= static_cast<uint8_t>(((h >> j) & 1) << 4);
}
// 32 nibbles of a 16-byte array (order as nibbles32), each an IQ4_NL code-book level (ggml's
// kvalues_iq4nl) plus 128.
void iq4_levels32(const uint8_t* qs, uint8_t* q) {
  constexpr uint8_t kLevels[16] = {1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241};
  for (int j = 0; j < 16; ++j) q[j] = kLevels[qs[j] & 0xF], q[j + 16] = kLevels[qs[j] >> 4];
}
// Q4_K / Q5_K 6-bit scale and min of sub-block j from the 12 packed bytes.
void k4_scale(const uint8_t* s, int j, float d, float dmin, float* sc, float* mn) {
  const int a = j < 4 ? s[j] & 63 : (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
  const int b = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  *sc = d * static_cast<float>(a), *mn = -(dmin * static_cast<float>(b));
}

void unpack(GgmlType type, const uint8_t* b, Unpacked& u) {
  switch (type) {
    case GgmlType::q4_0: u.run = 32, nibbles32(b + 2, u.q), u.scale[0] = half(b), u.offset[0] = -8 * half(b); return;
    case GgmlType::q4_1: u.run = 32, nibbles32(b + 4, u.q), u.scale[0] = half(b), u.offset[0] = half(b + 2); return;
    case GgmlType::q5_0:
      u.run = 32, nibbles32(b + 6, u.q), fifth_bits32(b + 2, u.q), u.scale[0] = half(b), u.offset[0] = -16 * half(b);
      return;
    case GgmlType::q5_1:
      u.run = 32, nibbles32(b + 8, u.q), fifth_bits32(b + 4, u.q), u.scale[0] = half(b), u.offset[0] = half(b + 2);
      return;
    case GgmlType::q8_0:  // signed codes: stored biased by 128 so q stays unsigned
      u.run = 32;
      for (int j = 0; j < 32; ++j) u.q[j] = static_cast<uint8_t>(b[2 + j] ^ 0x80);
      u.scale[0] = half(b), u.offset[0] = -128 * half(b);
      return;
    case GgmlType::q4_k:
    case GgmlType::q5_k: {
      const bool five = type == GgmlType::q5_k;
      const uint8_t* qs = b + (five ? 48 : 16);
      const uint8_t* qh = b + 16;
      u.run = 32;
      for (int c = 0; c < 4; ++c)  // 64 values per 32 bytes: low nibbles, then high nibbles
        for (int l = 0; l < 32; ++l) {
          uint8_t lo = qs[32 * c + l] & 0xF, hi = qs[32 * c + l] >> 4;
          if (five) lo |= ((qh[l] >> (2 * c)) & 1) << 4, hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
          u.q[64 * c + l] = lo, u.q[64 * c + 32 + l] = hi;
        }
      for (int j = 0; j < 8; ++j) k4_scale(b + 4, j, half(b), half(b + 2), &u.scale[j], &u.offset[j]);
      return;
    }
    case GgmlType::q6_k: {
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
      const float d = half(b + 208);
      u.run = 16;
      for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 32; ++l) {
          const uint8_t a = ql[64 * h + l], c = ql[64 * h + 32 + l], top = qh[32 * h + l];
          uint8_t* q = u.q + 128 * h + l;
          q[0] = (a & 0xF) | ((top & 3) << 4);
          q[32] = (c & 0xF) | (((top >> 2) & 3) << 4);
          q[64] = (a >> 4) | (((top >> 4) & 3) << 4);
          q[96] = (c >> 4) | (((top >> 6) & 3) << 4);
        }
      for (int j = 0; j < 16; ++j) u.scale[j] = d * static_cast<float>(sc[j]), u.offset[j] = -32 * u.scale[j];
      return;
    }
    case GgmlType::q2_k: {  // 16 runs of 16: scale d·(sc & 15), offset −dmin·(sc >> 4)
      const uint8_t* qs = b + 16;
      const float d = half(b + 80), dmin = half(b + 82);
      u.run = 16;
      for (int h = 0; h < 2; ++h)
        for (int j = 0; j < 4; ++j)
          for (int l = 0; l < 32; ++l) u.q[128 * h + 32 * j + l] = (qs[32 * h + l] >> (2 * j)) & 3;
      for (int i = 0; i < 16; ++i)
        u.scale[i] = d * static_cast<float>(b[i] & 0xF), u.offset[i] = -(dmin * static_cast<float>(b[i] >> 4));
      return;
    }
    case GgmlType::q3_k: {  // codes q + 4 (0..7): low 2 bits as Q2_K, bit 4h + j of hmask[l] as bit 2
      const uint8_t* hm = b;
      const uint8_t* qs = b + 32;
      const uint8_t* s = b + 96;
      const float d = half(b + 108);
      u.run = 16;
      for (int h = 0; h < 2; ++h)
        for (int j = 0; j < 4; ++j)
          for (int l = 0; l < 32; ++l)
            u.q[128 * h + 32 * j + l] =
                static_cast<uint8_t>(((qs[32 * h + l] >> (2 * j)) & 3) | (((hm[l] >> (4 * h + j)) & 1) << 2));
      for (int i = 0; i < 16; ++i) {
        const int sc = ((i < 8 ? s[i] : s[i - 8] >> 4) & 0xF) | (((s[8 + i % 4] >> (2 * (i / 4))) & 3) << 4);
        u.scale[i] = d * static_cast<float>(sc - 32), u.offset[i] = -4 * u.scale[i];
      }
      return;
    }
    case GgmlType::iq4_nl:  // code-book levels biased by 128 so q stays unsigned
      u.run = 32, iq4_levels32(b + 2, u.q), u.scale[0] = half(b), u.offset[0] = -128 * half(b);
      return;
    case GgmlType::iq4_xs: {
      const float d = half(b);
      const int scales_h = b[2] | (b[3] << 8);
      u.run = 32;
      for (int i = 0; i < 8; ++i) {
        iq4_levels32(b + 8 + 16 * i, u.q + 32 * i);
        const int ls = ((b[4 + i / 2] >> (4 * (i % 2))) & 0xF) | (((scales_h >> (2 * i)) & 3) << 4);
        u.scale[i] = d * static_cast<float>(ls - 32), u.offset[i] = -128 * u.scale[i];
      }
      return;
    }
    case GgmlType::mxfp4: {  // values directly: biased codes times scales up to 2^127 would overflow
      constexpr int8_t kE2m1Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
      const uint32_t bits = b[0] < 2 ? 0x00200000u << b[0] : static_cast<uint32_t>(b[0] - 1) << 23;
      float d;
      std::memcpy(&d, &bits, 4);
      for (int j = 0; j < 16; ++j)
        u.values[j] = static_cast<float>(kE2m1Doubled[b[1 + j] & 0xF]) * d,
        u.values[j + 16] = static_cast<float>(kE2m1Doubled[b[1 + j] >> 4]) * d;
      u.direct = true;
      return;
    }
    default: KAPITSA_CHECK(false, "cpu: ggml type {} is not decoded", ggml_type_name(type));
  }
}

}  // namespace

void dequantize_ggml_row(GgmlType type, const uint8_t* row, int64_t K, float* out) {
  const auto info = ggml_type_info(static_cast<uint32_t>(type));
  KAPITSA_CHECK(info && K % info->block_size == 0, "cpu: ggml {} row of {} values", ggml_type_name(type), K);
  Unpacked u;
  for (int64_t blk = 0; blk < K / info->block_size; ++blk) {
    unpack(type, row + blk * info->block_bytes, u);
    float* y = out + blk * info->block_size;
    if (u.direct) {
      std::memcpy(y, u.values, static_cast<size_t>(info->block_size) * sizeof(float));
      continue;
    }
    for (int64_t i = 0; i < info->block_size; ++i)
      y[i] = u.scale[i / u.run] * static_cast<float>(u.q[i]) + u.offset[i / u.run];
  }
}

// x: [T, K] f32;  w: ggml [N, K];  y: [T, N] f32.
void matmul_ggml(const Tensor& x, const Linear& w, const Tensor& y) {
  const int64_t N = w.rows(), K = w.cols(), T = K == 0 ? 0 : x.numel() / K;
  if (T == 0 || N == 0) return;
  if (ggml_int8_activations(w.ggml_type(), T)) return matmul_ggml_int8(x, w, y, true);
  if (ggml_packed_gemm(T)) return matmul_ggml_packed(x, w, y);
  const auto* blocks = w.weight().data_as<const uint8_t>();
  const int64_t row_bytes = w.weight().dim(-1);
  const float* px = x.f32();
  float* py = y.f32();
  const int64_t panels = (N + kTileR - 1) / kTileR;
  parallel_for(static_cast<size_t>(panels), 1, [&](size_t begin, size_t end) {
    thread_local std::vector<float> panel;
    panel.resize(static_cast<size_t>(kTileR * K));
    for (size_t p = begin; p < end; ++p) {
      const int64_t n0 = static_cast<int64_t>(p) * kTileR;
      const int rb = static_cast<int>(std::min<int64_t>(kTileR, N - n0));
      for (int r = 0; r < rb; ++r) dequantize_ggml_row(w.ggml_type(), blocks + (n0 + r) * row_bytes, K, panel.data() + r * K);
      for (int64_t t0 = 0; t0 < T; t0 += kTileT) {
        const int tb = static_cast<int>(std::min<int64_t>(kTileT, T - t0));
        dot_tile_any<simd::LoadF32>(tb, rb, px + t0 * K, K, panel.data(), K, K, py + t0 * N + n0, N);
      }
    }
  });
}

void embedding_ggml(const Linear& table, std::span<const int32_t> ids, const Tensor& out) {
  const int64_t H = table.cols(), row_bytes = table.weight().dim(-1);
  const auto* blocks = table.weight().data_as<const uint8_t>();
  for (size_t t = 0; t < ids.size(); ++t)
    dequantize_ggml_row(table.ggml_type(), blocks + ids[t] * row_bytes, H, out.f32() + static_cast<int64_t>(t) * H);
}

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
