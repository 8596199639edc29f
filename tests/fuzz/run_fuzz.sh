#!/usr/bin/env bash
# Runs one libFuzzer target for SECONDS over its seed corpus (tests/fuzz/corpus/<target>, read only) plus
# a scratch corpus in WORK/<target>/ (new inputs libFuzzer finds); a finding is saved as
# WORK/<target>/crash-* (or leak-/timeout-/oom-) and fails the run. Usage: run_fuzz.sh BIN FUZZ_DIR SECONDS WORK
set -euo pipefail
bin=$1 fuzz_dir=$2 seconds=$3 work=$4
name=$(basename "$bin")
seeds=$fuzz_dir/corpus/${name#fuzz_}
mkdir -p "$work/$name/new"
args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2560 -malloc_limit_mb=1024 -print_final_stats=1
      -artifact_prefix="$work/$name/")
[[ -f $fuzz_dir/$name.dict ]] && args+=(-dict="$fuzz_dir/$name.dict")
# Leaks are findings too (LSan runs at exit and after each input that grew the heap).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
exec "$bin" "${args[@]}" "$work/$name/new" "$seeds"
