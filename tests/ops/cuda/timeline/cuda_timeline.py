#!/usr/bin/env python3
"""Reads a timeline written by libcuda_timeline.so (cuda_timeline.cpp) and tells where a step's time goes.

Usage: cuda_timeline.py TRACE.csv [--nodes N] [--graphs G]

For each CUDA graph launched more than once: its kernels, its replays, the median wall time of a replay
(first kernel's start to last kernel's end), the median of its kernels' summed durations and of the gaps
between them, and the median time from one replay's end to the next's start (host work). For the G most
replayed graphs, node by node: median duration and median gap before it (where a dependent kernel
waited). Work outside graphs is summed by name.
"""
import csv
import statistics
import sys
from collections import defaultdict


def short(name, width=70):
    name = name.replace("(anonymous namespace)::", "").replace("kapitsa::", "")
    return name if len(name) <= width else name[: width - 1] + "…"


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    path = args[0]
    nodes = int(args[args.index("--nodes") + 1]) if "--nodes" in args else 200
    top = int(args[args.index("--graphs") + 1]) if "--graphs" in args else 3
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            rows.append((int(r["start_ns"]), int(r["end_ns"]), r["kind"], int(r["graph_id"]), int(r["graph_node_id"]), r["name"]))
    rows.sort()
    # Replays: maximal runs of records of one graph id, in start order.
    replays = defaultdict(list)  # graph id -> [ [records] ]
    outside = defaultdict(lambda: [0, 0])
    current = None
    for rec in rows:
        g = rec[3]
        if g == 0:
            o = outside[(rec[2], short(rec[5], 60))]
            o[0] += 1
            o[1] += rec[1] - rec[0]
            current = None
            continue
        if current is None or current[0] != g:
            replays[g].append([])
            current = (g, replays[g][-1])
        elif rec[4] in {x[4] for x in current[1]}:  # the same node again: a new replay of that graph
            replays[g].append([])
            current = (g, replays[g][-1])
        current[1].append(rec)
    print(f"{len(rows)} records, {sum(len(v) for v in replays.values())} graph replays of {len(replays)} graphs")
    print()
    print("| graph | nodes | replays | wall µs | kernels µs | gaps µs | host between µs | first kernel |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    summary = []
    for g, reps in replays.items():
        full = max(len(r) for r in reps)
        reps = [r for r in reps if len(r) == full]
        wall = [r[-1][1] - r[0][0] for r in reps]
        busy = [sum(x[1] - x[0] for x in r) for r in reps]
        gaps = [w - b for w, b in zip(wall, busy)]
        between = [b[0][0] - a[-1][1] for a, b in zip(reps, reps[1:])]
        summary.append((len(reps), g, full, reps))
        med = lambda v: statistics.median(v) / 1000 if v else float("nan")
        print(f"| {g} | {full} | {len(reps)} | {med(wall):.1f} | {med(busy):.1f} | {med(gaps):.1f} | {med(between):.1f} | "
              f"{short(reps[0][0][5], 40)} |")
    print()
    for count, g, full, reps in sorted(summary, reverse=True)[:top]:
        print(f"## graph {g}: {full} nodes, {count} replays (median µs over replays)")
        print("| # | kernel | duration | gap before |")
        print("|---:|---|---:|---:|")
        for i in range(min(full, nodes)):
            d = statistics.median(r[i][1] - r[i][0] for r in reps) / 1000
            gap = statistics.median(r[i][0] - r[i - 1][1] for r in reps) / 1000 if i else 0.0
            print(f"| {i} | {short(reps[0][i][5])} | {d:.2f} | {gap:.2f} |")
        print()
    print("## outside graphs (count, total µs)")
    for (kind, name), (n, t) in sorted(outside.items(), key=lambda kv: -kv[1][1])[:25]:
        print(f"{kind} {n:6d} {t / 1000:10.1f}  {name}")


if __name__ == "__main__":
    main()
