#!/usr/bin/env python3
"""The memory limit's cost and effect, in paired runs of the shootout's `limit` workload.

Each pair runs the workload's child process twice on one backend, without a limit and with one
(order alternating from pair to pair), and compares them: the workers' replacements per second after
the live set's drop (with over without, a ratio per pair), RSS after the drop (median and highest,
from 2 s after it), and what the reclaimer's thread and the workers' assists spent. Prints a markdown
table: medians over the pairs with their range.

Usage (after `cargo build --release --all-features --example shootout`):
    python3 scripts/limit_pairs.py [--pairs 10] [--backends system,jemalloc,mimalloc]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXE = os.path.join(ROOT, "target", "release", "examples", "shootout")


def child(backend, variant):
    out = subprocess.run([EXE, "--child", "limit", variant], env=dict(os.environ, FRAG_ALLOCATOR=backend),
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True).stdout
    doc = json.loads(out.strip().splitlines()[-1])
    return {row["case"]: row["figures"] for row in doc["rows"]}


def spread(values, fmt="{:.0f}"):
    values = sorted(values)
    return f"{fmt.format(statistics.median(values))} [{fmt.format(values[0])}, {fmt.format(values[-1])}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--backends", default="system,jemalloc,mimalloc")
    args = ap.parse_args()
    if not os.path.exists(EXE):
        sys.exit(f"{EXE} is missing: cargo build --release --all-features --example shootout")
    print("| backend | RSS after the drop, without (median / highest, MiB) | with a 320 MiB limit | "
          "throughput with over without | reclaimer CPU, ms | assists | assists' CPU, ms |")
    print("|---|---|---|---|---|---|---|")
    for backend in args.backends.split(","):
        ratios, rss_without, max_without, rss_with, max_with, cpu, assists, assist_cpu = ([] for _ in range(8))
        for i in range(args.pairs):
            order = ("without", "with limit") if i % 2 == 0 else ("with limit", "without")
            runs = {variant: child(backend, variant)["after the drop"] for variant in order}
            w, o = runs["with limit"], runs["without"]
            ratios.append(w["ops_per_s"] / o["ops_per_s"])
            rss_without.append(o["rss_median_mib"])
            max_without.append(o["rss_max_mib"])
            rss_with.append(w["rss_median_mib"])
            max_with.append(w["rss_max_mib"])
            cpu.append(w["reclaimer_cpu_ms"])
            assists.append(w["assists"])
            assist_cpu.append(w["assist_cpu_ms"])
            print(f"  {backend} pair {i + 1}: {ratios[-1]:.3f}, RSS {o['rss_median_mib']:.0f} -> "
                  f"{w['rss_median_mib']:.0f} MiB", file=sys.stderr, flush=True)
        print(f"| {backend} | {spread(rss_without)} / {spread(max_without)} | {spread(rss_with)} / "
              f"{spread(max_with)} | {spread(ratios, '{:.3f}')} | {spread(cpu)} | {spread(assists)} | "
              f"{spread(assist_cpu, '{:.1f}')} |", flush=True)


if __name__ == "__main__":
    main()
