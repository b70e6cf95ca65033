//! Cost of `Tracked<X>` against bare `X`, measured in the same run: malloc + free pairs at 16 B, 64 B,
//! 1 KiB and 32 KiB, on 1 and 2 threads, for every backend compiled in; `Tracked` runs with origin
//! sampling at its default rate, and once more at one sample per 64 KiB (the densest the sampled tier
//! takes). A
//! producer/consumer case measures blocks allocated on one thread and freed on another. One more:
//! `frag::reclaim::idle` when the reclaimer has asked nothing.
//!
//! `cargo bench --bench overhead --all-features` prints two tables at the end:
//! - criterion's median per benchmark, as ratios of tracked to bare;
//! - a paired measurement: bare and tracked alternate in short rounds and the table shows the median
//!   of the per-round ratios, which cancels the clock-speed drift of a shared machine that separate
//!   criterion runs (seconds apart) pick up.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use frag::Tracked;

/// Must match the sizes `compare` instantiates.
const SIZES: [usize; 4] = [16, 64, 1024, 32 << 10];
const THREADS: [usize; 2] = [1, 2];

/// `iters` malloc + free pairs of `SIZE` bytes on each of `threads` threads, timed from a common start;
/// returns the slowest thread's time, so the figure is "time per pair per thread" under contention.
///
/// The size is a compile-time constant, as it is for `Box::new` and most small allocations, so the
/// size-class computation folds away for both sides alike.
fn pairs<A: GlobalAlloc + Sync, const SIZE: usize>(alloc: &A, threads: usize, iters: u64) -> Duration {
    let layout = match Layout::from_size_align(SIZE, 8) {
        Ok(l) => l,
        Err(_) => return Duration::ZERO,
    };
    let run = || {
        let start = Instant::now();
        for _ in 0..iters {
            // SAFETY: non-zero size, valid alignment; the block is freed with the same layout.
            unsafe {
                let p = alloc.alloc(layout);
                black_box(p);
                alloc.dealloc(p, layout);
            }
        }
        start.elapsed()
    };
    if threads == 1 {
        return run();
    }
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    run()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_default()).max().unwrap_or_default()
    })
}

fn compare_size<A: GlobalAlloc + Sync + 'static, const SIZE: usize>(
    c: &mut Criterion,
    name: &str,
    bare: &A,
    tracked: &Tracked<A>,
) {
    for threads in THREADS {
        let mut g = c.benchmark_group(format!("pair/{name}/{SIZE}B/{threads}t"));
        g.bench_function(BenchmarkId::from_parameter("bare"), |b| {
            b.iter_custom(|iters| pairs::<A, SIZE>(bare, threads, iters))
        });
        g.bench_function(BenchmarkId::from_parameter("tracked"), |b| {
            b.iter_custom(|iters| pairs::<Tracked<A>, SIZE>(tracked, threads, iters))
        });
        if threads == 1 {
            dense(|| {
                g.bench_function(BenchmarkId::from_parameter("dense_64k"), |b| {
                    b.iter_custom(|iters| pairs::<Tracked<A>, SIZE>(tracked, threads, iters))
                });
            });
        }
        g.finish();
    }
}

/// Runs `f` at the densest sampling the sampled tier takes (one sample per 64 KiB: below that blocks
/// would not be marked, which needs the exact tier), then restores the default.
fn dense(f: impl FnOnce()) {
    frag::set_sampling(frag::Sampling::MeanBytes(64 << 10)).expect("the sampled tier samples at 64 KiB");
    f();
    frag::set_sampling(frag::Sampling::DEFAULT).ok();
}

/// `iters` blocks of `SIZE` bytes allocated on one thread and freed on another, handed over in
/// batches of 256 through a channel; returns the total time (per block: the producer's and the
/// consumer's work, overlapped).
fn handoff<A: GlobalAlloc + Sync, const SIZE: usize>(alloc: &A, iters: u64) -> Duration {
    const BATCH: usize = 256;
    let Ok(layout) = Layout::from_size_align(SIZE, 8) else { return Duration::ZERO };
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<usize>>(64);
    let (back_tx, back_rx) = std::sync::mpsc::channel::<Vec<usize>>();
    // Batch vectors circulate, so the channel carries no allocations of its own after warm-up.
    for _ in 0..64 {
        back_tx.send(Vec::with_capacity(BATCH)).ok();
    }
    let start = Instant::now();
    std::thread::scope(|s| {
        let back_tx = back_tx.clone();
        s.spawn(move || {
            for mut batch in rx {
                for p in batch.drain(..) {
                    // SAFETY: allocated below with `layout`, freed once.
                    unsafe { alloc.dealloc(p as *mut u8, layout) };
                }
                if back_tx.send(batch).is_err() {
                    break;
                }
            }
        });
        let mut left = iters as usize;
        while left > 0 {
            let Ok(mut batch) = back_rx.recv() else { break };
            for _ in 0..left.min(BATCH) {
                // SAFETY: non-zero size, valid alignment; freed by the consumer with `layout`.
                batch.push(unsafe { alloc.alloc(layout) } as usize);
            }
            left -= batch.len();
            if tx.send(batch).is_err() {
                break;
            }
        }
        drop(tx);
    });
    start.elapsed()
}

fn compare_handoff<A: GlobalAlloc + Sync + 'static, const SIZE: usize>(
    c: &mut Criterion,
    name: &str,
    bare: &A,
    tracked: &Tracked<A>,
) {
    let mut g = c.benchmark_group(format!("handoff/{name}/{SIZE}B"));
    g.bench_function(BenchmarkId::from_parameter("bare"), |b| b.iter_custom(|iters| handoff::<A, SIZE>(bare, iters)));
    g.bench_function(BenchmarkId::from_parameter("tracked"), |b| {
        b.iter_custom(|iters| handoff::<Tracked<A>, SIZE>(tracked, iters))
    });
    g.finish();
}

fn compare<A: GlobalAlloc + Sync + 'static>(c: &mut Criterion, name: &str, bare: &A, tracked: &Tracked<A>) {
    compare_size::<A, 16>(c, name, bare, tracked);
    compare_size::<A, 64>(c, name, bare, tracked);
    compare_size::<A, 1024>(c, name, bare, tracked);
    compare_size::<A, 32768>(c, name, bare, tracked);
    compare_handoff::<A, 64>(c, name, bare, tracked);
    compare_handoff::<A, 16384>(c, name, bare, tracked);
}

/// Median of per-round ratios: `rounds` rounds, each timing `bare` then `tracked` on the same work.
fn paired(rounds: usize, mut bare: impl FnMut() -> Duration, mut tracked: impl FnMut() -> Duration) -> (f64, f64, f64) {
    let mut r: Vec<(f64, f64)> = (0..rounds).map(|_| (bare().as_secs_f64(), tracked().as_secs_f64())).collect();
    let mut ratios: Vec<f64> = r.iter().map(|(b, t)| t / b).collect();
    ratios.sort_by(f64::total_cmp);
    r.sort_by(|x, y| x.0.total_cmp(&y.0));
    let bare_median = r[rounds / 2].0;
    r.sort_by(|x, y| x.1.total_cmp(&y.1));
    (bare_median, r[rounds / 2].1, ratios[rounds / 2])
}

const PAIRED_ROUNDS: usize = 21;
const PAIRED_ITERS: u64 = 200_000;

/// Prints one row of the paired table: `bare` and `tracked` each time `PAIRED_ITERS` operations.
fn paired_row(
    name: &str,
    case: &str,
    threads: usize,
    bare: impl FnMut() -> Duration,
    tracked: impl FnMut() -> Duration,
) {
    let (b, t, ratio) = paired(PAIRED_ROUNDS, bare, tracked);
    let ns = |d: f64| d * 1e9 / PAIRED_ITERS as f64;
    println!("| {name} | {case} | {threads} | {:.2} | {:.2} | {ratio:.3} | {:+.2} |", ns(b), ns(t), ns(t) - ns(b));
}

fn paired_rows<A: GlobalAlloc + Sync + 'static, const SIZE: usize>(name: &str, bare: &A, tracked: &Tracked<A>) {
    for threads in THREADS {
        paired_row(
            name,
            &format!("pair {SIZE} B"),
            threads,
            || pairs::<A, SIZE>(bare, threads, PAIRED_ITERS),
            || pairs::<Tracked<A>, SIZE>(tracked, threads, PAIRED_ITERS),
        );
    }
    if SIZE == 64 || SIZE == 16384 {
        paired_row(
            name,
            &format!("handoff {SIZE} B"),
            2,
            || handoff::<A, SIZE>(bare, PAIRED_ITERS),
            || handoff::<Tracked<A>, SIZE>(tracked, PAIRED_ITERS),
        );
    }
}

fn paired_table<A: GlobalAlloc + Sync + 'static>(name: &str, bare: &A, tracked: &Tracked<A>) {
    paired_rows::<A, 16>(name, bare, tracked);
    paired_rows::<A, 64>(name, bare, tracked);
    paired_rows::<A, 1024>(name, bare, tracked);
    paired_rows::<A, 16384>(name, bare, tracked);
    paired_rows::<A, 32768>(name, bare, tracked);
}

static SYSTEM: Tracked<System> = Tracked::new(System);
#[cfg(feature = "jemalloc")]
static JEMALLOC: Tracked<tikv_jemallocator::Jemalloc> = Tracked::new(tikv_jemallocator::Jemalloc);
#[cfg(feature = "mimalloc")]
static MIMALLOC: Tracked<mimalloc::MiMalloc> = Tracked::new(mimalloc::MiMalloc);
#[cfg(feature = "snmalloc")]
static SNMALLOC: Tracked<snmalloc_rs::SnMalloc> = Tracked::new(snmalloc_rs::SnMalloc);

/// The backend `Select` picks with `FRAG_ALLOCATOR` unset, as a fixed type.
#[cfg(feature = "jemalloc")]
type DefaultBackend = tikv_jemallocator::Jemalloc;
#[cfg(feature = "jemalloc")]
const DEFAULT_BACKEND: DefaultBackend = tikv_jemallocator::Jemalloc;
#[cfg(not(feature = "jemalloc"))]
type DefaultBackend = System;
#[cfg(not(feature = "jemalloc"))]
const DEFAULT_BACKEND: DefaultBackend = System;

static TRACKED_DEFAULT: Tracked<DefaultBackend> = Tracked::new(DEFAULT_BACKEND);
static TRACKED_SELECT: Tracked<frag::Select> = Tracked::new(frag::Select::new());

/// `Select`'s run-time dispatch against the fixed backend it picks, bare and inside `Tracked` (where
/// the backend's kind is a run-time value too). Run without `FRAG_ALLOCATOR`, so both sides are the
/// same allocator.
fn compare_select(c: &mut Criterion) {
    let select = frag::Select::new();
    let name = select.backend().name();
    let mut g = c.benchmark_group(format!("select/{name}/64B/1t"));
    g.bench_function(BenchmarkId::from_parameter("fixed"), |b| {
        b.iter_custom(|iters| pairs::<DefaultBackend, 64>(&DEFAULT_BACKEND, 1, iters))
    });
    g.bench_function(BenchmarkId::from_parameter("select"), |b| {
        b.iter_custom(|iters| pairs::<frag::Select, 64>(&select, 1, iters))
    });
    g.bench_function(BenchmarkId::from_parameter("tracked-fixed"), |b| {
        b.iter_custom(|iters| pairs::<Tracked<DefaultBackend>, 64>(&TRACKED_DEFAULT, 1, iters))
    });
    g.bench_function(BenchmarkId::from_parameter("tracked-select"), |b| {
        b.iter_custom(|iters| pairs::<Tracked<frag::Select>, 64>(&TRACKED_SELECT, 1, iters))
    });
    g.finish();
}

fn backends() -> Vec<&'static str> {
    let mut v = vec!["system"];
    if cfg!(feature = "jemalloc") {
        v.push("jemalloc");
    }
    if cfg!(feature = "mimalloc") {
        v.push("mimalloc");
    }
    if cfg!(feature = "snmalloc") {
        v.push("snmalloc");
    }
    v
}

/// Median (ns per iteration) criterion saved for one benchmark in this run.
fn median_ns(group: &str, case: &str) -> Option<f64> {
    let dir = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let path = format!("{dir}/criterion/{}/{case}/new/estimates.json", group.replace('/', "_"));
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["median"]["point_estimate"].as_f64()
}

fn summary() {
    println!("\ncriterion medians (tracked = default sampling; exact = every block sampled)\n");
    println!("| backend | case | threads | bare ns | tracked ns | ratio | diff ns | exact ns | exact ratio |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for name in backends() {
        for threads in THREADS {
            for size in SIZES {
                let group = format!("pair/{name}/{size}B/{threads}t");
                if let (Some(b), Some(t)) = (median_ns(&group, "bare"), median_ns(&group, "tracked")) {
                    let (e, er) = median_ns(&group, "exact")
                        .map_or(("-".to_owned(), "-".to_owned()), |e| (format!("{e:.2}"), format!("{:.2}", e / b)));
                    println!(
                        "| {name} | pair {size} B | {threads} | {b:.2} | {t:.2} | {:.3} | {:+.2} | {e} | {er} |",
                        t / b,
                        t - b
                    );
                }
            }
        }
        for size in [64, 16384] {
            let group = format!("handoff/{name}/{size}B");
            if let (Some(b), Some(t)) = (median_ns(&group, "bare"), median_ns(&group, "tracked")) {
                println!("| {name} | handoff {size} B | 2 | {b:.2} | {t:.2} | {:.3} | {:+.2} | - | - |", t / b, t - b);
            }
        }
    }
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    compare(&mut c, "system", &System, &SYSTEM);
    #[cfg(feature = "jemalloc")]
    compare(&mut c, "jemalloc", &tikv_jemallocator::Jemalloc, &JEMALLOC);
    #[cfg(feature = "mimalloc")]
    compare(&mut c, "mimalloc", &mimalloc::MiMalloc, &MIMALLOC);
    #[cfg(feature = "snmalloc")]
    compare(&mut c, "snmalloc", &snmalloc_rs::SnMalloc, &SNMALLOC);
    compare_select(&mut c);
    // The reclaimer's hook for idle threads when no request is open, as every tokio worker pays it
    // each time it parks.
    c.bench_function("reclaim_idle/no_request", |b| b.iter(frag::reclaim::idle));
    c.final_summary();
    summary();
    // The paired table runs only when benchmarking for real (not under `cargo test --benches`).
    if std::env::args().any(|a| a == "--bench") {
        println!("\npaired rounds (median of {PAIRED_ROUNDS} per-round ratios, {PAIRED_ITERS} operations per round)\n");
        println!("| backend | case | threads | bare ns | tracked ns | ratio | diff ns |");
        println!("|---|---|---|---|---|---|---|");
        paired_table("system", &System, &SYSTEM);
        #[cfg(feature = "jemalloc")]
        paired_table("jemalloc", &tikv_jemallocator::Jemalloc, &JEMALLOC);
        #[cfg(feature = "mimalloc")]
        paired_table("mimalloc", &mimalloc::MiMalloc, &MIMALLOC);
        #[cfg(feature = "snmalloc")]
        paired_table("snmalloc", &snmalloc_rs::SnMalloc, &SNMALLOC);
        let select = frag::Select::new();
        println!("\nSelect dispatch (\"bare\" = the fixed backend, \"tracked\" column = Select)\n");
        paired_row(
            &format!("select ({})", select.backend()),
            "pair 64 B",
            1,
            || pairs::<DefaultBackend, 64>(&DEFAULT_BACKEND, 1, PAIRED_ITERS),
            || pairs::<frag::Select, 64>(&select, 1, PAIRED_ITERS),
        );
        paired_row(
            &format!("Tracked<Select> vs Tracked<{}>", select.backend()),
            "pair 64 B",
            1,
            || pairs::<Tracked<DefaultBackend>, 64>(&TRACKED_DEFAULT, 1, PAIRED_ITERS),
            || pairs::<Tracked<frag::Select>, 64>(&TRACKED_SELECT, 1, PAIRED_ITERS),
        );
    }
}
