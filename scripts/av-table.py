#!/usr/bin/env python3
"""av-table.py — `tagwire bench av --json` (a JSON array, one object per run) on stdin, a
markdown table on stdout: one row per point (listeners, meetings, daemons) with the spread of
its runs, for BENCHMARKS.md unedited. Used by scripts/narada-av.sh."""
import json
import sys
from collections import OrderedDict


def spread(values, fmt):
    v = sorted(values)
    if len(v) == 1:
        return fmt.format(v[0])
    return "{} / {} / {}".format(fmt.format(v[0]), fmt.format(v[len(v) // 2]), fmt.format(v[-1]))


def main():
    text = sys.stdin.read().strip()
    try:
        runs = json.loads(text) if text else []
    except json.JSONDecodeError as e:
        sys.exit(f"av-table.py: stdin is not the JSON of `tagwire bench av --json`: {e}")
    points = OrderedDict()
    for r in runs:
        points.setdefault((r["listeners"], r["meetings"], r["daemons"]), []).append(r)
    print("| listeners | meetings | daemons | band, transport | runs | mean latency, ms (min / median / max) "
          "| RTP jitter, ms (median) | late > 100 ms, % (min / median / max) | lost, % (max) "
          "| packets measured (warm-up left out per listener) | within capacity |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for (listeners, meetings, daemons), rs in points.items():
        jit = sorted(r["mean_jitter_ms"] for r in rs)[len(rs) // 2]
        ok = sum(1 for r in rs if r["within_capacity"])
        print(f"| {listeners} | {meetings} | {daemons} | {rs[0]['band']}, {rs[0]['transport']} | {len(rs)} "
              f"| {spread([r['mean_latency_ms'] for r in rs], '{:.2f}')} | {jit:.2f} "
              f"| {spread([r['late_percent'] for r in rs], '{:.2f}')} | {max(r['lost_percent'] for r in rs):.2f} "
              f"| {sum(r['packets_measured'] for r in rs)} ({rs[0]['warmup_per_listener']}) | {ok} of {len(rs)} runs |")


if __name__ == "__main__":
    main()
