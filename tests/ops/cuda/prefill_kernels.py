#!/usr/bin/env python3
# Sums an Nsight Compute CSV (`ncu --csv --page raw --metrics gpu__time_duration.sum`) of prefill calls by
# kernel name: the total, then the 25 largest kernels with their time and launch count. bench_model runs a
# warm-up prefill before the measured one, so halve the figures for one prefill (docs/cuda.md, session 22).
# Usage: prefill_kernels.py ncu.csv
import collections
import csv
import sys


def main(path):
    header, time, count = None, collections.defaultdict(float), collections.Counter()
    for row in csv.reader(open(path, errors="replace")):
        if "Kernel Name" in row:
            header = row
            continue
        if header is None or len(row) != len(header):
            continue
        fields = dict(zip(header, row))
        try:
            ns = float(fields["gpu__time_duration.sum"].replace(",", ""))  # thousands separators in quotes
        except ValueError:
            continue  # the units row
        name = fields["Kernel Name"].replace("(anonymous namespace)::", "").split("(")[0][:90]
        time[name] += ns
        count[name] += 1
    print(f"total {sum(time.values()) / 1e6:.3f} ms of kernels, {sum(count.values())} launches")
    for name, ns in sorted(time.items(), key=lambda kv: -kv[1])[:25]:
        print(f"{ns / 1e6:9.3f} ms {count[name]:6d}  {name}")


if __name__ == "__main__":
    main(sys.argv[1])
