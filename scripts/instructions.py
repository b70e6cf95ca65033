#!/usr/bin/env python3
"""Counts what `Tracked` adds to the allocation path, in instructions, under callgrind, in both tiers.

Every figure is the difference of two run lengths of the same workload (N2 - N1 operations), so the
process's start-up and tear-down cancel and what is left is the cost per operation, deterministic to
the instruction for the single-threaded cases: a regression check, not a timing.

- pair:    malloc + free of 16 B, 64 B and 1 KiB (align 8) on one thread, per pair;
- churn:   65,536 live blocks of random sizes 16..=1024 B, a random one freed and replaced per step:
           instructions and simulated L1 data read misses per step (free + malloc);
- service: the service example (JSON echo, bodies 1 to 64 KiB) driving itself, instructions per
           request, one build per global allocator, only that differing: the bare backend, `Tracked`
           sampled (production tier), `Tracked` exact, and on jemalloc jemalloc's own heap profiler
           (tikv-jemallocator's `profiling` feature, `prof:true,prof_active:true,lg_prof_sample:19`:
           one sample per 512 KiB, like `Tracked`'s sampler): the anchor. The publisher thread's rounds
           (per second, not per request) and the heap profile it takes half-way are not counted. The threads interleave differently from run
           to run, so the service is measured `--repeat` times per build and reported as the median
           with its range. `--floor` adds the floor wrappers of `examples/support/floor.rs` (to the service,
           and `SampleOnly`, the least any countdown-and-mark sampler does, to the churn). The stacks'
           cost is the stack walk's own count (`frag::sites::capture`, inclusive) per request in the
           sampled runs: deterministic, where two runs' totals move with the threads' interleaving;
           `--stacks-off` also runs the sampled build with `--no-stacks`, for the difference of totals.

Builds go to target/instructions-build/ (or `--target-dir`) without frame pointers (RUSTFLAGS set
empty): the build a service gets by default, where stacks come from the unwind tables.
`--frame-pointers` measures the build with `-C force-frame-pointers=yes` instead (the frame-pointer
walk; target/instructions-build-fp/). The two run lengths of each figure run side by side.

Usage:
    python3 scripts/instructions.py [--backends jemalloc,system] [--no-service] [--floor] [--check]
                                    [--frame-pointers] [--repeat N] [--salts N] [--no-pairs] [--target-dir DIR]

`--check` exits 1 when a budget is exceeded. Needs valgrind (CI installs it).
"""

import argparse
import concurrent.futures
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILE = "hotpath"

# Budgets (added by `Tracked` over the bare backend): the one place they are kept. CI runs the script
# with `--check` and no budget flags, so these are what CI enforces; docs/PERFORMANCE.md's cost sheet
# quotes them. Each is today's level plus the spread between builds of one source (the layout of a
# binary moves glibc's heap and the service's inlining).
# Exact tier, instructions per malloc + free pair: jemalloc +47 to +50, glibc +61 to +70, mimalloc
# +105 to +111 (its usable size is a call); a backend not named here is not judged.
PAIR_BUDGET = "jemalloc=55,system=75,mimalloc=115"
CHURN_MISS_BUDGET = 0.10  # exact tier: simulated L1 data read misses in churn, relative to bare
SAMPLED_MISS_BUDGET = 0.09  # sampled tier, the same (its samples' misses vary by run: +2 to +5%)
SERVICE_BUDGET = 0.055  # sampled tier: instructions per request, relative to bare (code layout: ±1 point)
STACKS_BUDGET = 0.003  # sampled tier: the stack walk per request, relative to bare (0.3 points)
EXACT_SERVICE_BUDGET = 0.12  # exact tier, the same as the sampled tier's (+5 to +9%)
# The churn loop in a real caller (`examples/churn.rs`), instructions added per step, caller included.
# Issue 48 asks +8 for the sampled tier; measured 2026-11-28 evening (docs/PERFORMANCE.md): +8.4 to
# +8.55 jemalloc at local medians, CI +8.8 jemalloc and +9.5 glibc, counted inside the loop's function
# only (start-up moved whole-process counts by up to 0.5 per step between runs). These guard what was
# reached, with the spread between runs of one commit (one binary's runs on jemalloc spread by up to
# 1.5 per step: its decay and thread-cache GC run by time).
# 2026-11-29, later, with the example's crate in one codegen unit (`CHURN_CODEGEN_UNITS`): the loop's
# own +4.33 on jemalloc and +4.06 on glibc, the whole step +5.1 to +7.2 on jemalloc (medians of 7)
# and +6.1 to +6.3 on glibc. The sampled budget is the issue's +8.
CALLER_BUDGET = {"sampled": {"jemalloc": 8.0, "system": 8.0}, "exact": {"jemalloc": 95.0, "system": 75.0}}
# A 32 KiB malloc + free pair, stacks on, sampled tier: a sample every 16.5 pairs at the default mean,
# so this is mostly a sample's cost, judged per pair at that rate. Issue 48 asks +150; measured
# 2026-11-28 on jemalloc: +139.8 (was +376 before samples of large classes came from the thread
# cache, +148.9 before the walk's last pass). The guard leaves the layout's and jemalloc's spread.
LARGE_PAIR = 32 << 10
LARGE_PAIR_BUDGET = 150.0
DEFAULT_MEAN = 512 << 10
TIERS = ("sampled", "exact")

PAIR_SIZES = [16, 64, 1024]
POLL_ITERS = (1_000_000, 2_000_000)
PAIR_ITERS = (200_000, 400_000)
CHURN_STEPS = (500_000, 1_500_000)
SERVICE_LOAD = (300, 600)
# The example's `frag::Publisher` thread runs a round every second of wall time, not per request, and
# under callgrind a request takes ~50 times longer: counted, its rounds would weigh ~50 times what they
# do in a real run. Its rounds are left out of the count (the same in both builds).
# So is the heap profile the example takes once, half-way through its load: in-process
# symbolization whose cost grows with the number of distinct stacks, so that counted, a longer run
# would seem to cost more per request where it only names more sites (with stacks off it names none).
# (Both functions are `#[inline(never)]` for this; `check_excluded` fails the run if a name is gone.)
EXCLUDED_FUNCTIONS = ("frag::publish::Publisher::publish_once", "frag::profile::go::Plan::answer")
PUBLISHER_EXCLUDED = tuple(f"--toggle-collect={f}" for f in EXCLUDED_FUNCTIONS) + ("--collect-atstart=yes",)


def check_excluded(exe, walks=False):
    """Each excluded function must be a function of its own in `exe`, or the toggle silently excludes
    nothing (as it did once, when the function it named was renamed); so must the stack walk the
    sampled runs count inclusive (`CAPTURE`, with `walks`), or its cost reads 0 (as it did once,
    inlined)."""
    out = subprocess.run(["nm", "-C", exe], stdout=subprocess.PIPE, text=True).stdout
    for name in EXCLUDED_FUNCTIONS + ((CAPTURE,) if walks else ()):
        if not any(line.endswith(" " + name) for line in out.splitlines()):
            sys.exit(f"{exe} has no function {name}: it would be counted" if name != CAPTURE else
                     f"{exe} has no function {name}: the stack walk's cost would read 0")

FEATURES = {
    "system": "",
    "jemalloc": "jemalloc",
    "mimalloc": "mimalloc",
    "snmalloc": "snmalloc",
}


# Set by main(): RUSTFLAGS and CARGO_TARGET_DIR of every build.
BUILD_ENV = {}
# The default build's OpenTelemetry memory probes (feature `usdt`), unless `--no-usdt`: what a user's
# build carries.
EXTRA_FEATURES = ["usdt"]


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
    feats = sorted({FEATURES[b] for b in backends if FEATURES[b]} | set(EXTRA_FEATURES))
    out = run(["cargo", "build", "--profile", PROFILE, "--bench", "instructions", "--no-default-features",
               "--message-format=json"] + (["--features", ",".join(feats)] if feats else []))
    for line in out.stdout.splitlines():
        if '"executable"' in line and "instructions" in line:
            m = re.search(r'"executable":"([^"]+)"', line)
            if m:
                return m.group(1)
    sys.exit("could not find the built instructions bench")


# Pairs and churn guard the allocation path itself: they run with stack capture off (the bench's
# `FRAG_NO_STACKS`), as they did when builds without frame pointers had no stacks; the walk has its
# own guard below, on the service.
PATH_ONLY = {"FRAG_NO_STACKS": "1"}

# The stack walk of a sampled allocation, inclusive: its instructions per request are the unwinder's
# cost, counted whatever the threads' interleaving (which moves a whole run's count by 0.3-0.5%).
CAPTURE = "frag::sites::capture"
# The stack walk when jemalloc samples: the backtrace hook (`src/hooked/hooks.rs`), inclusive.
HOOK_WALK = "frag::hooked::hooks::backtrace"


def functions(path, inclusive=False):
    """Every function's instructions in a callgrind output, as (name, Ir) in callgrind_annotate's
    order: each its own alone, or with `inclusive` everything it called too."""
    out = subprocess.run(["callgrind_annotate", f"--inclusive={'yes' if inclusive else 'no'}", "--threshold=100", path],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    found = []
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+\S*?:(.*?) \[", line)
        if m:
            found.append((m.group(2), int(m.group(1).replace(",", ""))))
    return found


def inclusive(path, name, inclusive=True):
    """The inclusive instructions of function `name` in a callgrind output (0 if it never ran); its
    own alone with `inclusive=False`."""
    return next((ir for function, ir in functions(path, inclusive) if function == name), 0)


def calls_to(path, name):
    """How many calls a callgrind output records to the function named `name` (from any caller)."""
    names, target, calls = {}, False, 0
    for line in open(path):
        m = re.match(r"(c?)fn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
        if m:
            if m.group(3):
                names[m.group(2)] = m.group(3)
            target = bool(m.group(1)) and names.get(m.group(2), "").endswith(name)
            continue
        m = re.match(r"calls=(\d+)", line)
        if m and target:
            calls += int(m.group(1))
    return calls


def callgrind(cmd, cache=False, extra=(), env=None, functions=(), own=(), calls=()):
    """Total events of one run: {'Ir': ..., 'D1mr': ...}, the inclusive Ir of each of `functions`
    under its name, the Ir of each of `own`'s functions alone under `own:<name>`, and the calls to
    each of `calls` under `calls:<name>`."""
    with tempfile.NamedTemporaryFile(prefix="callgrind.", delete=False) as f:
        path = f.name
    try:
        vg = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={path}", "--dump-instr=no"] + list(extra)
        if cache:
            vg.append("--cache-sim=yes")
        run(vg + cmd, env)
        events, totals = None, None
        for line in open(path):
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("summary:") or line.startswith("totals:"):
                totals = [int(x) for x in line.split()[1:]]
        result = dict(zip(events, totals))
        for name in functions:
            result[name] = inclusive(path, name)
        for name in own:
            result[f"own:{name}"] = inclusive(path, name, inclusive=False)
        for name in calls:
            result[f"calls:{name}"] = calls_to(path, name)
        return result
    finally:
        os.unlink(path)


def per_op(cmd_for, lengths, cache=False, extra=(), env=None, functions=(), own=(), calls=()):
    """Per operation: the difference of the two run lengths' counts over the difference of lengths.
    The two runs go side by side (callgrind runs one thread at a time, and its counts, simulated
    cache included, do not depend on what else the machine runs)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        a, b = pool.map(lambda n: callgrind(cmd_for(n), cache, extra, env, functions, own, calls), lengths)
    n = lengths[1] - lengths[0]
    return {k: (b[k] - a[k]) / n for k in a}


# The service example's global allocator per variant (`examples/support/global_allocator.rs`).
VARIANTS = {"bare": "1", "sampled": "", "sampled-nostacks": "", "sampled-scoped": "", "exact": "exact", "jeprof": "1",
            "in-jemalloc": "in-jemalloc", "forward": "forward", "count": "count",
            "count-inline": "count-inline", "sample-only": "sample-only",
            "count-sample": "count-sample"}
# jemalloc's own heap profiler: the bare backend built with profiling, sampling one per 512 KiB.
JEPROF_ENV = {"_RJEM_MALLOC_CONF": "prof:true,prof_active:true,lg_prof_sample:19"}


def example_features(backend):
    """The features every example build of this script (and `scripts/zoo.py`) takes on `backend`:
    one set, so that the service, the churn and the zoo share one build of the library per profile."""
    return ["serde", "tokio"] + ([FEATURES[backend]] if FEATURES[backend] else []) + EXTRA_FEATURES


def build_service(backend, variant, salt=0):
    """The service example, release, with `variant`'s global allocator (only that differs). A non-zero
    `salt` adds `-C metadata=salt<N>` to the example crate alone: its symbol hashes, and so how rustc
    splits it into codegen units and what gets inlined where, change; its source and its dependencies
    do not. The spread over salts is the build-to-build spread a service delta carries."""
    if variant in ("sampled-nostacks", "sampled-scoped"):
        variant = "sampled"  # the same build, run with --no-stacks or --scoped
    feats = example_features(backend)
    if variant == "jeprof":
        feats.append("tikv-jemallocator/profiling")
    if variant == "in-jemalloc":
        feats.append("jemalloc-prof")
    env = {"FRAG_BARE_ALLOCATOR": VARIANTS[variant]}
    run(["cargo", "rustc", "--quiet", "--release", "--example", "service", "--no-default-features",
         "--features", ",".join(feats)] + (["--", "-C", f"metadata=salt{salt}"] if salt else []), env)
    out_dir = os.path.join(ROOT, "target", "instructions")
    os.makedirs(out_dir, exist_ok=True)
    dest = os.path.join(out_dir, f"service-{backend}-{variant}-{salt}")
    shutil.copy2(os.path.join(target_dir(), "release", "examples", "service"), dest)
    check_excluded(dest, walks=variant == "sampled")
    return dest


def build_churn(backend, variant):
    """The churn example (`examples/churn.rs`), release, with `variant`'s global allocator inlined
    into its loop, as into any caller's, the example's crate in one codegen unit
    (`CHURN_CODEGEN_UNITS`). The service's features, so that both share one build of the library."""
    feats = example_features(backend)
    run(["cargo", "rustc", "--quiet", "--release", "--example", "churn", "--no-default-features",
         "--features", ",".join(feats), "--", "-C", f"codegen-units={CHURN_CODEGEN_UNITS}"],
        {"FRAG_BARE_ALLOCATOR": VARIANTS[variant]})
    out_dir = os.path.join(ROOT, "target", "instructions")
    os.makedirs(out_dir, exist_ok=True)
    dest = os.path.join(out_dir, f"churn-{backend}-{variant}")
    shutil.copy2(os.path.join(target_dir(), "release", "examples", "churn"), dest)
    return dest


# The churn example's loop, the caller the allocator is inlined into; and its run lengths.
CHURN_CALLER = "churn::churn"
CALLER_STEPS = (1_000_000, 2_000_000)
# Runs of the bare and sampled builds, whose counts move between runs on jemalloc (its decay runs by
# wall time, and under callgrind a step takes ~50 times as long): the medians are judged. Medians of
# 3 moved by up to 0.9 a step between batches; each run is a couple of seconds.
CALLER_REPEATS = 7
# The example's own crate is built in one codegen unit. In release's 16, whether its set-up loop
# (`collect`) is inlined into `churn::churn` depends on which unit rustc puts each function in, and
# that moves with the size of every function the crate instantiates, the allocator's included: two
# builds of one loop differed by 2 instructions a step (the loop's random state in memory or in a
# register) after changes that did not touch the allocation path. docs/PERFORMANCE.md, "Why
# codegen units move the churn".
CHURN_CODEGEN_UNITS = 1


def frag_unwinder():
    return "frame pointers" if BUILD_ENV.get("RUSTFLAGS") else "unwind tables"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backends", default="jemalloc,system")
    ap.add_argument("--no-service", action="store_true")
    ap.add_argument("--frame-pointers", action="store_true",
                    help="build with -C force-frame-pointers=yes (what allocation sites need)")
    ap.add_argument("--check", action="store_true", help="exit 1 when a budget is exceeded")
    ap.add_argument("--pair-budget", default=str(PAIR_BUDGET),
                    help=f"exact tier: instructions added per pair: N, or backend=N,... (default {PAIR_BUDGET})")
    ap.add_argument("--miss-budget", type=float, default=CHURN_MISS_BUDGET,
                    help=f"exact tier: relative L1 read misses added in churn (default {CHURN_MISS_BUDGET})")
    ap.add_argument("--sampled-miss-budget", type=float, default=SAMPLED_MISS_BUDGET,
                    help=f"sampled tier: relative L1 read misses added in churn (default {SAMPLED_MISS_BUDGET})")
    ap.add_argument("--service-budget", type=float, default=SERVICE_BUDGET,
                    help=f"sampled tier: relative instructions added per request (default {SERVICE_BUDGET})")
    ap.add_argument("--exact-service-budget", type=float, default=EXACT_SERVICE_BUDGET,
                    help=f"exact tier: relative instructions added per request (default {EXACT_SERVICE_BUDGET})")
    ap.add_argument("--stacks-budget", type=float, default=STACKS_BUDGET,
                    help=f"sampled tier: the stack walk's instructions per request ({CAPTURE}, inclusive), "
                         f"relative to bare (default {STACKS_BUDGET})")
    ap.add_argument("--stacks-off", action="store_true",
                    help="also run the sampled build with --no-stacks (the same build without its stacks)")
    ap.add_argument("--salts", type=int, default=1,
                    help="builds of the service per allocator, each with its own -C metadata salt on the example "
                         "crate (median and range over all builds and runs; default 1)")
    ap.add_argument("--no-pairs", action="store_true", help="skip the pair and churn workloads")
    ap.add_argument("--scoped", action="store_true",
                    help="also count the service with each request in a tenant's scope, and a scoped poll")
    ap.add_argument("--repeat", type=int, default=3,
                    help="callgrind runs of the service per build (median and range reported; default 3)")
    ap.add_argument("--service-backends", default=None,
                    help="backends to count the service example on (default: --backends)")
    ap.add_argument("--target-dir", default=None,
                    help="the builds' target directory (default target/instructions-build, or -fp): CI shares its "
                         "release builds' one, so that the dependencies are built once")
    ap.add_argument("--floor", action="store_true",
                    help="also count the service with the floor wrappers of examples/support/floor.rs "
                         "(forwarding only; minimal exact per-class counter)")
    ap.add_argument("--no-usdt", action="store_true",
                    help="build without the OpenTelemetry memory probes (the `usdt` feature, on by default)")
    args = ap.parse_args()
    if args.no_usdt:
        EXTRA_FEATURES.clear()
    fp = args.frame_pointers
    BUILD_ENV["RUSTFLAGS"] = "-C force-frame-pointers=yes" if fp else ""
    BUILD_ENV["CARGO_TARGET_DIR"] = args.target_dir or os.path.join(ROOT, "target",
                                                                  "instructions-build" + ("-fp" if fp else ""))
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
        return pair_budget.get(backend, pair_budget.get("*", float("inf")))

    failures = []
    exe = None if args.no_pairs else build_workloads(backends)
    print(f"Instructions added by Tracked (callgrind, difference of two run lengths; exact-tier budget "
          f"+{args.pair_budget} per pair; stack capture off: the allocation path alone)\n")
    print("| backend | case | bare | sampled | added | exact | added |")
    print("|---|---|---|---|---|---|---|")
    for backend in backends if exe else []:
        for size in PAIR_SIZES:
            floors = ("floor", "floor-exact") if args.floor and backend in ("jemalloc", "system") else ()
            r = {kind: per_op(lambda n: [exe, "pair", backend, kind, str(size), str(n)], PAIR_ITERS,
                              env=PATH_ONLY)["Ir"]
                 for kind in ("bare",) + TIERS + floors}
            print(f"| {backend} | pair {size} B | {r['bare']:.1f} | {r['sampled']:.1f} | "
                  f"{r['sampled'] - r['bare']:+.1f} | {r['exact']:.1f} | {r['exact'] - r['bare']:+.1f} |", flush=True)
            if floors:
                print(f"| {backend} | pair {size} B, floors `SampleOnly` / `CountInline<SampleOnly>` | | "
                      f"{r['floor']:.1f} | {r['floor'] - r['bare']:+.1f} | {r['floor-exact']:.1f} | "
                      f"{r['floor-exact'] - r['bare']:+.1f} |", flush=True)
            added = r["exact"] - r["bare"]
            if added > budget_of(backend):
                failures.append(f"{backend} pair {size} B, exact: +{added:.1f} instructions > +{budget_of(backend):g}")
        r = {kind: per_op(lambda n: [exe, "pair", backend, kind, str(LARGE_PAIR), str(n)], PAIR_ITERS,
                          calls=(CAPTURE,))
             for kind in ("bare",) + TIERS}
        # Where the samples fall moves a run's count by a few instructions per pair: the added
        # instructions per sample (the stack captures counted), and per pair at the mean's rate.
        every = 1 / (1 - math.exp(-LARGE_PAIR / DEFAULT_MEAN))
        at_rate = {}
        for kind in TIERS:
            added = r[kind]["Ir"] - r["bare"]["Ir"]
            samples = r[kind][f"calls:{CAPTURE}"]
            at_rate[kind] = added / samples / every if samples else added
        print(f"| {backend} | pair {LARGE_PAIR >> 10} KiB, stacks on: per pair at a sample every {every:.1f} "
              f"(per sample) | {r['bare']['Ir']:.1f} | | {at_rate['sampled']:+.1f} "
              f"({at_rate['sampled'] * every:.0f}) | | {at_rate['exact']:+.1f} ({at_rate['exact'] * every:.0f}) |",
              flush=True)
        if backend == "jemalloc" and at_rate["sampled"] > LARGE_PAIR_BUDGET:
            failures.append(f"{backend} pair {LARGE_PAIR >> 10} KiB, sampled: +{at_rate['sampled']:.1f} "
                            f"instructions per pair at the mean's rate > +{LARGE_PAIR_BUDGET:g}")
        r = {kind: per_op(lambda n: [exe, "churn", backend, kind, str(n)], CHURN_STEPS, cache=True, env=PATH_ONLY)
             for kind in ("bare",) + TIERS}
        print(f"| {backend} | churn step | {r['bare']['Ir']:.1f} | {r['sampled']['Ir']:.1f} | "
              f"{r['sampled']['Ir'] - r['bare']['Ir']:+.1f} | {r['exact']['Ir']:.1f} | "
              f"{r['exact']['Ir'] - r['bare']['Ir']:+.1f} |")
        mb = r["bare"]["D1mr"]
        rel = {t: (r[t]["D1mr"] - mb) / mb if mb else 0.0 for t in TIERS}
        print(f"| {backend} | churn L1d read misses | {mb:.3f} | {r['sampled']['D1mr']:.3f} | "
              f"{100 * rel['sampled']:+.1f}% | {r['exact']['D1mr']:.3f} | {100 * rel['exact']:+.1f}% |", flush=True)
        if args.floor and backend in ("jemalloc", "system"):
            f = per_op(lambda n: [exe, "churn", backend, "floor", str(n)], CHURN_STEPS, cache=True, env=PATH_ONLY)
            print(f"| {backend} | churn, floor `SampleOnly` (instructions / L1d read misses) | | "
                  f"{f['Ir']:.1f} / {f['D1mr']:.3f} | {f['Ir'] - r['bare']['Ir']:+.1f} / "
                  f"{100 * (f['D1mr'] - mb) / mb:+.1f}% | | |", flush=True)
        for tier, budget in (("sampled", args.sampled_miss_budget), ("exact", args.miss_budget)):
            if rel[tier] > budget:
                failures.append(f"{backend} churn, {tier}: L1 read misses {100 * rel[tier]:+.1f}% > "
                                f"+{100 * budget:.1f}%")

    if exe:
        print(f"\nThe churn loop in a real caller (`examples/churn.rs`: 65,536 live blocks, each step frees one "
              f"at random and allocates 16 B-1 KiB; the global allocator inlined into the loop; stacks on; "
              f"the example's crate in {CHURN_CODEGEN_UNITS} codegen unit), "
              f"instructions per step, and the loop's own (`{CHURN_CALLER}`)\n")
        print("| backend | allocator | per step | added | the loop's own | added |")
        print("|---|---|---|---|---|---|")
        for backend in backends:
            rows = {}
            for variant in ("bare", "forward", "sampled", "exact"):
                churn = build_churn(backend, variant)
                # Counted inside the loop's function only: start-up (frag's tables, the reallocations
                # of its own sampled blocks there) moves a whole process's count between runs. The
                # bare and sampled builds still move by up to 0.6 per step between runs of one binary
                # on jemalloc (its decay and thread-cache GC run by time; where the samples fall):
                # the median of CALLER_REPEATS differences, the range beside it.
                repeats = [per_op(lambda n: [churn, str(n)], CALLER_STEPS, own=(CHURN_CALLER,),
                                  extra=(f"--toggle-collect={CHURN_CALLER}",))
                           for _ in range(CALLER_REPEATS if variant in ("bare", "sampled") else 1)]
                repeats.sort(key=lambda r: r["Ir"])
                rows[variant] = repeats[len(repeats) // 2]
                r, b = rows[variant], rows["bare"]
                own = f"own:{CHURN_CALLER}"
                spread = f" [{repeats[0]['Ir']:.1f}, {repeats[-1]['Ir']:.1f}]" if len(repeats) > 1 else ""
                print(f"| {backend} | {variant} | {r['Ir']:.1f}{spread} | {r['Ir'] - b['Ir']:+.1f} | {r[own]:.1f} | "
                      f"{r[own] - b[own]:+.1f} |", flush=True)
                added = r['Ir'] - b['Ir']
                budget = CALLER_BUDGET.get(variant, {}).get(backend)
                if budget is not None and added > budget:
                    failures.append(f"{backend} churn in a real caller, {variant}: +{added:.1f} instructions per "
                                    f"step > +{budget:g}")

    if exe and args.scoped:
        r = {kind: per_op(lambda n: [exe, "poll", kind, str(n)], POLL_ITERS, env=PATH_ONLY)["Ir"]
             for kind in ("plain", "scoped")}
        print(f"\nA poll in a scope (`fut.in_scope(scope)`): {r['scoped']:.1f} instructions against "
              f"{r['plain']:.1f} for the bare future: {r['scoped'] - r['plain']:+.1f} per poll", flush=True)

    if not args.no_service:
        print(f"\nService example, instructions per request (--concurrency 8 --delay-ms 0; publisher rounds "
              f"and the half-way heap profile not counted; median of {args.repeat} runs of each of {args.salts} builds, range in brackets)\n")
        print("| backend | allocator | per request | added |")
        print("|---|---|---|---|")
        service_backends = backends if args.service_backends is None else \
            [b for b in args.service_backends.split(",") if b]
        for backend in service_backends:
            variants = ["bare", "sampled"] + (["sampled-nostacks"] if args.stacks_off else []) + \
                (["sampled-scoped"] if args.scoped else []) + ["exact"] + \
                (["jeprof", "in-jemalloc"] if backend == "jemalloc" else []) + \
                (["forward", "count", "count-inline", "sample-only", "count-sample"] if args.floor else [])
            r = {}
            walks = []
            hook_walks = []
            for variant in variants:
                env = JEPROF_ENV if variant == "jeprof" else {}
                runs = []
                for salt in range(max(1, args.salts)):
                    exe_s = build_service(backend, variant, salt)
                    flags = {"sampled-nostacks": ["--no-stacks"], "sampled-scoped": ["--scoped"]}.get(variant, [])
                    for _ in range(max(1, args.repeat)):
                        counts = per_op(lambda n: [exe_s, "--load", str(n), "--concurrency", "8", "--delay-ms", "0"]
                                        + flags, SERVICE_LOAD, extra=PUBLISHER_EXCLUDED, env=env,
                                        functions=(CAPTURE,) if variant == "sampled" else
                                        (HOOK_WALK,) if variant == "in-jemalloc" else ())
                        runs.append(counts["Ir"])
                        if variant == "sampled":
                            walks.append(counts[CAPTURE])
                        if variant == "in-jemalloc":
                            hook_walks.append(counts[HOOK_WALK])
                runs.sort()
                r[variant] = (runs[len(runs) // 2], runs[0], runs[-1])
            bare = r["bare"][0]
            names = {"bare": "bare", "sampled": "Tracked (sampled)",
                     "sampled-nostacks": "Tracked (sampled), stacks off",
                     "sampled-scoped": "Tracked (sampled), each request in one of three tenants' scopes (`--scoped`)",
                     "exact": "Tracked<_, Exact>",
                     "jeprof": "jemalloc's own profiler",
                     "in-jemalloc": "bare, sampled inside jemalloc (`frag::sample_in_jemalloc`)", "forward": "floor: forward", "count": "floor: count",
                     "count-inline": "floor: count-inline", "sample-only": "floor: sample-only",
                     "count-sample": "floor: count-inline over sample-only"}
            for variant in variants:
                med, lo, hi = r[variant]
                added = "—" if variant == "bare" else \
                    f"{100 * (med - bare) / bare:+.2f}% [{100 * (lo - bare) / bare:+.2f}, {100 * (hi - bare) / bare:+.2f}]"
                print(f"| {backend} | {names[variant]} | {med / 1e6:.3f} M [{lo / 1e6:.3f}, {hi / 1e6:.3f}] | {added} |",
                      flush=True)
            walks.sort()
            walk = walks[len(walks) // 2]
            stacks = walk / bare
            print(f"| {backend} | stacks ({frag_unwinder()}): `{CAPTURE}` inclusive, in the sampled runs | "
                  f"{walk / 1e3:.1f} k [{walks[0] / 1e3:.1f}, {walks[-1] / 1e3:.1f}] | {100 * stacks:+.2f} points |")
            if hook_walks:
                hook_walks.sort()
                hw = hook_walks[len(hook_walks) // 2]
                print(f"| {backend} | stacks inside jemalloc: `{HOOK_WALK}` inclusive | {hw / 1e3:.1f} k | "
                      f"{100 * hw / bare:+.2f} points |")
                if hw / bare > args.stacks_budget:
                    failures.append(f"{backend} service, stacks inside jemalloc: {100 * hw / bare:+.2f} points > "
                                    f"+{100 * args.stacks_budget:.1f}")
            if "in-jemalloc" in r and r["in-jemalloc"][0] >= r["jeprof"][0]:
                failures.append(f"{backend} service: sampling inside jemalloc ({r['in-jemalloc'][0] / 1e6:.3f} M per "
                                f"request) is not below jemalloc's own profiler ({r['jeprof'][0] / 1e6:.3f} M)")
            if "sampled-scoped" in r:
                scoped = (r["sampled-scoped"][0] - r["sampled"][0]) / bare
                print(f"| {backend} | scopes: sampled with --scoped over the same build without | | "
                      f"{100 * scoped:+.2f} points |")
            if "sampled-nostacks" in r:
                off = (r["sampled"][0] - r["sampled-nostacks"][0]) / bare
                print(f"| {backend} | stacks: sampled over the same build with --no-stacks (medians of separate "
                      f"runs: moves with the interleaving) | | {100 * off:+.2f} points |")
            if stacks > args.stacks_budget:
                failures.append(f"{backend} service, stacks: {100 * stacks:+.2f} points > +{100 * args.stacks_budget:.1f}")
            for tier, budget in (("sampled", args.service_budget), ("exact", args.exact_service_budget)):
                rel = (r[tier][0] - bare) / bare
                if rel > budget:
                    failures.append(f"{backend} service, {tier}: {100 * rel:+.2f}% instructions per request > "
                                    f"+{100 * budget:.1f}%")

    verdict(failures, args.check)


def verdict(failures, check):
    """Prints the budgets a run went over, or that it kept them; exits 1 on one over with `check`."""
    if failures:
        print("\nover budget:\n  " + "\n  ".join(failures))
        if check:
            sys.exit(1)
    else:
        print("\nwithin budget")


if __name__ == "__main__":
    main()
