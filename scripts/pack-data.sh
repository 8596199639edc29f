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
  # prompt_logits is dropped from references: the tests rebuild it from hidden_states (lm_head of the
  # last row, tests/models/fixture_reference.h), and it was 70% of each file. So is an MTP reference's
  # `logits` (lm_head of its mtp_hidden rows; MtpHead.DemoHeadMatchesThePyTorchReference), and
  # `greedy_logits` where `greedy_hidden` holds each greedy step's final-normed row (demo references
  # written by tools/demo_model/train.py since session 30; fixture_reference.h rebuilds them).
  if [[ "$f" == *reference.safetensors ]]; then python3 - "$f" <<'PY'
import json, struct, sys
path = sys.argv[1]
data = open(path, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header, body = json.loads(data[8:8 + n]), data[8 + n:]
header.pop("prompt_logits", None)
if "mtp_hidden" in header:
    header.pop("logits", None)
if "greedy_hidden" in header:
    header.pop("greedy_logits", None)
out, chunks, offset = {}, [], 0
for name, e in sorted(((k, v) for k, v in header.items() if k != "__metadata__"), key=lambda kv: kv[1]["data_offsets"][0]):
    chunk = body[e["data_offsets"][0]:e["data_offsets"][1]]
    out[name] = dict(e, data_offsets=[offset, offset + len(chunk)])
    chunks.append(chunk)
    offset += len(chunk)
if "__metadata__" in header:
    out["__metadata__"] = header["__metadata__"]
text = json.dumps(out, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
open(path, "wb").write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
PY
  fi
  xz "${options[@]}" -T1 --force "$f"
  echo "$f: $(stat -c %s "$f.xz") bytes packed"
done
