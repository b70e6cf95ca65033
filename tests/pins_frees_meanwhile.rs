//! Reports ask jemalloc how full the slabs of live sampled blocks are while their owners free them.
//! jemalloc's `experimental.utilization.batch_query` does not survive a block freed while it reads
//! (it loads an extent's slab bit and then its size class without a lock; a slab emptied and reused
//! as a large extent between the two makes it index `bin_infos` past its end), so frag asks in
//! windows that the frees of those blocks wait for (`sampler::gate`; its loom model proves the
//! ordering). This test runs the two together for real: worker threads fill jemalloc's 160-byte
//! slabs (20 KiB each), free them all and at once allocate 16 KiB blocks (20 KiB extents with
//! jemalloc's cache-oblivious page), while the main thread reports again and again. It fails if a
//! report crashes, or if a free waits for a window that never closes (the run hangs until nextest's
//! timeout; checked by leaving a window open).
//!
//! The race itself is a few instructions wide and does not crash everywhere: the index past
//! `bin_infos` faults only where the table sits near the end of its mapping. It was seen as a
//! segfault in the service example under valgrind (about one run in 40–60); this workload under
//! valgrind did not crash even without the gate (20,000 reports), so it is no proof of the fix on
//! its own.

#![cfg(feature = "jemalloc")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[global_allocator]
static A: frag::Tracked<tikv_jemallocator::Jemalloc, frag::Exact> = frag::Tracked::new(tikv_jemallocator::Jemalloc);

/// Reports made while the workers churn: `FRAG_RACE_REPORTS` (for runs under valgrind), else 200.
fn reports() -> usize {
    std::env::var("FRAG_RACE_REPORTS").ok().and_then(|v| v.parse().ok()).unwrap_or(200)
}

fn churn(stop: &AtomicBool, rounds: &AtomicU64) {
    let mut small: Vec<Box<[u8; 160]>> = Vec::with_capacity(4096);
    let mut large: Vec<Vec<u8>> = Vec::with_capacity(8);
    while !stop.load(Ordering::Relaxed) {
        small.extend((0..4096).map(|i| Box::new([i as u8; 160])));
        small.clear();
        large.extend((0..8).map(|i| vec![i as u8; 16 << 10]));
        large.clear();
        rounds.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn reports_survive_frees_of_the_blocks_they_ask_about() {
    // A block in 25 of the workers' sampled, unmarked (below 64 KiB): each is asked about itself.
    frag::set_sampling(frag::Sampling::MeanBytes(4096)).expect("the exact tier samples at 4 KiB");
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (stop, rounds) = (Arc::clone(&stop), Arc::clone(&rounds));
            std::thread::spawn(move || churn(&stop, &rounds))
        })
        .collect();
    let mut asked = 0;
    for _ in 0..reports() {
        let r = frag::report();
        let method = r.sites.as_ref().and_then(|s| s.pinned.as_ref()).map(|p| p.method);
        if matches!(method, Some(frag::report::PinMethod::Slabs | frag::report::PinMethod::Both)) {
            asked += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().expect("a worker");
    }
    println!("{asked} reports asked jemalloc about slabs, {} rounds of churn", rounds.load(Ordering::Relaxed));
    assert!(rounds.load(Ordering::Relaxed) > 0, "the workers churned during the reports");
    assert!(asked > 0, "the reports asked jemalloc about slabs");
}
