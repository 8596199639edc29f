#!/usr/bin/env bash
# Runs one libFuzzer target over its seed corpus (tests/fuzz/corpus/<target>, read only) plus a scratch
# corpus in WORK/<target>/new (inputs libFuzzer finds); a finding is saved as WORK/<target>/crash-* (or
# leak-/timeout-/oom-) and fails the run. Usage: run_fuzz.sh BIN FUZZ_DIR WORK runs=N|seconds=S
#   runs=N     what ctest (CI) does: N inputs from random seed 1 over the seeds alone (the scratch corpus
#              is emptied first), so a run repeats exactly and a finding reproduces with the same command;
#   seconds=S  what scripts/fuzz.sh does by hand: as long as S allows, growing the scratch corpus.
set -euo pipefail
bin=$1 fuzz_dir=$2 work=$3 mode=$4
name=$(basename "$bin")
seeds=$fuzz_dir/corpus/${name#fuzz_}
args=(-timeout=10 -rss_limit_mb=2560 -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$work/$name/")
case $mode in
  runs=*) rm -rf "$work/$name/new"; args+=(-seed=1 -runs="${mode#runs=}") ;;
  seconds=*) args+=(-max_total_time="${mode#seconds=}") ;;
  *) echo "run_fuzz.sh: the last argument is runs=N or seconds=S, not '$mode'" >&2; exit 2 ;;
esac
mkdir -p "$work/$name/new"
[[ -f $fuzz_dir/$name.dict ]] && args+=(-dict="$fuzz_dir/$name.dict")
# Leaks are findings too (LSan runs at exit and after each input that grew the heap).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
exec "$bin" "${args[@]}" "$work/$name/new" "$seeds"
