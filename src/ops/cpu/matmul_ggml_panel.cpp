// Prefill GEMM for the GGUF types with int8-activation kernels (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4,
// and the K-quants Q2_K–Q6_K and IQ4_XS further down) from many tokens (kPanelTokens and more), at the
// avx512 level (16 rows a register) and the avxvnni and avx2 levels (8; plain AVX2 multiplies the signed
// types as |w| · sign(x, w)): the row kernels' int8 activations, but a register of rows at a time in its int32 lanes instead of
// one row's partial sums.
// Each task repacks a group of rows, block by block, into a panel (per block: the rows' scales d and
// mins c as f32, and their 32 codes as unsigned bytes (+ an offset), four codes of one row in each int32 lane,
// 8 registers for the block), then runs every token over it: VPDPBUSD multiplies a register of rows'
// code quads by one token's 4 activation codes broadcast, so 8 of them give the rows' whole block dots
// in int32 lanes, with no horizontal sums. The offset comes back out as offset · Σ x̂ (the accumulator
// starts there); then one convert and one FMA (scale d·dx) per register of rows, token and block, against ~5
// operations per row, token and block in the row kernels. The repacking costs about one row-kernel pass
// and is shared by all the tokens: decode stays on the row kernels.
// Sums per (row, token) are formed in block order in f32, so outputs differ from the row kernels' by
// summation order (within the same rounding bound against ref); below kPanelTokens tokens the row kernels
// run, which keeps a speculative verification's rows equal to each token alone. Where the CPU has
// AMX-INT8, the avx512 level runs the same sums on AMX tiles instead (matmul_ggml_amx.cpp: bit-equal).
#include "base/thread_pool.h"
#include "ops/cpu/amx.h"
#include "ops/cpu/ggml_block32.h"
#include "ops/cpu/ggml_ksuper.h"

#include <algorithm>
#include <vector>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL::ggml_int8 {

#if defined(KAPITSA_GGML_INT8) && !defined(KAPITSA_GGML_INT8_NEON)
namespace {

// The level's registers: 16 rows in a 512-bit one at the avx512 level, 8 in a 256-bit one at the avxvnni
// and avx2 levels.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
struct V {
  static constexpr int64_t kRows = 16;
  static constexpr int kMaxCode = 255;  // the largest unsigned code VPDPBUSD takes exactly
  static constexpr bool kSignTrick = false;
  using I = __m512i;
  using F = __m512;
  static I load(const void* p) { return _mm512_load_si512(p); }
  static F loadf(const float* p) { return _mm512_load_ps(p); }
  static I set1(int32_t v) { return _mm512_set1_epi32(v); }
  static F set1f(float v) { return _mm512_set1_ps(v); }
  static I zero() { return _mm512_setzero_si512(); }
  static F zerof() { return _mm512_setzero_ps(); }
  static I dpbusd(I acc, I u, I s) { return _mm512_dpbusd_epi32(acc, u, s); }
  static I dpwssd(I acc, I a, I b) { return _mm512_dpwssd_epi32(acc, a, b); }
  static I add(I a, I b) { return _mm512_add_epi32(a, b); }
  static I mullo(I a, I b) { return _mm512_mullo_epi32(a, b); }
  static I abs8(I a) { return _mm512_abs_epi8(a); }
  static I sign8(I x, I w) {  // x, negated where w < 0, zero where w = 0 (VPSIGNB's rule; no 512-bit VPSIGNB)
    const __mmask64 neg = _mm512_movepi8_mask(w), nonzero = _mm512_test_epi8_mask(w, w);
    return _mm512_maskz_mov_epi8(nonzero, _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x));
  }
  static F cvt(I a) { return _mm512_cvtepi32_ps(a); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  static void store(float* y, F v, int64_t rows) { _mm512_mask_storeu_ps(y, static_cast<__mmask16>((1u << rows) - 1), v); }
};
#else
// AVX2 (with AVX-VNNI, or without: then VPMADDUBSW + VPMADDWD, exact only for unsigned codes below 128,
// whose byte pairs stay within int16; the signed types — Q8_0, IQ4_NL, MXFP4, IQ4_XS — go in as signed
// codes and multiply as |w| · sign(x, w), llama.cpp's trick: |w| ≤ 128, pairs ≤ 2 · 128 · 127).
struct V {
  static constexpr int64_t kRows = 8;
#if defined(__AVXVNNI__)
  static constexpr int kMaxCode = 255;
  static constexpr bool kSignTrick = false;
#else
  static constexpr int kMaxCode = 127;
  static constexpr bool kSignTrick = true;
#endif
  using I = __m256i;
  using F = __m256;
  static I load(const void* p) { return _mm256_load_si256(static_cast<const __m256i*>(p)); }
  static F loadf(const float* p) { return _mm256_load_ps(p); }
  static I set1(int32_t v) { return _mm256_set1_epi32(v); }
  static F set1f(float v) { return _mm256_set1_ps(v); }
  static I zero() { return _mm256_setzero_si256(); }
  static F zerof() { return _mm256_setzero_ps(); }
#if defined(__AVXVNNI__)
  static I dpbusd(I acc, I u, I s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
  static I dpwssd(I acc, I a, I b) { return _mm256_dpwssd_avx_epi32(acc, a, b); }
#else
  static I dpbusd(I acc, I u, I s) { return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))); }
  static I dpwssd(I acc, I a, I b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
#endif
  static I add(I a, I b) { return _mm256_add_epi32(a, b); }
  static I mullo(I a, I b) { return _mm256_mullo_epi32(a, b); }
  static I abs8(I a) { return _mm256_abs_epi8(a); }
  static I sign8(I x, I w) { return _mm256_sign_epi8(x, w); }
  static F cvt(I a) { return _mm256_cvtepi32_ps(a); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }
  static void store(float* y, F v, int64_t rows) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_maskstore_ps(y, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(rows)), lane), v);
  }
};
#endif
constexpr int64_t kRows = V::kRows;  // rows of a panel: the int32 lanes of a register

// Codes go into the panel as code + kOffset: unsigned, as VPDPBUSD's first operand wants them (Q4_0's
// q − 8 back to q, Q5_0's q − 16 to q; the signed code books and Q8_0 + 128); kOffset · Σ x̂ comes back out.
template <GgmlType TYPE>
constexpr int kOffset = TYPE == GgmlType::q4_0 ? 8 : TYPE == GgmlType::q5_0 ? 16 : kSignedCodes<TYPE> ? 128 : 0;
// Plain AVX2: the types stored + 128 go in signed instead (V::kSignTrick).
template <GgmlType TYPE>
constexpr bool kSignPanel = V::kSignTrick && kOffset<TYPE> == 128;
template <GgmlType TYPE>
constexpr int kPanelOffset = kSignPanel<TYPE> ? 0 : kOffset<TYPE>;
template <GgmlType TYPE>
constexpr int kMaxCode32 = TYPE == GgmlType::q4_0 || TYPE == GgmlType::q4_1 ? 15
                           : TYPE == GgmlType::q5_0 || TYPE == GgmlType::q5_1 ? 31 : 255;

// One block of 32 values of a panel's rows.
struct alignas(64) PanelBlock {
  float d[kRows];              // w = d · code + c
  float c[kRows];
  uint32_t quads[8][kRows];    // quads[g][r]: codes 4g..4g+3 of row r, each + kPanelOffset (unsigned for VPDPBUSD)
};

// Rows [n0, n0 + rows) of `blocks` → panel[nb]; missing rows (rows < kRows) become zeros.
template <GgmlType TYPE>
void repack(const uint8_t* blocks, int64_t row_bytes, int64_t n0, int64_t rows, int64_t nb, PanelBlock* panel) {
  alignas(64) uint32_t codes[kRows][8];
  const __m256i offset = _mm256_set1_epi8(static_cast<char>(kPanelOffset<TYPE>));
  for (int64_t b = 0; b < nb; ++b) {
    PanelBlock& p = panel[b];
    for (int64_t r = 0; r < kRows; ++r) {
      if (r < rows) {
        const Block32 w = decode32<TYPE>(blocks + (n0 + r) * row_bytes + b * kBlockBytes<TYPE>);
        _mm256_store_si256(reinterpret_cast<__m256i*>(codes[r]), _mm256_add_epi8(w.codes, offset));
        p.d[r] = w.d, p.c[r] = w.c;
      } else {
        _mm256_store_si256(reinterpret_cast<__m256i*>(codes[r]), offset);
        p.d[r] = p.c[r] = 0;
      }
    }
    for (int g = 0; g < 8; ++g)
      for (int64_t r = 0; r < kRows; ++r) p.quads[g][r] = codes[r][g];
  }
}

// The panel · tokens [t0, t0 + TB) → y[t · N + r] for the panel's `rows` rows.
// SIGN: the codes are signed (kSignPanel): |w| · sign(x, w).
template <int OFFSET, bool MIN, bool SIGN, int TB>
void panel_tokens(const PanelBlock* panel, int64_t nb, const Act& a, int64_t t0, float* y, int64_t N, int64_t rows) {
  V::F acc[TB];
  for (int t = 0; t < TB; ++t) acc[t] = V::zerof();
  for (int64_t b = 0; b < nb; ++b) {
    const PanelBlock& p = panel[b];
    V::I w[8], u[8];  // u: the unsigned operand (w, or |w|)
    for (int g = 0; g < 8; ++g) w[g] = V::load(p.quads[g]), u[g] = SIGN ? V::abs8(w[g]) : w[g];
    const V::F d = V::loadf(p.d);
    for (int t = 0; t < TB; ++t) {
      const int64_t at = (t0 + t) * nb + b;
      const int8_t* xq = a.q + (t0 + t) * a.K + b * 32;
      int32_t x4[8];
      std::memcpy(x4, xq, 32);
      // Two chains of four (a VPDPBUSD waits for its accumulator), the offset taken out at the start.
      V::I even = OFFSET ? V::set1(-OFFSET * a.bsum32[at]) : V::zero(), odd = V::zero();
      const auto x = [&](int g) { return SIGN ? V::sign8(V::set1(x4[g]), w[g]) : V::set1(x4[g]); };
      for (int g = 0; g < 8; g += 2) {
        even = V::dpbusd(even, u[g], x(g));
        odd = V::dpbusd(odd, u[g + 1], x(g + 1));
      }
      const float dx = a.d[at];
      const V::F sum = V::cvt(V::add(even, odd));
      acc[t] = V::fmadd(sum, V::mul(d, V::set1f(dx)), acc[t]);
      if constexpr (MIN) acc[t] = V::fmadd(V::loadf(p.c), V::set1f(dx * static_cast<float>(a.bsum32[at])), acc[t]);
    }
  }
  for (int t = 0; t < TB; ++t) V::store(y + (t0 + t) * N, acc[t], rows);
}

// One superblock of a panel's rows.
struct alignas(64) PanelSuper {
  float d[kRows], dmin[kRows];
  int32_t sc[16][kRows];
  uint32_t mins[8][kRows];     // mins[i][r]: m_{2i} | m_{2i+1} << 16 of row r (int16 pairs)
  uint32_t quads[64][kRows];   // quads[g][r]: codes 4g..4g+3 of row r
};

// Plain AVX2: a K-type stored + 128 (IQ4_XS) goes in signed instead, as kSignPanel.
template <class F>
constexpr bool kSignK = V::kSignTrick && F::O == 128;

template <class F>
void repack_k(const uint8_t* blocks, int64_t row_bytes, int64_t n0, int64_t rows, int64_t ns, PanelSuper* panel) {
  SuperRow sr[kRows];
  for (int64_t s = 0; s < ns; ++s) {
    PanelSuper& p = panel[s];
    for (int64_t r = 0; r < kRows; ++r) {
      if (r < rows) F::decode(blocks + (n0 + r) * row_bytes + s * F::kBytes, sr[r]);
      else sr[r] = SuperRow{};
      p.d[r] = sr[r].d, p.dmin[r] = sr[r].dmin;
      for (int j = 0; j < 256 / F::S; ++j) p.sc[j][r] = sr[r].sc[j];
      for (int i = 0; i < 8; ++i)
        p.mins[i][r] = static_cast<uint32_t>(sr[r].m[2 * i] & 0xFFFF) | static_cast<uint32_t>(sr[r].m[2 * i + 1]) << 16;
    }
    for (int g = 0; g < 64; ++g)
      for (int64_t r = 0; r < kRows; ++r) {
        std::memcpy(&p.quads[g][r], sr[r].q + 4 * g, 4);
        if constexpr (kSignK<F>) p.quads[g][r] ^= 0x80808080u;  // code + 128 → the signed code
      }
  }
}

template <class F, int TB>
void panel_tokens_k(const PanelSuper* panel, int64_t ns, const Act& a, int64_t t0, float* y, int64_t N, int64_t rows) {
  constexpr int kSub = 256 / F::S, kQuads = F::S / 4;
  V::F acc[TB];
  for (int t = 0; t < TB; ++t) acc[t] = V::zerof();
  for (int64_t s = 0; s < ns; ++s) {
    const PanelSuper& p = panel[s];
    V::I total[TB];
    for (int t = 0; t < TB; ++t) total[t] = V::zero();
    for (int j = 0; j < kSub; ++j) {
      V::I w[kQuads], u[kQuads];  // u: the unsigned operand (w, or |w| where kSignK)
      for (int g = 0; g < kQuads; ++g) w[g] = V::load(p.quads[j * kQuads + g]), u[g] = kSignK<F> ? V::abs8(w[g]) : w[g];
      const V::I sc = V::load(p.sc[j]);
      for (int t = 0; t < TB; ++t) {
        const int8_t* xq = a.q + (t0 + t) * a.K + s * 256 + j * F::S;
        int32_t x4[kQuads];
        std::memcpy(x4, xq, F::S);
        V::I sum = V::zero();
        if constexpr (F::O != 0 && !kSignK<F>) {
          const int16_t bs = F::S == 16 ? a.bsum16[(t0 + t) * (a.K / 16) + s * 16 + j] : a.bsum32[(t0 + t) * (a.K / 32) + s * 8 + j];
          sum = V::set1(-F::O * bs);
        }
        for (int g = 0; g < kQuads; ++g)
          sum = V::dpbusd(sum, u[g], kSignK<F> ? V::sign8(V::set1(x4[g]), w[g]) : V::set1(x4[g]));
        total[t] = V::add(total[t], V::mullo(sum, sc));
      }
    }
    const V::F d = V::loadf(p.d);
    for (int t = 0; t < TB; ++t) {
      const float dx = a.d[(t0 + t) * ns + s];
      acc[t] = V::fmadd(V::cvt(total[t]), V::mul(d, V::set1f(dx)), acc[t]);
      if constexpr (F::kMins) {
        int32_t bs2[kSub / 2];  // Σ x̂ of sub-blocks 2i and 2i + 1 as an int16 pair
        std::memcpy(bs2, F::S == 16 ? a.bsum16 + (t0 + t) * (a.K / 16) + s * 16 : a.bsum32 + (t0 + t) * (a.K / 32) + s * 8,
                    sizeof bs2);
        V::I m = V::zero();
        for (int i = 0; i < kSub / 2; ++i) m = V::dpwssd(m, V::load(p.mins[i]), V::set1(bs2[i]));
        acc[t] = V::fnmadd(V::cvt(m), V::mul(V::loadf(p.dmin), V::set1f(dx)), acc[t]);
      }
    }
  }
  for (int t = 0; t < TB; ++t) V::store(y + (t0 + t) * N, acc[t], rows);
}

// The 32-value types (TYPE) or a K-quant (F): groups of 16 rows split across threads, each repacked
// once and run over every token, 4 tokens a pass.
template <class Panel, class Repack, class Tokens1, class Tokens4>
void panels(int64_t nblk, int64_t T, int64_t N, Repack repack_rows, Tokens1 tokens1, Tokens4 tokens4) {
  const int64_t groups = (N + kRows - 1) / kRows;
  parallel_for(static_cast<size_t>(groups), 1, [&](size_t begin, size_t end) {
    thread_local std::vector<Panel> panel;
    panel.resize(static_cast<size_t>(nblk));
    for (size_t g = begin; g < end; ++g) {
      const int64_t n0 = static_cast<int64_t>(g) * kRows, rows = std::min(kRows, N - n0);
      repack_rows(n0, rows, panel.data());
      int64_t t0 = 0;
      for (; t0 + 4 <= T; t0 += 4) tokens4(panel.data(), t0, n0, rows);
      for (; t0 < T; ++t0) tokens1(panel.data(), t0, n0, rows);
    }
  });
}

template <GgmlType TYPE>
void panels32(const uint8_t* blocks, int64_t row_bytes, const Act& a, int64_t T, float* y, int64_t N) {
  const int64_t nb = a.K / 32;
  constexpr bool kMin = !kSignedCodes<TYPE>;
  constexpr int kOff = kPanelOffset<TYPE>;
  constexpr bool kSign = kSignPanel<TYPE>;
  panels<PanelBlock>(
      nb, T, N, [&](int64_t n0, int64_t rows, PanelBlock* p) { repack<TYPE>(blocks, row_bytes, n0, rows, nb, p); },
      [&](const PanelBlock* p, int64_t t0, int64_t n0, int64_t rows) { panel_tokens<kOff, kMin, kSign, 1>(p, nb, a, t0, y + n0, N, rows); },
      [&](const PanelBlock* p, int64_t t0, int64_t n0, int64_t rows) { panel_tokens<kOff, kMin, kSign, 4>(p, nb, a, t0, y + n0, N, rows); });
}

template <class F>
void panels_k(const uint8_t* blocks, int64_t row_bytes, const Act& a, int64_t T, float* y, int64_t N) {
  const int64_t ns = a.K / 256;
  panels<PanelSuper>(
      ns, T, N, [&](int64_t n0, int64_t rows, PanelSuper* p) { repack_k<F>(blocks, row_bytes, n0, rows, ns, p); },
      [&](const PanelSuper* p, int64_t t0, int64_t n0, int64_t rows) { panel_tokens_k<F, 1>(p, ns, a, t0, y + n0, N, rows); },
      [&](const PanelSuper* p, int64_t t0, int64_t n0, int64_t rows) { panel_tokens_k<F, 4>(p, ns, a, t0, y + n0, N, rows); });
}

// A type runs as panels where the level multiplies its codes exactly (kMaxCode, or signed codes).
template <GgmlType TYPE>
bool try32(const uint8_t* blocks, int64_t row_bytes, const Act& a, int64_t T, float* y, int64_t N) {
  if constexpr (kMaxCode32<TYPE> > V::kMaxCode && !kSignPanel<TYPE>) return false;
  else return panels32<TYPE>(blocks, row_bytes, a, T, y, N), true;
}
template <class F>
bool try_k(const uint8_t* blocks, int64_t row_bytes, const Act& a, int64_t T, float* y, int64_t N) {
  if constexpr (F::kMaxCode > V::kMaxCode && !kSignK<F>) return false;
  else return panels_k<F>(blocks, row_bytes, a, T, y, N), true;
}

}  // namespace

#elif defined(KAPITSA_GGML_INT8_NEON) && defined(__ARM_FEATURE_MATMUL_INT8)
// ---- AArch64 with i8mm: SMMLA multiplies a 2 × 8 matrix of int8 (two rows' 8 codes) by another (two
// tokens' 8 activation codes) into a 2 × 2 int32 tile: the panel holds rows in pairs, the activations are
// laid out in token pairs once per call, and 4 SMMLA give two rows' whole block dots for two tokens. Codes
// are signed with their offsets applied (q − 8, Q6_K's q − 32, …): no offset to take back out.
namespace {

constexpr int64_t kRows = 8;  // a group: 4 row pairs

// x̂ in token pairs: pair p, block of 32 b, chunk j (8 inputs) → 16 bytes (token 2p's 8 codes, then 2p + 1's;
// zeros for a token past T).
std::vector<int8_t> token_pairs(const Act& a, int64_t T) {
  const int64_t pairs = (T + 1) / 2, nb = a.K / 32;
  std::vector<int8_t> xp(static_cast<size_t>(pairs * a.K * 2), 0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t j = 0; j < 4; ++j)
        std::memcpy(xp.data() + ((t / 2 * nb + b) * 4 + j) * 16 + (t % 2) * 8, a.q + t * a.K + b * 32 + j * 8, 8);
  return xp;
}

// The 2 × 2 tile [row r token t0, r t1, r + 1 t0, r + 1 t1] of a row pair and a token pair.
inline void store_tile(float32x4_t v, float* y, int64_t N, int64_t t, int64_t T, int64_t r, int64_t rows) {
  float o[4];
  vst1q_f32(o, v);
  for (int i = 0; i < 4; ++i) {
    const int64_t tt = t + (i & 1), rr = r + (i >> 1);
    if (tt < T && rr < rows) y[tt * N + rr] = o[i];
  }
}
// [v0, v0, v1, v1] and [v0, v1, v0, v1]: a row pair's values against a token pair's.
inline float32x4_t rows2(const float* v) { return float32x4_t{v[0], v[0], v[1], v[1]}; }
inline float32x4_t tokens2(float v0, float v1) { return float32x4_t{v0, v1, v0, v1}; }

struct NeonBlock {
  float d[kRows], c[kRows];
  int8_t codes[kRows / 2][4][16];  // [row pair][chunk of 8][row 2p's codes, row 2p + 1's]
};

template <GgmlType TYPE>
void repack_neon(const uint8_t* blocks, int64_t row_bytes, int64_t n0, int64_t rows, int64_t nb, NeonBlock* panel) {
  for (int64_t b = 0; b < nb; ++b) {
    NeonBlock& p = panel[b];
    for (int64_t r = 0; r < kRows; ++r) {
      int8_t codes[32] = {};
      p.d[r] = p.c[r] = 0;
      if (r < rows) {
        const Block32 w = decode32<TYPE>(blocks + (n0 + r) * row_bytes + b * kBlockBytes<TYPE>);
        vst1q_s8(codes, w.codes.lo), vst1q_s8(codes + 16, w.codes.hi);
        p.d[r] = w.d, p.c[r] = w.c;
      }
      for (int j = 0; j < 4; ++j) std::memcpy(p.codes[r / 2][j] + (r % 2) * 8, codes + 8 * j, 8);
    }
  }
}

template <bool MIN>
void neon_tokens(const NeonBlock* panel, int64_t nb, const Act& a, const int8_t* xp, int64_t T, float* y, int64_t N,
                 int64_t rows) {
  for (int64_t t = 0; t < T; t += 2) {
    const int8_t* x = xp + (t / 2) * nb * 64;
    const int64_t t1 = std::min(t + 1, T - 1);  // a lone last token pairs with zeros; its dx is never used
    float32x4_t acc[kRows / 2];
    for (auto& v : acc) v = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; ++b) {
      const NeonBlock& p = panel[b];
      int8x16_t xv[4];
      for (int j = 0; j < 4; ++j) xv[j] = vld1q_s8(x + (b * 4 + j) * 16);
      const float dx0 = a.d[t * nb + b], dx1 = a.d[t1 * nb + b];
      const float32x4_t dx = tokens2(dx0, dx1);
      float32x4_t dxs{};
      if constexpr (MIN) dxs = tokens2(dx0 * static_cast<float>(a.bsum32[t * nb + b]), dx1 * static_cast<float>(a.bsum32[t1 * nb + b]));
      for (int64_t rp = 0; rp < kRows / 2; ++rp) {
        int32x4_t sum = vdupq_n_s32(0);
        for (int j = 0; j < 4; ++j) sum = vmmlaq_s32(sum, vld1q_s8(p.codes[rp][j]), xv[j]);
        acc[rp] = vfmaq_f32(acc[rp], vcvtq_f32_s32(sum), vmulq_f32(rows2(p.d + 2 * rp), dx));
        if constexpr (MIN) acc[rp] = vfmaq_f32(acc[rp], rows2(p.c + 2 * rp), dxs);
      }
    }
    for (int64_t rp = 0; rp < kRows / 2; ++rp) store_tile(acc[rp], y, N, t, T, 2 * rp, rows);
  }
}

// K-quants: codes q − O as signed bytes, sub-block scales on the int32 tiles (MLA), mins from Σx̂.
struct NeonSuper {
  float d[kRows], dmin[kRows];
  int32_t sc[16][kRows / 2][4];    // [sub-block][row pair]: [sc r, sc r, sc r + 1, sc r + 1]
  int32_t mins[16][kRows / 2][4];  // the same for the mins
  int8_t codes[kRows / 2][32][16];  // [row pair][chunk of 8 values][row 2p's, row 2p + 1's]
};

template <class F>
void repack_neon_k(const uint8_t* blocks, int64_t row_bytes, int64_t n0, int64_t rows, int64_t ns, NeonSuper* panel) {
  SuperRow sr;
  for (int64_t s = 0; s < ns; ++s) {
    NeonSuper& p = panel[s];
    for (int64_t r = 0; r < kRows; ++r) {
      if (r < rows) F::decode(blocks + (n0 + r) * row_bytes + s * F::kBytes, sr);
      else sr = SuperRow{};
      p.d[r] = sr.d, p.dmin[r] = sr.dmin;
      for (int j = 0; j < 256 / F::S; ++j)
        for (int i = 0; i < 2; ++i) p.sc[j][r / 2][2 * (r % 2) + i] = sr.sc[j], p.mins[j][r / 2][2 * (r % 2) + i] = sr.m[j];
      for (int c = 0; c < 32; ++c)
        for (int k = 0; k < 8; ++k)
          p.codes[r / 2][c][(r % 2) * 8 + k] = static_cast<int8_t>(r < rows ? sr.q[8 * c + k] - F::O : 0);
    }
  }
}

template <class F>
void neon_tokens_k(const NeonSuper* panel, int64_t ns, const Act& a, const int8_t* xp, int64_t T, float* y, int64_t N,
                   int64_t rows) {
  constexpr int kSub = 256 / F::S, kChunks = F::S / 8;
  const int16_t* bsum = F::S == 16 ? a.bsum16 : a.bsum32;
  const int64_t per_token = a.K / F::S;  // sub-block sums a token
  for (int64_t t = 0; t < T; t += 2) {
    const int8_t* x = xp + (t / 2) * a.K * 2;
    const int64_t t1 = std::min(t + 1, T - 1);
    float32x4_t acc[kRows / 2];
    for (auto& v : acc) v = vdupq_n_f32(0.0f);
    for (int64_t s = 0; s < ns; ++s) {
      const NeonSuper& p = panel[s];
      int32x4_t total[kRows / 2], mins[kRows / 2];
      for (int64_t rp = 0; rp < kRows / 2; ++rp) total[rp] = mins[rp] = vdupq_n_s32(0);
      for (int j = 0; j < kSub; ++j) {
        int8x16_t xv[kChunks];
        for (int c = 0; c < kChunks; ++c) xv[c] = vld1q_s8(x + (s * 32 + j * kChunks + c) * 16);
        int32x4_t bs{};
        if constexpr (F::kMins) {
          const int32_t b0 = bsum[t * per_token + s * kSub + j], b1 = bsum[t1 * per_token + s * kSub + j];
          bs = int32x4_t{b0, b1, b0, b1};
        }
        for (int64_t rp = 0; rp < kRows / 2; ++rp) {
          int32x4_t sum = vdupq_n_s32(0);
          for (int c = 0; c < kChunks; ++c) sum = vmmlaq_s32(sum, vld1q_s8(p.codes[rp][j * kChunks + c]), xv[c]);
          total[rp] = vmlaq_s32(total[rp], sum, vld1q_s32(p.sc[j][rp]));
          if constexpr (F::kMins) mins[rp] = vmlaq_s32(mins[rp], bs, vld1q_s32(p.mins[j][rp]));
        }
      }
      const float32x4_t dx = tokens2(a.d[t * ns + s], a.d[t1 * ns + s]);
      for (int64_t rp = 0; rp < kRows / 2; ++rp) {
        acc[rp] = vfmaq_f32(acc[rp], vcvtq_f32_s32(total[rp]), vmulq_f32(rows2(p.d + 2 * rp), dx));
        if constexpr (F::kMins) acc[rp] = vfmsq_f32(acc[rp], vcvtq_f32_s32(mins[rp]), vmulq_f32(rows2(p.dmin + 2 * rp), dx));
      }
    }
    for (int64_t rp = 0; rp < kRows / 2; ++rp) store_tile(acc[rp], y, N, t, T, 2 * rp, rows);
  }
}

// Groups of 8 rows split across threads, each repacked once and run over every token pair.
template <class Panel, class Repack, class Tokens>
void neon_panels(int64_t nblk, int64_t N, Repack repack_rows, Tokens tokens) {
  const int64_t groups = (N + kRows - 1) / kRows;
  parallel_for(static_cast<size_t>(groups), 1, [&](size_t begin, size_t end) {
    thread_local std::vector<Panel> panel;
    panel.resize(static_cast<size_t>(nblk));
    for (size_t g = begin; g < end; ++g) {
      const int64_t n0 = static_cast<int64_t>(g) * kRows, rows = std::min(kRows, N - n0);
      repack_rows(n0, rows, panel.data());
      tokens(panel.data(), n0, rows);
    }
  });
}

template <GgmlType TYPE>
bool try32(const uint8_t* blocks, int64_t row_bytes, const Act& a, int64_t T, float* y, int64_t N) {
  const int64_t nb = a.K / 32;
  const std::vector<int8_t> xp = token_pairs(a, T);
  neon_panels<NeonBlock>(
      nb, N, [&](int64_t n0, int64_t rows, NeonBlock* p) { repack_neon<TYPE>(blocks, row_bytes, n0, rows, nb, p); },
      [&](const NeonBlock* p, int64_t n0, int64_t rows) {
        neon_tokens<!kSignedCodes<TYPE>>(p, nb, a, xp.data(), T, y + n0, N, rows);
      });
  return true;
}
template <class F>
bool try_k(const uint8_t* blocks, int64_t row_bytes, const Act& a, int64_t T, float* y, int64_t N) {
  const int64_t ns = a.K / 256;
  const std::vector<int8_t> xp = token_pairs(a, T);
  neon_panels<NeonSuper>(
      ns, N, [&](int64_t n0, int64_t rows, NeonSuper* p) { repack_neon_k<F>(blocks, row_bytes, n0, rows, ns, p); },
      [&](const NeonSuper* p, int64_t n0, int64_t rows) { neon_tokens_k<F>(p, ns, a, xp.data(), T, y + n0, N, rows); });
  return true;
}

}  // namespace

#elif defined(KAPITSA_GGML_INT8)
namespace {
// No panels on this level (AArch64 without i8mm: the row kernels run every token count).
template <GgmlType>
bool try32(const uint8_t*, int64_t, const Act&, int64_t, float*, int64_t) { return false; }
template <class>
bool try_k(const uint8_t*, int64_t, const Act&, int64_t, float*, int64_t) { return false; }
}  // namespace
#endif

#if defined(KAPITSA_GGML_INT8)
bool ggml_panels(GgmlType type, const uint8_t* blocks, int64_t row_bytes, const Act& a, int64_t T, float* y, int64_t N) {
  if (T < kPanelTokens) return false;
  if (ggml_amx_int8(type, blocks, row_bytes, a, T, y, N)) return true;  // AMX tiles where usable (matmul_ggml_amx.cpp)
  switch (type) {
    case GgmlType::q8_0: return try32<GgmlType::q8_0>(blocks, row_bytes, a, T, y, N);
    case GgmlType::q4_0: return try32<GgmlType::q4_0>(blocks, row_bytes, a, T, y, N);
    case GgmlType::q4_1: return try32<GgmlType::q4_1>(blocks, row_bytes, a, T, y, N);
    case GgmlType::q5_0: return try32<GgmlType::q5_0>(blocks, row_bytes, a, T, y, N);
    case GgmlType::q5_1: return try32<GgmlType::q5_1>(blocks, row_bytes, a, T, y, N);
    case GgmlType::iq4_nl: return try32<GgmlType::iq4_nl>(blocks, row_bytes, a, T, y, N);
    case GgmlType::mxfp4: return try32<GgmlType::mxfp4>(blocks, row_bytes, a, T, y, N);
    case GgmlType::q4_k: return try_k<K4<false>>(blocks, row_bytes, a, T, y, N);
    case GgmlType::q5_k: return try_k<K4<true>>(blocks, row_bytes, a, T, y, N);
    case GgmlType::q6_k: return try_k<K6>(blocks, row_bytes, a, T, y, N);
    case GgmlType::q2_k: return try_k<K23<false>>(blocks, row_bytes, a, T, y, N);
    case GgmlType::q3_k: return try_k<K23<true>>(blocks, row_bytes, a, T, y, N);
    case GgmlType::iq4_xs: return try_k<Iq4Xs>(blocks, row_bytes, a, T, y, N);
    default: return false;
  }
}
#endif

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL::ggml_int8
