//! Exact per-thread and per-class counts for known sequences, against a model of the sequence.

mod common;

use std::alloc::{Layout, System, alloc, alloc_zeroed, dealloc, realloc};

use common::{Counting, on_named_thread, row, row_delta};

#[global_allocator]
// Unsampled: `Counting` counts the bytes it serves, and a sampled small block's mark is 8 bytes larger
// than its request (`src/sampler/mark.rs`), so byte-exact conservation holds only without samples.
static A: frag::Tracked<Counting<System>, frag::Exact> =
    frag::Tracked::with_sampling(Counting(System), frag::Sampling::Off);

/// Sizes no test harness or report allocates: each lands in a class of its own above 64 KiB.
const SIZES: [usize; 3] = [70_001, 100_003, 200_005];

fn class_row(report: &frag::Report, size: usize) -> Option<&frag::report::SizeClassRow> {
    report.size_classes.iter().find(|c| c.min_size as usize <= size && c.max_size.is_none_or(|m| m as usize >= size))
}

#[test]
fn known_sequence_on_one_thread() {
    // The model: 30 allocations (10 per size), 5 of them zeroed, 4 reallocations, 12 frees.
    let seen = on_named_thread(
        "seq-one",
        // SAFETY: each block is freed or reallocated once, with the layout it was allocated with.
        || unsafe {
            let mut blocks = Vec::with_capacity(64);
            for i in 0..30 {
                let layout = Layout::from_size_align(SIZES[i % 3], 8).unwrap();
                let p = if i < 5 { alloc_zeroed(layout) } else { alloc(layout) };
                assert!(!p.is_null());
                blocks.push((p, layout));
            }
            for (p, layout) in blocks.iter_mut().take(4) {
                let grown = realloc(*p, *layout, layout.size() + 100_000);
                assert!(!grown.is_null());
                *p = grown;
                *layout = Layout::from_size_align(layout.size() + 100_000, 8).unwrap();
            }
            for (p, layout) in blocks.drain(..12) {
                dealloc(p, layout);
            }
            std::mem::forget(blocks); // 18 blocks stay live: the test asserts they are counted live
        },
        |before, after| {
            assert!(row(after, "seq-one").alive);
            row_delta(before, after, "seq-one")
        },
    );
    let [allocations, deallocations, reallocations, allocated_bytes, freed_bytes] = seen;
    // The Vec of 64 entries is one more allocation (and no free: it is forgotten).
    assert_eq!(allocations, 31);
    assert_eq!(reallocations, 4);
    assert_eq!(deallocations, 12);
    let holder = (64 * std::mem::size_of::<(*mut u8, Layout)>()) as u64;
    let allocated: u64 = holder + (0..30).map(|i| SIZES[i % 3] as u64).sum::<u64>() + 4 * 100_000;
    let grown_old: u64 = (0..4).map(|i| SIZES[i % 3] as u64).sum();
    let freed_new: u64 = (0..12).map(|i| SIZES[i % 3] as u64).sum::<u64>() + 4 * 100_000;
    // allocated_bytes counts new sizes of reallocations; freed_bytes their old sizes.
    assert_eq!(allocated_bytes, allocated + grown_old);
    assert_eq!(freed_bytes, freed_new + grown_old);
}

#[test]
fn allocated_here_freed_there() {
    const N: usize = 500;
    let size = 150_007; // class (131073, 163840], nothing else allocates that
    let layout = Layout::from_size_align(size, 16).unwrap();
    let before = frag::report();
    let before_class = class_row(&before, size).cloned();
    let (tx, rx) = std::sync::mpsc::sync_channel::<usize>(N);
    let producer = on_named_thread(
        "producer",
        || {
            for _ in 0..N {
                // SAFETY: valid non-zero layout; freed by the consumer with the same layout.
                let p = unsafe { alloc(layout) };
                tx.send(p as usize).unwrap();
            }
        },
        |before, after| {
            let c = class_row(after, size).expect("class row");
            let b = before_class.as_ref().map_or(0, |b| b.live_blocks);
            assert_eq!(c.live_blocks - b, N as u64, "all blocks live before the consumer runs");
            assert_eq!(c.live_bytes, c.live_blocks * size as u64);
            row_delta(before, after, "producer")
        },
    );
    let consumer = on_named_thread(
        "consumer",
        move || {
            for p in rx.try_iter() {
                // SAFETY: allocated above with `layout`, freed once.
                unsafe { dealloc(p as *mut u8, layout) };
            }
        },
        |before, after| {
            let c = class_row(after, size).expect("class row");
            let b = before_class.as_ref().map_or(0, |b| b.live_blocks);
            assert_eq!(c.live_blocks, b, "all blocks freed");
            assert_eq!(c.deallocations - before_class.as_ref().map_or(0, |b| b.deallocations), N as u64);
            row_delta(before, after, "consumer")
        },
    );
    assert_eq!(producer, [N as u64, 0, 0, (N * size) as u64, 0]);
    assert_eq!(consumer, [0, N as u64, 0, 0, (N * size) as u64]);
}

#[test]
fn totals_equal_what_the_backend_served() {
    let v: Vec<Vec<u8>> = (0..1000).map(|i| vec![1; i * 7]).collect();
    drop(v);
    common::assert_conserved();
}
