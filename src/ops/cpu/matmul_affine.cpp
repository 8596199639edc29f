// CPU kernels for MLX affine weights: dequantize-and-dot. A row's K codes are one little-endian bit
// stream; every 32 codes are exactly `bits` uint32 words (a "block", never split by a group since
// group sizes are multiples of 32). A block is decoded to float vectors in registers — per lane, the
// word its code starts in and the one after, shifted and ORed, so codes straddling words (3/5/6 bits)
// cost the same as the rest — with AVX-512 or AVX2 permutes and variable shifts, NEON table lookups
// (TBL) and shifts (USHL) on AArch64, or plain C++ where none of them is compiled for. Σ x·(s·q + b) over a group is s·Σ x·q + b·Σ x: the group sums of x are
// computed once per call, the weights are never widened to f32 in memory for few tokens (decode), and
// at one token four rows are decoded per pass (independent FMA chains sharing the x loads). 8- and
// 4-bit blocks widen bytes / nibbles directly instead of the word-pair permute.
// Many tokens (prefill): rows are dequantized into an L1 panel and run through the dense dot tiles.
// At ≤ 8 tokens, 4- and 8-bit weights on the avx512 level and AArch64, and 4-bit weights on the avx2 and
// avxvnni levels, go to matmul_affine_int16.cpp instead.
#include "base/thread_pool.h"
#include "ops/cpu/affine.h"
#include "ops/cpu/dot_tile.h"
#include "ops/cpu/simd.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {
namespace {
using simd::kW;
using simd::vf;

constexpr int kBlock = 32;            // codes per block
constexpr int kChunks = kBlock / kW;  // float vectors per block
constexpr int kMaxTokens = 4;         // tokens per register pass of the GEMV
constexpr int kGemvRows = 4;          // rows per pass at T = 1: independent FMA chains, shared x loads

// Per code i of a block: the word it starts in, the next word, and the shifts that bring its bits down.
template <int BITS>
struct Lanes {
  alignas(64) int32_t lo[kBlock], hi[kBlock], sr[kBlock], sl[kBlock];
  constexpr Lanes() : lo(), hi(), sr(), sl() {
    for (int i = 0; i < kBlock; ++i) {
      const int p = i * BITS, s = p % 32;
      lo[i] = p / 32;
      hi[i] = p / 32 + 1 < 8 ? p / 32 + 1 : 7;  // s == 0: the high word is shifted out entirely
      sr[i] = s;
      sl[i] = s == 0 ? 32 : 32 - s;             // a shift of 32 gives 0 in the vector shifts
    }
  }
};
template <int BITS>
inline constexpr Lanes<BITS> kLanes{};

#if defined(__aarch64__)
// Lanes as NEON takes them: the 4 byte indices of each code's two words (TBL), and its shifts as USHL
// counts (negative: right; 32: everything out).
template <int BITS>
struct NeonLanes {
  alignas(16) uint8_t lo[4 * kBlock], hi[4 * kBlock];
  alignas(16) int32_t shr[kBlock], shl[kBlock];
  constexpr NeonLanes() : lo(), hi(), shr(), shl() {
    const Lanes<BITS> l;
    for (int i = 0; i < kBlock; ++i) {
      for (int b = 0; b < 4; ++b) lo[4 * i + b] = static_cast<uint8_t>(4 * l.lo[i] + b), hi[4 * i + b] = static_cast<uint8_t>(4 * l.hi[i] + b);
      shr[i] = -l.sr[i], shl[i] = l.sl[i];
    }
  }
};
template <int BITS>
inline constexpr NeonLanes<BITS> kNeonLanes{};

// 16 bytes as 16 floats (4 vectors).
inline void widen_bytes(uint8x16_t v, vf out[4]) {
  const uint16x8_t a = vmovl_u8(vget_low_u8(v)), b = vmovl_high_u8(v);
  out[0] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(a))), out[1] = vcvtq_f32_u32(vmovl_high_u16(a));
  out[2] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(b))), out[3] = vcvtq_f32_u32(vmovl_high_u16(b));
}
#endif

// The 32 codes of the block at `words` (exactly BITS words) as kChunks float vectors. 8 and 4 bits
// widen bytes / nibbles directly; the other widths use the word-pair permute.
template <int BITS>
inline void decode(const uint32_t* words, vf out[kChunks]) {
  [[maybe_unused]] const auto* bytes = reinterpret_cast<const uint8_t*>(words);
#if defined(__AVX512F__)
  if constexpr (BITS == 8) {
    for (int c = 0; c < kChunks; ++c)
      out[c] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + 16 * c))));
  } else if constexpr (BITS == 4) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)), m = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
    out[0] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)));
    out[1] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(lo, hi)));
  } else {
    const Lanes<BITS>& l = kLanes<BITS>;
    const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(BITS), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m512i w = _mm512_zextsi256_si512(_mm256_maskload_epi32(reinterpret_cast<const int*>(words), lanes));
    const __m512i mask = _mm512_set1_epi32((1 << BITS) - 1);
    for (int c = 0; c < kChunks; ++c) {
      const __m512i lo = _mm512_permutexvar_epi32(_mm512_load_si512(l.lo + c * kW), w);
      const __m512i hi = _mm512_permutexvar_epi32(_mm512_load_si512(l.hi + c * kW), w);
      const __m512i v = _mm512_or_si512(_mm512_srlv_epi32(lo, _mm512_load_si512(l.sr + c * kW)),
                                        _mm512_sllv_epi32(hi, _mm512_load_si512(l.sl + c * kW)));
      out[c] = _mm512_cvtepi32_ps(_mm512_and_si512(v, mask));
    }
  }
#elif defined(__AVX2__) && defined(__FMA__)
  if constexpr (BITS == 8) {
    for (int c = 0; c < kChunks; ++c)
      out[c] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + 8 * c))));
  } else if constexpr (BITS == 4) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)), m = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
    const __m128i a = _mm_unpacklo_epi8(lo, hi), b = _mm_unpackhi_epi8(lo, hi);
    out[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(a));
    out[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(a, 8)));
    out[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
    out[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)));
  } else {
    const Lanes<BITS>& l = kLanes<BITS>;
    const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(BITS), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i w = _mm256_maskload_epi32(reinterpret_cast<const int*>(words), lanes);
    const __m256i mask = _mm256_set1_epi32((1 << BITS) - 1);
    auto at = [](const int32_t* t, int c) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(t + c * kW)); };
    for (int c = 0; c < kChunks; ++c) {
      const __m256i lo = _mm256_permutevar8x32_epi32(w, at(l.lo, c)), hi = _mm256_permutevar8x32_epi32(w, at(l.hi, c));
      const __m256i v = _mm256_or_si256(_mm256_srlv_epi32(lo, at(l.sr, c)), _mm256_sllv_epi32(hi, at(l.sl, c)));
      out[c] = _mm256_cvtepi32_ps(_mm256_and_si256(v, mask));
    }
  }
#elif defined(__aarch64__)
  if constexpr (BITS == 8) {
    widen_bytes(vld1q_u8(bytes), out);
    widen_bytes(vld1q_u8(bytes + 16), out + 4);
  } else if constexpr (BITS == 4) {  // byte j: code 2j in the low nibble, 2j + 1 in the high one
    const uint8x16_t v = vld1q_u8(bytes), lo = vandq_u8(v, vdupq_n_u8(0x0f)), hi = vshrq_n_u8(v, 4);
    widen_bytes(vzip1q_u8(lo, hi), out);
    widen_bytes(vzip2q_u8(lo, hi), out + 4);
  } else {
    // The block's BITS words in a zeroed 32-byte table (no read past the row's end), each code's two
    // words gathered by TBL, shifted into place and masked.
    const NeonLanes<BITS>& l = kNeonLanes<BITS>;
    alignas(16) uint8_t table[32] = {};
    std::memcpy(table, words, 4 * BITS);
    const uint8x16x2_t t = {{vld1q_u8(table), vld1q_u8(table + 16)}};
    const uint32x4_t mask = vdupq_n_u32((1u << BITS) - 1);
    for (int c = 0; c < kChunks; ++c) {
      const uint32x4_t lo = vreinterpretq_u32_u8(vqtbl2q_u8(t, vld1q_u8(l.lo + 16 * c)));
      const uint32x4_t hi = vreinterpretq_u32_u8(vqtbl2q_u8(t, vld1q_u8(l.hi + 16 * c)));
      const uint32x4_t v = vorrq_u32(vshlq_u32(lo, vld1q_s32(l.shr + 4 * c)), vshlq_u32(hi, vld1q_s32(l.shl + 4 * c)));
      out[c] = vcvtq_f32_u32(vandq_u32(v, mask));
    }
  }
#else
  const Lanes<BITS>& l = kLanes<BITS>;
  alignas(64) float codes[kBlock];
  for (int i = 0; i < kBlock; ++i) {
    // The next word only where the code straddles two: the block holds exactly BITS words.
    const bool straddles = l.sr[i] + BITS > 32;
    const uint64_t pair = words[l.lo[i]] | (straddles ? static_cast<uint64_t>(words[l.hi[i]]) << 32 : 0);
    codes[i] = static_cast<float>(static_cast<uint32_t>(pair >> l.sr[i]) & ((1u << BITS) - 1));
  }
  for (int c = 0; c < kChunks; ++c) out[c] = simd::load(codes + c * kW);
#endif
}

struct AffineView {
  const uint32_t* words;  // [N, words_per_row]
  const Tensor& scales;   // [N, G]
  const Tensor& biases;
  int64_t words_per_row, K, G, group_size;
};

// Row n dequantized into out[0, K).
template <int BITS>
void dequantize_row(const AffineView& a, int64_t n, float* out) {
  const uint32_t* row = a.words + n * a.words_per_row;
  const int64_t blocks_per_group = a.group_size / kBlock;
  for (int64_t g = 0; g < a.G; ++g) {
    const vf s = simd::set1(affine_param(a.scales, n * a.G + g)), b = simd::set1(affine_param(a.biases, n * a.G + g));
    for (int64_t j = 0; j < blocks_per_group; ++j) {
      const int64_t blk = g * blocks_per_group + j;
      vf q[kChunks];
      decode<BITS>(row + blk * BITS, q);
      for (int c = 0; c < kChunks; ++c) simd::store(out + blk * kBlock + c * kW, simd::fma_exact(q[c], s, b));
    }
  }
}

// y[t, n] for TB tokens and the RB rows from n0: each block of each row is decoded once and dotted
// with every token. xsum: [TB, G] group sums of x;  x: [TB, K];  y: [TB, N] (stride N).
template <int BITS, int TB, int RB>
void gemv_tile(const AffineView& a, const float* x, const float* xsum, float* y, int64_t N, int64_t n0) {
  const int64_t blocks_per_group = a.group_size / kBlock;
  vf acc[TB][RB];
  float bias_sum[TB][RB] = {};
  for (int t = 0; t < TB; ++t)
    for (int r = 0; r < RB; ++r) acc[t][r] = simd::zero();
  for (int64_t g = 0; g < a.G; ++g) {
    vf gacc[TB][RB];
    for (int t = 0; t < TB; ++t)
      for (int r = 0; r < RB; ++r) gacc[t][r] = simd::zero();
    for (int64_t j = 0; j < blocks_per_group; ++j) {
      const int64_t blk = g * blocks_per_group + j;
      vf q[RB][kChunks];
      for (int r = 0; r < RB; ++r) decode<BITS>(a.words + (n0 + r) * a.words_per_row + blk * BITS, q[r]);
      for (int c = 0; c < kChunks; ++c)
        for (int t = 0; t < TB; ++t) {
          const vf xv = simd::load(x + t * a.K + blk * kBlock + c * kW);
          for (int r = 0; r < RB; ++r) gacc[t][r] = simd::fma(xv, q[r][c], gacc[t][r]);
        }
    }
    for (int r = 0; r < RB; ++r) {
      const int64_t at = (n0 + r) * a.G + g;
      const vf s = simd::set1(affine_param(a.scales, at));
      const float b = affine_param(a.biases, at);
      for (int t = 0; t < TB; ++t) {
        acc[t][r] = simd::fma(gacc[t][r], s, acc[t][r]);
        bias_sum[t][r] += b * xsum[t * a.G + g];
      }
    }
  }
  for (int t = 0; t < TB; ++t)
    for (int r = 0; r < RB; ++r) y[t * N + n0 + r] = simd::reduce_add(acc[t][r]) + bias_sum[t][r];
}

// Rows [n0, n1) for the T ≤ kMaxTokens tokens of x: kGemvRows rows at a time for one token, one row
// at a time (reused by up to 4 tokens) otherwise.
template <int BITS>
void gemv_rows(const AffineView& a, int64_t T, const float* x, const float* xsum, float* y, int64_t N, int64_t n0,
               int64_t n1) {
  int64_t n = n0;
  switch (T) {
    case 1:
      for (; n + kGemvRows <= n1; n += kGemvRows) gemv_tile<BITS, 1, kGemvRows>(a, x, xsum, y, N, n);
      for (; n < n1; ++n) gemv_tile<BITS, 1, 1>(a, x, xsum, y, N, n);
      return;
    case 2: for (; n < n1; ++n) gemv_tile<BITS, 2, 1>(a, x, xsum, y, N, n); return;
    case 3: for (; n < n1; ++n) gemv_tile<BITS, 3, 1>(a, x, xsum, y, N, n); return;
    default: for (; n < n1; ++n) gemv_tile<BITS, 4, 1>(a, x, xsum, y, N, n); return;
  }
}

template <int BITS>
void matmul_bits(const AffineView& a, const float* px, float* py, int64_t T, int64_t N) {
  const int64_t K = a.K;
  if (T <= 2 * kMaxTokens) {
    // Group sums of x, once per call (the bias term of every row).
    thread_local std::vector<float> xsum;
    xsum.assign(static_cast<size_t>(T * a.G), 0.0f);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < K; ++k) xsum[static_cast<size_t>(t * a.G + k / a.group_size)] += px[t * K + k];
    const float* xs = xsum.data();
    const int64_t tasks = (N + kGemvRows - 1) / kGemvRows;
    const size_t grain =
        static_cast<size_t>(std::max<int64_t>(1, (32 << 10) / std::max<int64_t>(1, kGemvRows * a.words_per_row * 4)));
    parallel_for(static_cast<size_t>(tasks), grain, [&](size_t begin, size_t end) {
      const int64_t n0 = static_cast<int64_t>(begin) * kGemvRows;
      const int64_t n1 = std::min(N, static_cast<int64_t>(end) * kGemvRows);
      for (int64_t t0 = 0; t0 < T; t0 += kMaxTokens)
        gemv_rows<BITS>(a, std::min<int64_t>(kMaxTokens, T - t0), px + t0 * K, xs + t0 * a.G, py + t0 * N, N, n0, n1);
    });
    return;
  }
  // Many tokens: kTileR rows at a time dequantized into an f32 panel, then the dense register tiles.
  const int64_t blocks = (N + kTileR - 1) / kTileR;
  parallel_for(static_cast<size_t>(blocks), 1, [&](size_t begin, size_t end) {
    thread_local std::vector<float> panel;
    panel.resize(static_cast<size_t>(kTileR * K));
    for (size_t blk = begin; blk < end; ++blk) {
      const int64_t n0 = static_cast<int64_t>(blk) * kTileR;
      const int rb = static_cast<int>(std::min<int64_t>(kTileR, N - n0));
      for (int r = 0; r < rb; ++r) dequantize_row<BITS>(a, n0 + r, panel.data() + r * K);
      int64_t t0 = 0;
      if (rb == kTileR)
        for (; t0 + kTileT <= T; t0 += kTileT)
          dot_tile<simd::LoadF32, kTileT, kTileR>(px + t0 * K, K, panel.data(), K, K, py + t0 * N + n0, N);
      for (; t0 < T; t0 += kTileT) {
        const int tb = static_cast<int>(std::min<int64_t>(kTileT, T - t0));
        dot_tile_any<simd::LoadF32>(tb, rb, px + t0 * K, K, panel.data(), K, K, py + t0 * N + n0, N);
      }
    }
  });
}

// f<BITS>() for the Linear's bits.
template <class F>
void with_bits(int bits, F&& f) {
  switch (bits) {
    case 2: return f.template operator()<2>();
    case 3: return f.template operator()<3>();
    case 4: return f.template operator()<4>();
    case 5: return f.template operator()<5>();
    case 6: return f.template operator()<6>();
    case 8: return f.template operator()<8>();
  }
  KAPITSA_CHECK(false, "affine: {} bits", bits);
}

}  // namespace

void matmul_affine(const Tensor& x, const Linear& w, const Tensor& y) {
  const int64_t N = w.rows(), K = w.cols(), T = K == 0 ? 0 : x.numel() / K;
  if (T == 0 || N == 0) return;
  if (affine_int16_activations(w.bits(), w.group_size(), T)) return matmul_affine_int16(x, w, y, T);
  const AffineView a{w.weight().data_as<const uint32_t>(), w.scales(), w.biases(), w.weight().dim(-1), K,
                     w.scales().dim(-1), w.group_size()};
  with_bits(w.bits(), [&]<int BITS>() { matmul_bits<BITS>(a, x.f32(), y.f32(), T, N); });
}

void embedding_affine(const Linear& table, std::span<const int32_t> ids, const Tensor& out) {
  const int64_t H = table.cols();
  const AffineView a{table.weight().data_as<const uint32_t>(), table.scales(), table.biases(), table.weight().dim(-1),
                     H, table.scales().dim(-1), table.group_size()};
  float* o = out.f32();
  with_bits(table.bits(), [&]<int BITS>() {
    for (size_t t = 0; t < ids.size(); ++t) dequantize_row<BITS>(a, ids[t], o + static_cast<int64_t>(t) * H);
  });
}

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
