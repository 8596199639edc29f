#!/usr/bin/env bash
# The cpu kernels are compiled once per instruction-set level (src/ops/cpu/CMakeLists.txt); only their
# own namespaces may hold AVX / AVX-512 / BMI instructions. A function elsewhere that has them is code
# the linker took from a level's object file for a name every level shares (an inline function of a
# common header, a std template): on a CPU without that level it would die with SIGILL. This test reads
# the disassembly of the linked binary and lists every such function.
# Usage: level_isolation_test.sh BINARY
set -euo pipefail
binary=$1
command -v objdump >/dev/null || { echo "SKIP: objdump not found"; exit 77; }
# VEX/EVEX-encoded instructions all start with v; BMI1/2, LZCNT and MOVBE are the rest of x86-64-v3.
# tzcnt is left out: GCC writes `rep bsf` at the baseline, which objdump prints as tzcnt.
found=$(objdump -d -C --no-show-raw-insn "$binary" | awk '
  /^[0-9a-f]+ <.*>:$/ { name = $0; sub(/^[0-9a-f]+ </, "", name); sub(/>:$/, "", name); next }
  $2 ~ /^v[a-z]/ || $2 ~ /^(shlx|shrx|sarx|rorx|bzhi|pdep|pext|mulx|andn|blsi|blsr|blsmsk|lzcnt|movbe)$/ {
    if (name !~ /ops::cpu::(avx2|avxvnni|avx512)::/ && !(name in seen)) { seen[name] = 1; print name " (" $2 ")" }
  }')
if [[ -n "$found" ]]; then
  echo "Functions outside ops::cpu::avx2 / avxvnni / avx512 with AVX/BMI instructions in $binary:"
  echo "$found" | head -40
  exit 1
fi
echo "OK: AVX/BMI instructions only inside ops::cpu::avx2, avxvnni and avx512 in $binary"
