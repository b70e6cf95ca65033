//! Cost of `Tracked<X>` against bare `X`, measured in the same run: malloc + free pairs at 16 B, 64 B,
//! 1 KiB and 32 KiB, on 1 and 2 threads, for every backend compiled in.
//!
//! `cargo bench --bench overhead --all-features` prints a table of median ratios and differences at
//! the end (from criterion's own estimates); the budget is a ratio <= 1.05 and <= +1 ns per pair.

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
        g.finish();
    }
}

fn compare<A: GlobalAlloc + Sync + 'static>(c: &mut Criterion, name: &str, bare: &A, tracked: &Tracked<A>) {
    compare_size::<A, 16>(c, name, bare, tracked);
    compare_size::<A, 64>(c, name, bare, tracked);
    compare_size::<A, 1024>(c, name, bare, tracked);
    compare_size::<A, 32768>(c, name, bare, tracked);
}

static SYSTEM: Tracked<System> = Tracked::new(System);
#[cfg(feature = "jemalloc")]
static JEMALLOC: Tracked<tikv_jemallocator::Jemalloc> = Tracked::new(tikv_jemallocator::Jemalloc);
#[cfg(feature = "mimalloc")]
static MIMALLOC: Tracked<mimalloc::MiMalloc> = Tracked::new(mimalloc::MiMalloc);
#[cfg(feature = "snmalloc")]
static SNMALLOC: Tracked<snmalloc_rs::SnMalloc> = Tracked::new(snmalloc_rs::SnMalloc);

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
    println!("\n| backend | size | threads | bare ns/pair | tracked ns/pair | ratio | diff ns |");
    println!("|---|---|---|---|---|---|---|");
    for name in backends() {
        for threads in THREADS {
            for size in SIZES {
                let group = format!("pair/{name}/{size}B/{threads}t");
                if let (Some(b), Some(t)) = (median_ns(&group, "bare"), median_ns(&group, "tracked")) {
                    println!("| {name} | {size} | {threads} | {b:.2} | {t:.2} | {:.3} | {:+.2} |", t / b, t - b);
                }
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
    c.final_summary();
    summary();
}
