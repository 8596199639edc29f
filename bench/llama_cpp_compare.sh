#!/usr/bin/env bash
# Kapitsa beside llama.cpp on the same GGUF files, the same threads, in one run (issue 20's speed
# figures; docs/performance.md "Beside llama.cpp"). Engines alternate file by file, ROUNDS times, so a
# slow minute of a shared machine hits both. Prints one line per measurement and a summary table.
#
#   bash bench/llama_cpp_compare.sh FILE.gguf [FILE.gguf ...]
#
# Needs llama.cpp's llama-bench (bash ../shared/tools/llama.cpp/build.sh) and build/release/bench/bench_model.
# Environment: THREADS (default: all cores), PROMPT (256), DECODE (32), ROUNDS (2),
#   LLAMA_BENCH (/tmp/llama.cpp-ref/llama.cpp/build/bin/llama-bench), BENCH_MODEL (build/release/bench/bench_model).
# Each engine gets THREADS threads (llama-bench -t, KAPITSA_THREADS). Figures are tokens/s.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: bash bench/llama_cpp_compare.sh FILE.gguf [FILE.gguf ...]" >&2; exit 2; }
THREADS=${THREADS:-$(nproc)}
PROMPT=${PROMPT:-256}
DECODE=${DECODE:-32}
ROUNDS=${ROUNDS:-2}
LLAMA_BENCH=${LLAMA_BENCH:-/tmp/llama.cpp-ref/llama.cpp/build/bin/llama-bench}
BENCH_MODEL=${BENCH_MODEL:-build/release/bench/bench_model}
for tool in "$LLAMA_BENCH" "$BENCH_MODEL"; do
  [ -x "$tool" ] || { echo "llama_cpp_compare: $tool is missing (see the header of this script)" >&2; exit 2; }
done

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for round in $(seq 1 "$ROUNDS"); do
  for file in "$@"; do
    name=$(basename "$file" .gguf)
    # llama-bench's CSV: the pp and tg rows carry avg_ts (tokens/s, mean of its own -r 2 repetitions).
    csv=$("$LLAMA_BENCH" -m "$file" -p "$PROMPT" -n "$DECODE" -t "$THREADS" -r 2 -o csv 2>/dev/null)
    col=$(echo "$csv" | head -1 | tr ',' '\n' | grep -nxE '"?avg_ts"?' | cut -d: -f1)
    l_pp=$(echo "$csv" | sed -n 2p | cut -d, -f"$col" | tr -d '"')
    l_tg=$(echo "$csv" | sed -n 3p | cut -d, -f"$col" | tr -d '"')
    out=$(KAPITSA_THREADS=$THREADS "$BENCH_MODEL" --model "$file" --prompt "$PROMPT" --decode "$DECODE" 2>/dev/null)
    k_pp=$(echo "$out" | awk -F'|' '/^\| prefill/ {gsub(/ /, "", $3); print $3}')
    k_tg=$(echo "$out" | awk -F'|' '/^\| decode/ {gsub(/ /, "", $3); print $3}')
    roof=$(echo "$out" | awk -F'|' '/^\| decode/ {gsub(/ /, "", $4); print $4}')
    load=$(cut -d' ' -f1 /proc/loadavg)
    printf 'round %s  %-28s llama.cpp pp%s %8.2f tg%s %7.2f | kapitsa pp %8.2f tg %7.2f (roofline %s) | load %s\n' \
      "$round" "$name" "$PROMPT" "$l_pp" "$DECODE" "$l_tg" "$k_pp" "$k_tg" "$roof" "$load"
    echo "$name $l_pp $l_tg $k_pp $k_tg $roof" >> "$results"
  done
done

echo
echo "| file | llama.cpp decode | Kapitsa decode | Kapitsa / llama.cpp | llama.cpp prefill $PROMPT | Kapitsa prefill $PROMPT | Kapitsa decode roofline |"
echo "|---|---:|---:|---:|---:|---:|---:|"
awk '{ n[$1]++; lpp[$1] = lpp[$1] sep[$1] $2; ltg[$1] = ltg[$1] sep[$1] $3; kpp[$1] = kpp[$1] sep[$1] $4;
       ktg[$1] = ktg[$1] sep[$1] $5; roof[$1] = $6; r[$1] = r[$1] sep[$1] sprintf("%.2f×", $5 / $3); sep[$1] = ", " }
     END { for (f in n) printf "| %s | %s | %s | %s | %s | %s | %s |\n", f, ltg[f], ktg[f], r[f], lpp[f], kpp[f], roof[f] }' "$results"
echo "(THREADS=$THREADS, rounds=$ROUNDS, $(lscpu | sed -n 's/^Model name: *//p'))"
