#!/usr/bin/env bash
# Packs a large data file for tracking: FILE becomes FILE.xz (the plain file is removed); the build
# unpacks it back next to itself (target kapitsa_data, CMakeLists.txt), where the git-ignored copy lives.
# Usage: bash scripts/pack-data.sh FILE...  The LZMA literal context follows the element width (bf16
# weights: 2 bytes, f32 references: 4 bytes): 5-8% smaller than plain `xz -9e` on these files.
set -euo pipefail
for f in "$@"; do
  case "$f" in
    *model.safetensors) options=(--lzma2=preset=9e,lc=0,lp=1,pb=1) ;;      # bf16 weights
    *reference.safetensors) options=(--lzma2=preset=9e,lc=0,lp=2,pb=2) ;;  # f32 logits, hidden states
    *) options=(-9e) ;;
  esac
  xz "${options[@]}" -T1 --force "$f"
  echo "$f: $(stat -c %s "$f.xz") bytes packed"
done
