#!/usr/bin/env python3
"""Share of held-out function stubs whose greedy completion parses (issue 19's measure), decoded by Kapitsa.

Usage: python3 tools/demo_model/eval_stubs.py [--kapitsa build/release/kapitsa] [--max-tokens 256]
           METRICS_JSON MODEL_DIR...
The stubs are the "stubs" list train.py wrote into metrics.json (top-level functions of the held-out code,
cut after their docstring). Each model completes each stub greedily (raw completion, no chat template);
the completion is cut at the first line back at column 0 and must parse with at least one statement after
the docstring (stubs.body_parses). Prints one line per model and, with --show, every completion.
With --spec mtp,draft (issue 19: "draft/MTP acceptance on the same set") each stub is completed again with
each proposer (MTP head k = 2, --draft DIR k = 3: bench_spec's lengths), and the share of guessed tokens
accepted is printed, with how many completions equal the plain one (greedy speculation is lossless, so
all must).
"""
import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stubs import body_parses  # noqa: E402


def complete(kapitsa, model, stub, max_tokens, spec=()):
    """The greedy completion, and with spec (kapitsa run's --spec arguments) the summary's (accepted,
    guessed) counts."""
    out = subprocess.run([kapitsa, "run", "--model", model, "--no-template", "--temperature", "0",
                          "--max-tokens", str(max_tokens), *spec, stub],
                         capture_output=True, text=True, check=True)
    if not spec:
        return out.stdout, None
    m = re.search(r"(\d+) of (\d+) guessed tokens accepted", out.stderr)
    return out.stdout, (int(m[1]), int(m[2])) if m else (0, 0)  # no summary count: nothing was guessed


# kapitsa run's arguments per proposer: bench_spec's guess lengths for the demo pair.
def spec_args(name, draft):
    return {"mtp": ["--spec", "mtp", "--spec-k", "2"],
            "draft": ["--spec", "draft", "--draft", draft, "--spec-k", "3"],
            "ngram": ["--spec", "ngram", "--spec-k", "4"]}[name]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("metrics")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--kapitsa", default="build/release/kapitsa")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--show", action="store_true")
    ap.add_argument("--spec", default="", help="comma-separated proposers (mtp, draft, ngram): also complete "
                                               "each stub with each and report its acceptance")
    ap.add_argument("--draft", default="models/demo/draft", help="the draft model of --spec draft")
    args = ap.parse_args()
    proposers = [p for p in args.spec.split(",") if p]
    for p in proposers:
        if p not in ("mtp", "draft", "ngram"):
            ap.error(f"--spec: unknown proposer {p!r} (mtp, draft or ngram)")
    stubs = json.load(open(args.metrics))["stubs"]
    for model in args.models:
        ok = 0
        accepted = {p: [0, 0, 0] for p in proposers}  # accepted, guessed, completions equal to plain
        for s in stubs:
            text, _ = complete(args.kapitsa, model, s["stub"], args.max_tokens)
            good, src = body_parses(s["stub"], text)
            ok += good
            if args.show:
                print(f"--- {s['function']}: {'parses' if good else 'does not parse'}\n{src}")
            for p in proposers:
                spec_text, (a, g) = complete(args.kapitsa, model, s["stub"], args.max_tokens, spec_args(p, args.draft))
                accepted[p][0] += a
                accepted[p][1] += g
                accepted[p][2] += spec_text == text
        print(f"{model}: {ok}/{len(stubs)} completions parse ({100 * ok / max(1, len(stubs)):.0f}%)", flush=True)
        for p, (a, g, same) in accepted.items():
            print(f"  {p}: {a} of {g} guessed tokens accepted ({100 * a / max(1, g):.1f}%); "
                  f"{same}/{len(stubs)} completions the same as without speculation", flush=True)


if __name__ == "__main__":
    main()
