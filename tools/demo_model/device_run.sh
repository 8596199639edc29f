#!/usr/bin/env bash
# The commands that produce models/demo on a lent H200 (see README.md), from the repository root.
#   bash tools/demo_model/device_run.sh smoke [ARGS]  every stage on tiny data (seconds), then the full
#                                                     pipeline with short budgets (to time each phase)
#   bash tools/demo_model/device_run.sh full [ARGS]   the smoke run, then the real run (about 9 minutes)
#   bash tools/demo_model/device_run.sh chain ARGS    one call of a run longer than a call (ARGS: at least
#       --target-steps N --stop-after S): the target trains S seconds and saves its state in out/ (git-
#       ignored: a warm machine keeps the checkout's ignored files between calls, seen in session 36;
#       /tmp not yet seen to survive); the same command again (on the same machine, while it is still
#       warm) goes on; the call that reaches N steps evaluates and exports. Prints STOPPED_AT=step while
#       unfinished.
# Both reuse the first edition's tokenizer and measure the first edition's target beside the new one.
# Output: logs, and the result packed as $OUT/demo.tar.part-* (15 MB pieces; reassemble with cat).
set -o pipefail
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mode=${1:-full}; shift
common=(--tokenizer models/demo/target --baseline models/demo/target)
nvidia-smi -L
python3 tools/demo_model/test_gdn_chunked.py || exit 1
if [ "$mode" = smoke ]; then
  timeout 150 python3 tools/demo_model/train.py --smoke --out /tmp/smoke "${common[@]}" 2>&1 | tee "$OUT/smoke.log" || exit 1
  head -c 4000 /tmp/smoke/metrics.json; echo
  timeout 400 python3 tools/demo_model/train.py --out /tmp/demo "${common[@]}" --target-budget 25 --draft-budget 8 \
    --probe-batches 32,64 "$@" 2>&1 | tee "$OUT/full.log"
  rc=$?
elif [ "$mode" = chain ]; then
  mkdir -p out
  [ -f out/demo_state.pt ] || rm -rf /tmp/demo out/demo_chain.log  # no state: a fresh run
  ( time timeout 590 python3 tools/demo_model/train.py --out /tmp/demo "${common[@]}" --state out/demo_state.pt "$@" ) 2>&1 |
    tee -a out/demo_chain.log  # every call's log, in order
  rc=$?
  [ $rc = 0 ] && [ -f /tmp/demo/DONE ] && rm -f out/demo_state.pt  # finished: the next chain starts afresh
  cp out/demo_chain.log "$OUT/chain.log"
else
  timeout 100 python3 tools/demo_model/train.py --smoke --out /tmp/smoke "${common[@]}" 2>&1 | tee "$OUT/smoke.log" || exit 1
  ( time timeout 520 python3 tools/demo_model/train.py --out /tmp/demo "${common[@]}" "$@" ) 2>&1 | tee "$OUT/full.log"
  rc=$?
fi
cd /tmp
[ -f demo/metrics.json ] && cp demo/metrics.json "$OUT/"
if [ -f demo/DONE ] && [ "$mode" != smoke ]; then
  tar --exclude=demo/tmp --exclude=demo/tokenizer -cf - demo | split -b 15M - "$OUT/demo.tar.part-"
fi
ls -la "$OUT"
exit $rc
