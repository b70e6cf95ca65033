//! loom model of the sampler's side table (`src/sampler/side_table.rs`, included here with loom's atomics): on
//! a table of four slots, where every probe wraps and every key collides, concurrent inserts, removals
//! and hand-offs never lose, duplicate or corrupt an entry, a removed key is never found again, and
//! the filter returns to zero.
//!
use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;

use crate::model;
use crate::side_table::{SampledBlock, Table};

type Small = Table<4>;

fn entry(tid: u32, size: u64) -> SampledBlock {
    SampledBlock {
        tid,
        slot: Some((tid as u16, 1)),
        size,
        weight: 8.0,
        born: u64::from(tid) * 1000 + size,
        site: tid + 7,
        marked: tid % 2 == 0,
        lead: if tid % 4 == 0 { 64 * tid as u16 % 4096 } else { 0 },
        twin: if tid % 2 == 0 { 0x9000 + tid as usize * 0x40 } else { 0 },
        frag: tid % 3 == 0,
        scope: (tid % 5) as u16,
    }
}

/// `n` block addresses that share one home slot.
fn colliding(n: usize) -> Vec<usize> {
    let home = Small::home(0x1000);
    (1..).map(|i| i * 0x1000).filter(|&a| Small::home(a) == home).take(n).collect()
}

/// Two threads insert and remove their own blocks, which share a home slot, at once: each gets back
/// exactly what it stored.
#[test]
fn concurrent_insert_and_remove() {
    model(|| {
        let t = Arc::new(Small::new());
        let keys = colliding(2);
        let workers: Vec<_> = (1..=2u32)
            .map(|id| {
                let t = Arc::clone(&t);
                let p = keys[id as usize - 1] as *mut u8;
                thread::spawn(move || {
                    assert!(t.insert(p, entry(id, 64)), "four slots hold two entries");
                    assert!(t.may_contain(p), "own insert is visible to its thread");
                    assert_eq!(t.remove(p), Some(entry(id, 64)));
                    assert_eq!(t.remove(p), None, "a removed key is gone");
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(t.len(), 0);
        assert!(t.filter_is_clear());
    });
}

/// A block sampled on one thread is handed to another through a release/acquire hand-off (as any
/// program passes a pointer between threads); the receiver sees the filter byte and the whole entry,
/// while a third thread inserts and removes a block of its own in the same neighbourhood.
#[test]
fn hand_off_sees_the_whole_entry() {
    model(|| {
        let t = Arc::new(Small::new());
        let mailbox = Arc::new(AtomicUsize::new(0));
        let producer = {
            let (t, mailbox) = (Arc::clone(&t), Arc::clone(&mailbox));
            thread::spawn(move || {
                let p = 0x7000 as *mut u8;
                assert!(t.insert(p, entry(1, 4096)));
                mailbox.store(p as usize, Ordering::Release);
            })
        };
        let other = {
            let t = Arc::clone(&t);
            thread::spawn(move || {
                let q = 0x9000 as *mut u8;
                if t.insert(q, entry(3, 8)) {
                    assert_eq!(t.remove(q), Some(entry(3, 8)));
                }
            })
        };
        let consumer = {
            let (t, mailbox) = (Arc::clone(&t), Arc::clone(&mailbox));
            thread::spawn(move || {
                let p = loop {
                    match mailbox.load(Ordering::Acquire) {
                        0 => thread::yield_now(),
                        p => break p as *mut u8,
                    }
                };
                assert!(t.may_contain(p), "the filter byte is visible after the hand-off");
                assert_eq!(t.remove(p), Some(entry(1, 4096)), "the entry arrives whole");
            })
        };
        for h in [producer, other, consumer] {
            h.join().unwrap();
        }
        assert_eq!(t.len(), 0);
        assert!(t.filter_is_clear());
    });
}

/// An address freed on one thread and handed out again to another (as allocators recycle addresses)
/// never meets the old entry: the second owner finds only its own.
#[test]
fn recycled_address_never_meets_a_stale_entry() {
    model(|| {
        let t = Arc::new(Small::new());
        let freed = Arc::new(AtomicUsize::new(0));
        let p = 0x5000 as *mut u8;
        assert!(t.insert(p, entry(1, 100)));
        let first = {
            let (t, freed) = (Arc::clone(&t), Arc::clone(&freed));
            thread::spawn(move || {
                assert_eq!(t.remove(p), Some(entry(1, 100)));
                // The block goes back to the allocator only now.
                freed.store(1, Ordering::Release);
            })
        };
        let second = {
            let (t, freed) = (Arc::clone(&t), Arc::clone(&freed));
            thread::spawn(move || {
                while freed.load(Ordering::Acquire) == 0 {
                    thread::yield_now();
                }
                // The allocator hands the same address to this thread, unsampled this time.
                assert_eq!(t.remove(p), None, "no stale entry for a recycled address");
                assert!(t.insert(p, entry(2, 200)));
                assert_eq!(t.remove(p), Some(entry(2, 200)));
            })
        };
        first.join().unwrap();
        second.join().unwrap();
        assert!(t.filter_is_clear());
    });
}

/// A full neighbourhood drops the sample and counts it, whatever the interleaving.
#[test]
fn full_table_drops_and_counts() {
    model(|| {
        let t = Arc::new(Small::new());
        for i in 1..=3usize {
            assert!(t.insert((i * 0x100) as *mut u8, entry(i as u32, 1)));
        }
        let racers: Vec<_> = (4..=5usize)
            .map(|i| {
                let t = Arc::clone(&t);
                thread::spawn(move || t.insert((i * 0x100) as *mut u8, entry(i as u32, 1)))
            })
            .collect();
        let won: usize = racers.into_iter().map(|h| usize::from(h.join().unwrap())).sum();
        assert_eq!(won, 1, "exactly one of two racers gets the last slot");
        assert_eq!(t.dropped(), 1);
        assert_eq!(t.len(), 4);
    });
}
