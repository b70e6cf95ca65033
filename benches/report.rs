//! What a report costs: `report()` (the breakdown and findings included), `totals()` and
//! `ProcessStats::read()`, with 10, 100 and 1,000 live threads that each allocated (so each holds a
//! shard). Goal: `report()` within 1 ms at 1,000 threads.

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
    c.final_summary();
}
