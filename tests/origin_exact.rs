//! Origin tracking with every block sampled: figures must equal what the test itself did.
//!
//! Each test uses block sizes of its own size class, so tests running side by side in one process
//! do not disturb each other's class figures. The reports' own blocks may share a test's class (a
//! vector of report rows grows to a few KiB), but each is freed on the thread that made it: a test
//! checks the cross-thread frees of its class exactly and allows a few more local ones.

mod common;

use common::{class_row, on_thread, raw_alloc, raw_free, thread_row, tid_of};
use frag::{Sampling, Tracked};
use std::alloc::{Layout, System};

#[global_allocator]
static A: Tracked<System, frag::Exact> = Tracked::with_sampling(System, Sampling::EveryBlock);

/// Cross-thread and local frees of the class of `size` bytes (exact: every block is sampled, each
/// weighs one).
fn class_frees(size: u64) -> (u64, u64) {
    let report = frag::report();
    let c = class_row(&report, size).expect("the class has a row");
    let cross = (c.cross_thread_ratio.expect("enough samples") * c.cross_thread_samples as f64).round() as u64;
    (cross, c.cross_thread_samples - cross)
}

/// Local frees beyond the test's own: the reports' blocks in its class (a few per report; `cargo
/// test` runs the other tests, and their reports, in the same process).
const REPORT_BLOCKS: u64 = 16;

#[test]
fn producer_consumer_is_all_cross_thread() {
    const N: usize = 10_000;
    const SIZE: usize = 12_345; // class 12289..=14336
    let (blocks_tx, blocks_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    // The producer stays alive until the report is checked, so its row (and slot) stay its own.
    let producer = std::thread::Builder::new()
        .name("producer".into())
        .spawn(move || {
            blocks_tx.send((0..N).map(|_| raw_alloc(SIZE)).collect::<Vec<_>>()).unwrap();
            done_rx.recv().ok();
        })
        .unwrap();
    let blocks = blocks_rx.recv().unwrap();
    on_thread("consumer", move || blocks.into_iter().for_each(|b| raw_free(b, SIZE)));

    let r = frag::report();
    done_tx.send(()).unwrap();
    producer.join().unwrap();
    let (cross, local) = class_frees(SIZE as u64);
    assert!(cross == N as u64 && local <= REPORT_BLOCKS, "{cross} cross-thread, {local} local");
    let o = r.origin.as_ref().expect("origin section");
    assert_eq!(o.sampling, Sampling::EveryBlock);
    assert_eq!(o.dropped_samples, 0);
    let (p, c) = (tid_of(&r, "producer").expect("producer row"), tid_of(&r, "consumer").expect("consumer row"));
    let pair = o.pairs.iter().find(|x| x.alloc_tid == p && x.free_tid == c).expect("producer -> consumer cell");
    // The test's blocks plus the vector holding them (and whatever std allocates along).
    assert!((N as u64..=N as u64 + 16).contains(&pair.frees), "{pair:?}");
    assert!(pair.bytes >= (N * SIZE) as u64);
    assert_eq!(pair.alloc_thread.as_deref(), Some("producer"));
    assert_eq!(pair.free_thread.as_deref(), Some("consumer"));
    let producer = thread_row(&r, "producer").expect("producer row");
    let consumer = thread_row(&r, "consumer").expect("consumer row");
    assert!(producer.freed_elsewhere >= N as u64 && consumer.remote_frees >= N as u64);
    assert!(producer.freed_elsewhere_bytes >= (N * SIZE) as u64);
    assert!(consumer.remote_freed_bytes >= (N * SIZE) as u64);
}

#[test]
fn thread_per_core_is_all_local() {
    const SIZE: usize = 1333; // class 1281..=1536
    let work = || {
        let mut ring = vec![0usize; 64];
        for i in 0..20_000 {
            let slot = &mut ring[i % 64];
            if *slot != 0 {
                raw_free(*slot, SIZE);
            }
            *slot = raw_alloc(SIZE);
        }
        ring.into_iter().filter(|&b| b != 0).for_each(|b| raw_free(b, SIZE));
    };
    let a = std::thread::spawn(work);
    let b = std::thread::spawn(work);
    a.join().unwrap();
    b.join().unwrap();
    assert_eq!(class_frees(SIZE as u64).0, 0);
}

#[test]
fn realloc_keeps_the_origin_and_moves_the_entry() {
    const SMALL: usize = 2000; // class 1793..=2048
    const LARGE: usize = 3 << 20; // class 2.5..=3 MiB
    // Allocated, grown (moves), shrunk (may move) and freed on one thread: all local.
    on_thread("reallocator", || {
        for _ in 0..100 {
            let small = Layout::from_size_align(SMALL, 8).unwrap();
            // SAFETY: valid layouts; each block is reallocated and freed with the layout it has.
            unsafe {
                let p = std::alloc::alloc(small);
                let q = std::alloc::realloc(p, small, LARGE);
                let r = std::alloc::realloc(q, Layout::from_size_align(LARGE, 8).unwrap(), SMALL + 10);
                std::alloc::dealloc(r, Layout::from_size_align(SMALL + 10, 8).unwrap());
            }
        }
    });
    // Every free was found under the block's latest address and counted as local.
    assert_eq!(class_frees(SMALL as u64).0, 0);

    // Allocated on one thread, reallocated there, freed on another: cross-thread, exactly once each.
    const MOVED: usize = 200_000; // class 196609..=229376
    let blocks = on_thread("grower", || {
        (0..100)
            .map(|_| {
                let p = raw_alloc(100);
                // SAFETY: `p` is a live block of 100 bytes, alignment 8.
                unsafe { std::alloc::realloc(p as *mut u8, Layout::from_size_align(100, 8).unwrap(), MOVED) as usize }
            })
            .collect::<Vec<_>>()
    });
    on_thread("freer", move || blocks.into_iter().for_each(|b| raw_free(b, MOVED)));
    let (cross, local) = class_frees(MOVED as u64);
    assert!(cross == 100 && local <= REPORT_BLOCKS, "{cross} cross-thread, {local} local");
}

#[test]
fn a_recycled_address_is_never_a_false_cross_thread_free() {
    const SIZE: usize = 5000; // class 4609..=5120
    let mut reused = 0;
    for _ in 0..100 {
        let p = on_thread("giver", || raw_alloc(SIZE));
        // The taker frees the giver's block (cross-thread), then allocates the same size: the
        // allocator's thread cache hands the same address back. That block is the taker's own.
        reused += on_thread("taker", move || {
            raw_free(p, SIZE);
            let q = raw_alloc(SIZE);
            raw_free(q, SIZE);
            usize::from(q == p)
        });
    }
    assert!(reused > 0, "the allocator never recycled an address: the test proves nothing");
    // 100 cross-thread frees and 100 local ones.
    let (cross, local) = class_frees(SIZE as u64);
    assert!(cross == 100 && (100..=100 + REPORT_BLOCKS).contains(&local), "{cross} cross-thread, {local} local");
}
