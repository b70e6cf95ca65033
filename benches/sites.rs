//! What a sampled allocation costs: an allocation and free of a 64-byte block at a stack depth of 8,
//! 32 and 64 frames, with every block sampled (`EveryBlock`) and with sampling off, both with every
//! free looking in the side table (every-block mode switches that on for good), so the difference is
//! the sample: the frame-pointer walk, the site table look-up, the side-table entry and the origin and
//! site tallies at allocation and free. Each measurement runs on a fresh thread, so the walk
//! sees the requested depth plus the few frames of a thread's start.
//!
//! Also prints what `Sites::symbolize` costs: reading the debug information each time (the default:
//! the symbolizer's cache is released after use), and with the cache kept (`frag::sites::keep_symbol_cache`),
//! in time, in resident memory and in frag's own memory as the report shows it.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};

#[cfg(feature = "jemalloc")]
#[global_allocator]
static A: frag::Tracked<tikv_jemallocator::Jemalloc, frag::Exact> = frag::Tracked::new(tikv_jemallocator::Jemalloc);
#[cfg(not(feature = "jemalloc"))]
#[global_allocator]
static A: frag::Tracked<std::alloc::System, frag::Exact> = frag::Tracked::new(std::alloc::System);

/// Runs `f` at `depth` frames below this one.
#[inline(never)]
fn at_depth<R>(depth: usize, f: &mut dyn FnMut() -> R) -> R {
    if depth == 0 { f() } else { black_box(at_depth(depth - 1, f)) }
}

/// Times `iters` allocation + free pairs at `depth`, on a fresh thread.
fn pairs(depth: usize, iters: u64) -> Duration {
    std::thread::scope(|s| {
        s.spawn(|| {
            at_depth(depth, &mut || {
                let start = Instant::now();
                for i in 0..iters {
                    black_box(Box::new([i as u8; 64]));
                }
                start.elapsed()
            })
        })
        .join()
        .expect("bench thread")
    })
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap_or(0)
}

fn main() {
    assert_ne!(frag::sites::unwinder(), frag::sites::Unwinder::None, "no stacks on this target");
    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    // Every-block mode makes every free look in the side table for good, in both cases below.
    frag::set_sampling(frag::Sampling::EveryBlock).expect("every block");
    let mut group = c.benchmark_group("sites");
    for depth in [8, 32, 64] {
        for (name, sampling) in [("off", frag::Sampling::Off), ("every_block", frag::Sampling::EveryBlock)] {
            frag::set_sampling(sampling).expect("sampling");
            group.bench_with_input(BenchmarkId::new(name, depth), &depth, |b, &d| b.iter_custom(|n| pairs(d, n)));
        }
    }
    group.finish();

    frag::set_sampling(frag::Sampling::EveryBlock).expect("every block");
    let held: Vec<Box<[u8]>> = (0..64).map(|i| vec![i as u8; 4096].into_boxed_slice()).collect();
    let symbolize = || {
        let mut report = frag::report();
        let start = Instant::now();
        if let Some(sites) = report.sites.as_mut() {
            sites.symbolize();
        }
        (start.elapsed().as_secs_f64() * 1e3, report)
    };
    let before = rss_kib();
    let (released, report) = symbolize();
    let after_release = rss_kib();
    frag::sites::keep_symbol_cache(true);
    let (first_kept, _) = symbolize();
    let kept_rss = rss_kib();
    let (warm, _) = symbolize();
    let kept = frag::report().frag_itself;
    frag::sites::keep_symbol_cache(false);
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "Sites::symbolize: {released:.0} ms reading the debug information (default: released after, resident \
         +{:.1} MiB after); with frag::sites::keep_symbol_cache(true): {first_kept:.0} ms the first time, {warm:.1} ms \
         after, the cache {:.1} MiB (frag itself, usable; resident +{:.1} MiB); deepest stack captured: {} frames",
        mib(after_release.saturating_sub(before)),
        kept.usable_bytes as f64 / (1 << 20) as f64,
        mib(kept_rss.saturating_sub(before)),
        report.sites.as_ref().map_or(0, |s| s.top.iter().map(|r| r.stack.len()).max().unwrap_or(0))
    );
    drop(held);
}
