// CPU kernels for MLX affine weights: dequantize-and-dot. A row's K codes are one little-endian bit
// stream; every 32 codes are exactly `bits` uint32 words (a "block", never split by a group since
// group sizes are multiples of 32). A block is decoded to float vectors in registers — per lane, the
// word its code starts in and the one after, shifted and ORed, so codes straddling words (3/5/6 bits)
// cost the same as the rest — with AVX-512 or AVX2 permutes and variable shifts, or plain C++ where
// neither is compiled for. Σ x·(s·q + b) over a group is s·Σ x·q + b·Σ x: the group sums of x are
// computed once per call, the weights are never widened to f32 in memory for few tokens (decode).
// Many tokens (prefill): rows are dequantized into an L1 panel and run through the dense dot tiles.
#include "base/thread_pool.h"
#include "ops/cpu/affine.h"
#include "ops/cpu/dot_tile.h"
#include "ops/cpu/simd.h"

#include <algorithm>
#include <array>
#include <vector>

namespace kapitsa::ops::cpu {
namespace {
using simd::kW;
using simd::vf;

constexpr int kBlock = 32;               // codes per block
constexpr int kChunks = kBlock / kW;     // float vectors per block
constexpr int kMaxTokens = 4;            // tokens per register pass of the GEMV
constexpr int kRowsPerTask = 4;

float scalar_param(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::bf16: return bf16_to_f32(t.data_as<const uint16_t>()[i]);
    case DType::f16: return f16_to_f32(t.data_as<const uint16_t>()[i]);
    default: return t.data_as<const float>()[i];
  }
}

// Decodes blocks of one bits value: lane tables built once per call.
class BlockDecoder {
 public:
  explicit BlockDecoder(int bits) : bits_(bits), mask_((1u << bits) - 1) {
    for (int i = 0; i < kBlock; ++i) {
      const int p = i * bits, s = p % 32;
      lo_[i] = p / 32;
      hi_[i] = std::min(p / 32 + 1, 7);  // s == 0: the high word is not used (shifted out)
      sr_[i] = s;
      sl_[i] = s == 0 ? 32 : 32 - s;     // a shift of 32 gives 0 in the vector shifts
    }
  }

  // The 32 codes of the block at `words` (exactly bits_ words) as kChunks float vectors.
  void decode(const uint32_t* words, vf out[kChunks]) const {
#if defined(__AVX512F__)
    const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(bits_), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m512i w = _mm512_zextsi256_si512(_mm256_maskload_epi32(reinterpret_cast<const int*>(words), lanes));
    const __m512i mask = _mm512_set1_epi32(static_cast<int>(mask_));
    for (int c = 0; c < kChunks; ++c) {
      const __m512i lo = _mm512_permutexvar_epi32(load_i(lo_, c), w), hi = _mm512_permutexvar_epi32(load_i(hi_, c), w);
      const __m512i v = _mm512_or_si512(_mm512_srlv_epi32(lo, load_i(sr_, c)), _mm512_sllv_epi32(hi, load_i(sl_, c)));
      out[c] = _mm512_cvtepi32_ps(_mm512_and_si512(v, mask));
    }
#elif defined(__AVX2__) && defined(__FMA__)
    const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(bits_), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i w = _mm256_maskload_epi32(reinterpret_cast<const int*>(words), lanes);
    const __m256i mask = _mm256_set1_epi32(static_cast<int>(mask_));
    for (int c = 0; c < kChunks; ++c) {
      const __m256i lo = _mm256_permutevar8x32_epi32(w, load_i(lo_, c)), hi = _mm256_permutevar8x32_epi32(w, load_i(hi_, c));
      const __m256i v = _mm256_or_si256(_mm256_srlv_epi32(lo, load_i(sr_, c)), _mm256_sllv_epi32(hi, load_i(sl_, c)));
      out[c] = _mm256_cvtepi32_ps(_mm256_and_si256(v, mask));
    }
#else
    alignas(64) float codes[kBlock];
    for (int i = 0; i < kBlock; ++i) {
      const uint64_t pair = words[lo_[i]] | (sr_[i] != 0 ? static_cast<uint64_t>(words[hi_[i]]) << 32 : 0);
      codes[i] = static_cast<float>(static_cast<uint32_t>(pair >> sr_[i]) & mask_);
    }
    for (int c = 0; c < kChunks; ++c) out[c] = simd::load(codes + c * kW);
#endif
  }

  // The block's codes as 32 floats in memory.
  void decode_to(const uint32_t* words, float* out) const {
    vf v[kChunks];
    decode(words, v);
    for (int c = 0; c < kChunks; ++c) simd::store(out + c * kW, v[c]);
  }

 private:
#if defined(__AVX512F__)
  static __m512i load_i(const std::array<int32_t, kBlock>& a, int c) { return _mm512_loadu_si512(a.data() + c * kW); }
#elif defined(__AVX2__) && defined(__FMA__)
  static __m256i load_i(const std::array<int32_t, kBlock>& a, int c) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.data() + c * kW));
  }
#endif
  int bits_;
  uint32_t mask_;
  alignas(64) std::array<int32_t, kBlock> lo_{}, hi_{}, sr_{}, sl_{};
};

struct AffineView {
  const uint32_t* words;  // [N, words_per_row]
  const Tensor& scales;   // [N, G]
  const Tensor& biases;
  int64_t words_per_row, K, G, group_size, bits;
};

// Row n dequantized into out[0, K).
void dequantize_row(const AffineView& a, const BlockDecoder& dec, int64_t n, float* out) {
  const uint32_t* row = a.words + n * a.words_per_row;
  const int64_t blocks_per_group = a.group_size / kBlock;
  for (int64_t g = 0; g < a.G; ++g) {
    const vf s = simd::set1(scalar_param(a.scales, n * a.G + g)), b = simd::set1(scalar_param(a.biases, n * a.G + g));
    for (int64_t j = 0; j < blocks_per_group; ++j) {
      vf q[kChunks];
      dec.decode(row + (g * blocks_per_group + j) * a.bits, q);
      float* o = out + (g * blocks_per_group + j) * kBlock;
      for (int c = 0; c < kChunks; ++c) simd::store(o + c * kW, simd::fma(q[c], s, b));
    }
  }
}

// y[t, n] for TB tokens (≤ kMaxTokens) and rows [n0, n1): the codes are decoded once per block and
// dotted with every token; xsum: [TB, G] group sums of x.
template <int TB>
void gemv_rows(const AffineView& a, const BlockDecoder& dec, const float* x, const float* xsum, float* y, int64_t N,
               int64_t n0, int64_t n1) {
  const int64_t blocks_per_group = a.group_size / kBlock;
  for (int64_t n = n0; n < n1; ++n) {
    const uint32_t* row = a.words + n * a.words_per_row;
    vf acc[TB];
    float bias_sum[TB] = {};
    for (int t = 0; t < TB; ++t) acc[t] = simd::zero();
    for (int64_t g = 0; g < a.G; ++g) {
      vf gacc[TB];
      for (int t = 0; t < TB; ++t) gacc[t] = simd::zero();
      for (int64_t j = 0; j < blocks_per_group; ++j) {
        const int64_t k0 = (g * blocks_per_group + j) * kBlock;
        vf q[kChunks];
        dec.decode(row + (k0 / kBlock) * a.bits, q);
        for (int t = 0; t < TB; ++t)
          for (int c = 0; c < kChunks; ++c) gacc[t] = simd::fma(simd::load(x + t * a.K + k0 + c * kW), q[c], gacc[t]);
      }
      const float s = scalar_param(a.scales, n * a.G + g), b = scalar_param(a.biases, n * a.G + g);
      const vf sv = simd::set1(s);
      for (int t = 0; t < TB; ++t) {
        acc[t] = simd::fma(gacc[t], sv, acc[t]);
        bias_sum[t] += b * xsum[t * a.G + g];
      }
    }
    for (int t = 0; t < TB; ++t) y[t * N + n] = simd::reduce_add(acc[t]) + bias_sum[t];
  }
}

}  // namespace

void matmul_affine(const Tensor& x, const Linear& w, const Tensor& y) {
  const int64_t N = w.rows(), K = w.cols(), T = K == 0 ? 0 : x.numel() / K;
  if (T == 0 || N == 0) return;
  const AffineView a{w.weight().data_as<const uint32_t>(), w.scales(), w.biases(), w.weight().dim(-1), K,
                     w.scales().dim(-1), w.group_size(), w.bits()};
  const BlockDecoder dec(w.bits());
  const float* px = x.f32();
  float* py = y.f32();
  if (T <= 2 * kMaxTokens) {
    // Group sums of x, once per call (the bias term of every row).
    thread_local std::vector<float> xsum;
    xsum.assign(static_cast<size_t>(T * a.G), 0.0f);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < K; ++k) xsum[static_cast<size_t>(t * a.G + k / a.group_size)] += px[t * K + k];
    const float* xs = xsum.data();
    const int64_t tasks = (N + kRowsPerTask - 1) / kRowsPerTask;
    const size_t grain = static_cast<size_t>(std::max<int64_t>(1, (32 << 10) / std::max<int64_t>(1, kRowsPerTask * a.words_per_row * 4)));
    parallel_for(static_cast<size_t>(tasks), grain, [&](size_t begin, size_t end) {
      const int64_t n0 = static_cast<int64_t>(begin) * kRowsPerTask, n1 = std::min(N, static_cast<int64_t>(end) * kRowsPerTask);
      for (int64_t t0 = 0; t0 < T; t0 += kMaxTokens) {
        const int64_t tb = std::min<int64_t>(kMaxTokens, T - t0);
        const float* xt = px + t0 * K;
        const float* st = xs + t0 * a.G;
        float* yt = py + t0 * N;
        switch (tb) {
          case 1: gemv_rows<1>(a, dec, xt, st, yt, N, n0, n1); break;
          case 2: gemv_rows<2>(a, dec, xt, st, yt, N, n0, n1); break;
          case 3: gemv_rows<3>(a, dec, xt, st, yt, N, n0, n1); break;
          default: gemv_rows<4>(a, dec, xt, st, yt, N, n0, n1); break;
        }
      }
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
      for (int r = 0; r < rb; ++r) dequantize_row(a, dec, n0 + r, panel.data() + r * K);
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

void embedding_affine(const Linear& table, std::span<const int32_t> ids, const Tensor& out) {
  const int64_t H = table.cols();
  const AffineView a{table.weight().data_as<const uint32_t>(), table.scales(), table.biases(), table.weight().dim(-1),
                     H, table.scales().dim(-1), table.group_size(), table.bits()};
  const BlockDecoder dec(table.bits());
  float* o = out.f32();
  for (size_t t = 0; t < ids.size(); ++t) dequantize_row(a, dec, ids[t], o + static_cast<int64_t>(t) * H);
}

}  // namespace kapitsa::ops::cpu
