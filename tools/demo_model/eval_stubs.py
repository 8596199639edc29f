#!/usr/bin/env python3
"""Share of held-out function stubs whose greedy completion parses (issue 19's measure), decoded by Kapitsa.

Usage: python3 tools/demo_model/eval_stubs.py [--kapitsa build/release/kapitsa] [--max-tokens 256]
           METRICS_JSON MODEL_DIR...
The stubs are the "stubs" list train.py wrote into metrics.json (top-level functions of the held-out code,
cut after their docstring). Each model completes each stub greedily (raw completion, no chat template);
the completion is cut at the first line back at column 0 and must parse with at least one statement after
the docstring (stubs.body_parses). Prints one line per model and, with --show, every completion.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stubs import body_parses  # noqa: E402


def complete(kapitsa, model, stub, max_tokens):
    out = subprocess.run([kapitsa, "run", "--model", model, "--no-template", "--temperature", "0",
                          "--max-tokens", str(max_tokens), "--quiet", stub],
                         capture_output=True, text=True, check=True)
    return out.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("metrics")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--kapitsa", default="build/release/kapitsa")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--show", action="store_true")
    args = ap.parse_args()
    stubs = json.load(open(args.metrics))["stubs"]
    for model in args.models:
        ok = 0
        for s in stubs:
            good, src = body_parses(s["stub"], complete(args.kapitsa, model, s["stub"], args.max_tokens))
            ok += good
            if args.show:
                print(f"--- {s['function']}: {'parses' if good else 'does not parse'}\n{src}")
        print(f"{model}: {ok}/{len(stubs)} completions parse ({100 * ok / max(1, len(stubs)):.0f}%)", flush=True)


if __name__ == "__main__":
    main()
