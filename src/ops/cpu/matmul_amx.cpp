// AMX bf16 GEMM for prefill (amx.h): y[T, N] = x[T, K] · w[N, K]ᵀ on the tiles of Intel's Advanced Matrix
// Extensions (Sapphire Rapids and later). TDPBF16PS multiplies a 16 × 32 bf16 tile by a 32 × 16 one
// (stored as 16 rows of 16 bf16 pairs along k, the "VNNI" layout) into a 16 × 16 f32 tile: 8192
// products in about 16 cycles, where AVX-512 does 32 f32 FMAs a cycle.
// A = 16 weight rows as stored (no repacking of w), B = 16 tokens of x, packed once per call, C = the
// 16 × 16 block of yᵀ. x is split into three bf16 parts (hi = bf16(x), mid = bf16(x − hi), lo =
// bf16(x − hi − mid): their sum is x for normal floats) whose tile products accumulate in the same C,
// so y keeps the f32 accuracy of the other kernels for 3× the tile work.
// Tiles: C 2 × 2 (tmm0-3: 32 weight rows × 32 tokens), A 2 (tmm4-5), B 2 (tmm6-7). Work items are
// (a block of row pairs, 32 or 64 tokens), row-block major, split across threads; each thread loads the
// tile configuration for its share and releases it after.
// The tile instructions are inline assembly (GNU as and clang's assembler know them), so the file needs
// no AMX compiler flags; they run only where amx_bf16_usable() says so.
#include "base/check.h"
#include "base/thread_pool.h"
#include "ops/cpu/amx.h"
#include "ops/cpu/amx_tiles.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(KAPITSA_AMX)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {
#if defined(KAPITSA_AMX)
namespace {

using amx::TileConfig;

// Every tile 16 rows of 64 bytes. Built on the stack each time: the probe runs it in a forked child,
// where a static's initialisation guard could be held by a thread that no longer exists.
void tiles_on() {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) cfg.colsb[i] = 64, cfg.rows[i] = 16;
  KAPITSA_TILE_CONFIG(cfg);
}
void tiles_off() { KAPITSA_TILE_RELEASE(); }

// The tile instructions of one AMX feature: TDPBF16PS (amx_bf16) or TDPBSSD (amx_int8).
enum class Feature { bf16, int8 };

// "usable", or why not, for one feature: the same steps for both, the probe running that feature's
// instruction (CPUID leaf 7 EDX: bit 24 amx_tile, 22 amx_bf16, 25 amx_int8).
std::string detect(Feature feature) {
  const char* env = std::getenv("KAPITSA_AMX");
  if (env != nullptr && std::strcmp(env, "0") == 0) return "off (KAPITSA_AMX=0)";
  const bool int8 = feature == Feature::int8;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0 || ((d >> 24) & 1u) == 0 || ((d >> (int8 ? 25 : 22)) & 1u) == 0)
    return int8 ? "the CPU does not list amx_tile and amx_int8" : "the CPU does not list amx_tile and amx_bf16";
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));  // the avx512 level runs only where OSXSAVE is set
  const uint64_t xcr0 = (uint64_t{hi} << 32) | lo;
  if ((xcr0 & (uint64_t{3} << 17)) != (uint64_t{3} << 17)) return "the OS does not save AMX tile state (XCR0)";
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtileData = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) != 0)
    return fmt::format("Linux did not grant AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM: {}; needs Linux 5.16+)",
                       std::strerror(errno));
  // A CPU (or a hypervisor) may list AMX and still fault on the first tile instruction: run one in a
  // child process first, so a fault ends the child, not this process.
  const pid_t pid = fork();
  if (pid < 0) return fmt::format("could not start the AMX probe (fork: {})", std::strerror(errno));
  if (pid == 0) {
    tiles_on();
    KAPITSA_TILE_ZERO(0);
    KAPITSA_TILE_ZERO(4);
    KAPITSA_TILE_ZERO(6);
    if (int8) KAPITSA_TILE_DPBSSD(0, 4, 6);
    else KAPITSA_TILE_DP(0, 4, 6);
    tiles_off();
    _exit(0);
  }
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0)
    if (errno != EINTR) return fmt::format("the AMX probe was lost (waitpid: {})", std::strerror(errno));
  if (WIFSIGNALED(wstatus)) return fmt::format("the AMX probe died of signal {} ({})", WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)));
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) return "the AMX probe failed";
  return "usable";
}

const std::string& status() {
  static const std::string s = detect(Feature::bf16);
  return s;
}

constexpr int kParts = 3;              // bf16 parts of x
constexpr int64_t kTileElems = 512;    // bf16 elements of a 16 × 64-byte tile

// bf16(v) rounded to nearest even, in the low half of each 32-bit lane (finite v).
inline __m512i bf16_bits(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  return _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
}
inline __m512 bf16_value(__m512i bits) { return _mm512_castsi512_ps(_mm512_slli_epi32(bits, 16)); }

// In-register transpose of a 16 × 16 matrix of 32-bit words (rows r[0..15] become columns).
inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + c], 128-bit lane L: column 4L + c of rows 4g … 4g + 3.
  __m512i u[16];
  for (int g = 0; g < 4; ++g) {
    u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  // Column 4L + c = lane L of u[c], u[4 + c], u[8 + c], u[12 + c].
  for (int c = 0; c < 4; ++c) {
    const __m512i ab_lo = _mm512_shuffle_i32x4(u[c], u[4 + c], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i ab_hi = _mm512_shuffle_i32x4(u[c], u[4 + c], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i cd_lo = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i cd_hi = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(3, 2, 3, 2));
    r[c] = _mm512_shuffle_i32x4(ab_lo, cd_lo, _MM_SHUFFLE(2, 0, 2, 0));
    r[4 + c] = _mm512_shuffle_i32x4(ab_lo, cd_lo, _MM_SHUFFLE(3, 1, 3, 1));
    r[8 + c] = _mm512_shuffle_i32x4(ab_hi, cd_hi, _MM_SHUFFLE(2, 0, 2, 0));
    r[12 + c] = _mm512_shuffle_i32x4(ab_hi, cd_hi, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

// x [T, K] f32 → B tiles [T/16 blocks][K/32][kParts][16 pairs of k][16 tokens][2], tokens past T zero.
// Per (16 tokens, 32 k): each token's 32 values split into three bf16 parts (hi, then the rounded
// remainder twice) and paired along k — 16 words a token — then each part's 16 × 16 words transposed so
// a tile row holds one pair of k for all 16 tokens.
void pack_x(const float* x, int64_t T, int64_t K, std::vector<uint16_t>& xp) {
  const int64_t blocks = (T + 15) / 16, kb = K / 32;
  xp.resize(static_cast<size_t>(blocks * kb * kParts * kTileElems));
  // Elements 0-15 are the even 16-bit halves of a (k 0-15), 16-31 those of b (k 16-31).
  alignas(64) int16_t order[32];
  for (int e = 0; e < 32; ++e) order[e] = static_cast<int16_t>(e < 16 ? 2 * e : 32 + 2 * (e - 16));
  const __m512i pair_order = _mm512_load_si512(order);
  parallel_for(static_cast<size_t>(blocks * kb), 16, [&](size_t begin, size_t end) {
    __m512i words[kParts][16];
    for (size_t item = begin; item < end; ++item) {
      const int64_t tb = static_cast<int64_t>(item) / kb, k0 = (static_cast<int64_t>(item) % kb) * 32;
      for (int t = 0; t < 16; ++t) {
        if (tb * 16 + t >= T) {
          for (int p = 0; p < kParts; ++p) words[p][t] = _mm512_setzero_si512();
          continue;
        }
        const float* xt = x + (tb * 16 + t) * K + k0;
        __m512 a = _mm512_loadu_ps(xt), b = _mm512_loadu_ps(xt + 16);
        for (int p = 0; p < kParts; ++p) {
          const __m512i ha = bf16_bits(a), hb = bf16_bits(b);
          words[p][t] = _mm512_permutex2var_epi16(ha, pair_order, hb);
          a = _mm512_sub_ps(a, bf16_value(ha)), b = _mm512_sub_ps(b, bf16_value(hb));  // exact remainders
        }
      }
      uint16_t* tiles = xp.data() + static_cast<int64_t>(item) * kParts * kTileElems;
      for (int p = 0; p < kParts; ++p) {
        transpose16(words[p]);
        for (int r = 0; r < 16; ++r) _mm512_storeu_si512(tiles + p * kTileElems + r * 32, words[p][r]);
      }
    }
  });
}

// Rows [n0, n0 + 16) of w as an A operand: w itself when all 16 exist, else a zero-padded copy.
const uint16_t* row_block(const uint16_t* w, int64_t n0, int64_t N, int64_t K, std::vector<uint16_t>& pad) {
  if (n0 + 16 <= N) return w + n0 * K;
  pad.assign(static_cast<size_t>(16 * K), 0);
  std::memcpy(pad.data(), w + n0 * K, static_cast<size_t>((N - n0) * K) * 2);
  return pad.data();
}

}  // namespace

bool amx_bf16_usable() {  // asked on every bf16 prefill matmul: the answer kept as a bool
  static const bool usable = status() == "usable";
  return usable;
}
std::string amx_status() { return status(); }
std::string amx_int8_status() {
  static const std::string s = detect(Feature::int8);
  return s;
}
bool amx_int8_usable() {  // asked on every quantized prefill matmul
  static const bool usable = amx_int8_status() == "usable";
  return usable;
}

void matmul_amx_bf16(const float* x, const uint16_t* w, float* y, int64_t T, int64_t K, int64_t N) {
  if (T == 0 || N == 0) return;
  const int64_t kb = K / 32, blocks = (T + 15) / 16;
  thread_local std::vector<uint16_t> xp;
  pack_x(x, T, K, xp);
  // Tokens of a work item: their B tiles (K · 6 bytes a token) stay in a core's L2 (2 MiB on Sapphire
  // Rapids) while the item's weight rows pass through.
  const int64_t chunk_tokens = K <= 4096 ? 64 : 32;
  const int64_t row_pairs = (N + 31) / 32, chunks = (T + chunk_tokens - 1) / chunk_tokens;
  // Row-pair blocks: enough work items for every thread (4 each), else ~256 KiB of weights each.
  const int64_t threads = static_cast<int64_t>(default_thread_pool().size());
  int64_t per_item = std::max<int64_t>(1, (256 << 10) / (64 * K));
  if (chunks * ((row_pairs + per_item - 1) / per_item) < threads * 4)
    per_item = std::max<int64_t>(1, (row_pairs * chunks + threads * 4 - 1) / (threads * 4));
  const int64_t items_n = (row_pairs + per_item - 1) / per_item;
  const uint16_t* xt = xp.data();
  parallel_for(static_cast<size_t>(items_n * chunks), 1, [&](size_t begin, size_t end) {
    thread_local std::vector<uint16_t> pad0, pad1;
    alignas(64) float c[4][16][16];
    tiles_on();
    for (size_t item = begin; item < end; ++item) {
      const int64_t nb = static_cast<int64_t>(item) / chunks, ch = static_cast<int64_t>(item) % chunks;
      const int64_t tb_end = std::min(blocks, (ch + 1) * chunk_tokens / 16);
      for (int64_t rp = nb * per_item; rp < std::min(row_pairs, (nb + 1) * per_item); ++rp) {
        const int64_t n0 = rp * 32;
        const bool two_rows = n0 + 16 < N;
        const uint16_t* a0 = row_block(w, n0, N, K, pad0);
        const uint16_t* a1 = two_rows ? row_block(w, n0 + 16, N, K, pad1) : nullptr;
        const int64_t lda = K * 2;
        for (int64_t tb = ch * chunk_tokens / 16; tb < tb_end; tb += 2) {
          const bool two_tokens = tb + 1 < tb_end;
          const uint16_t* b0 = xt + tb * kb * kParts * kTileElems;
          const uint16_t* b1 = b0 + kb * kParts * kTileElems;
          KAPITSA_TILE_ZERO(0);
          KAPITSA_TILE_ZERO(1);
          KAPITSA_TILE_ZERO(2);
          KAPITSA_TILE_ZERO(3);
          for (int64_t k = 0; k < kb; ++k) {
            KAPITSA_TILE_LOAD(4, a0 + k * 32, lda);
            if (two_rows) KAPITSA_TILE_LOAD(5, a1 + k * 32, lda);
            for (int p = 0; p < kParts; ++p) {
              const int64_t at = (k * kParts + p) * kTileElems;
              KAPITSA_TILE_LOAD(6, b0 + at, 64);
              KAPITSA_TILE_DP(0, 4, 6);
              if (two_rows) KAPITSA_TILE_DP(2, 5, 6);
              if (two_tokens) {
                KAPITSA_TILE_LOAD(7, b1 + at, 64);
                KAPITSA_TILE_DP(1, 4, 7);
                if (two_rows) KAPITSA_TILE_DP(3, 5, 7);
              }
            }
          }
          KAPITSA_TILE_STORE(0, &c[0][0][0], 64);
          KAPITSA_TILE_STORE(1, &c[1][0][0], 64);
          KAPITSA_TILE_STORE(2, &c[2][0][0], 64);
          KAPITSA_TILE_STORE(3, &c[3][0][0], 64);
          // c[i]: rows (n0 + 16·(i / 2) + r), tokens (16·(tb + i % 2) + t) → y[t][n].
          for (int i = 0; i < 4; ++i) {
            const int64_t rn = n0 + 16 * (i / 2), tt = 16 * (tb + i % 2);
            if ((i / 2 == 1 && !two_rows) || (i % 2 == 1 && !two_tokens)) continue;
            for (int64_t t = 0; t < 16 && tt + t < T; ++t)
              for (int64_t r = 0; r < 16 && rn + r < N; ++r) y[(tt + t) * N + rn + r] = c[i][r][t];
          }
        }
      }
    }
    tiles_off();
  });
}

#else

bool amx_bf16_usable() { return false; }
bool amx_int8_usable() { return false; }
std::string amx_status() {
#if defined(__x86_64__) && defined(__linux__)
  return "only the avx512 level has the AMX kernel";
#else
  return "AMX kernels are built for Linux x86-64 only";
#endif
}
std::string amx_int8_status() { return amx_status(); }
void matmul_amx_bf16(const float*, const uint16_t*, float*, int64_t, int64_t, int64_t) {
  KAPITSA_CHECK(false, "matmul_amx_bf16: this level has no AMX kernel (amx_bf16_usable() is false)");
}

#endif
}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL
