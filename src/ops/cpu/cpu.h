// The CPU backend: SIMD kernels and threads from base/thread_pool, same functions as ops/ref, file for
// file; tests compare the two on random inputs. One binary runs on every x86-64 (and AArch64, where the
// op tests run under qemu): the kernel files are compiled once per instruction-set level, each copy in
// its own namespace (cpu::baseline, cpu::avx2, cpu::avxvnni, cpu::avx512 on x86-64; cpu::baseline, cpu::dotprod on
// AArch64; src/ops/cpu/CMakeLists.txt), and backend() hands out the table of the best level this CPU
// runs, chosen once at start (dispatch.cpp; docs/decisions.md "One binary for every x86-64").
#pragma once

#include "ops/seq_batch.h"
#include "tensor/linear.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kapitsa::ops {
struct BackendTable;
}

namespace kapitsa::ops::cpu {

// The levels, in the order of preference (the last one the CPU runs is chosen); each level's enumerator
// is its namespace's name (KAPITSA_CPU_LEVEL).
// x86-64 — baseline: the build's own flags (plain x86-64, SSE2); avx2: x86-64-v3 (AVX2, FMA, F16C,
// BMI1/2); avxvnni: x86-64-v3 plus AVX-VNNI (the 256-bit VPDPBUSD / VPDPWSSD of Alder Lake and later
// client CPUs, which have no AVX-512); avx512: x86-64-v4 (AVX-512 F/BW/CD/DQ/VL) plus AVX-512 VNNI.
// Not a chain: an Ice Lake or Zen 4 runs avx512 but not avxvnni (no AVX-VNNI), so each level states
// everything it needs and a CPU may run a level without running every level listed before it.
// AArch64 — baseline: ARMv8.0-A with Advanced SIMD (NEON, mandatory there); dotprod: + the int8 dot
// product (SDOT/UDOT, ARMv8.2's FEAT_DotProd); i8mm: + the int8 matrix multiply (SMMLA, FEAT_I8MM), which
// the prefill panels use (matmul_ggml_panel.cpp).
// On other architectures only baseline is compiled (plain C++).
#if defined(__aarch64__)
enum class Level { baseline, dotprod, i8mm };
inline constexpr Level kLevels[] = {Level::baseline, Level::dotprod, Level::i8mm};
#else
enum class Level { baseline, avx2, avxvnni, avx512 };
inline constexpr Level kLevels[] = {Level::baseline, Level::avx2, Level::avxvnni, Level::avx512};
#endif

std::string_view level_name(Level level);
// Whether this build compiled the level's kernels (all of the architecture's unless KAPITSA_CPU_LEVELS named
// fewer; the baseline always).
bool level_compiled(Level level);
// The best level this CPU and OS run (x86-64: CPUID and XGETBV, the OS must save the AVX / AVX-512
// registers; AArch64 Linux: the kernel's hwcaps), and what a level needs that this CPU lacks ("" when
// it runs the level), e.g. "avx512_vnni", "avx_vnni" or "asimddp".
Level best_level();
std::string missing_features(Level level);
// best_level(), or the level named by KAPITSA_CPU_ISA (a level_name); a name this CPU cannot run,
// or no such name, ends the process with a message that says which (exit code 2).
Level selected_level();

// The backend table of the selected level, named "cpu" (ops/backend.h).
const BackendTable* backend();
// The table of any level (nullptr when this CPU or this build lacks it): the selected level's is
// backend(), the others are named "cpu_<level>" — the op tests run every level the CPU has.
const BackendTable* backend_for(Level level);
// The level whose kernels a table runs; nullopt for a table of another backend.
std::optional<Level> level_of(const BackendTable& table);

// The affine int16-activation GEMV's rounding (affine.h): x rounded to int16 per kActBlock inputs, each
// block with one scale max|x| / kActMax, for at most kActMaxTokens tokens.
inline constexpr int kActBlock = 64;
inline constexpr float kActMax = 32767.0f;
inline constexpr int kActMaxTokens = 8;

// The tiles the AMX-INT8 prefill GEMM of GGUF weights (matmul_ggml_amx.cpp, avx512 level) runs on:
// the CPU's where amx_int8_usable() (automatic), none (off: the AVX-512 panels), or a plain C++ emulation
// of the tile instructions on any CPU running the avx512 level (emulated: tests of the GEMM's packing,
// tile shapes and loops on machines without AMX; slow). Tests set it; everything else leaves automatic.
enum class AmxInt8 { automatic, off, emulated };

}  // namespace kapitsa::ops::cpu

// Each level's kernels: the ops, the table, and the kernel-level functions tests and benches call
// directly (ggml.h and affine.h say what they do). KAPITSA_CPU_AT(level, fn) is fn of that level.
#define KAPITSA_CPU_DECLARE_LEVEL                                                                   \
  BackendTable table(std::string_view name);                                                       \
  int64_t matmul_invariant_rows(const Linear& w);                                                  \
  int64_t ggml_int8_block(GgmlType type);                                                          \
  bool ggml_int8_activations(GgmlType type, int64_t tokens);                                       \
  bool ggml_int8_has_vnni();                                                                       \
  void matmul_ggml_int8(const Tensor& x, const Linear& w, const Tensor& y, bool vnni);              \
  void matmul_ggml_packed(const Tensor& x, const Linear& w, const Tensor& y);                       \
  bool affine_int16_activations(int bits, int64_t group_size, int64_t tokens);                      \
  bool amx_bf16_usable();                                                                          \
  std::string amx_status();                                                                        \
  bool amx_int8_usable();                                                                          \
  std::string amx_int8_status();                                                                   \
  void set_amx_int8(AmxInt8 mode);                                                                 \
  void matmul_amx_bf16(const float* x, const uint16_t* w, float* y, int64_t T, int64_t K, int64_t N);
// Which levels this build compiled: each 1 unless KAPITSA_CPU_LEVELS left it out (src/ops/cpu/CMakeLists.txt
// then defines it 0 for everything that links the cpu backend). A left-out level's KAPITSA_CPU_AT is null.
#if defined(__x86_64__)
#ifndef KAPITSA_CPU_BUILT_avx2
#define KAPITSA_CPU_BUILT_avx2 1
#endif
#ifndef KAPITSA_CPU_BUILT_avxvnni
#define KAPITSA_CPU_BUILT_avxvnni 1
#endif
#ifndef KAPITSA_CPU_BUILT_avx512
#define KAPITSA_CPU_BUILT_avx512 1
#endif
#elif defined(__aarch64__)
#ifndef KAPITSA_CPU_BUILT_dotprod
#define KAPITSA_CPU_BUILT_dotprod 1
#endif
#ifndef KAPITSA_CPU_BUILT_i8mm
#define KAPITSA_CPU_BUILT_i8mm 1
#endif
#endif
// KAPITSA_CPU_FN_OF(KAPITSA_CPU_BUILT_x, x, fn): &x::fn, or a null of its type (named only inside decltype,
// so the linker is not asked for a level that was not built).
#define KAPITSA_CPU_FN_OF(built, level, fn) KAPITSA_CPU_FN_PASTE(built, level, fn)
#define KAPITSA_CPU_FN_PASTE(built, level, fn) KAPITSA_CPU_FN_##built(level, fn)
#define KAPITSA_CPU_FN_1(level, fn) (&::kapitsa::ops::cpu::level::fn)
#define KAPITSA_CPU_FN_0(level, fn) static_cast<decltype(&::kapitsa::ops::cpu::level::fn)>(nullptr)

// clang-format off
namespace kapitsa::ops::cpu::baseline {
#include "ops/op_list.inc"
KAPITSA_CPU_DECLARE_LEVEL
}  // namespace kapitsa::ops::cpu::baseline
#if defined(__x86_64__)
namespace kapitsa::ops::cpu::avx2 {
#include "ops/op_list.inc"
KAPITSA_CPU_DECLARE_LEVEL
}  // namespace kapitsa::ops::cpu::avx2
namespace kapitsa::ops::cpu::avxvnni {
#include "ops/op_list.inc"
KAPITSA_CPU_DECLARE_LEVEL
}  // namespace kapitsa::ops::cpu::avxvnni
namespace kapitsa::ops::cpu::avx512 {
#include "ops/op_list.inc"
KAPITSA_CPU_DECLARE_LEVEL
}  // namespace kapitsa::ops::cpu::avx512
#define KAPITSA_CPU_AT(level, fn)                                                                             \
  ((level) == ::kapitsa::ops::cpu::Level::avx512    ? KAPITSA_CPU_FN_OF(KAPITSA_CPU_BUILT_avx512, avx512, fn)   \
   : (level) == ::kapitsa::ops::cpu::Level::avxvnni ? KAPITSA_CPU_FN_OF(KAPITSA_CPU_BUILT_avxvnni, avxvnni, fn) \
   : (level) == ::kapitsa::ops::cpu::Level::avx2    ? KAPITSA_CPU_FN_OF(KAPITSA_CPU_BUILT_avx2, avx2, fn)       \
                                                    : &::kapitsa::ops::cpu::baseline::fn)
#elif defined(__aarch64__)
namespace kapitsa::ops::cpu::dotprod {
#include "ops/op_list.inc"
KAPITSA_CPU_DECLARE_LEVEL
}  // namespace kapitsa::ops::cpu::dotprod
namespace kapitsa::ops::cpu::i8mm {
#include "ops/op_list.inc"
KAPITSA_CPU_DECLARE_LEVEL
}  // namespace kapitsa::ops::cpu::i8mm
#define KAPITSA_CPU_AT(level, fn)                                                                             \
  ((level) == ::kapitsa::ops::cpu::Level::i8mm      ? KAPITSA_CPU_FN_OF(KAPITSA_CPU_BUILT_i8mm, i8mm, fn)       \
   : (level) == ::kapitsa::ops::cpu::Level::dotprod ? KAPITSA_CPU_FN_OF(KAPITSA_CPU_BUILT_dotprod, dotprod, fn) \
                                                    : &::kapitsa::ops::cpu::baseline::fn)
#else
#define KAPITSA_CPU_AT(level, fn) (&::kapitsa::ops::cpu::baseline::fn)
#endif
// clang-format on
