#!/usr/bin/env python3
# Summarises an Nsight Compute CSV (`ncu --csv --page raw --metrics gpu__time_duration.sum,
# dram__bytes_read.sum,dram__bytes_write.sum`) of a model's eager steps (KAPITSA_CUDA_GRAPHS=0) into
# one decode step's kernel list: the kernels between the last two launches of the embedding kernel
# (each step starts with one; STEP_MARKER names another kernel, e.g. dequantize_affine for a quantized table). Prints the kernel count, the summed kernel time, and the kernels grouped
# by (name, grid) with their time and DRAM bandwidth, largest first. Used by profile_run.sh
# (docs/cuda.md, "Profile of one decode step").
# Usage: profile_step.py ncu.csv
import csv
import os
import sys
from collections import defaultdict


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def short_name(name):
    """'void ns::(anonymous namespace)::gemv_vec_kernel<__nv_bfloat16, 1>(const float *, …)' → 'gemv_vec_kernel<__nv_bfloat16, 1>'."""
    for prefix in ("(anonymous namespace)::", "<unnamed>::", "unnamed>::"):
        name = name.replace(prefix, "")
    if name.startswith("void "):
        name = name[5:]
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0:
            cut = i
            break
    name = name[:cut]
    depth, start = 0, 0
    for i, ch in enumerate(name):
        depth += ch == "<"
        depth -= ch == ">"
        if depth == 0 and name[i:i + 2] == "::":
            start = i + 2
    return name[start:][:60]


def main(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu prints its own "==PROF==" lines too
    rows = list(csv.DictReader(lines))
    if len(rows) < 2:
        sys.exit(f"{path}: no kernels")
    units = rows[0]
    rows = rows[1:]  # the second line holds units
    time_key = "gpu__time_duration.sum"
    read_key = "dram__bytes_read.sum" if "dram__bytes_read.sum" in units else None
    write_key = "dram__bytes_write.sum" if "dram__bytes_write.sum" in units else None
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}[units[time_key]]  # → µs
    byte_scale = {"byte": 1, "Kbyte": 1e3, "KB": 1e3, "Mbyte": 1e6, "MB": 1e6, "Gbyte": 1e9, "GB": 1e9}
    marker = os.environ.get("STEP_MARKER", "embedding")  # a quantized table's rows: dequantize_affine
    starts = [i for i, r in enumerate(rows) if marker in r["Kernel Name"]]
    if len(starts) < 2:
        sys.exit(f"{path}: fewer than two steps ({marker} kernels at {starts})")
    step = rows[starts[-2]:starts[-1]]
    total = sum(number(r[time_key]) * scale for r in step)
    groups = defaultdict(lambda: [0, 0.0, 0.0])
    for r in step:
        name = short_name(r["Kernel Name"])
        key = (name, r.get("Grid Size", ""), r.get("Block Size", ""))
        g = groups[key]
        g[0] += 1
        g[1] += number(r[time_key]) * scale
        if read_key:
            g[2] += number(r[read_key]) * byte_scale.get(units[read_key], 1)
            g[2] += number(r[write_key]) * byte_scale.get(units[write_key], 1) if write_key else 0
    print(f"one eager decode step: {len(step)} kernels, {total:.1f} µs of kernel time "
          f"({len(rows)} kernels profiled, {len(starts)} steps)")
    print(f"{'µs':>8} {'%':>5} {'n':>4} {'µs each':>8} {'GB/s':>6}  kernel grid block")
    for (name, grid, block), (n, us, bytes_) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        gbs = bytes_ / (us * 1e-6) / 1e9 if us > 0 else 0
        print(f"{us:8.1f} {100 * us / total:5.1f} {n:4d} {us / n:8.2f} {gbs:6.0f}  {name} {grid} {block}")
    print("\nthe step's kernels in launch order (µs):")
    for r in step:
        print(f"{number(r[time_key]) * scale:8.2f}  {short_name(r['Kernel Name'])} {r.get('Grid Size', '')}")


if __name__ == "__main__":
    main(sys.argv[1])
