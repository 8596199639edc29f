// The register-tiled dot-product kernel shared by matmul and attention (internal to ops/cpu):
// out[t, r] = Σ_k x[t, k] · w[r, k] for a TB×RB tile, f32 accumulation in TB·RB vector registers,
// weights widened from f32/bf16/f16 as they are loaded. K needs no alignment (scalar tail).
#pragma once

#include "ops/cpu/simd.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <utility>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {

// Tile sizes for T > 1: TB·RB accumulators + RB weight vectors + 1 x vector must fit the registers
// (32 with AVX-512 or AArch64's NEON, 16 with AVX2 / SSE2).
#if defined(__AVX512F__) || defined(__aarch64__)
constexpr int kTileT = 4, kTileR = 4;
#else
constexpr int kTileT = 3, kTileR = 3;
#endif

// x: [TB rows, stride ldx];  w: [RB rows, stride ldw];  out: [TB rows, stride ldo].
template <class WL, int TB, int RB>
inline void dot_tile(const float* x, int64_t ldx, const typename WL::T* w, int64_t ldw, int64_t K, float* out,
                     int64_t ldo) {
  using namespace simd;
  vf acc[TB][RB];
  for (int t = 0; t < TB; ++t)
    for (int r = 0; r < RB; ++r) acc[t][r] = zero();
  int64_t k = 0;
  for (; k + kW <= K; k += kW) {
    vf wv[RB];
    for (int r = 0; r < RB; ++r) wv[r] = WL::load(w + r * ldw + k);
    for (int t = 0; t < TB; ++t) {
      const vf xv = simd::load(x + t * ldx + k);
      for (int r = 0; r < RB; ++r) acc[t][r] = simd::fma(xv, wv[r], acc[t][r]);
    }
  }
  for (int t = 0; t < TB; ++t)
    for (int r = 0; r < RB; ++r) {
      float s = reduce_add(acc[t][r]);
      // The tail as explicit fused multiply-adds where the level has them: left to the compiler, `s +=
      // x·w` was contracted in some tile shapes and vectorised as multiply-then-add across rows in others,
      // so a row's sums depended on the tile (DenseRowsOfSeveralTokensEqualEachTokenAlone).
#if defined(__FMA__) || defined(__aarch64__)
      for (int64_t kk = k; kk < K; ++kk) s = std::fma(x[t * ldx + kk], WL::scalar(w + r * ldw + kk), s);
#else
      for (int64_t kk = k; kk < K; ++kk) s += x[t * ldx + kk] * WL::scalar(w + r * ldw + kk);
#endif
      out[t * ldo + r] = s;
    }
}

template <class WL>
using DotTileFn = void (*)(const float*, int64_t, const typename WL::T*, int64_t, int64_t, float*, int64_t);

// table[tb-1][rb-1] = dot_tile<WL, tb, rb>, for the ragged edges of a tiled loop.
template <class WL, size_t... I>
constexpr std::array<DotTileFn<WL>, sizeof...(I)> make_dot_tiles(std::index_sequence<I...>) {
  return {&dot_tile<WL, static_cast<int>(I / kTileR) + 1, static_cast<int>(I % kTileR) + 1>...};
}
template <class WL>
inline constexpr auto kDotTiles = make_dot_tiles<WL>(std::make_index_sequence<kTileT * kTileR>{});

template <class WL>
inline void dot_tile_any(int tb, int rb, const float* x, int64_t ldx, const typename WL::T* w, int64_t ldw, int64_t K,
                         float* out, int64_t ldo) {
  kDotTiles<WL>[static_cast<size_t>((tb - 1) * kTileR + (rb - 1))](x, ldx, w, ldw, K, out, ldo);
}

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
