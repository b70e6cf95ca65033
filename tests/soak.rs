//! Soak: for 60 s (`FRAG_SOAK_SECS` to change), two threads allocate, free and hand blocks to each
//! other while one of them takes reports and the other publishes them through an installed Prometheus
//! recorder (per-thread series on) and renders the scrape. No deadlock (every thread finishes within a
//! deadline), conservation holds at the end against an independent counter, and resident memory stays
//! flat once warm: the instrument's own memory does not grow with time.

mod common;

use std::alloc::System;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Counting, assert_conserved, rss_bytes, scaled, under_memcheck};

#[global_allocator]
// Unsampled: `Counting` counts the bytes it serves, and a sampled small block's mark is 8 bytes larger
// than its request (`src/sampler/mark.rs`), so byte-exact conservation holds only without samples.
static A: frag::Tracked<Counting<System>, frag::Exact> =
    frag::Tracked::with_sampling(Counting(System), frag::Sampling::Off);

/// Growth of resident memory allowed between the end of the first quarter and the end of the run.
const RSS_GROWTH_LIMIT: u64 = 4 << 20;

fn seconds() -> u64 {
    let default = scaled(60) as u64;
    std::env::var("FRAG_SOAK_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// Allocates and frees a bounded live set of mixed sizes, sending some blocks to the other thread and
/// freeing what it receives; calls `side` every 64 rounds.
fn churn(stop: &AtomicBool, tx: mpsc::SyncSender<Vec<u8>>, rx: mpsc::Receiver<Vec<u8>>, mut side: impl FnMut()) -> u64 {
    let mut live: Vec<Vec<u8>> = Vec::with_capacity(512);
    let mut rounds = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for k in 0..32usize {
            let size = [24, 100, 700, 3000, 16_000, 70_000][(rounds as usize + k) % 6];
            live.push(vec![k as u8; size]);
        }
        if live.len() > 400 {
            for block in live.drain(..200).step_by(8) {
                let _ = tx.try_send(block); // a full channel just frees it here
            }
        }
        for block in rx.try_iter() {
            drop(block);
        }
        if rounds % 64 == 0 {
            side();
        }
        rounds += 1;
    }
    drop(tx);
    rx.iter().for_each(drop);
    rounds
}

#[test]
fn reports_and_publishing_under_load() {
    let secs = seconds();
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let scrape = recorder.handle();
    metrics::set_global_recorder(recorder).expect("install the recorder");

    let stop = Arc::new(AtomicBool::new(false));
    let reports = Arc::new(AtomicU64::new(0));
    let (tx_a, rx_b) = mpsc::sync_channel(256);
    let (tx_b, rx_a) = mpsc::sync_channel(256);
    let reporter = {
        let (stop, reports) = (Arc::clone(&stop), Arc::clone(&reports));
        std::thread::Builder::new()
            .name("soak-report".into())
            .spawn(move || {
                churn(&stop, tx_a, rx_a, || {
                    let r = frag::report();
                    std::hint::black_box(r.to_string());
                    reports.fetch_add(1, Ordering::Relaxed);
                })
            })
            .expect("spawn")
    };
    let publisher = {
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("soak-publish".into())
            .spawn(move || {
                let mut publisher = frag::Publisher::new().per_thread(true).label("test", "soak");
                let mut n = 0u64;
                churn(&stop, tx_b, rx_b, || {
                    publisher.publish_once();
                    n += 1;
                    if n % 16 == 0 {
                        std::hint::black_box(scrape.render());
                    }
                })
            })
            .expect("spawn")
    };

    let start = Instant::now();
    let total = Duration::from_secs(secs);
    std::thread::sleep(total / 4);
    let warm_rss = rss_bytes();
    std::thread::sleep(total - total / 4);
    let end_rss = rss_bytes();
    stop.store(true, Ordering::Relaxed);

    // No deadlock: both threads see the flag within a generous deadline.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(reporter.is_finished() && publisher.is_finished()) {
        assert!(Instant::now() < deadline, "a soak thread did not stop: deadlock?");
        std::thread::sleep(Duration::from_millis(20));
    }
    let rounds = reporter.join().expect("reporter") + publisher.join().expect("publisher");
    let reports = reports.load(Ordering::Relaxed);
    eprintln!(
        "soak {:.0} s: {rounds} rounds, {reports} reports; rss {} KiB after the first quarter, {} KiB at the end",
        start.elapsed().as_secs_f64(),
        warm_rss >> 10,
        end_rss >> 10
    );
    assert!(reports > 0, "reports were taken");
    assert!(
        under_memcheck() || end_rss.saturating_sub(warm_rss) <= RSS_GROWTH_LIMIT,
        "resident memory grew {} KiB after warm-up",
        end_rss.saturating_sub(warm_rss) >> 10
    );
    assert_conserved();
    let t = frag::report::totals();
    assert!(t.allocated_bytes < 1 << 20, "the workload's blocks are all freed: {} B live", t.allocated_bytes);
}
