#!/usr/bin/env bash
# The one command that produced models/demo on a lent H200 (see README.md): a smoke run of every
# stage on tiny data first (so a failure costs seconds, not the full run), then the full run.
# Output: logs and models/demo packed as $OUT/demo.tar.part-* (15 MB pieces; reassemble with cat).
# Arguments go to the full run only, e.g. `--target-steps 1012 --draft-steps 1077` to reproduce.
set -o pipefail
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
timeout 200 python3 tools/demo_model/train.py --smoke --out /tmp/smoke 2>&1 | tee "$OUT/smoke.log"
rc=$?
if [ $rc -eq 0 ]; then
  cat /tmp/smoke/target/config.json; head -c 3000 /tmp/smoke/target/reference.json; echo
  ( time python3 tools/demo_model/train.py --out /tmp/demo "$@" ) 2>&1 | tee "$OUT/full.log"
  rc=$?
fi
cd /tmp
if [ -f demo/DONE ]; then
  tar --exclude=demo/raw --exclude=demo/tmp -cf - demo | split -b 15M - "$OUT/demo.tar.part-"
elif [ -d demo/raw ]; then
  tar -cf - demo/raw demo/tokenizer | split -b 15M - "$OUT/demo.tar.part-"
fi
ls -la "$OUT"
exit $rc
