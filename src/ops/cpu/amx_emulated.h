// The AMX tile instructions the int8 GEMM uses (matmul_ggml_amx.cpp), in plain C++ on a thread's own tile
// state (internal to ops/cpu): LDTILECFG / TILERELEASE, TILEZERO, TILELOADD, TILESTORED and TDPBSSD with
// the semantics of Intel's SDM (rows and colsb from the configuration; a load zeroes the bytes past colsb
// and the rows past rows). Lets machines without AMX run the GEMM's packing, tile shapes and loops
// (cpu.h's AmxInt8::emulated); only the instruction encodings are left to a CPU with AMX. Checks what
// the hardware would fault on (#UD): an instruction without a configuration, shapes that do not fit.
#pragma once

#include "base/check.h"
#include "ops/cpu/amx_tiles.h"

#include <cstring>

#if defined(KAPITSA_AMX)
namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL::amx {

struct EmulatedTiles {
  struct State {
    TileConfig cfg;
    bool configured = false;
    alignas(64) uint8_t tmm[8][16][64];  // tmm[t][row][byte]
  };
  static State& state() {
    thread_local State s;
    return s;
  }
  static void config(const TileConfig& cfg) {
    State& s = state();
    KAPITSA_CHECK(cfg.palette == 1, "amx emulation: palette {}", cfg.palette);
    for (int t = 0; t < 8; ++t)
      KAPITSA_CHECK(cfg.rows[t] <= 16 && cfg.colsb[t] <= 64 && cfg.colsb[t] % 4 == 0, "amx emulation: tile {} is {} × {} bytes", t,
                    cfg.rows[t], cfg.colsb[t]);
    s.cfg = cfg, s.configured = true;
    std::memset(s.tmm, 0, sizeof s.tmm);  // LDTILECFG zeroes the tiles
  }
  static void release() { state().configured = false; }

  template <int t>
  static void zero() {
    std::memset(used(t).tmm[t], 0, sizeof(State::tmm[t]));
  }
  template <int t>
  static void load(const void* base, int64_t stride) {
    State& s = used(t);
    std::memset(s.tmm[t], 0, sizeof s.tmm[t]);
    for (int r = 0; r < s.cfg.rows[t]; ++r) std::memcpy(s.tmm[t][r], static_cast<const uint8_t*>(base) + r * stride, s.cfg.colsb[t]);
  }
  template <int t>
  static void store(void* base, int64_t stride) {
    const State& s = used(t);
    for (int r = 0; r < s.cfg.rows[t]; ++r) std::memcpy(static_cast<uint8_t*>(base) + r * stride, s.tmm[t][r], s.cfg.colsb[t]);
  }
  // c[m][n] += Σ_k Σ_i a[m][4k + i] · b[k][4n + i] over signed bytes, int32 lanes (wrapping, as the
  // hardware's adds do). Shapes: rows(a) = rows(c), colsb(b) = colsb(c), rows(b) = colsb(a) / 4.
  template <int c, int a, int b>
  static void dpbssd() {
    State& s = used(c);
    used(a), used(b);
    const TileConfig& g = s.cfg;
    KAPITSA_CHECK(g.rows[a] == g.rows[c] && g.colsb[b] == g.colsb[c] && g.rows[b] * 4 == g.colsb[a],
                  "amx emulation: tdpbssd shapes c {}×{}, a {}×{}, b {}×{}", g.rows[c], g.colsb[c], g.rows[a], g.colsb[a],
                  g.rows[b], g.colsb[b]);
    for (int m = 0; m < g.rows[c]; ++m)
      for (int n = 0; n < g.colsb[c] / 4; ++n) {
        int32_t v;
        std::memcpy(&v, s.tmm[c][m] + 4 * n, 4);
        uint32_t sum = static_cast<uint32_t>(v);
        for (int k = 0; k < g.colsb[a] / 4; ++k)
          for (int i = 0; i < 4; ++i)
            sum += static_cast<uint32_t>(static_cast<int8_t>(s.tmm[a][m][4 * k + i]) * static_cast<int8_t>(s.tmm[b][k][4 * n + i]));
        std::memcpy(s.tmm[c][m] + 4 * n, &sum, 4);
      }
  }

 private:
  static State& used(int t) {
    State& s = state();
    KAPITSA_CHECK(s.configured, "amx emulation: tile {} used without a tile configuration", t);
    KAPITSA_CHECK(s.cfg.rows[t] > 0 && s.cfg.colsb[t] > 0, "amx emulation: tile {} is not configured", t);
    return s;
  }
};

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL::amx
#endif
