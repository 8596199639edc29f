#!/usr/bin/env bash
# The README's main command: installs dependencies, builds, and runs Kapitsa on the bundled demo model
# (models/demo/target, a 29M-parameter Qwen3.5-architecture model trained on Python code, shipped 4-bit): it
# continues the start of a Python class (raw completion, greedy with a mild repetition penalty, which keeps
# the small model out of greedy loops), streaming the text to the terminal, with speculative decoding by the
# model's own multi-token-prediction head. The summary line says tokens/s and how many guessed tokens were
# accepted; the text is the same as without speculation (tests/runtime: Speculation*, RunCli*).
# Another prompt: bash scripts/run.sh "def greet(name):"
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
default_prompt='class Counter:
    """Count how many times each key was seen."""

    def __init__(self):
        self.counts = {}

    def add(self, key):'
prompt="${1:-$default_prompt}"
printf '%s\n' "$prompt"
./build/release/kapitsa run --no-template --temperature 0 --repetition-penalty 1.1 --max-tokens 200 \
  --stop $'\n\n\n' --spec mtp "$prompt"$'\n'
