// Tests of the MLX affine weight format (WeightFormat::affine): the ref dequantization, matmul and
// embedding against values computed here from the format's definition — hand-written words whose bit
// patterns are known (codes straddling two words for 3/5/6 bits), and a bit-by-byte packer written
// independently of the kernels — for every bits value, with extreme codes (0 and 2^bits − 1), zero
// scales and negative biases; then every backend against ref on fresh random weights (the cpu
// backend's int16-activation GEMV within the bound its rounding of x allows).
#include "op_test_helpers.h"
#include "ops/cpu/cpu.h"
#include "ops/ref/ref.h"

#include <algorithm>
#include <cmath>

#include <vector>

namespace kapitsa::ops {
namespace {
using test::Rng;

constexpr int kBits[] = {2, 3, 4, 5, 6, 8};

// Codes q[n][k] packed the way MLX defines it: code k of a row occupies stream bits
// [k·bits, (k+1)·bits), stream bit i being bit i % 8 of byte i / 8 (little-endian words).
std::vector<uint32_t> pack(const std::vector<std::vector<uint32_t>>& q, int bits) {
  const size_t K = q[0].size(), row_bytes = K * static_cast<size_t>(bits) / 8;
  std::vector<uint8_t> bytes(q.size() * row_bytes, 0);
  for (size_t n = 0; n < q.size(); ++n)
    for (size_t k = 0; k < K; ++k)
      for (int b = 0; b < bits; ++b)
        if ((q[n][k] >> b) & 1u) {
          const size_t i = k * static_cast<size_t>(bits) + static_cast<size_t>(b);
          bytes[n * row_bytes + i / 8] |= static_cast<uint8_t>(1u << (i % 8));
        }
  std::vector<uint32_t> words(bytes.size() / 4);
  for (size_t w = 0; w < words.size(); ++w)
    words[w] = bytes[4 * w] | bytes[4 * w + 1] << 8 | bytes[4 * w + 2] << 16 | static_cast<uint32_t>(bytes[4 * w + 3]) << 24;
  return words;
}

// A bf16 / f16 / f32 tensor holding `values` (chosen exactly representable in each).
Buffer params(DType dt, Shape shape, const std::vector<float>& values) {
  Buffer b = Buffer::allocate(dt, shape);
  for (size_t i = 0; i < values.size(); ++i) {
    if (dt == DType::f32) b.tensor().data_as<float>()[i] = values[i];
    else if (dt == DType::bf16) b.tensor().data_as<uint16_t>()[i] = f32_to_bf16(values[i]);
    else b.tensor().data_as<uint16_t>()[i] = f32_to_f16(values[i]);
  }
  return b;
}

// Hand-written words: 32 codes per row, one group of 32.
TEST(Affine, RefHandWrittenWords) {
  struct Case {
    int bits;
    std::vector<uint32_t> words;  // bits words = 32 codes
    std::vector<std::pair<int, uint32_t>> codes;  // (k, q) expected; every other code is 0
  };
  const std::vector<Case> cases = {
      {2, {0x000000E4u, 0x40000000u}, {{0, 0}, {1, 1}, {2, 2}, {3, 3}, {31, 1}}},
      // 3 bits: code 10 is stream bits 30..32 — two bits of word 0 and one of word 1
      {3, {0xC0000007u, 0x00000001u, 0xE0000000u}, {{0, 7}, {10, 7}, {31, 7}}},
      {4, {0x76543210u, 0xF0000000u, 0, 0}, {{0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 6}, {7, 7}, {15, 15}}},
      // 5 bits: code 6 is bits 30..34 (2 + 3 bits), code 12 bits 60..64 (4 + 1 bits)
      {5, {0xC0000000u, 0xF0000007u, 0x00000001u, 0, 0}, {{6, 31}, {12, 31}}},
      // 6 bits: code 5 is bits 30..35 (2 + 4), code 10 bits 60..65 (4 + 2)
      {6, {0xC0000000u, 0xF000000Fu, 0x00000003u, 0, 0, 0xFC000000u}, {{5, 63}, {10, 63}, {31, 63}}},
      {8, {0x04030201u, 0, 0, 0, 0, 0, 0, 0xFF000000u}, {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {31, 255}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("bits {}", c.bits));
    ASSERT_EQ(c.words.size(), static_cast<size_t>(c.bits));
    std::vector<uint32_t> words = c.words;
    Buffer scales = params(DType::bf16, {1, 1}, {0.5f}), biases = params(DType::bf16, {1, 1}, {-3.0f});
    const Linear w = Linear::affine(Tensor(DType::u32, {1, c.bits}, words.data()), scales, biases, c.bits, 32);
    EXPECT_EQ(w.rows(), 1);
    EXPECT_EQ(w.cols(), 32);
    std::vector<float> row(32);
    ref::dequantize_row(w, 0, row.data());
    std::vector<float> want(32, -3.0f);  // code 0 → bias
    for (auto [k, q] : c.codes) want[static_cast<size_t>(k)] = 0.5f * static_cast<float>(q) - 3.0f;
    for (int k = 0; k < 32; ++k) EXPECT_EQ(row[static_cast<size_t>(k)], want[static_cast<size_t>(k)]) << "k=" << k;
  }
}

// Packed by the test's own packer: extremes, zero scales, negative biases, every scale dtype and group
// size; dequantize, embedding and matmul all read the same values.
TEST(Affine, RefDequantizeEmbeddingMatmul) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (int bits : kBits)
    for (int gs : {32, 64, 128})
      for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
        SCOPED_TRACE(fmt::format("bits {} group {} {}", bits, gs, dtype_name(dt)));
        const int64_t N = 5, K = 2 * gs, G = K / gs;
        const uint32_t qmax = (1u << bits) - 1;
        std::uniform_int_distribution<uint32_t> code(0, qmax);
        std::vector<std::vector<uint32_t>> q(N, std::vector<uint32_t>(K));
        for (auto& row : q)
          for (auto& v : row) v = code(r.gen);
        q[0][0] = 0, q[0][1] = qmax, q[1][K - 1] = qmax, q[2][gs] = 0;
        // scales and biases exact in bf16 and f16: multiples of 1/8 of small magnitude
        std::vector<float> s(N * G), b(N * G);
        std::uniform_int_distribution<int> eighth(-16, 16);
        for (size_t i = 0; i < s.size(); ++i) s[i] = eighth(r.gen) / 8.0f, b[i] = eighth(r.gen) / 8.0f;
        s[0] = 0.0f;          // a zero scale: the group is its bias
        b[1] = -2.0f;         // negative biases
        s[2] = 1.0f, b[2] = -0.5f * qmax;  // symmetric around zero
        std::vector<uint32_t> words = pack(q, bits);
        Buffer scales = params(dt, {N, G}, s), biases = params(dt, {N, G}, b);
        const Linear w = Linear::affine(Tensor(DType::u32, {N, K * bits / 32}, words.data()), scales, biases, bits, gs);
        EXPECT_EQ(w.cols(), K);
        EXPECT_EQ(w.nbytes(), words.size() * 4 + 2 * N * G * dtype_size(dt));
        // expected weights from the definition
        std::vector<float> want(N * K);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t k = 0; k < K; ++k)
            want[n * K + k] = s[n * G + k / gs] * static_cast<float>(q[n][k]) + b[n * G + k / gs];
        std::vector<float> row(K);
        for (int64_t n = 0; n < N; ++n) {
          ref::dequantize_row(w, n, row.data());
          for (int64_t k = 0; k < K; ++k) ASSERT_EQ(row[k], want[n * K + k]) << "n=" << n << " k=" << k;
        }
        const std::vector<int32_t> ids = {4, 0, 2, 0};
        Buffer e = Buffer::allocate(DType::f32, {4, K});
        test::run(test::ref(), embedding, w, ids, e);
        for (size_t t = 0; t < ids.size(); ++t)
          for (int64_t k = 0; k < K; ++k) ASSERT_EQ(e.f32()[t * K + k], want[ids[t] * K + k]);
        Buffer x = test::random_f32(r, {3, K});
        Buffer y = Buffer::allocate(DType::f32, {3, N});
        test::run(test::ref(), matmul, x, w, y);
        for (int64_t t = 0; t < 3; ++t)
          for (int64_t n = 0; n < N; ++n) {
            double acc = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
              acc += static_cast<double>(x.f32()[t * K + k]) * want[n * K + k];
              mag += std::abs(static_cast<double>(x.f32()[t * K + k]) * want[n * K + k]);
            }
            EXPECT_NEAR(y.f32()[t * N + n], acc, 1e-6 * mag + 1e-6) << "t=" << t << " n=" << n;
          }
      }
}

// A random affine Linear [N, K] (codes over the full range, scales and biases of both signs) and its
// storage.
struct RandomAffine {
  std::vector<uint32_t> words;
  Buffer scales, biases;
  Linear w;
  int64_t K;
  RandomAffine(Rng& r, int64_t N, int64_t K, int bits, int gs, DType dt) : K(K) {
    std::uniform_int_distribution<uint32_t> word;
    words.resize(static_cast<size_t>(N * K * bits / 32));
    for (auto& v : words) v = word(r.gen);
    scales = kapitsa::testing::random_buffer(r.gen, dt, {N, K / gs}, -0.1f, 0.1f);
    biases = kapitsa::testing::random_buffer(r.gen, dt, {N, K / gs}, -0.5f, 0.5f);
    w = Linear::affine(Tensor(DType::u32, {N, K * bits / 32}, words.data()), scales, biases, bits, gs);
  }
  double bias(int64_t n, int64_t g) const {
    const Tensor& b = biases.tensor();
    const int64_t i = n * b.dim(1) + g;
    return b.dtype() == DType::bf16  ? bf16_to_f32(b.data_as<const uint16_t>()[i])
           : b.dtype() == DType::f16 ? f16_to_f32(b.data_as<const uint16_t>()[i])
                                     : b.data_as<const float>()[i];
  }
  // Row n as ref dequantizes it; every row on the first call (the bounds ask for each row once a token).
  const float* dequantized(int64_t n) const {
    if (rows_.empty()) {
      rows_.resize(static_cast<size_t>(w.rows() * K));
      for (int64_t i = 0; i < w.rows(); ++i) ref::dequantize_row(w, i, rows_.data() + i * K);
    }
    return rows_.data() + n * K;
  }

 private:
  mutable std::vector<float> rows_;
};

// Every backend against ref on fresh random weights and inputs: token counts on both sides of the
// GEMV / panel switch, row counts not a multiple of any block, every bits value and group size.
TEST_P(OnBackend, AffineMatmulAndEmbeddingMatchRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  for (int bits : kBits)
    for (int gs : {32, 64, 128})
      for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
        std::uniform_int_distribution<int> pick_groups(1, 3);
        // One long row per bits value (142 chunks of 32 codes: more than the CUDA GEMV's 128 threads a row),
        // and for 4 and 8 bits one matrix of over 8192 rows (thousands of GPU blocks, an odd tail).
        const bool long_row = gs == 32 && dt == DType::bf16;
        const bool many_rows = gs == 64 && dt == DType::f16 && (bits == 4 || bits == 8);
        const int64_t N = many_rows ? 8193 + static_cast<int64_t>(r.gen() % 7) : 1 + static_cast<int64_t>(r.gen() % 37);
        const int64_t K = long_row ? 32 * 142 : many_rows ? gs : gs * pick_groups(r.gen);
        RandomAffine a(r, N, K, bits, gs, dt);
        for (int64_t T : {1, 2, 3, 4, 5, 8, 9, 20, 33}) {
          SCOPED_TRACE(fmt::format("bits {} group {} {} T={} N={} K={}", bits, gs, dtype_name(dt), T, N, K));
          Buffer x = test::random_f32(r, {T, K});
          Buffer yr = Buffer::zeros(DType::f32, {T, N}), yc = Buffer::allocate(DType::f32, {T, N});
          for (int64_t i = 0; i < T * N; ++i) yc.f32()[i] = 1e30f;  // written, not accumulated
          test::run(test::ref(), matmul, x, a.w, yr);
          test::run(backend(), matmul, x, a.w, yc);
          // f32 accumulation (and s·Σxq + b·Σx regrouping) vs double: relative to Σ|x·w| of the row;
          // plus cuda's prefill bound (T > 8: bf16 parts of x and w, the smallest products left out).
          // The cpu backend's int16-activation GEMV also rounds x to sx·round(x/sx) per 64 inputs
          // (sx = max|x|/32767), which moves an output by at most Σ_k |s·q_k| · sx/2.
          const std::optional<cpu::Level> level = cpu::level_of(backend());
          // The cuda backend rounds x the same way for 4 bits, groups of a multiple of 64, T ≤ 32
          // (affine_int16_supported in ops/cuda/affine_gemv.cu; over 8 rows in chunks, ops/cuda/matmul.cpp).
          const bool cuda_int16 = backend().name == "cuda" && bits == 4 && gs % 64 == 0 && T <= 32;
          const bool int16 = (level && KAPITSA_CPU_AT(*level, affine_int16_activations)(bits, gs, T)) || cuda_int16;
          for (int64_t n = 0; n < N; ++n) {
            const float* row = a.dequantized(n);
            for (int64_t t = 0; t < T; ++t) {
              double mag = 0, rounding = 0;
              for (int64_t k = 0; k < K; ++k) mag += std::abs(static_cast<double>(x.f32()[t * K + k]) * row[static_cast<size_t>(k)]);
              for (int64_t p = 0; int16 && p < K / cpu::kActBlock; ++p) {
                float amax = 0;
                for (int64_t k = p * cpu::kActBlock; k < (p + 1) * cpu::kActBlock; ++k)
                  amax = std::max(amax, std::abs(x.f32()[t * K + k]));
                for (int64_t k = p * cpu::kActBlock; k < (p + 1) * cpu::kActBlock; ++k)  // |s·q| = |w − b|
                  rounding += std::abs(row[k] - a.bias(n, k / gs)) * amax / cpu::kActMax / 2;
              }
              ASSERT_NEAR(yc.f32()[t * N + n], yr.f32()[t * N + n],
                          1.0001 * rounding + test::cuda_prefill_bound(backend(), T, mag) + 2e-6 * mag + 1e-7)
                  << "t=" << t << " n=" << n << (int16 ? " (int16 activations)" : "");
            }
          }
        }
        std::vector<int32_t> ids;
        for (int i = 0; i < 6; ++i) ids.push_back(static_cast<int32_t>(r.gen() % static_cast<uint64_t>(N)));
        Buffer er = Buffer::zeros(DType::f32, {6, K}), ec = Buffer::zeros(DType::f32, {6, K});
        test::run(test::ref(), embedding, a.w, ids, er);
        test::run(backend(), embedding, a.w, ids, ec);
        EXPECT_TRUE(test::bit_equal(er, ec)) << "embedding, bits " << bits;  // both scale·q + bias in one fma
      }
}

// Each row of a matmul over T tokens equals, bit for bit, the same token's row alone: speculative
// verification (the last accepted token plus k proposals in one forward) then gives exactly the logits
// plain decoding gives, so greedy output cannot change with speculation. The MLX default shapes (groups
// of 64, K a multiple of 128: the cpu's plane kernel) and 8 bits, 1-8 tokens, fresh random data.
// On cuda only 4 bits (the int16 GEMV, whose 1-, 4- and 8-token instances form each token's sums in one
// order), up to 32 tokens; its other widths take other kernels for one token and for several.
TEST_P(OnBackend, AffineRowsOfSeveralTokensEqualEachTokenAlone) {
  const bool cuda = backend().name == "cuda";
  Rng r;
  SCOPED_TRACE(r.trace());
  for (int bits : {4, 8})
    for (int64_t K : {128, 384, 1152}) {
      if (cuda && bits != 4) continue;
      const int64_t N = 1 + static_cast<int64_t>(r.gen() % 70);
      RandomAffine a(r, N, K, bits, 64, DType::bf16);
      // On cuda 9-32 rows too (GEMVs over chunks of at most 8 rows). The backend claims at most what this
      // test checks (ops::matmul_invariant_rows: the engine keeps speculative steps within it).
      std::vector<int64_t> token_counts = {2, 3, 4, 5, 6, 7, 8};
      if (cuda) token_counts.insert(token_counts.end(), {12, 20, 32});
      ASSERT_LE(backend().matmul_invariant_rows(a.w), token_counts.back());
      for (int64_t T : token_counts) {
        SCOPED_TRACE(fmt::format("bits {} K={} N={} T={}", bits, K, N, T));
        Buffer x = test::random_f32(r, {T, K});
        Buffer y = Buffer::allocate(DType::f32, {T, N}), alone = Buffer::allocate(DType::f32, {1, N});
        test::run(backend(), matmul, x, a.w, y);
        for (int64_t t = 0; t < T; ++t) {
          test::run(backend(), matmul, x.tensor().rows(t, t + 1), a.w, alone);
          for (int64_t n = 0; n < N; ++n) ASSERT_EQ(y.f32()[t * N + n], alone.f32()[n]) << "t=" << t << " n=" << n;
        }
      }
    }
}

// |y − ref| allowed for output n of a matmul over `a` with x_t: [K]: f32 accumulation (relative to
// Σ|x·w|), plus, for a backend rounding x to int16 per 64 inputs (sx = max|x|/32767), Σ_k |s·q_k|·sx/2;
// with prefill (cuda's, more than 8 tokens), its bound instead (test::cuda_prefill_bound).
double affine_bound(const RandomAffine& a, const float* x_t, int64_t n, int64_t K, int gs, bool prefill = false) {
  const float* row = a.dequantized(n);
  double mag = 0, rounding = 0;
  for (int64_t k = 0; k < K; ++k) mag += std::abs(static_cast<double>(x_t[k]) * row[k]);
  if (prefill) return mag / 32768 + 2e-6 * mag + 1e-7;  // cuda's prefill: test::cuda_prefill_bound
  for (int64_t p = 0; p < K / cpu::kActBlock; ++p) {
    float amax = 0;
    for (int64_t k = p * cpu::kActBlock; k < (p + 1) * cpu::kActBlock; ++k) amax = std::max(amax, std::abs(x_t[k]));
    for (int64_t k = p * cpu::kActBlock; k < (p + 1) * cpu::kActBlock; ++k)
      rounding += std::abs(row[k] - a.bias(n, k / gs)) * amax / cpu::kActMax / 2;
  }
  return 1.0001 * rounding + 2e-6 * mag + 1e-7;
}

// matmul_many and matmul_swiglu over 4-bit affine weights (the GPU runs several weights sharing x in one
// launch, and SwiGLU's gate and up in one with the activation in its epilogue): every backend against
// ref's matmul (and silu_mul), parts of odd row counts, more parts than one launch takes, 1–12 tokens.
// Under AddressSanitizer bf16 scales only (the slowest test of that pass: the scale dtype changes
// values, not which memory a kernel touches).
TEST_P(OnBackend, AffineManyAndSwigluMatchRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  const std::vector<DType> dtypes = testing::kUnderAddressSanitizer ? std::vector<DType>{DType::bf16}
                                                          : std::vector<DType>{DType::bf16, DType::f16, DType::f32};
  for (int gs : {64, 128})
    for (DType dt : dtypes)
      for (int64_t T : {1, 3, 8, 12}) {
        // 40 groups of 64: two full blocks of 16 groups and a tail (the cpu plane kernel's s·sx blocks).
        const int64_t K = 2560;
        SCOPED_TRACE(fmt::format("group {} {} T={}", gs, dtype_name(dt), T));
        const bool prefill = backend().name == "cuda" && T > 8;
        const Buffer x = test::random_f32(r, {T, K});
        std::vector<RandomAffine> parts;
        parts.reserve(5);  // a Linear points into its RandomAffine's storage: no reallocation
        for (int64_t N : {70, 1, 33, 130, 9}) parts.emplace_back(r, N, K, 4, gs, dt);
        std::vector<Linear> w;
        std::vector<Buffer> yr, yc;
        std::vector<Tensor> yc_t;
        for (const RandomAffine& a : parts) {
          w.push_back(a.w);
          yr.push_back(Buffer::zeros(DType::f32, {T, a.w.rows()}));
          yc.push_back(Buffer::allocate(DType::f32, {T, a.w.rows()}));
          for (int64_t i = 0; i < yc.back().tensor().numel(); ++i) yc.back().f32()[i] = std::nanf("");
          test::run(test::ref(), matmul, x, a.w, yr.back());
        }
        for (const Buffer& b : yc) yc_t.push_back(b.tensor());
        test::run(backend(), matmul_many, x, w, yc_t);
        for (size_t i = 0; i < parts.size(); ++i)
          for (int64_t t = 0; t < T; ++t)
            for (int64_t n = 0; n < parts[i].w.rows(); ++n) {
              const int64_t at = t * parts[i].w.rows() + n;
              ASSERT_NEAR(yc[i].f32()[at], yr[i].f32()[at], affine_bound(parts[i], x.f32() + t * K, n, K, gs, prefill))
                  << "part " << i << " t=" << t << " n=" << n;
            }
        // SwiGLU over parts 0 and 3 cut to 70 rows: silu(g)·u, |silu'| ≤ 1.1.
        const RandomAffine& gate = parts[0];
        RandomAffine up(r, 70, K, 4, gs, dt);
        Buffer g = Buffer::zeros(DType::f32, {T, 70}), u = Buffer::zeros(DType::f32, {T, 70}),
               ref_y = Buffer::zeros(DType::f32, {T, 70});
        test::run(test::ref(), matmul, x, gate.w, g);
        test::run(test::ref(), matmul, x, up.w, u);
        test::run(test::ref(), silu_mul, g, u, ref_y);
        Buffer y = Buffer::allocate(DType::f32, {T, 70}), scratch = Buffer::zeros(DType::f32, {T, 70});
        for (int64_t i = 0; i < T * 70; ++i) y.f32()[i] = std::nanf("");
        test::run(backend(), matmul_swiglu, x, gate.w, up.w, scratch, y);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t n = 0; n < 70; ++n) {
            const int64_t at = t * 70 + n;
            const double eg = affine_bound(gate, x.f32() + t * K, n, K, gs, prefill),
                         eu = affine_bound(up, x.f32() + t * K, n, K, gs, prefill);
            const double gv = g.f32()[at], uv = u.f32()[at], silu = gv / (1 + std::exp(-gv));
            ASSERT_NEAR(y.f32()[at], ref_y.f32()[at], 1.1 * std::abs(uv) * eg + (std::abs(silu) + 1.1 * eg) * eu + 1e-6 * std::abs(ref_y.f32()[at]) + 1e-7)
                << "swiglu t=" << t << " n=" << n;
          }
      }
}

// matmul_experts over affine expert stacks (the GPU routes quantized experts on the device: x rounded once
// for 4 bits, groups of 64/128; other bits the chunk kernel): every backend against ref, random ids with
// repeats, every bits value, rows not a multiple of a block.
TEST_P(OnBackend, AffineMatmulExpertsMatchRef) {
  Rng r;
  SCOPED_TRACE(r.trace());
  struct Case {
    int64_t T, k, E, N;
    int gs, groups;  // K = gs · groups
  };
  // (One group of 64 or two: the tiny fixtures' expert shapes, a row of 2 or 4 chunks of 32 codes; and a
  // row of 144 chunks, more than a cuda block's threads.)
  for (int bits : kBits)
    for (const Case& c : std::vector<Case>{{1, 6, 8, 40, 64, 5}, {3, 2, 5, 17, 32, 5}, {4, 4, 16, 130, 128, 5},
                                           {5, 2, 8, 64, 64, 1}, {2, 4, 16, 64, 64, 2}, {2, 6, 8, 9, 64, 72}})
      for (DType dt : {DType::bf16, DType::f32}) {
        const int64_t K = c.gs * c.groups;
        SCOPED_TRACE(fmt::format("bits {} group {} {} T={} k={} E={} N={} K={}", bits, c.gs, dtype_name(dt), c.T, c.k,
                                 c.E, c.N, K));
        // The stack's storage as one [E·N, K] matrix: expert e's row n is its row e·N + n.
        RandomAffine all(r, c.E * c.N, K, bits, c.gs, dt);
        const Linear stack = Linear::affine(Tensor(DType::u32, {c.E, c.N, K * bits / 32}, all.words.data()),
                                            all.scales.tensor().reshape({c.E, c.N, K / c.gs}),
                                            all.biases.tensor().reshape({c.E, c.N, K / c.gs}), bits, c.gs);
        std::vector<Linear> experts;
        for (int64_t e = 0; e < c.E; ++e) experts.push_back(stack.expert(e));
        const Buffer x = test::random_f32(r, {c.T, K});
        Buffer ids = Buffer::zeros(DType::i32, {c.T, c.k});
        int32_t* id = ids.tensor().data_as<int32_t>();
        for (int64_t i = 0; i < c.T * c.k; ++i) id[i] = static_cast<int32_t>(r.gen() % c.E);
        Buffer yr = Buffer::zeros(DType::f32, {c.T * c.k, c.N}), yc = Buffer::allocate(DType::f32, {c.T * c.k, c.N});
        for (int64_t i = 0; i < c.T * c.k * c.N; ++i) yc.f32()[i] = std::nanf("");  // every row is written
        test::run(test::ref(), matmul_experts, x, experts, ids, yr);
        test::run(backend(), matmul_experts, x, experts, ids, yc);
        for (int64_t p = 0; p < c.T * c.k; ++p)
          for (int64_t n = 0; n < c.N; ++n)
            ASSERT_NEAR(yc.f32()[p * c.N + n], yr.f32()[p * c.N + n],
                        affine_bound(all, x.f32() + p / c.k * K, id[p] * c.N + n, K, c.gs))
                << "p=" << p << " n=" << n << " expert " << id[p];
      }
}

// A stack of experts: expert(e) of an affine stack reads its own codes, scales and biases.
// The relu² ops over affine weights are the backend's own product then relu_squared, bit for bit (cuda:
// relu² in the int16 GEMV's stores for 4 bits and up to 8 tokens, a pass of its own after the chunk
// kernel and the prefill path), dense and routed; some outputs negative before (0 after).
TEST_P(OnBackend, AffineReluSquaredIsProductThenReluSquared) {
  Rng r;
  SCOPED_TRACE(r.trace());
  auto check = [&](const Buffer& plain, const Buffer& y) {
    Buffer expected = Buffer::zeros(DType::f32, {plain.tensor().numel()});
    test::run(backend(), relu_squared, plain, expected);
    int64_t positive = 0;
    for (int64_t i = 0; i < expected.tensor().numel(); ++i) {
      ASSERT_EQ(y.f32()[i], expected.f32()[i]) << "at " << i;
      positive += plain.f32()[i] > 0;
    }
    EXPECT_GT(positive, 0);
    EXPECT_LT(positive, expected.tensor().numel());
  };
  for (int bits : {4, 3})
    for (int64_t T : {1, 3, 12}) {
      SCOPED_TRACE(fmt::format("bits {} T={}", bits, T));
      const int64_t K = 640, N = 70, E = 4, k = 2;
      const Buffer x = test::random_f32(r, {T, K});
      const RandomAffine dense(r, N, K, bits, 64, DType::bf16);
      Buffer plain = Buffer::zeros(DType::f32, {T, N}), y = Buffer::zeros(DType::f32, {T, N});
      test::run(backend(), matmul, x, dense.w, plain);
      test::run(backend(), matmul_relu_squared, x, dense.w, y);
      check(plain, y);
      RandomAffine all(r, E * N, K, bits, 64, DType::bf16);
      const Linear stack = Linear::affine(Tensor(DType::u32, {E, N, K * bits / 32}, all.words.data()),
                                          all.scales.tensor().reshape({E, N, K / 64}),
                                          all.biases.tensor().reshape({E, N, K / 64}), bits, 64);
      std::vector<Linear> experts;
      for (int64_t e = 0; e < E; ++e) experts.push_back(stack.expert(e));
      Buffer ids = Buffer::zeros(DType::i32, {T, k});
      for (int64_t i = 0; i < T * k; ++i) ids.tensor().data_as<int32_t>()[i] = static_cast<int32_t>(r.gen() % E);
      Buffer routed = Buffer::zeros(DType::f32, {T * k, N}), routed_y = Buffer::zeros(DType::f32, {T * k, N});
      test::run(backend(), matmul_experts, x, experts, ids, routed);
      test::run(backend(), matmul_experts_relu_squared, x, experts, ids, routed_y);
      check(routed, routed_y);
    }
}

TEST(Affine, ExpertViewsKeepTheirScales) {
  Rng r;
  SCOPED_TRACE(r.trace());
  const int64_t E = 3, N = 4, K = 64;
  std::vector<uint32_t> words(static_cast<size_t>(E * N * K * 4 / 32));
  for (auto& v : words) v = static_cast<uint32_t>(r.gen());
  Buffer scales = kapitsa::testing::random_buffer(r.gen, DType::bf16, {E, N, 2}),
         biases = kapitsa::testing::random_buffer(r.gen, DType::bf16, {E, N, 2});
  const Linear stack = Linear::affine(Tensor(DType::u32, {E, N, K * 4 / 32}, words.data()), scales, biases, 4, 32);
  EXPECT_EQ(stack.experts(), E);
  EXPECT_EQ(stack.nbytes(), words.size() * 4 + 2 * static_cast<size_t>(E * N * 2 * 2));
  for (int64_t e = 0; e < E; ++e) {
    const Linear ex = stack.expert(e);
    EXPECT_EQ(ex.format(), WeightFormat::affine);
    EXPECT_EQ(ex.rows(), N);
    EXPECT_EQ(ex.cols(), K);
    const Linear single = Linear::affine(Tensor(DType::u32, {N, K * 4 / 32}, words.data() + e * N * K * 4 / 32),
                                         scales.tensor().index(e), biases.tensor().index(e), 4, 32);
    std::vector<float> a(K), b(K);
    for (int64_t n = 0; n < N; ++n) {
      ref::dequantize_row(ex, n, a.data());
      ref::dequantize_row(single, n, b.data());
      EXPECT_EQ(a, b);
    }
    // a row range keeps the scales of its rows
    const Linear tail = ex.row_range(2, 4);
    ref::dequantize_row(tail, 1, a.data());
    ref::dequantize_row(single, 3, b.data());
    EXPECT_EQ(a, b);
  }
}

}  // namespace
}  // namespace kapitsa::ops
