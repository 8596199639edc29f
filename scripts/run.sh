#!/usr/bin/env bash
# The README's main command: installs dependencies, builds, and runs Kapitsa on the bundled demo model
# (models/demo/target, a 29M-parameter Qwen3.5-architecture model trained on Python code, shipped 4-bit): it
# completes the start of a Python function, streaming the text to the terminal, with n-gram speculative
# decoding on (the summary line says how many guessed tokens were accepted; the output is the same as without).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
prompt="${1:-Complete the following code:

\`\`\`python
def fibonacci(n):
    \"\"\"Return the n-th Fibonacci number.\"\"\"
}"
./build/release/kapitsa run --max-tokens 120 --seed 1 --spec ngram "$prompt"
