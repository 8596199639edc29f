#!/usr/bin/env bash
# The AArch64 twin of level_isolation_test.sh: the dotprod and i8mm levels' kernel files are compiled for
# ARMv8.2-A + dot product (+ i8mm) (src/ops/cpu/CMakeLists.txt), so only ops::cpu::dotprod / i8mm may hold the
# instructions ARMv8.0 lacks that such code can contain: SDOT/UDOT, the LSE atomics (v8.1) and
# SQRDMLAH/SQRDMLSH (v8.1 RDM). Any other function of ours (kapitsa::, std:: or fmt:: code, which an
# object file of every level instantiates) with one is a copy the linker took from the dotprod objects,
# and would die with SIGILL on an ARMv8.0 CPU. The C library and libgcc (their own run-time checks,
# the __aarch64_* outline atomics) are not ours and not checked.
# Usage: level_isolation_aarch64.sh BINARY (a statically linked AArch64 executable)
set -euo pipefail
binary=$1
objdump=aarch64-linux-gnu-objdump
command -v $objdump >/dev/null || { echo "SKIP: $objdump not found"; exit 77; }
found=$($objdump -d -C --no-show-raw-insn "$binary" | awk '
  /^[0-9a-f]+ <.*>:$/ { name = $0; sub(/^[0-9a-f]+ </, "", name); sub(/>:$/, "", name); next }
  $2 ~ /^(usdot|sudot|smmla|ummla|usmmla)$/ && name ~ /(kapitsa|std|fmt|testing)::/ && name !~ /ops::cpu::i8mm::/ &&
  !(name in seen) { seen[name] = 1; print name " (" $2 ", an i8mm instruction outside ops::cpu::i8mm)"; next }
  $2 ~ /^(sdot|udot|usdot|sudot|smmla|ummla|usmmla|sqrdmlah|sqrdmlsh)$/ ||
  $2 ~ /^(cas|casp|ldadd|ldclr|ldeor|ldset|ldsmax|ldsmin|ldumax|ldumin|swp|stadd|stclr|steor|stset|stsmax|stsmin|stumax|stumin)(a|l|al)?(b|h)?$/ {
    if (name ~ /(kapitsa|std|fmt|testing)::/ && name !~ /ops::cpu::(dotprod|i8mm)::/ && !(name in seen)) {
      seen[name] = 1; print name " (" $2 ")"
    }
  }')
if [[ -n "$found" ]]; then
  echo "Functions outside ops::cpu::dotprod and i8mm with ARMv8.1+ instructions in $binary:"
  echo "$found" | head -40
  exit 1
fi
echo "OK: dot-product, i8mm and ARMv8.1+ instructions only inside ops::cpu::dotprod and i8mm in $binary"
