#!/usr/bin/env python3
"""Counts what `Tracked` adds to callers written the ways programs write them (`examples/zoo.rs`),
in instructions per step under callgrind, in a user's release build (the default release profile:
16 codegen units, no LTO) and with fat LTO (one codegen unit), bare backend against the README's
`Tracked<Jemalloc>`.

The allocator's fast path is inlined into the callers, so a change in its size can change how the
callers around it are compiled (what LLVM inlines into what, what stays in registers). The zoo's
callers were written for this measurement, not tuned against: the closure step, `Vec<Box<[u8]>>`
churn, `HashMap<String, Vec<u8>>` insert/remove, `BTreeMap` growth and shrink, a log line by
`format!` and `push_str`, `serde_json::from_slice` into a `Value`, an iterator chain that collects.

Each figure is the difference of two run lengths (N2 - N1 steps) counted inside the caller's own
function, everything it calls included (the allocator's entry points, frag's out-of-line code and
its samples), so that start-up and set-up cancel; the median of `--repeat` runs. The allocator's
slow paths (its internal C functions: refills, flushes, decay, extents) are counted apart and
printed beside: jemalloc's decay runs by wall time and moves them by up to ±4 a step between two
runs of one binary, which buried differences of a few instructions; they are the allocator's code,
the same in both builds. Without them most callers' runs count the same to 0.1 a step, the hash
map's within 3. A step of some callers allocates many times (the JSON document about 34): the
judged unit is a step that allocates at most once, so a caller's added instructions are divided by
its allocations and reallocations per step where that is more than one (counted by a build whose
global allocator counts calls, `--cfg 'frag_zoo="count"'`).

Usage:
    python3 scripts/zoo.py [--backends jemalloc] [--repeat 3] [--check] [--target-dir DIR]

`--check` exits 1 when the maximum over the zoo exceeds the budget of its build. Needs valgrind.
"""

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import instructions  # noqa: E402  (the callgrind helpers, one home)

ROOT = instructions.ROOT
# Budgets, instructions added per step (a step that allocates at most once), the maximum over the
# zoo: issue 63's.
BUDGET = {"release": 10.0, "hotpath": 8.0}
BUILDS = {"release": "release profile (16 codegen units)", "hotpath": "fat LTO, 1 codegen unit"}
# Each caller's two run lengths: a few seconds under callgrind each.
STEPS = {
    "closure": (100_000, 200_000),
    "boxes": (100_000, 200_000),
    "hashmap": (50_000, 100_000),
    "btree": (200_000, 400_000),
    "strings": (20_000, 40_000),
    "json": (5_000, 10_000),
    "collect": (20_000, 40_000),
}
CALLERS = tuple(STEPS)


def build(backend, profile, variant):
    """The zoo example with `variant`'s global allocator (`tracked`, `bare`, `count`), the one build
    difference a `--cfg` on the example's crate alone, so that all builds share the library's."""
    feats = instructions.example_features(backend)
    cfg = [] if variant == "tracked" else ["--", "--cfg", f'frag_zoo="{variant}"']
    instructions.run(["cargo", "rustc", "--quiet", "--profile", profile, "--example", "zoo", "--no-default-features",
                      "--features", ",".join(feats)] + cfg)
    out_dir = os.path.join(ROOT, "target", "zoo")
    os.makedirs(out_dir, exist_ok=True)
    dest = os.path.join(out_dir, f"zoo-{backend}-{profile}-{variant}")
    shutil.copy2(os.path.join(instructions.target_dir(), profile, "examples", "zoo"), dest)
    return dest


def calls_per_step(exe, caller):
    """Allocations + reallocations per step, from the counting build (set-up cancels)."""
    n1, n2 = STEPS[caller]
    counts = []
    for n in (n1, n2):
        out = instructions.run([exe, caller, str(n)]).stdout
        line = next(l for l in out.splitlines() if l.startswith("calls "))
        allocations, _frees, reallocations = (int(x) for x in line.split()[1:])
        counts.append(allocations + reallocations)
    return (counts[1] - counts[0]) / (n2 - n1)


# The allocator's public entry points (jemalloc's, prefixed as tikv-jemallocator builds it, and
# glibc's), counted with the caller; its other C functions (`_rjem_je_*` and its static helpers,
# glibc's `_int_*`, the locks they take) are its slow paths (see the module's docs).
PUBLIC = re.compile(r"^(_rjem_)?(malloc|mallocx|calloc|sdallocx|dallocx|free|realloc|rallocx|xallocx|"
                    r"posix_memalign|aligned_alloc|memalign|malloc_usable_size|sallocx|nallocx)$")


def slow_path(function):
    """Whether `function` (a callgrind name) is one of the allocator's slow paths: C (no Rust path),
    not an entry point, not a `mem*` copy."""
    return "::" not in function and not PUBLIC.match(function) and not function.lstrip("_").startswith("mem")


def counted(exe, caller, n):
    """Instructions inside `caller` over a run of `n` steps: (everything, the allocator's slow paths)."""
    with tempfile.NamedTemporaryFile(prefix="callgrind.zoo.", delete=False) as f:
        path = f.name
    try:
        instructions.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={path}", "--dump-instr=no",
                          f"--toggle-collect=zoo::{caller}", exe, caller, str(n)])
        found = instructions.functions(path)
    finally:
        os.unlink(path)
    return sum(ir for _, ir in found), sum(ir for function, ir in found if slow_path(function))


def per_step(exe, caller, repeat):
    """Instructions per step inside `caller` without the allocator's slow paths: the median and
    range of `repeat` runs; and the median of its slow paths' own."""
    n1, n2 = STEPS[caller]
    fast, slow = [], []
    for _ in range(repeat):
        (t1, s1), (t2, s2) = counted(exe, caller, n1), counted(exe, caller, n2)
        fast.append(((t2 - s2) - (t1 - s1)) / (n2 - n1))
        slow.append((s2 - s1) / (n2 - n1))
    return statistics.median(fast), min(fast), max(fast), statistics.median(slow)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backends", default="jemalloc")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--check", action="store_true", help="exit 1 when a build's maximum exceeds its budget")
    ap.add_argument("--target-dir", default=None, help="the builds' target directory (default target/zoo-build)")
    args = ap.parse_args()
    instructions.BUILD_ENV["RUSTFLAGS"] = ""
    instructions.BUILD_ENV["CARGO_TARGET_DIR"] = args.target_dir or os.path.join(ROOT, "target", "zoo-build")
    failures = []
    for backend in [b for b in args.backends.split(",") if b]:
        counting = build(backend, "release", "count")
        unit = {c: max(1.0, calls_per_step(counting, c)) for c in CALLERS}
        for profile in BUILDS:
            exes = {v: build(backend, profile, v) for v in ("bare", "tracked")}
            print(f"\n{backend}, {BUILDS[profile]}: instructions per step inside the caller without the "
                  f"allocator's slow paths (median of {args.repeat}, range; the slow paths' own median apart), "
                  f"added per step that allocates at most once\n")
            print("| caller | allocations per step | bare | tracked | added per step | added per allocation "
                  "| slow paths, bare / tracked |")
            print("|---|---|---|---|---|---|---|")
            added = {}
            for caller in CALLERS:
                r = {v: per_step(exes[v], caller, args.repeat) for v in exes}
                step = r["tracked"][0] - r["bare"][0]
                added[caller] = step / unit[caller]
                print(f"| {caller} | {unit[caller]:.2f} | {r['bare'][0]:.1f} [{r['bare'][1]:.1f}, {r['bare'][2]:.1f}] | "
                      f"{r['tracked'][0]:.1f} [{r['tracked'][1]:.1f}, {r['tracked'][2]:.1f}] | {step:+.1f} | "
                      f"{added[caller]:+.2f} | {r['bare'][3]:.1f} / {r['tracked'][3]:.1f} |", flush=True)
            worst = max(added, key=added.get)
            print(f"\nmaximum {added[worst]:+.2f} ({worst}), median {statistics.median(added.values()):+.2f}; "
                  f"budget +{BUDGET[profile]:g}")
            if added[worst] > BUDGET[profile]:
                failures.append(f"{backend} {BUILDS[profile]}: {worst} +{added[worst]:.2f} instructions per step "
                                f"> +{BUDGET[profile]:g}")
    instructions.verdict(failures, args.check)


if __name__ == "__main__":
    main()
