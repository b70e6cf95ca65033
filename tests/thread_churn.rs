//! 10,000 short-lived threads: the shard pool stays bounded (slots are recycled at thread exit) and
//! the totals equal what the backend served, exactly.

mod common;

use std::alloc::System;
use std::sync::mpsc;

use common::{Counting, assert_conserved};

#[global_allocator]
static A: frag::Tracked<Counting<System>> = frag::Tracked::new(Counting(System));

#[test]
fn ten_thousand_threads() {
    const THREADS: usize = 10_000;
    const AT_ONCE: usize = 8;
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let mut kept = Vec::with_capacity(THREADS);
    for wave in 0..THREADS / AT_ONCE {
        let handles: Vec<_> = (0..AT_ONCE)
            .map(|i| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    // Some blocks die here, one is handed to the main thread and freed there later.
                    let local: Vec<Box<[u8]>> = (0..10).map(|k| vec![0u8; 16 + k * (wave + i)].into()).collect();
                    drop(local);
                    tx.send(vec![1u8; 100 + i]).unwrap();
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        kept.extend(rx.try_iter());
    }
    assert_eq!(kept.len(), THREADS);

    let r = frag::report();
    // Pool bounded: at most the threads alive at once (8 workers, main, the harness) plus a margin
    // for a slot released late; nobody was pushed to the overflow shard.
    assert!(r.shards.used <= 2 * AT_ONCE + 4, "{:?}", r.shards);
    assert_eq!(r.shards.unslotted_threads, 0);
    let rows: u64 = r.threads.iter().map(|t| t.allocations).sum();
    assert_eq!(rows, r.tracked.allocations, "rows add up to the total");
    drop(kept);
    assert_conserved();
}
