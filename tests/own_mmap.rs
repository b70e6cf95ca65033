//! `Tracked` over an allocator of the user's own, with a `Introspect`: an `mmap` per block, unmapped at
//! its free (the allocator of `examples/own_allocator.rs`). Ground truth: the allocator's own
//! counters and the process's RSS from `/proc`, which must fall by each freed block at once.

#[path = "../examples/support/mmap_per_block.rs"]
mod mmap_per_block;

mod common;

use mmap_per_block::{MmapPerBlock, MmapProbe, block_len};

#[global_allocator]
static A: frag::Tracked<MmapPerBlock, frag::Exact> = frag::Tracked::with_introspect(MmapPerBlock, &MmapProbe);

const MIB: u64 = 1 << 20;

/// `(allocator's live blocks, its mapped bytes, frag's totals)` read while nothing else allocated.
fn quiescent() -> ((u64, u64), frag::report::HeapCounts) {
    for _ in 0..10_000 {
        let before = MmapPerBlock::live();
        let served = MmapPerBlock::served();
        // The program's and frag's own (its unwind tables, built before `main`).
        let t = common::all_totals();
        if MmapPerBlock::live() == before && MmapPerBlock::served() == served {
            return (before, t);
        }
        std::thread::yield_now();
    }
    panic!("other threads never stopped allocating");
}

#[test]
fn counts_usable_sizes_and_rss_follow_the_allocator() {
    // Exact counts and usable sizes (the `Introspect`'s page-rounded lengths) against the allocator's own.
    let ((blocks, mapped), t) = quiescent();
    assert_eq!(t.live_blocks, blocks);
    assert_eq!(t.usable_bytes, mapped);

    let r = frag::report();
    assert_eq!(r.backend, Some(frag::backend::WrappedBackend::Other("mmap-per-block")));
    assert_eq!(r.usable_source, Some(frag::backend::UsableSource::Introspect));
    let a = r.allocator.expect("the `Introspect`'s statistics");
    assert!(a.mapped.is_some_and(|m| m > 0));
    let b = &r.diagnosis.as_ref().expect("diagnosis").breakdown;
    assert_eq!(b.source(frag::report::diagnosis::Part::Holes), frag::report::diagnosis::Source::Measured);

    // Each free unmaps its block: RSS falls by it at once, and so do the tracked usable bytes.
    let size = (MIB as usize) - 100;
    let mut held: Vec<Vec<u8>> = (0..32).map(|i| vec![i as u8 | 1; size]).collect();
    let mut rss_falls = Vec::with_capacity(32); // no allocation of its own inside the loop
    while let Some(block) = held.pop() {
        let (_, before) = quiescent();
        let rss = common::rss_bytes();
        drop(block);
        rss_falls.push(rss.saturating_sub(common::rss_bytes()));
        let (_, after) = quiescent();
        assert_eq!(before.usable_bytes - after.usable_bytes, block_len(size) as u64);
    }
    let len = block_len(size) as u64;
    let close = rss_falls.iter().filter(|&&f| f.abs_diff(len) <= 64 << 10).count();
    eprintln!("RSS fell by {:?} KiB per 1 MiB block", rss_falls.iter().map(|f| f >> 10).collect::<Vec<_>>());
    // Each free's own RSS drop, within 64 KiB (other threads may touch a page meanwhile). Under
    // memcheck RSS is valgrind's, not the program's.
    assert!(common::under_memcheck() || close >= 30, "{close} of 32 frees released their block at once: {rss_falls:?}");
}
