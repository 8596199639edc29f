// AMX tile plumbing shared by the AMX kernels (internal to ops/cpu: matmul_amx.cpp's bf16 GEMM,
// matmul_ggml_amx.cpp's int8 one): ldtilecfg's operand and the tile instructions as inline assembly (GNU as
// and clang's assembler know them, so no file needs AMX compiler flags). Defines KAPITSA_AMX where the
// AMX kernels exist: the avx512 level on Linux x86-64. Nothing here may run before amx_*_usable() said so.
#pragma once

#include "ops/cpu/level.h"

#include <cstdint>

#if defined(__x86_64__) && defined(__linux__) && defined(__AVX512F__)
#define KAPITSA_AMX 1

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL::amx {

// ldtilecfg's 64-byte operand, palette 1: tile i has rows[i] rows of colsb[i] bytes (at most 16 × 64).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes a row
  uint8_t rows[16] = {};
};

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL::amx

#define KAPITSA_TILE_LOAD(t, base, stride) \
  asm volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(base), "r"(static_cast<int64_t>(stride)) : "memory")
#define KAPITSA_TILE_STORE(t, base, stride) \
  asm volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(base), "r"(static_cast<int64_t>(stride)) : "memory")
#define KAPITSA_TILE_ZERO(t) asm volatile("tilezero %%tmm" #t ::)
#define KAPITSA_TILE_CONFIG(cfg) asm volatile("ldtilecfg %0" ::"m"(cfg))
#define KAPITSA_TILE_RELEASE() asm volatile("tilerelease" ::)
// tmm c += tmm a · tmm b (AT&T order: b, a, c; Intel's TDP* tmm1 = c, tmm2 = a, tmm3 = b). a: rows of c
// by colsb(a) bytes; b: colsb(a) / 4 rows of 4-byte groups, one per column of c.
// TDPBF16PS: bf16 pairs, f32 sums. TDPBSSD: signed bytes in a and in b, int32 sums (c[m][n] += Σ_k Σ_i
// a[m][4k + i] · b[k][4n + i]).
#define KAPITSA_TILE_DP(c, a, b) asm volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#define KAPITSA_TILE_DPBSSD(c, a, b) asm volatile("tdpbssd %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

#endif
