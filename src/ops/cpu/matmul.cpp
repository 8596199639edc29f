// CPU matmul y = x·wᵀ with f32/bf16/f16 weights used in place, f32 accumulation (MLX affine weights:
// matmul_affine.cpp).
// T = 1 (decode GEMV) is memory-bound: rows are split across threads and each pass streams
// kGemvRows weight rows against the cached x. T > 1 works on (row block × token chunk) tasks, so
// each weight row is read from memory once per token chunk, not once per token: below 64 tokens with
// dot-product register tiles (each row summed as the GEMV sums it), larger T (prefill) with the classic packed outer-product kernel
// (kPackRows weight rows widened and transposed to [K, kPackRows], tokens broadcast); bf16 weights go to
// the AMX tiles instead where the CPU has them (matmul_amx.cpp).
#include "base/thread_pool.h"
#include "ops/composed/composed.h"
#include "ops/cpu/affine.h"
#include "ops/cpu/amx.h"
#include "ops/cpu/ggml.h"
#include "ops/cpu/level.h"
#include "ops/cpu/dot_tile.h"

#include <algorithm>
#include <array>
#include <utility>
#include <type_traits>
#include <vector>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {
namespace {

constexpr int kGemvRows = 8;  // rows per GEMV pass: 8 independent FMA chains, 8 prefetch streams

template <class WL>
void gemv(const float* x, const typename WL::T* w, float* y, int64_t K, int64_t N) {
  const int64_t groups = (N + kGemvRows - 1) / kGemvRows;
  const int64_t group_bytes = kGemvRows * K * static_cast<int64_t>(sizeof(typename WL::T));
  const size_t grain = static_cast<size_t>(std::max<int64_t>(1, (32 << 10) / std::max<int64_t>(1, group_bytes)));
  parallel_for(static_cast<size_t>(groups), grain, [&](size_t begin, size_t end) {
    for (size_t g = begin; g < end; ++g) {
      const int64_t n0 = static_cast<int64_t>(g) * kGemvRows;
      const int64_t nr = std::min<int64_t>(kGemvRows, N - n0);
      if (nr == kGemvRows) {
        dot_tile<WL, 1, kGemvRows>(x, K, w + n0 * K, K, K, y + n0, 0);
      } else {
        for (int64_t n = n0; n < n0 + nr; ++n) dot_tile<WL, 1, 1>(x, K, w + n * K, K, K, y + n, 0);
      }
    }
  });
}

// Rows [0, rb) of w (stride K) as f32: the rows themselves for f32 weights, else widened into panel.
template <class WL>
const float* widen_panel(const typename WL::T* w, int rb, int64_t K, std::vector<float>& panel) {
  if constexpr (std::is_same_v<WL, simd::LoadF32>) {
    return w;
  } else {
    panel.resize(static_cast<size_t>(rb * K));
    const int64_t n = rb * K;
    int64_t i = 0;
    for (; i + simd::kW <= n; i += simd::kW) simd::store(panel.data() + i, WL::load(w + i));
    for (; i < n; ++i) panel[static_cast<size_t>(i)] = WL::scalar(w + i);
    return panel.data();
  }
}

template <class WL>
void gemm_small(const float* x, const typename WL::T* w, float* y, int64_t T, int64_t K, int64_t N) {
  const int64_t esize = static_cast<int64_t>(sizeof(typename WL::T));
  // Token chunk: x chunk ≈ 256 KiB (L2), at least one tile, whole T when small.
  int64_t tc = std::max<int64_t>(kTileT, ((256 << 10) / (4 * K)) / kTileT * kTileT);
  tc = std::min<int64_t>(tc, 256);
  if (T <= tc) tc = T;
  const int64_t n_tc = (T + tc - 1) / tc;
  // Row block: ≈ 128 KiB of weights (L2), but enough blocks to feed every thread.
  const int64_t threads = static_cast<int64_t>(default_thread_pool().size());
  int64_t nb = std::max<int64_t>(kTileR, ((128 << 10) / (esize * K)) / kTileR * kTileR);
  const int64_t min_tasks = threads * 4;
  if (n_tc * ((N + nb - 1) / nb) < min_tasks) {
    const int64_t want_blocks = (min_tasks + n_tc - 1) / n_tc;
    nb = std::max<int64_t>(kTileR, ((N + want_blocks - 1) / want_blocks + kTileR - 1) / kTileR * kTileR);
  }
  const int64_t n_nb = (N + nb - 1) / nb;
  // Task order: row block major, so one thread's consecutive tasks reuse the same weights from cache.
  parallel_for(static_cast<size_t>(n_nb * n_tc), 1, [&](size_t begin, size_t end) {
    thread_local std::vector<float> panel;
    for (size_t task = begin; task < end; ++task) {
      const int64_t b = static_cast<int64_t>(task) / n_tc, c = static_cast<int64_t>(task) % n_tc;
      const int64_t n_begin = b * nb, n_end = std::min(N, n_begin + nb);
      const int64_t t_begin = c * tc, t_end = std::min(T, t_begin + tc);
      for (int64_t n0 = n_begin; n0 < n_end; n0 += kTileR) {
        const int rb = static_cast<int>(std::min<int64_t>(kTileR, n_end - n0));
        // 16-bit weights: widen this row group once into an L1-resident f32 panel, so the inner
        // loop is pure loads + FMAs however many token tiles reuse it.
        const float* wr = widen_panel<WL>(w + n0 * K, rb, K, panel);
        int64_t t0 = t_begin;
        if (rb == kTileR)
          for (; t0 + kTileT <= t_end; t0 += kTileT)
            dot_tile<simd::LoadF32, kTileT, kTileR>(x + t0 * K, K, wr, K, K, y + t0 * N + n0, N);
        for (; t0 < t_end; t0 += kTileT) {
          const int tb = static_cast<int>(std::min<int64_t>(kTileT, t_end - t0));
          dot_tile_any<simd::LoadF32>(tb, rb, x + t0 * K, K, wr, K, K, y + t0 * N + n0, N);
        }
      }
    }
  });
}

// ---- packed outer-product GEMM for prefill ----------------------------------------------------
constexpr int kPackRows = 2 * simd::kW;  // weight rows per panel = two vectors of outputs
#if defined(__AVX512F__) || defined(__aarch64__)
constexpr int kPackTokens = 8;  // 16 accumulators + 2 weight vectors + 1 broadcast of 32 registers
#else
constexpr int kPackTokens = 6;  // 12 accumulators + 2 weight vectors + 1 broadcast of 16 registers
#endif

#if defined(__AVX2__)
// In-register transpose of an 8×8 block of floats (rows r[0..7] become columns).
inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // h = 0: rows 0-3, h = 1: rows 4-7
    u[4 * h + 0] = _mm256_shuffle_ps(t[4 * h + 0], t[4 * h + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h + 0], t[4 * h + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
    r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
  }
}
#elif defined(__aarch64__)
// In-register transpose of a 4×4 block of floats (rows r[0..3] become columns).
inline void transpose4(float32x4_t r[4]) {
  const float32x4_t t0 = vtrn1q_f32(r[0], r[1]), t1 = vtrn2q_f32(r[0], r[1]);
  const float32x4_t t2 = vtrn1q_f32(r[2], r[3]), t3 = vtrn2q_f32(r[2], r[3]);
  const auto d = [](float32x4_t v) { return vreinterpretq_f64_f32(v); };
  r[0] = vreinterpretq_f32_f64(vtrn1q_f64(d(t0), d(t2)));
  r[1] = vreinterpretq_f32_f64(vtrn1q_f64(d(t1), d(t3)));
  r[2] = vreinterpretq_f32_f64(vtrn2q_f64(d(t0), d(t2)));
  r[3] = vreinterpretq_f32_f64(vtrn2q_f64(d(t1), d(t3)));
}
#endif

// Weight rows as f32, for the packed GEMM: dense rows widened (WL), or llama.cpp blocks decoded.
template <class WL>
struct DenseRows {
  const typename WL::T* w;
  int64_t K;
  void operator()(int64_t n, float* dst) const {
    const typename WL::T* src = w + n * K;
    int64_t k = 0;
    for (; k + simd::kW <= K; k += simd::kW) simd::store(dst + k, WL::load(src + k));
    for (; k < K; ++k) dst[k] = WL::scalar(src + k);
  }
};
struct GgmlRows {
  GgmlType type;
  const uint8_t* blocks;
  int64_t row_bytes, K;
  void operator()(int64_t n, float* dst) const { dequantize_ggml_row(type, blocks + n * row_bytes, K, dst); }
};

// panel[k, j] = row n0 + j at k for j < rows (zero beyond), as f32.  panel: [K, kPackRows].
// Rows are widened into `rows_buf` first, then transposed in 8×8 (AVX2) or 4×4 (NEON) register blocks
// (a scalar transpose here cost as much as a third of the GEMM at T = 128).
template <class Rows>
void pack_panel(const Rows& w, int64_t n0, int rows, int64_t K, float* panel, std::vector<float>& rows_buf) {
  rows_buf.resize(static_cast<size_t>(kPackRows * K));
  float* buf = rows_buf.data();
  for (int j = 0; j < kPackRows; ++j) {
    float* dst = buf + j * K;
    if (j >= rows) std::fill(dst, dst + K, 0.0f);
    else w(n0 + j, dst);
  }
  int64_t k = 0;
#if defined(__AVX2__)
  static_assert(kPackRows % 8 == 0);
  for (; k + 8 <= K; k += 8)
    for (int j0 = 0; j0 < kPackRows; j0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(buf + (j0 + i) * K + k);
      transpose8(r);
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(panel + (k + i) * kPackRows + j0, r[i]);
    }
#elif defined(__aarch64__)
  static_assert(kPackRows % 4 == 0);
  for (; k + 4 <= K; k += 4)
    for (int j0 = 0; j0 < kPackRows; j0 += 4) {
      float32x4_t r[4];
      for (int i = 0; i < 4; ++i) r[i] = vld1q_f32(buf + (j0 + i) * K + k);
      transpose4(r);
      for (int i = 0; i < 4; ++i) vst1q_f32(panel + (k + i) * kPackRows + j0, r[i]);
    }
#endif
  for (; k < K; ++k)
    for (int j = 0; j < kPackRows; ++j) panel[k * kPackRows + j] = buf[j * K + k];
}

// y[t, 0:cols] = Σ_k x[t, k] · panel[k, 0:cols] for t < MR; with `accumulate`, the sums continue from
// y's values (a later block of k: the same chain of additions as one pass over all k).
template <int MR>
void packed_tile(const float* x, int64_t ldx, const float* panel, int64_t K, float* y, int64_t ldy, int cols,
                 bool accumulate) {
  using namespace simd;
  vf acc[MR][2];
  for (int t = 0; t < MR; ++t) {
    if (!accumulate) {
      acc[t][0] = acc[t][1] = zero();
    } else if (cols == kPackRows) {
      acc[t][0] = load(y + t * ldy), acc[t][1] = load(y + t * ldy + kW);
    } else {
      alignas(64) float tmp[kPackRows] = {};
      for (int j = 0; j < cols; ++j) tmp[j] = y[t * ldy + j];
      acc[t][0] = load(tmp), acc[t][1] = load(tmp + kW);
    }
  }
  for (int64_t k = 0; k < K; ++k) {
    const vf w0 = load(panel + k * kPackRows), w1 = load(panel + k * kPackRows + kW);
    for (int t = 0; t < MR; ++t) {
      const vf xb = set1(x[t * ldx + k]);
      acc[t][0] = simd::fma(xb, w0, acc[t][0]);
      acc[t][1] = simd::fma(xb, w1, acc[t][1]);
    }
  }
  for (int t = 0; t < MR; ++t) {
    if (cols == kPackRows) {
      store(y + t * ldy, acc[t][0]);
      store(y + t * ldy + kW, acc[t][1]);
    } else {
      alignas(64) float tmp[kPackRows];
      store(tmp, acc[t][0]);
      store(tmp + kW, acc[t][1]);
      for (int j = 0; j < cols; ++j) y[t * ldy + j] = tmp[j];
    }
  }
}

using PackedTileFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int, bool);
template <size_t... I>
constexpr std::array<PackedTileFn, sizeof...(I)> make_packed_tiles(std::index_sequence<I...>) {
  return {&packed_tile<static_cast<int>(I) + 1>...};
}
constexpr auto kPackedTiles = make_packed_tiles(std::make_index_sequence<kPackTokens>{});

// k per pass over a token chunk: the panel's slice (kPackKBlock · kPackRows floats, 128 KiB) stays in L2
// while every token tile of the chunk reads it. Without it a K = 9216 panel (1.2 MiB) came from L3 for
// each tile, and the L2-sized token chunk shrank to 8 tokens, so each panel was widened again every 8
// tokens: 4× slower than at K = 2560 (docs/decisions.md "AMX").
constexpr int64_t kPackKBlock = 1024;

template <class Rows>
void gemm_packed(const float* x, const Rows& w, float* y, int64_t T, int64_t K, int64_t N) {
  // Token chunk: the x slice of one k block ≈ 512 KiB (L2), up to 256 tokens, so packing is amortised
  // over many tiles.
  const int64_t kblock = std::min(K, kPackKBlock);
  int64_t tc = std::max<int64_t>(kPackTokens, ((512 << 10) / (4 * kblock)) / kPackTokens * kPackTokens);
  tc = std::min<int64_t>(tc, 256 / kPackTokens * kPackTokens);
  if (T <= tc) tc = T;
  const int64_t n_tc = (T + tc - 1) / tc;
  const int64_t n_groups = (N + kPackRows - 1) / kPackRows;
  // Row block: a few panels, but enough tasks to feed every thread.
  const int64_t threads = static_cast<int64_t>(default_thread_pool().size());
  int64_t gb = std::max<int64_t>(1, (256 << 10) / (4 * K * kPackRows));
  if (n_tc * ((n_groups + gb - 1) / gb) < threads * 4)
    gb = std::max<int64_t>(1, (n_groups * n_tc + threads * 4 - 1) / (threads * 4));
  const int64_t n_gb = (n_groups + gb - 1) / gb;
  parallel_for(static_cast<size_t>(n_gb * n_tc), 1, [&](size_t begin, size_t end) {
    thread_local std::vector<float> panel, row;
    for (size_t task = begin; task < end; ++task) {
      const int64_t b = static_cast<int64_t>(task) / n_tc, c = static_cast<int64_t>(task) % n_tc;
      const int64_t t_begin = c * tc, t_end = std::min(T, t_begin + tc);
      for (int64_t g = b * gb; g < std::min(n_groups, (b + 1) * gb); ++g) {
        const int64_t n0 = g * kPackRows;
        const int cols = static_cast<int>(std::min<int64_t>(kPackRows, N - n0));
        panel.resize(static_cast<size_t>(K * kPackRows));
        pack_panel(w, n0, cols, K, panel.data(), row);
        for (int64_t k0 = 0; k0 < K; k0 += kblock) {
          const int64_t kl = std::min(kblock, K - k0);
          const float* pk = panel.data() + k0 * kPackRows;
          int64_t t0 = t_begin;
          for (; t0 + kPackTokens <= t_end; t0 += kPackTokens)
            packed_tile<kPackTokens>(x + t0 * K + k0, K, pk, kl, y + t0 * N + n0, N, cols, k0 > 0);
          if (t0 < t_end)
            kPackedTiles[static_cast<size_t>(t_end - t0 - 1)](x + t0 * K + k0, K, pk, kl, y + t0 * N + n0, N, cols, k0 > 0);
        }
      }
    }
  });
}

// Below this many tokens a row's outputs are summed in the one-token GEMV's order (the dot tiles share
// it), so a decode step of up to 63 rows — sequences, speculative guesses — gives each row the sums it
// would get alone: greedy speculation stays bit-identical to plain decoding (docs/speculative-decoding.md).
// The dot tiles also measured as fast as the packed GEMM or faster up to 64 tokens (avx512: 288-336
// against 162-283 GFLOP/s at 16-64 tokens; avx2 about even).
constexpr int64_t kInvariantTokens = 64;

template <class WL>
void run(const float* x, const void* w, float* y, int64_t T, int64_t K, int64_t N) {
  const auto* wt = static_cast<const typename WL::T*>(w);
  if (T == 1)
    gemv<WL>(x, wt, y, K, N);
  else if (T < kInvariantTokens)
    gemm_small<WL>(x, wt, y, T, K, N);
  else if (std::is_same_v<WL, simd::LoadBF16> && K % 32 == 0 && amx_bf16_usable())
    matmul_amx_bf16(x, reinterpret_cast<const uint16_t*>(w), y, T, K, N);
  else
    gemm_packed(x, DenseRows<WL>{wt, K}, y, T, K, N);
}

}  // namespace

// Rows up to which matmul over w gives each row the bits it gets alone (ops::matmul_invariant_rows):
// dense weights below kInvariantTokens; affine weights of 4 and 8 bits in groups of 64 with K a multiple
// of 128 (the MLX default) at 1-8 tokens, as the op test checks them (the int16-activation kernels and the
// f32 GEMV of the levels without them); llama.cpp blocks at 1-8 tokens where they are decoded per token
// (the int8-activation types, Kapitsa's float blocks); no claim for the other formats.
int64_t matmul_invariant_rows(const Linear& w) {
  switch (w.format()) {
    case WeightFormat::dense: return kInvariantTokens - 1;
    case WeightFormat::affine:
      return (w.bits() == 4 || w.bits() == 8) && w.group_size() == 64 && w.cols() % 128 == 0 ? 8 : 0;
    case WeightFormat::ggml:
      return ggml_type_internal(w.ggml_type()) || ggml_int8_block(w.ggml_type()) > 0 ? 8 : 0;
  }
  return 0;
}

bool ggml_packed_gemm(int64_t tokens) { return tokens >= 2 * kPackTokens; }

void matmul_ggml_packed(const Tensor& x, const Linear& w, const Tensor& y) {
  const int64_t N = w.rows(), K = w.cols(), T = x.numel() / K;
  const GgmlRows rows{w.ggml_type(), w.weight().data_as<const uint8_t>(), w.weight().dim(-1), K};
  gemm_packed(x.f32(), rows, y.f32(), T, K, N);
}

// x: [T, K] f32;  w: [N, K] f32|f16|bf16;  y: [T, N] f32.  (Leading dims of x and y are flattened.)
void matmul(const Tensor& x, const Linear& linear, const Tensor& y) {
  if (linear.format() == WeightFormat::affine) return matmul_affine(x, linear, y);
  if (linear.format() == WeightFormat::ggml) return matmul_ggml(x, linear, y);
  const Tensor& w = linear.dense("matmul");
  const int64_t N = w.dim(0), K = w.dim(1);
  const int64_t T = K == 0 ? 0 : x.numel() / K;
  if (T == 0 || N == 0) return;
  switch (w.dtype()) {
    case DType::f32: return run<simd::LoadF32>(x.f32(), w.data(), y.f32(), T, K, N);
    case DType::bf16: return run<simd::LoadBF16>(x.f32(), w.data(), y.f32(), T, K, N);
    case DType::f16: return run<simd::LoadF16>(x.f32(), w.data(), y.f32(), T, K, N);
    default: KAPITSA_CHECK(false, "matmul: weight dtype {} not supported", dtype_name(w.dtype()));
  }
}

// x: [T, K] f32;  w[i]: [N_i, K];  y[i]: [T, N_i] f32. One matmul each (each is already parallel).
void matmul_many(const Tensor& x, std::span<const Linear> w, std::span<const Tensor> y) {
  for (size_t i = 0; i < w.size(); ++i) matmul(x, w[i], y[i]);
}

// The op's composition (ops/composed/composed.h) over this backend's ops.
void matmul_swiglu(const Tensor& x, const Linear& w_gate, const Linear& w_up, const Tensor& up, const Tensor& y) {
  composed::matmul_swiglu(*backend_for(Level::KAPITSA_CPU_LEVEL), x, w_gate, w_up, up, y);
}
void matmul_relu_squared(const Tensor& x, const Linear& w, const Tensor& y) {
  composed::matmul_relu_squared(*backend_for(Level::KAPITSA_CPU_LEVEL), x, w, y);
}

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
