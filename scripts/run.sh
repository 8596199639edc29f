#!/usr/bin/env bash
# The README's main command: installs dependencies, builds, and runs Kapitsa on the bundled model.
# Until the demo model and `kapitsa run` exist, it runs a full forward pass plus a greedy
# continuation of the Qwen3.5 test checkpoint and prints the generated token ids.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
model=tests/fixtures/qwen35-dense-tiny
ids="$(mktemp --suffix=.json)"; out="$(mktemp --suffix=.safetensors)"
trap 'rm -f "$ids" "$out"' EXIT
echo "[1, 2, 3, 100, 200, 300, 1000, 1500]" >"$ids"
./build/release/kapitsa logits --model "$model" --ids-file "$ids" --out "$out" --generate 16
echo "kapitsa: wrote logits and 16 greedy tokens for $model to $out"
