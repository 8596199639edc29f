#!/usr/bin/env bash
# Builds Kapitsa and installs it for the current user: PREFIX/bin/kapitsa and PREFIX/share/kapitsa (the
# demo models and the model catalog). PREFIX: the first argument, else ~/.local. Packages come from
# apt-get (sudo when not root); nothing else needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="${1:-$HOME/.local}"
bash scripts/install-deps.sh
bash scripts/build.sh
cmake --install build/release --prefix "$prefix"
echo "kapitsa: installed $prefix/bin/kapitsa"
case ":$PATH:" in
  *":$prefix/bin:"*) ;;
  *) echo "kapitsa: $prefix/bin is not on your PATH; add it, e.g. export PATH=\"$prefix/bin:\$PATH\"" ;;
esac
