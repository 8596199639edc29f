#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then the installed kapitsa — run from / with an empty HOME,
# far from the source tree — finds its demo model under PREFIX/share/kapitsa and completes a prompt;
# the catalog and LICENSE are installed beside it; doctor lists the installed catalog and bench runs the
# demo model. Args: BUILD_DIR.
set -euo pipefail
build="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
for f in bin/kapitsa share/kapitsa/LICENSE share/kapitsa/models/catalog.json \
         share/kapitsa/models/demo/target/model.safetensors share/kapitsa/models/demo/target/tokenizer.json \
         share/kapitsa/models/demo/draft/config.json; do
  [ -e "$tmp/prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
mkdir -p "$tmp/home"
out="$(cd / && env -u KAPITSA_HOME HOME="$tmp/home" "$tmp/prefix/bin/kapitsa" run --max-tokens 4 --seed 1 "def add(a, b):" 2>&1)" ||
  { echo "$out"; exit 1; }
echo "$out"
grep -q "\[4 tokens" <<<"$out" || { echo "no summary line of 4 tokens"; exit 1; }
# doctor reads the installed catalog; bench runs the installed demo model.
installed() { (cd / && env -u KAPITSA_HOME HOME="$tmp/home" "$tmp/prefix/bin/kapitsa" "$@" 2>&1); }
out="$(installed doctor --json --seconds 0.05)" || { echo "$out"; exit 1; }
grep -q '"spec": "27b:4bit"' <<<"$out" || { echo "$out"; echo "doctor lists no catalog model"; exit 1; }
out="$(installed bench --prompt 8 --decode 2 --sequences 1 --ttft 8 --no-spec --seconds 0 --json)" || { echo "$out"; exit 1; }
grep -q '"prefill"' <<<"$out" || { echo "$out"; echo "bench printed no prefill result"; exit 1; }
echo "install test: ok"
