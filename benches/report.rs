//! What a report costs: `report()` (the breakdown and findings included), `totals()` and
//! `ProcessStats::read()`, with 10, 100 and 1,000 live threads that each allocated (so each holds a
//! shard). Goal: `report()` within 1 ms at 1,000 threads. And what the history adds to a
//! publisher's round at 4,096 sites: a snapshot of the report and its recording in a full history,
//! and the comparison that explains a step.

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion};

#[cfg(feature = "jemalloc")]
#[global_allocator]
static A: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);
#[cfg(not(feature = "jemalloc"))]
#[global_allocator]
static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);

/// `n` threads that allocated and stay alive (small stacks) until the returned barrier is passed.
fn live_threads(n: usize) -> (Arc<Barrier>, Vec<std::thread::JoinHandle<()>>) {
    let started = Arc::new(Barrier::new(n + 1));
    let done = Arc::new(Barrier::new(n + 1));
    let handles = (0..n)
        .map(|i| {
            let (started, done) = (Arc::clone(&started), Arc::clone(&done));
            std::thread::Builder::new()
                .name(format!("worker-{i}"))
                .stack_size(64 << 10)
                .spawn(move || {
                    let held: Vec<Vec<u8>> = (0..16).map(|j| vec![j as u8; 64 << (j % 6)]).collect();
                    started.wait();
                    done.wait();
                    drop(held);
                })
                .expect("spawn")
        })
        .collect();
    started.wait();
    (done, handles)
}

/// Allocates a 64 KiB block (sampled about once in 8 at the default rate) at the end of one of
/// 4,096 distinct stacks: `bits` picks, level by level, which of two functions recurses.
#[inline(never)]
fn left(level: u32, bits: u32, kept: &mut Vec<Vec<u8>>) {
    site(level, bits, kept);
    black_box(());
}

#[inline(never)]
fn right(level: u32, bits: u32, kept: &mut Vec<Vec<u8>>) {
    site(level, bits, kept);
    black_box(());
}

#[inline(never)]
fn site(level: u32, bits: u32, kept: &mut Vec<Vec<u8>>) {
    match level {
        0 => kept.push(vec![1u8; 64 << 10]),
        _ if bits & 1 == 0 => left(level - 1, bits >> 1, kept),
        _ => right(level - 1, bits >> 1, kept),
    }
}

/// A snapshot of a report of 4,096 sites, and its recording in a history that is full.
fn history(c: &mut Criterion) {
    let mut kept = Vec::new();
    for round in 0..16 {
        for bits in 0..4096 {
            site(12, bits, &mut kept);
            if round % 2 == 0 {
                kept.pop();
            }
        }
        kept.truncate(4096);
    }
    let report = frag::report();
    let sites = report.sites.as_ref().map_or(0, |s| s.sites);
    eprintln!("history: {sites} sites in the report");
    let mut history = frag::history::History::new();
    let mut at = 0u64;
    let mut next = || {
        at += 5;
        Duration::from_secs(at)
    };
    for _ in 0..30_000 {
        history.record(frag::history::Snapshot::of(&report, next(), 0).expect("a resident figure"));
    }
    let mut group = c.benchmark_group("history");
    group.bench_function("snapshot_4096_sites", |b| {
        b.iter(|| black_box(frag::history::Snapshot::of(&report, next(), 0)))
    });
    group.bench_function("snapshot_and_record_4096_sites", |b| {
        b.iter(|| history.record(frag::history::Snapshot::of(&report, next(), 0).expect("a resident figure")))
    });
    // A step explained, before its sites are named: two snapshots an hour apart compared.
    let now = history.snapshots().last().expect("a snapshot").to;
    group.bench_function("compare_in_a_full_history", |b| {
        b.iter(|| black_box(history.compare(now - Duration::from_secs(3600), now)))
    });
    group.bench_function("report_4096_sites", |b| b.iter(|| black_box(frag::report())));
    group.finish();
    drop(kept);
}

fn main() {
    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    let mut group = c.benchmark_group("report");
    for n in [10, 100, 1000] {
        let (done, handles) = live_threads(n);
        group.bench_with_input(BenchmarkId::new("report", n), &n, |b, _| b.iter(|| black_box(frag::report())));
        group.bench_with_input(BenchmarkId::new("totals", n), &n, |b, _| b.iter(|| black_box(frag::report::totals())));
        group.bench_with_input(BenchmarkId::new("process_stats", n), &n, |b, _| {
            b.iter(|| black_box(frag::process::ProcessStats::read()))
        });
        #[cfg(feature = "jemalloc")]
        {
            let epoch = BenchmarkId::new("jemalloc_epoch", n);
            group.bench_with_input(epoch, &n, |b, _| b.iter(|| black_box(tikv_jemalloc_ctl::epoch::advance())));
        }
        done.wait();
        handles.into_iter().for_each(|h| h.join().expect("join"));
    }
    group.finish();
    history(&mut c);
    c.final_summary();
}
