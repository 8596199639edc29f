#!/usr/bin/env python3
"""Checks cuda_timeline.py's reading of a trace on a hand-made one (no GPU needed): replays split where a
graph's node comes again, an unfinished last replay left out, marginal times under programmatic
dependent launch (a kernel that starts before its predecessor ends), work outside graphs summed, and
the two-trace comparison. Run by ctest (cuda_timeline_reader)."""
import contextlib
import io
import os
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cuda_timeline  # noqa: E402

HEADER = "kind,start_ns,end_ns,graph_id,graph_node_id,stream,name\n"


def write(rows):
    f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
    f.write(HEADER)
    for r in rows:
        f.write(",".join(str(x) for x in r) + "\n")
    f.close()
    return f.name


def trace(kernel_b_ns):
    """Graph 7, three replays of nodes a, b, c (b overlaps a: it starts 1 µs before a ends), then half a
    fourth replay; a memcpy outside graphs between replays."""
    rows, t = [], 1_000_000
    for replay in range(3):
        rows.append(("K", t, t + 4000, 7, 11, 3, '"a"'))
        rows.append(("K", t + 3000, t + 4000 + kernel_b_ns, 7, 12, 3, '"b"'))  # PDL: starts before a ends
        end_b = t + 4000 + kernel_b_ns
        rows.append(("K", end_b + 500, end_b + 2500, 7, 13, 3, '"c"'))
        rows.append(("C", end_b + 10_000, end_b + 12_000, 0, 0, 3, '"memcpy kind 2 64 B"'))
        t = end_b + 50_000
    rows.append(("K", t, t + 4000, 7, 11, 3, '"a"'))  # the trace ends inside this replay
    return write(rows)


def main():
    path = trace(kernel_b_ns=6000)
    graphs, outside = cuda_timeline.load(path)
    assert list(graphs) == [7], graphs.keys()
    assert len(graphs[7]) == 3, f"{len(graphs[7])} complete replays, want 3 (the unfinished one left out)"
    nodes = cuda_timeline.nodes(graphs[7])
    names = [n for n, _, _ in nodes]
    assert names == ["a", "b", "c"], names
    marginal = [m for _, m, _ in nodes]
    # a: its own 4 µs; b: ends 6 µs after a; c: ends 2.5 µs after b.
    assert [round(m, 3) for m in marginal] == [4.0, 6.0, 2.5], marginal
    assert round(nodes[1][2], 3) == 7.0, nodes[1]  # b's own duration counts the µs it overlapped a
    assert outside[("C", "memcpy kind 2 64 B")] == [3, 6000], outside

    # Two traces of the same graph: b is 3 µs slower in the second, flagged "<<".
    slower = trace(kernel_b_ns=9000)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cuda_timeline.compare(path, slower, None, None)
    lines = out.getvalue().splitlines()
    b_line = next(line for line in lines if line.split()[1:2] == ["b"])
    assert b_line.rstrip().endswith("<<"), b_line
    assert "12.5" in lines[-1] and "15.5" in lines[-1], lines[-1]  # the sums of marginal times

    with contextlib.redirect_stdout(io.StringIO()):
        cuda_timeline.one(path, 1)  # the one-trace report runs
    os.unlink(path)
    os.unlink(slower)
    print("cuda_timeline reader: ok")


if __name__ == "__main__":
    main()
