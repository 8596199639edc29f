// Intel AMX on the cpu backend (internal to ops/cpu): the bf16-weight GEMM of prefill (matmul_amx.cpp) and
// the int8-activation GEMM of GGUF blocks (matmul_ggml_amx.cpp) on AMX tiles, for the avx512 level on Linux
// x86-64. Other levels and platforms compile stubs (never usable).
#pragma once

#include "ops/cpu/ggml_int8.h"
#include "ops/cpu/level.h"

#include <cstdint>

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL {

// matmul.cpp hands bf16 weights to the AMX GEMM where it would run its packed GEMM (from 64 tokens,
// kInvariantTokens), so the token counts whose rows equal one-token rows (the dot tiles) stay the same.
// Declared for every level in cpu.h (tests and `kapitsa doctor` call them):
// amx_bf16_usable: this level compiled the AMX kernel, the CPU lists amx_tile and amx_bf16, the OS saves
// tile state (XCR0), Linux granted this process tile data (arch_prctl ARCH_REQ_XCOMP_PERM), a probe of
// the tile instructions ran to completion in a child process (a CPU may list AMX and still fault on it),
// and KAPITSA_AMX is not "0". Decided once. amx_status: why not, or "usable".
// amx_int8_usable: the same with amx_int8 and a TDPBSSD probe (KAPITSA_AMX=0 turns both off).
// matmul_amx_bf16: y = x·wᵀ on AMX for bf16 w [N, K], K % 32 == 0, any T ≥ 1, only where
// amx_bf16_usable(). x is split into three bf16 parts (hi + mid + lo = x exactly for normal floats), each
// part's products accumulated in f32 by the tiles: the f32 accuracy of the other kernels, not bf16's.
// set_amx_int8: which tiles ggml_amx_int8 runs on (cpu.h's AmxInt8; tests).

}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL

namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL::ggml_int8 {
#if defined(KAPITSA_GGML_INT8)
// ggml_panels' first choice (matmul_ggml_panel.cpp, T ≥ kPanelTokens): y [T, N] = x̂ · wᵀ for GGUF blocks
// w [N, row_bytes] on AMX-INT8 tiles, bit-equal to the panels; false, having done nothing, where the level
// has no AMX kernel, set_amx_int8 or amx_int8_usable() say no, or the type is not one of the panels'.
bool ggml_amx_int8(GgmlType type, const uint8_t* blocks, int64_t row_bytes, const Act& a, int64_t T, float* y, int64_t N);
#endif
}  // namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL::ggml_int8
