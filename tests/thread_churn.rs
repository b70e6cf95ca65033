//! 100,000 short-lived threads: the shard pool stays bounded (slots are recycled at thread exit, none
//! leaks), resident memory stays flat, and the totals equal what the backend served, exactly.

mod common;

use std::alloc::System;
use std::sync::mpsc;

use common::{Counting, assert_conserved, rss_bytes, scaled, under_memcheck};

#[global_allocator]
// Unsampled: `Counting` counts the bytes it serves, and a sampled small block's mark is 8 bytes larger
// than its request (`src/sampler/mark.rs`), so byte-exact conservation holds only without samples.
static A: frag::Tracked<Counting<System>, frag::Exact> =
    frag::Tracked::with_sampling(Counting(System), frag::Sampling::Off);

/// Threads alive at once.
const AT_ONCE: usize = 8;
/// Resident memory may grow by at most this much between the first 1% of the threads and the end:
/// frag's own memory is static (the shard pool and side table), so thread churn adds nothing to it.
const RSS_GROWTH_LIMIT: u64 = 8 << 20;

#[test]
fn a_hundred_thousand_threads() {
    let threads = scaled(100_000).max(AT_ONCE * 10);
    let waves = threads / AT_ONCE;
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let mut kept = 0usize;
    let mut warm_rss = 0;
    for wave in 0..waves {
        let handles: Vec<_> = (0..AT_ONCE)
            .map(|i| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    // Some blocks die here, one is handed to the main thread and freed there.
                    let local: Vec<Box<[u8]>> = (0..10).map(|k| vec![0u8; 16 + k * (wave % 97 + i)].into()).collect();
                    drop(local);
                    tx.send(vec![1u8; 100 + i]).unwrap();
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        kept += rx.try_iter().count();
        if wave == waves / 100 {
            warm_rss = rss_bytes();
        }
    }
    assert_eq!(kept, waves * AT_ONCE);
    let end_rss = rss_bytes();

    let r = frag::report();
    eprintln!(
        "{threads} threads: rss {} KiB after 1% of them, {} KiB at the end; shards used {} of {}",
        warm_rss >> 10,
        end_rss >> 10,
        r.shards.used,
        r.shards.capacity
    );
    // Pool bounded: at most the threads alive at once (8 workers, main, the harness) plus a margin
    // for a slot released late; nobody was pushed to the overflow shard; no slot leaked.
    assert!(r.shards.used <= 2 * AT_ONCE + 4, "{:?}", r.shards);
    assert_eq!(r.shards.unslotted_threads, 0);
    let alive = r.threads.iter().filter(|t| t.alive).count();
    assert_eq!(r.shards.live, alive, "live slots are exactly the live threads: {:?}", r.shards);
    assert!(alive <= 3, "only the main and harness threads remain: {alive}");
    let rows: u64 = r.threads.iter().map(|t| t.allocations).sum();
    assert_eq!(rows, r.tracked.allocations, "rows add up to the total");
    assert!(
        under_memcheck() || end_rss.saturating_sub(warm_rss) <= RSS_GROWTH_LIMIT,
        "resident memory grew {} KiB over {threads} threads",
        end_rss.saturating_sub(warm_rss) >> 10
    );
    assert_conserved();
}
