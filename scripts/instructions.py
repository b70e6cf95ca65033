#!/usr/bin/env python3
"""Counts what `Tracked` adds to the allocation path, in instructions, under callgrind.

Every figure is the difference of two run lengths of the same workload (N2 - N1 operations), so the
process's start-up and tear-down cancel and what is left is the cost per operation, deterministic to
the instruction: a regression check, not a timing.

- pair:    malloc + free of 16 B, 64 B and 1 KiB (align 8) on one thread, per pair;
- churn:   65,536 live blocks of random sizes 16..=1024 B, a random one freed and replaced per step:
           instructions and simulated L1 data read misses per step (free + malloc);
- service: the service example (JSON echo, bodies 1 to 64 KiB) driving itself, instructions per
           request, built twice: with `Tracked` and with the bare backend (FRAG_BARE_ALLOCATOR=1);
           the publisher thread's rounds (per second, not per request) are not counted. The count
           moves by about half a point between runs: the threads interleave differently.
           `--floor` adds two more builds: a wrapper that only forwards, and the cheapest exact
           per-class counter (`examples/support/floor.rs`): what any wrapper pays before `Tracked`
           does anything of its own.

Builds go to target/instructions-build/ without frame pointers (RUSTFLAGS set empty, overriding the
repository's `.cargo/config.toml`): the build a service gets by default. `--frame-pointers` measures
the build that allocation sites need instead (target/instructions-build-fp/): the flag itself adds
about 8 instructions per pair (frame set-up in the wrappers), sites add none to the fast path.

Usage:
    python3 scripts/instructions.py [--backends jemalloc,system] [--no-service] [--floor] [--check]
                                    [--frame-pointers]

`--check` exits 1 when a budget below is exceeded. Needs valgrind (CI installs it).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILE = "hotpath"

# Budgets (added by `Tracked` over the bare backend), from the hot-path issue.
PAIR_BUDGET = 40  # instructions per malloc + free pair
CHURN_MISS_BUDGET = 0.05  # simulated L1 data read misses, relative to bare
SERVICE_BUDGET = 0.05  # instructions per request, relative to bare

PAIR_SIZES = [16, 64, 1024]
PAIR_ITERS = (200_000, 400_000)
CHURN_STEPS = (200_000, 400_000)
SERVICE_LOAD = (300, 600)
# The example's `frag::Publisher` thread runs a round every second of wall time, not per request, and
# under callgrind a request takes ~50 times longer: counted, its rounds would weigh ~50 times what they
# do in a real run. Its rounds are left out of the count (the same in both builds).
PUBLISHER_EXCLUDED = ("--toggle-collect=frag::publish::Publisher::publish", "--collect-atstart=yes")

FEATURES = {
    "system": "",
    "jemalloc": "jemalloc",
    "mimalloc": "mimalloc",
    "snmalloc": "snmalloc",
}


# Set by main(): RUSTFLAGS and CARGO_TARGET_DIR of every build.
BUILD_ENV = {}


def target_dir():
    return BUILD_ENV["CARGO_TARGET_DIR"]


def run(cmd, env=None, quiet=True):
    e = dict(os.environ)
    e.update(BUILD_ENV)
    e.update(env or {})
    out = subprocess.run(cmd, cwd=ROOT, env=e, stdout=subprocess.PIPE if quiet else None,
                         stderr=subprocess.PIPE if quiet else None, text=True)
    if out.returncode != 0:
        sys.stderr.write(f"failed: {' '.join(cmd)}\n{out.stdout or ''}{out.stderr or ''}")
        sys.exit(2)
    return out


def build_workloads(backends):
    feats = sorted({FEATURES[b] for b in backends if FEATURES[b]})
    out = run(["cargo", "build", "--profile", PROFILE, "--bench", "instructions", "--no-default-features",
               "--message-format=json"] + (["--features", ",".join(feats)] if feats else []))
    for line in out.stdout.splitlines():
        if '"executable"' in line and "instructions" in line:
            m = re.search(r'"executable":"([^"]+)"', line)
            if m:
                return m.group(1)
    sys.exit("could not find the built instructions bench")


def callgrind(cmd, cache=False, extra=()):
    """Total events of one run: {'Ir': ..., 'D1mr': ...}."""
    with tempfile.NamedTemporaryFile(prefix="callgrind.", delete=False) as f:
        path = f.name
    try:
        vg = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={path}", "--dump-instr=no"] + list(extra)
        if cache:
            vg.append("--cache-sim=yes")
        run(vg + cmd)
        events, totals = None, None
        for line in open(path):
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("summary:") or line.startswith("totals:"):
                totals = [int(x) for x in line.split()[1:]]
        return dict(zip(events, totals))
    finally:
        os.unlink(path)


def per_op(cmd_for, lengths, cache=False, extra=()):
    a = callgrind(cmd_for(lengths[0]), cache, extra)
    b = callgrind(cmd_for(lengths[1]), cache, extra)
    n = lengths[1] - lengths[0]
    return {k: (b[k] - a[k]) / n for k in a}


# The service example's global allocator per variant (`examples/support/global_allocator.rs`).
VARIANTS = {"bare": "1", "tracked": "", "forward": "forward", "count": "count", "count-inline": "count-inline"}


def build_service(backend, variant):
    """The service example, release, with `variant`'s global allocator (only that differs)."""
    feats = ",".join(["serde"] + ([FEATURES[backend]] if FEATURES[backend] else []))
    env = {"FRAG_BARE_ALLOCATOR": VARIANTS[variant]}
    run(["cargo", "build", "--quiet", "--release", "--example", "service", "--no-default-features",
         "--features", feats], env)
    out_dir = os.path.join(ROOT, "target", "instructions")
    os.makedirs(out_dir, exist_ok=True)
    dest = os.path.join(out_dir, f"service-{backend}-{variant}")
    shutil.copy2(os.path.join(target_dir(), "release", "examples", "service"), dest)
    return dest


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backends", default="jemalloc,system")
    ap.add_argument("--no-service", action="store_true")
    ap.add_argument("--frame-pointers", action="store_true",
                    help="build with -C force-frame-pointers=yes (what allocation sites need)")
    ap.add_argument("--check", action="store_true", help="exit 1 when a budget is exceeded")
    ap.add_argument("--pair-budget", default=str(PAIR_BUDGET),
                    help=f"instructions added per pair: N, or backend=N,... (default {PAIR_BUDGET})")
    ap.add_argument("--miss-budget", type=float, default=CHURN_MISS_BUDGET,
                    help=f"relative L1 read misses added in churn (default {CHURN_MISS_BUDGET})")
    ap.add_argument("--service-budget", type=float, default=SERVICE_BUDGET,
                    help=f"relative instructions added per request (default {SERVICE_BUDGET})")
    ap.add_argument("--service-backends", default=None,
                    help="backends to count the service example on (default: --backends)")
    ap.add_argument("--floor", action="store_true",
                    help="also count the service with the floor wrappers of examples/support/floor.rs "
                         "(forwarding only; minimal exact per-class counter)")
    args = ap.parse_args()
    fp = args.frame_pointers
    BUILD_ENV["RUSTFLAGS"] = "-C force-frame-pointers=yes" if fp else ""
    BUILD_ENV["CARGO_TARGET_DIR"] = os.path.join(ROOT, "target", "instructions-build" + ("-fp" if fp else ""))
    print(f"build: {'with' if fp else 'without'} frame pointers ({BUILD_ENV['CARGO_TARGET_DIR']})\n")
    backends = [b for b in args.backends.split(",") if b]
    for b in backends:
        if b not in FEATURES:
            sys.exit(f"unknown backend {b}; one of {', '.join(FEATURES)}")

    pair_budget = {}
    for part in args.pair_budget.split(","):
        name, _, value = part.rpartition("=")
        pair_budget[name or "*"] = float(value)

    def budget_of(backend):
        return pair_budget.get(backend, pair_budget.get("*", PAIR_BUDGET))

    exe = build_workloads(backends)
    failures = []
    print(f"Instructions added by Tracked (callgrind, difference of two run lengths; budget +{args.pair_budget} per pair)\n")
    print("| backend | case | bare | tracked | added | added % |")
    print("|---|---|---|---|---|---|")
    for backend in backends:
        for size in PAIR_SIZES:
            r = {}
            for kind in ("bare", "tracked"):
                # The loop reuses one address, eligible for sampling (the cold path) in one process of
                # 64 (the key is drawn per process): the median of three measurements is the fast path.
                runs = sorted(per_op(lambda n: [exe, "pair", backend, kind, str(size), str(n)], PAIR_ITERS)["Ir"]
                              for _ in range(3 if kind == "tracked" else 1))
                r[kind] = runs[len(runs) // 2]
            added = r["tracked"] - r["bare"]
            print(f"| {backend} | pair {size} B | {r['bare']:.1f} | {r['tracked']:.1f} | {added:+.1f} | "
                  f"{100 * added / r['bare']:+.1f}% |", flush=True)
            if added > budget_of(backend):
                failures.append(f"{backend} pair {size} B: +{added:.1f} instructions > +{budget_of(backend):g}")
        r = {}
        for kind in ("bare", "tracked"):
            r[kind] = per_op(lambda n: [exe, "churn", backend, kind, str(n)], CHURN_STEPS, cache=True)
        added = r["tracked"]["Ir"] - r["bare"]["Ir"]
        print(f"| {backend} | churn step | {r['bare']['Ir']:.1f} | {r['tracked']['Ir']:.1f} | {added:+.1f} | "
              f"{100 * added / r['bare']['Ir']:+.1f}% |")
        mb, mt = r["bare"]["D1mr"], r["tracked"]["D1mr"]
        rel = (mt - mb) / mb if mb else 0.0
        print(f"| {backend} | churn L1d read misses | {mb:.3f} | {mt:.3f} | {mt - mb:+.3f} | {100 * rel:+.1f}% |",
              flush=True)
        if rel > args.miss_budget:
            failures.append(f"{backend} churn: L1 read misses {100 * rel:+.1f}% > +{100 * args.miss_budget:.0f}%")

    if not args.no_service:
        print("\nService example, instructions per request (--concurrency 8 --delay-ms 0; publisher rounds "
              "not counted)\n")
        print("| backend | bare | tracked | added % |")
        print("|---|---|---|---|")
        service_backends = backends if args.service_backends is None else \
            [b for b in args.service_backends.split(",") if b]
        variants = ["bare", "tracked"] + (["forward", "count", "count-inline"] if args.floor else [])
        for backend in service_backends:
            r = {}
            for variant in variants:
                exe_s = build_service(backend, variant)
                r[variant] = per_op(lambda n: [exe_s, "--load", str(n), "--concurrency", "8", "--delay-ms", "0"],
                                    SERVICE_LOAD, extra=PUBLISHER_EXCLUDED)["Ir"]
            rel = (r["tracked"] - r["bare"]) / r["bare"]
            print(f"| {backend} | {r['bare'] / 1e6:.3f} M | {r['tracked'] / 1e6:.3f} M | {100 * rel:+.2f}% |",
                  flush=True)
            for variant in variants[2:]:
                v = (r[variant] - r["bare"]) / r["bare"]
                print(f"| {backend}, floor: {variant} | {r['bare'] / 1e6:.3f} M | {r[variant] / 1e6:.3f} M | "
                      f"{100 * v:+.2f}% |", flush=True)
            if rel > args.service_budget:
                failures.append(f"{backend} service: {100 * rel:+.2f}% instructions per request > "
                                f"+{100 * args.service_budget:.0f}%")

    if failures:
        print("\nover budget:\n  " + "\n  ".join(failures))
        if args.check:
            sys.exit(1)
    else:
        print("\nwithin budget")


if __name__ == "__main__":
    main()
