#!/usr/bin/env bash
# Configures and builds Kapitsa (Release, portable: cpu kernels per ISA level) into build/release. Extra args go to ninja.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release >/dev/null
cmake --build --preset release -- "$@"
