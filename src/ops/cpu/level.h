// For the kernel files of ops/cpu only: src/ops/cpu/CMakeLists.txt compiles each of them once per
// instruction-set level, with -march for that level and KAPITSA_CPU_LEVEL set to the level's namespace
// (baseline, avx2, avxvnni, avx512). Everything a kernel file or its internal headers define — inline helpers
// and templates too — sits in namespace kapitsa::ops::cpu::KAPITSA_CPU_LEVEL: the same name compiled
// for two levels would be one symbol to the linker, which keeps one copy (maybe the AVX-512 one).
#pragma once

#ifndef KAPITSA_CPU_LEVEL
#error "an ops/cpu kernel file is compiled once per level, with KAPITSA_CPU_LEVEL set (src/ops/cpu/CMakeLists.txt)"
#endif

#include "ops/cpu/cpu.h"
