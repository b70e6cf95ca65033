#!/usr/bin/env python3
"""Paired whole-process CPU runs of two builds of one program (`examples/churn.rs`, or a caller of
`examples/zoo.rs` with `--caller`): the CPU time
(user + system) of each, the ratio `wrapped / bare` per pair, and their median and range.

Two ways to pair, the same binaries either way:
- by default one after the other on one core (`taskset`), which goes first alternating;
- `--together`: both runs of a pair at once, one per core, the cores swapped from pair to pair, so
  that both meet the same interference from outside the machine (it shares the L3 cache and memory
  bandwidth between them, which a lone run has to itself).

A virtual machine's CPU time includes the time its host ran something else (no steal time is
reported here), so on a busy host a lone run's time moves by up to 2x: read the range first.

    python3 scripts/cpu_pairs.py BARE WRAPPED [--steps 50000000] [--pairs 14] [--together] [--caller NAME]
"""
import argparse
import os
import statistics
import subprocess
import tempfile


def run(exe, steps, core, before=()):
    """Starts `exe [before...] steps` pinned to `core`; returns the process and the file its times go to."""
    out = tempfile.NamedTemporaryFile(delete=False)
    out.close()
    cmd = ["/usr/bin/time", "-f", "%U %S", "-o", out.name, "taskset", "-c", str(core), exe, *before, str(steps)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL), out.name


def cpu(proc, path):
    if proc.wait() != 0:
        raise SystemExit(f"{proc.args[-2]} failed")
    with open(path) as f:
        user, system = f.read().split()[-2:]
    os.unlink(path)
    return float(user) + float(system)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bare")
    ap.add_argument("wrapped")
    ap.add_argument("--steps", type=int, default=50_000_000)
    ap.add_argument("--pairs", type=int, default=14)
    ap.add_argument("--together", action="store_true", help="both runs of a pair at once, one per core")
    ap.add_argument("--caller", help="an argument before the steps: the caller of `examples/zoo.rs` to run")
    args = ap.parse_args()
    before = [args.caller] if args.caller else []
    ratios = []
    for i in range(args.pairs):
        if not args.together:
            order = [args.bare, args.wrapped] if i % 2 == 0 else [args.wrapped, args.bare]
            t = {exe: cpu(*run(exe, args.steps, 1, before)) for exe in order}
            bare, wrapped = t[args.bare], t[args.wrapped]
        else:
            cores = (0, 1) if i % 2 == 0 else (1, 0)
            a, b = run(args.bare, args.steps, cores[0], before), run(args.wrapped, args.steps, cores[1], before)
            bare, wrapped = cpu(*a), cpu(*b)
        ratios.append(wrapped / bare)
        print(f"pair {i + 1}: bare {bare:.2f} s, wrapped {wrapped:.2f} s, ratio {wrapped / bare:.3f}", flush=True)
    print(f"median {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}), {len(ratios)} pairs")


if __name__ == "__main__":
    main()
