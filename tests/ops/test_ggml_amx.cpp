// The AMX-INT8 prefill GEMM of GGUF blocks (the cpu's avx512 level, matmul_ggml_amx.cpp) against the
// AVX-512 panels it replaces (bit-equal: the same integer block dots, the same f32 steps in the same
// order) and against ref (the int8 rounding bound), for every type it covers, token counts around its
// 32-token tile pairs and row counts around its 32-row groups. On emulated tiles (a plain C++ model of
// TDPBSSD and the tile moves: any CPU with the avx512 level), and on the CPU's own tiles where AMX is
// usable (the GPU machine's Xeon; tests/ops/amx_device_run.sh): skipped, saying why, elsewhere.
#include "ggml_blocks.h"
#include "op_test_helpers.h"
#include "ops/cpu/cpu.h"
#include "ops/ref/ref.h"

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <vector>

namespace kapitsa::ops {
namespace {
#if defined(__x86_64__)
using cpu::AmxInt8;
using cpu::Level;

constexpr GgmlType kAmxTypes[] = {GgmlType::q8_0, GgmlType::q4_0, GgmlType::q4_1, GgmlType::q5_0, GgmlType::q5_1,
                                  GgmlType::iq4_nl, GgmlType::mxfp4, GgmlType::q2_k, GgmlType::q3_k, GgmlType::q4_k,
                                  GgmlType::q5_k, GgmlType::q6_k, GgmlType::iq4_xs};

// Sets the avx512 level's AMX-INT8 mode for a scope; automatic again after (a failed ASSERT included).
struct AmxMode {
  explicit AmxMode(AmxInt8 mode) { set(mode); }
  ~AmxMode() { set(AmxInt8::automatic); }
  static void set(AmxInt8 mode) { KAPITSA_CPU_AT(Level::avx512, set_amx_int8)(mode); }
};

Buffer amx_gemm(AmxInt8 mode, const Buffer& x, const Linear& w, int64_t T, int64_t N) {
  const AmxMode scope(mode);
  Buffer y = Buffer::allocate(DType::f32, {T, N});
  for (int64_t i = 0; i < T * N; ++i) y.f32()[i] = std::nanf("");  // every output must be written
  KAPITSA_CPU_AT(Level::avx512, matmul_ggml_int8)(x, w, y, /*vnni=*/true);
  return y;
}

// For each type, T and N: the modes' outputs bit-equal to the panels' (AmxInt8::off), and within the int8
// rounding bound (+ 2e-6 of Σ|x·w|) of ref's f64 dot of the dequantized rows.
void expect_modes_match_panels_and_ref(std::initializer_list<AmxInt8> modes) {
  test::Rng r;
  SCOPED_TRACE(r.trace());
  for (GgmlType type : kAmxTypes) {
    const auto info = *ggml_type_info(static_cast<uint32_t>(type));
    const int64_t B = KAPITSA_CPU_AT(Level::avx512, ggml_int8_block)(type);
    ASSERT_GT(B, 0) << info.name;
    // K a few blocks (9 for the 32-value types: not a pair count); N off the 16-row tiles and 32-row groups.
    const int64_t K = info.block_size == 256 ? 512 : 288;
    for (int64_t T : {64, 70, 129}) {
      const int64_t N = 1 + static_cast<int64_t>(r.gen() % 70);
      SCOPED_TRACE(fmt::format("{} T={} N={} K={}", info.name, T, N, K));
      std::vector<uint8_t> bytes = test::random_blocks(r, type, N, K);
      const Linear w = Linear::ggml(Tensor(DType::u8, {N, K / info.block_size * info.block_bytes}, bytes.data()), type, K);
      const Buffer x = test::random_f32(r, {T, K}, -3.0f, 3.0f);
      const Buffer panels = amx_gemm(AmxInt8::off, x, w, T, N);
      for (AmxInt8 mode : modes) {
        SCOPED_TRACE(mode == AmxInt8::emulated ? "emulated tiles" : "the CPU's tiles");
        const Buffer y = amx_gemm(mode, x, w, T, N);
        for (int64_t i = 0; i < T * N; ++i) ASSERT_EQ(y.f32()[i], panels.f32()[i]) << "t=" << i / N << " n=" << i % N;
      }
      std::vector<float> row(static_cast<size_t>(K));
      for (int64_t n = 0; n < N; ++n) {
        ref::dequantize_row(w, n, row.data());
        for (int64_t t = 0; t < T; ++t) {
          const float* xt = x.f32() + t * K;
          double want = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) want += static_cast<double>(xt[k]) * row[static_cast<size_t>(k)], mag += std::abs(static_cast<double>(xt[k]) * row[static_cast<size_t>(k)]);
          ASSERT_NEAR(panels.f32()[t * N + n], want, test::int8_rounding_bound(xt, row.data(), K, B) + 2e-6 * mag + 1e-7)
              << "t=" << t << " n=" << n;
        }
      }
    }
  }
}
#endif

// The GEMM's packing, tile shapes (the emulation checks them as the CPU would) and loops, on any CPU
// with the avx512 level.
TEST(AmxInt8, EmulatedTilesMatchPanelsAndRef) {
#if defined(__x86_64__)
  if (cpu::backend_for(Level::avx512) == nullptr)
    GTEST_SKIP() << "no avx512 level here (" << test::level_skip_reason(Level::avx512) << ")";
  expect_modes_match_panels_and_ref({AmxInt8::emulated});
#else
  GTEST_SKIP() << "AMX is x86-64 only";
#endif
}

// The same on the CPU's tiles (and the emulation beside them): the instruction encodings and the tile
// configuration as the hardware takes them.
TEST(AmxInt8, TilesMatchPanelsAndRef) {
#if defined(__x86_64__)
  if (cpu::backend_for(Level::avx512) == nullptr)
    GTEST_SKIP() << "no avx512 level here (" << test::level_skip_reason(Level::avx512) << ")";
  if (!KAPITSA_CPU_AT(Level::avx512, amx_int8_usable)())
    GTEST_SKIP() << "AMX-INT8 not usable here (AMX: " << KAPITSA_CPU_AT(Level::avx512, amx_status)() << ")";
  expect_modes_match_panels_and_ref({AmxInt8::automatic, AmxInt8::emulated});
#else
  GTEST_SKIP() << "AMX is x86-64 only";
#endif
}

}  // namespace
}  // namespace kapitsa::ops
