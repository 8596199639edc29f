#!/usr/bin/env python3
"""Reads timelines written by libcuda_timeline.so (cuda_timeline.cpp) and tells where a step's time goes.

  cuda_timeline.py TRACE.csv [--graphs G]          every graph, then the G most replayed node by node
  cuda_timeline.py A.csv B.csv [GRAPH_A GRAPH_B]   two graphs of the same nodes side by side (default:
                                                   each trace's most replayed graph)

A replay is a run of one graph's records in start order. Kernels queued with programmatic dependent
launch start before their predecessor ends and wait inside, so a kernel's own duration overlaps the
one before; what a node adds to a step is its *marginal* time: its end minus the latest end before it.
Per graph: nodes, replays, the median wall time of a replay (first start to last end), and the median
host time between replays. Work outside graphs is summed by name.
"""
import csv
import re
import statistics
import sys
from collections import defaultdict


def short(name, width=64):
    name = re.sub(r"_ZN7kapitsa3ops4cuda7kernels\d+_GLOBAL__N__[0-9a-f]+_\d+_", "", name)
    name = name.replace("(anonymous namespace)::", "").replace("kapitsa::", "")
    return name if len(name) <= width else name[: width - 1] + "…"


def load(path):
    """Returns ({graph id: [replay: [records]]}, {(kind, name): [count, ns]} outside graphs)."""
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            rows.append((int(r["start_ns"]), int(r["end_ns"]), r["kind"], int(r["graph_id"]), int(r["graph_node_id"]), r["name"]))
    rows.sort()
    replays, outside, current = defaultdict(list), defaultdict(lambda: [0, 0]), None
    for rec in rows:
        if rec[3] == 0:
            o = outside[(rec[2], short(rec[5]))]
            o[0] += 1
            o[1] += rec[1] - rec[0]
            current = None
            continue
        if current is None or current[0] != rec[3] or rec[4] in current[2]:  # a node seen again: a new replay
            replays[rec[3]].append([])
            current = (rec[3], replays[rec[3]][-1], set())
        current[1].append(rec)
        current[2].add(rec[4])
    # Only complete replays (a trace may end inside one).
    return {g: [r for r in reps if len(r) == max(len(x) for x in reps)] for g, reps in replays.items()}, outside


def nodes(reps):
    """Per node: (name, median marginal µs, median duration µs)."""
    out = []
    for i in range(len(reps[0])):
        marginal = statistics.median((r[i][1] - max(x[1] for x in r[:i])) if i else r[i][1] - r[i][0] for r in reps)
        duration = statistics.median(r[i][1] - r[i][0] for r in reps)
        out.append((short(reps[0][i][5]), marginal / 1000, duration / 1000))
    return out


def med_us(values):
    return statistics.median(values) / 1000 if values else float("nan")


def most_replayed(graphs):
    return max(graphs, key=lambda g: len(graphs[g]))


def one(path, top):
    graphs, outside = load(path)
    print(f"{sum(len(v) for v in graphs.values())} replays of {len(graphs)} graphs")
    print()
    print("| graph | nodes | replays | wall µs | host between µs | first kernel |")
    print("|---|---:|---:|---:|---:|---|")
    for g, reps in graphs.items():
        wall = [r[-1][1] - r[0][0] for r in reps]
        between = [b[0][0] - a[-1][1] for a, b in zip(reps, reps[1:])]
        print(f"| {g} | {len(reps[0])} | {len(reps)} | {med_us(wall):.1f} | {med_us(between):.1f} | {short(reps[0][0][5], 40)} |")
    for g in sorted(graphs, key=lambda g: -len(graphs[g]))[:top]:
        print(f"\n## graph {g}: {len(graphs[g][0])} nodes, {len(graphs[g])} replays (medians, µs)")
        print("| # | kernel | marginal | duration |")
        print("|---:|---|---:|---:|")
        for i, (name, marginal, duration) in enumerate(nodes(graphs[g])):
            print(f"| {i} | {name} | {marginal:.2f} | {duration:.2f} |")
    print("\n## outside graphs (kind, count, total µs)")
    for (kind, name), (n, t) in sorted(outside.items(), key=lambda kv: -kv[1][1])[:25]:
        print(f"{kind} {n:6d} {t / 1000:10.1f}  {name}")


def compare(path_a, path_b, ga, gb):
    a, _ = load(path_a)
    b, _ = load(path_b)
    ga = ga if ga is not None else most_replayed(a)
    gb = gb if gb is not None else most_replayed(b)
    na, nb = nodes(a[ga]), nodes(b[gb])
    print(f"marginal µs of each node: graph {ga} of {path_a} ({len(a[ga])} replays) | graph {gb} of {path_b} ({len(b[gb])})")
    for i, (x, y) in enumerate(zip(na, nb)):
        flag = "  <<" if y[1] - x[1] > 2 else "  >>" if x[1] - y[1] > 2 else ""
        other = "" if x[0] == y[0] else f"  (B: {y[0]})"
        print(f"{i:4d} {x[0]:64s} {x[1]:7.2f} {y[1]:7.2f}{flag}{other}")
    print(f"     {'sum':64s} {sum(x[1] for x in na):7.1f} {sum(y[1] for y in nb):7.1f}")


def main():
    args = sys.argv[1:]
    top = 3
    if "--graphs" in args:
        top = int(args[args.index("--graphs") + 1])
        del args[args.index("--graphs") : args.index("--graphs") + 2]
    if len(args) == 1:
        one(args[0], top)
    elif len(args) in (2, 4):
        compare(args[0], args[1], int(args[2]) if len(args) == 4 else None, int(args[3]) if len(args) == 4 else None)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
