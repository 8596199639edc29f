// AMX-INT8 GEMM for prefill over GGUF blocks (amx.h): y[T, N] = x[T, K] · w[N, K]ᵀ with int8 activations,
// for every type of the prefill panels (matmul_ggml_panel.cpp): Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4
// and the K-quants Q2_K–Q6_K, IQ4_XS; from kPanelTokens tokens, at the avx512 level, where amx_int8_usable().
// TDPBSSD multiplies a 16 × S tile of signed bytes (16 weight rows' codes of one block or sub-block of S
// values: 32, or 16 for Q2_K / Q3_K / Q6_K) by an S × 16 one (16 tokens' x̂ in groups of 4 bytes along k)
// into the 16 × 16 int32 block dots. Codes go in signed with their offsets applied (q − 8, Q6_K's q − 32,
// code books as levels), so no offset comes back out. The scales cannot go into the tiles (one per row,
// block and token): each product is stored and scaled with AVX-512 as the panels do — per block
// acc += dot · (d·dx) (+ c · dx·Σx̂), per K-quant superblock Σ_j sc_j·dot_j in int32 and one f32 step with
// the mins' Σ_j m_j·Σx̂_j — the same integers and the same f32 operations in the same order, so the
// outputs are bit-equal to the panels' with or without AMX.
// Tiles: C 2 × 2 (tmm0-3: 32 weight rows × 32 tokens), A 2 (tmm4-5), B 2 (tmm6-7). Work items are groups
// of 32 rows (zero-padded), repacked once and run over every 32 tokens (x packed once per call, zero-padded).
// The GEMM is a template over its tiles: the CPU's (inline assembly, amx_tiles.h) or EmulatedTiles
// (amx_emulated.h), which tests run on machines without AMX (cpu.h's AmxInt8).
#include "base/thread_pool.h"
#include "ops/cpu/amx.h"
#include "ops/cpu/amx_emulated.h"
#include "ops/cpu/amx_tiles.h"
#include "ops/cpu/ggml_block32.h"
#include "ops/cpu/ggml_ksuper.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {
namespace {
std::atomic<AmxInt8> g_mode{AmxInt8::automatic};
}  // namespace
void set_amx_int8(AmxInt8 mode) { g_mode.store(mode, std::memory_order_relaxed); }
}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL::ggml_int8 {
#if defined(KAPITSA_GGML_INT8) && defined(KAPITSA_AMX) && defined(__AVX512VNNI__)
namespace {

// The CPU's tiles, in the fixed roles above (tile numbers are part of each instruction's encoding).
struct CpuTiles {
  static void config(const amx::TileConfig& cfg) { KAPITSA_TILE_CONFIG(cfg); }
  static void release() { KAPITSA_TILE_RELEASE(); }
  template <int t>
  static void zero() {
    if constexpr (t == 0) KAPITSA_TILE_ZERO(0);
    else if constexpr (t == 1) KAPITSA_TILE_ZERO(1);
    else if constexpr (t == 2) KAPITSA_TILE_ZERO(2);
    else {
      static_assert(t == 3);
      KAPITSA_TILE_ZERO(3);
    }
  }
  template <int t>
  static void load(const void* base, int64_t stride) {
    if constexpr (t == 4) KAPITSA_TILE_LOAD(4, base, stride);
    else if constexpr (t == 5) KAPITSA_TILE_LOAD(5, base, stride);
    else if constexpr (t == 6) KAPITSA_TILE_LOAD(6, base, stride);
    else {
      static_assert(t == 7);
      KAPITSA_TILE_LOAD(7, base, stride);
    }
  }
  template <int t>
  static void store(void* base, int64_t stride) {
    if constexpr (t == 0) KAPITSA_TILE_STORE(0, base, stride);
    else if constexpr (t == 1) KAPITSA_TILE_STORE(1, base, stride);
    else if constexpr (t == 2) KAPITSA_TILE_STORE(2, base, stride);
    else {
      static_assert(t == 3);
      KAPITSA_TILE_STORE(3, base, stride);
    }
  }
  template <int c, int a, int b>
  static void dpbssd() {
    if constexpr (c == 0 && a == 4 && b == 6) KAPITSA_TILE_DPBSSD(0, 4, 6);
    else if constexpr (c == 1 && a == 4 && b == 7) KAPITSA_TILE_DPBSSD(1, 4, 7);
    else if constexpr (c == 2 && a == 5 && b == 6) KAPITSA_TILE_DPBSSD(2, 5, 6);
    else {
      static_assert(c == 3 && a == 5 && b == 7);
      KAPITSA_TILE_DPBSSD(3, 5, 7);
    }
  }
};

constexpr int64_t kGroupRows = 32;  // rows of a work item: two A tiles
using Tile32 = int32_t[4][16][16];  // the 2 × 2 C tiles: [16 · (rows / 16) + tokens / 16][row][token]
using TileF = float[4][16][16];

// ---- The formats: a row is a run of scale blocks (SB values) of sub-blocks (S values, one tile deep) ----
// Meta: the group's per-row scales of one scale block; Tok: 16 tokens' scales of one scale block.

// The 32-value types: w = d · code + c per block; y += dot · (d·dx) (+ c · (dx · Σx̂) where c exists).
template <GgmlType TYPE>
struct Fmt32 {
  static constexpr int S = 32, SB = 32, kSub = 1;
  static constexpr bool kMin = !kSignedCodes<TYPE>;
  struct Meta {
    float d[kGroupRows], c[kGroupRows];
  };
  struct Tok {
    alignas(64) float dx[16], dxbs[16];
  };
  static void decode(const uint8_t* block, int8_t* codes, Meta& m, int r) {
    const Block32 w = decode32<TYPE>(block);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes), w.codes);
    m.d[r] = w.d, m.c[r] = w.c;
  }
  static int64_t block_bytes() { return kBlockBytes<TYPE>; }
  static void token(const Act& a, int64_t t, int64_t p, Tok& tk, int lane) {
    const int64_t at = t * (a.K / 32) + p;
    tk.dx[lane] = a.d[at];
    if constexpr (kMin) tk.dxbs[lane] = a.d[at] * static_cast<float>(a.bsum32[at]);
  }
  static void sub(const Tile32& c, const Meta& m, int, Tile32&, TileF& acc, const Tok* tk[2]) {
    for (int i = 0; i < 4; ++i) {
      const __m512 dx = _mm512_load_ps(tk[i % 2]->dx), dxbs = _mm512_load_ps(tk[i % 2]->dxbs);
      for (int r = 0; r < 16; ++r) {
        const int row = 16 * (i / 2) + r;
        __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[i][r])), _mm512_mul_ps(_mm512_set1_ps(m.d[row]), dx),
                                   _mm512_load_ps(acc[i][r]));
        if constexpr (kMin) v = _mm512_fmadd_ps(_mm512_set1_ps(m.c[row]), dxbs, v);
        _mm512_store_ps(acc[i][r], v);
      }
    }
  }
  static void block(const Tile32&, const Meta&, TileF&, const Tok* [2]) {}
};

// The K-quants (ggml_ksuper.h's form): per superblock Σ_j sc_j · dot_j in int32, then
// y += total · (d·dx) − (Σ_j m_j · Σx̂_j) · (dmin·dx).
template <class F>
struct FmtK {
  static constexpr int S = F::S, SB = 256, kSub = 256 / F::S;
  struct Meta {
    float d[kGroupRows], dmin[kGroupRows];
    int32_t sc[kSub][kGroupRows];
    uint32_t mins[kSub / 2][kGroupRows];  // m_{2i} | m_{2i+1} << 16: int16 pairs
  };
  struct Tok {
    alignas(64) float dx[16];
    uint32_t bs2[kSub / 2][16];  // Σx̂ of sub-blocks 2i and 2i + 1: int16 pairs
  };
  static void decode(const uint8_t* block, int8_t* codes, Meta& m, int r) {
    SuperRow sr;
    F::decode(block, sr);
    for (int k = 0; k < 256; ++k) codes[k] = static_cast<int8_t>(sr.q[k] - F::O);
    m.d[r] = sr.d, m.dmin[r] = sr.dmin;
    for (int j = 0; j < kSub; ++j) m.sc[j][r] = sr.sc[j];
    for (int i = 0; i < kSub / 2; ++i)
      m.mins[i][r] = static_cast<uint32_t>(sr.m[2 * i] & 0xFFFF) | static_cast<uint32_t>(sr.m[2 * i + 1]) << 16;
  }
  static int64_t block_bytes() { return F::kBytes; }
  static void token(const Act& a, int64_t t, int64_t s, Tok& tk, int lane) {
    tk.dx[lane] = a.d[t * (a.K / 256) + s];
    if constexpr (F::kMins) {
      const int16_t* bs = F::S == 16 ? a.bsum16 + t * (a.K / 16) + s * 16 : a.bsum32 + t * (a.K / 32) + s * 8;
      for (int i = 0; i < kSub / 2; ++i) std::memcpy(&tk.bs2[i][lane], bs + 2 * i, 4);
    }
  }
  static void sub(const Tile32& c, const Meta& m, int j, Tile32& total, TileF&, const Tok* [2]) {
    for (int i = 0; i < 4; ++i)
      for (int r = 0; r < 16; ++r) {
        const __m512i scaled = _mm512_mullo_epi32(_mm512_load_si512(c[i][r]), _mm512_set1_epi32(m.sc[j][16 * (i / 2) + r]));
        _mm512_store_si512(total[i][r], _mm512_add_epi32(_mm512_load_si512(total[i][r]), scaled));
      }
  }
  static void block(const Tile32& total, const Meta& m, TileF& acc, const Tok* tk[2]) {
    for (int i = 0; i < 4; ++i) {
      const __m512 dx = _mm512_load_ps(tk[i % 2]->dx);
      for (int r = 0; r < 16; ++r) {
        const int row = 16 * (i / 2) + r;
        __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(total[i][r])), _mm512_mul_ps(_mm512_set1_ps(m.d[row]), dx),
                                   _mm512_load_ps(acc[i][r]));
        if constexpr (F::kMins) {
          __m512i mins = _mm512_setzero_si512();
          for (int p = 0; p < kSub / 2; ++p)
            mins = _mm512_dpwssd_epi32(mins, _mm512_set1_epi32(static_cast<int>(m.mins[p][row])), _mm512_loadu_si512(tk[i % 2]->bs2[p]));
          v = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(_mm512_set1_ps(m.dmin[row]), dx), v);
        }
        _mm512_store_ps(acc[i][r], v);
      }
    }
  }
};

// x̂ [T, K] → B tiles xb [token tiles][K / 32][8 groups of 4 k][16 tokens][4] (B's row g holds bytes 4g..4g+3
// of each token), and the tokens' scales tok [token tiles][scale blocks]; token tiles an even count,
// tokens past T zero.
template <class F>
void pack_x(const Act& a, int64_t T, int64_t tiles, std::vector<int8_t>& xb, std::vector<typename F::Tok>& tok) {
  const int64_t chunks = a.K / 32, nblk = a.K / F::SB;
  xb.resize(static_cast<size_t>(tiles * chunks * 512));
  tok.assign(static_cast<size_t>(tiles * nblk), typename F::Tok{});
  parallel_for(static_cast<size_t>(tiles), 1, [&](size_t begin, size_t end) {
    for (int64_t tb = static_cast<int64_t>(begin); tb < static_cast<int64_t>(end); ++tb) {
      int8_t* tile = xb.data() + tb * chunks * 512;
      std::memset(tile, 0, static_cast<size_t>(chunks * 512));
      for (int lane = 0; lane < 16 && tb * 16 + lane < T; ++lane) {
        const int64_t t = tb * 16 + lane;
        for (int64_t c = 0; c < chunks; ++c)
          for (int g = 0; g < 8; ++g) std::memcpy(tile + c * 512 + g * 64 + lane * 4, a.q + t * a.K + c * 32 + g * 4, 4);
        for (int64_t p = 0; p < nblk; ++p) F::token(a, t, p, tok[static_cast<size_t>(tb * nblk + p)], lane);
      }
    }
  });
}

// Rows [n0, n0 + 32) of the weights → codes [32][K] (signed bytes, row-major: an A tile is 16 rows of it)
// and meta [K / SB]; rows past N zero.
template <class F>
void repack(const uint8_t* blocks, int64_t row_bytes, int64_t K, int64_t n0, int64_t N, int8_t* codes, typename F::Meta* meta) {
  const int64_t nblk = K / F::SB;
  std::fill(meta, meta + nblk, typename F::Meta{});
  for (int r = 0; r < kGroupRows; ++r) {
    int8_t* row = codes + r * K;
    if (n0 + r >= N) {
      std::memset(row, 0, static_cast<size_t>(K));
      continue;
    }
    for (int64_t p = 0; p < nblk; ++p) F::decode(blocks + (n0 + r) * row_bytes + p * F::block_bytes(), row + p * F::SB, meta[p], r);
  }
}

// One group of rows times every token: per pair of token tiles, per scale block, per sub-block, the
// 2 × 2 tile products, stored and scaled into acc; acc → y.
template <class Tiles, class F>
void group_tokens(const int8_t* codes, const typename F::Meta* meta, const int8_t* xb, const typename F::Tok* tok, int64_t K,
                  int64_t tiles, int64_t T, int64_t n0, int64_t N, float* y) {
  const int64_t chunks = K / 32, nblk = K / F::SB;
  alignas(64) Tile32 c, total;
  alignas(64) TileF acc;
  for (int64_t tb = 0; tb < tiles; tb += 2) {
    std::memset(acc, 0, sizeof acc);
    for (int64_t p = 0; p < nblk; ++p) {
      const typename F::Tok* tk[2] = {tok + tb * nblk + p, tok + (tb + 1) * nblk + p};
      if constexpr (F::kSub > 1) std::memset(total, 0, sizeof total);
      for (int j = 0; j < F::kSub; ++j) {
        const int64_t k0 = p * F::SB + j * F::S;
        // B rows for k0: 4-byte group (k0 % 32) / 4 of the chunk.
        const int8_t* b = xb + (tb * chunks + k0 / 32) * 512 + (k0 % 32) / 4 * 64;
        Tiles::template load<4>(codes + k0, K);
        Tiles::template load<5>(codes + 16 * K + k0, K);
        Tiles::template load<6>(b, 64);
        Tiles::template load<7>(b + chunks * 512, 64);
        Tiles::template zero<0>(), Tiles::template zero<1>(), Tiles::template zero<2>(), Tiles::template zero<3>();
        Tiles::template dpbssd<0, 4, 6>();
        Tiles::template dpbssd<1, 4, 7>();
        Tiles::template dpbssd<2, 5, 6>();
        Tiles::template dpbssd<3, 5, 7>();
        Tiles::template store<0>(c[0], 64);
        Tiles::template store<1>(c[1], 64);
        Tiles::template store<2>(c[2], 64);
        Tiles::template store<3>(c[3], 64);
        F::sub(c, meta[p], j, total, acc, tk);
      }
      F::block(total, meta[p], acc, tk);
    }
    // acc[i][r][t]: row n0 + 16·(i / 2) + r, token 16·(tb + i % 2) + t.
    for (int i = 0; i < 4; ++i) {
      const int64_t rn = n0 + 16 * (i / 2), tt = 16 * (tb + i % 2);
      for (int64_t t = 0; t < 16 && tt + t < T; ++t)
        for (int64_t r = 0; r < 16 && rn + r < N; ++r) y[(tt + t) * N + rn + r] = acc[i][r][t];
    }
  }
}

template <class Tiles, class F>
void gemm(const uint8_t* blocks, int64_t row_bytes, const Act& a, int64_t T, float* y, int64_t N) {
  const int64_t K = a.K, tiles = (T + 31) / 32 * 2, nblk = K / F::SB;
  thread_local std::vector<int8_t> xb;
  thread_local std::vector<typename F::Tok> tok;
  pack_x<F>(a, T, tiles, xb, tok);
  const int8_t* xbp = xb.data();  // the calling thread's: the workers' thread_locals are others
  const typename F::Tok* tokp = tok.data();
  amx::TileConfig cfg;  // C: 16 × 16 int32; A: 16 rows × S bytes; B: S / 4 rows × 16 tokens' 4 bytes
  for (int t = 0; t < 4; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  for (int t = 4; t < 6; ++t) cfg.rows[t] = 16, cfg.colsb[t] = F::S;
  for (int t = 6; t < 8; ++t) cfg.rows[t] = F::S / 4, cfg.colsb[t] = 64;
  const int64_t groups = (N + kGroupRows - 1) / kGroupRows;
  parallel_for(static_cast<size_t>(groups), 1, [&](size_t begin, size_t end) {
    thread_local std::vector<int8_t> codes;
    thread_local std::vector<typename F::Meta> meta;
    codes.resize(static_cast<size_t>(kGroupRows * K)), meta.resize(static_cast<size_t>(nblk));
    Tiles::config(cfg);
    for (size_t g = begin; g < end; ++g) {
      const int64_t n0 = static_cast<int64_t>(g) * kGroupRows;
      repack<F>(blocks, row_bytes, K, n0, N, codes.data(), meta.data());
      group_tokens<Tiles, F>(codes.data(), meta.data(), xbp, tokp, K, tiles, T, n0, N, y);
    }
    Tiles::release();
  });
}

template <class Tiles>
bool run(GgmlType type, const uint8_t* blocks, int64_t row_bytes, const Act& a, int64_t T, float* y, int64_t N) {
  switch (type) {
    case GgmlType::q8_0: return gemm<Tiles, Fmt32<GgmlType::q8_0>>(blocks, row_bytes, a, T, y, N), true;
    case GgmlType::q4_0: return gemm<Tiles, Fmt32<GgmlType::q4_0>>(blocks, row_bytes, a, T, y, N), true;
    case GgmlType::q4_1: return gemm<Tiles, Fmt32<GgmlType::q4_1>>(blocks, row_bytes, a, T, y, N), true;
    case GgmlType::q5_0: return gemm<Tiles, Fmt32<GgmlType::q5_0>>(blocks, row_bytes, a, T, y, N), true;
    case GgmlType::q5_1: return gemm<Tiles, Fmt32<GgmlType::q5_1>>(blocks, row_bytes, a, T, y, N), true;
    case GgmlType::iq4_nl: return gemm<Tiles, Fmt32<GgmlType::iq4_nl>>(blocks, row_bytes, a, T, y, N), true;
    case GgmlType::mxfp4: return gemm<Tiles, Fmt32<GgmlType::mxfp4>>(blocks, row_bytes, a, T, y, N), true;
    case GgmlType::q4_k: return gemm<Tiles, FmtK<K4<false>>>(blocks, row_bytes, a, T, y, N), true;
    case GgmlType::q5_k: return gemm<Tiles, FmtK<K4<true>>>(blocks, row_bytes, a, T, y, N), true;
    case GgmlType::q6_k: return gemm<Tiles, FmtK<K6>>(blocks, row_bytes, a, T, y, N), true;
    case GgmlType::q2_k: return gemm<Tiles, FmtK<K23<false>>>(blocks, row_bytes, a, T, y, N), true;
    case GgmlType::q3_k: return gemm<Tiles, FmtK<K23<true>>>(blocks, row_bytes, a, T, y, N), true;
    case GgmlType::iq4_xs: return gemm<Tiles, FmtK<Iq4Xs>>(blocks, row_bytes, a, T, y, N), true;
    default: return false;
  }
}

}  // namespace

bool ggml_amx_int8(GgmlType type, const uint8_t* blocks, int64_t row_bytes, const Act& a, int64_t T, float* y, int64_t N) {
  const AmxInt8 mode = g_mode.load(std::memory_order_relaxed);
  if (mode == AmxInt8::emulated) return run<amx::EmulatedTiles>(type, blocks, row_bytes, a, T, y, N);
  if (mode == AmxInt8::off || !amx_int8_usable()) return false;
  return run<CpuTiles>(type, blocks, row_bytes, a, T, y, N);
}

#elif defined(KAPITSA_GGML_INT8)
bool ggml_amx_int8(GgmlType, const uint8_t*, int64_t, const Act&, int64_t, float*, int64_t) { return false; }
#endif
}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL::ggml_int8
