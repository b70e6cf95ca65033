//! loom model of the page-bucket counters behind the mark (`src/sampler/buckets.rs`, included here
//! with loom's atomics), on two first-level and four second-level buckets so that every page shares
//! its buckets with others: a sampled block's buckets read occupied for whoever the block is handed
//! to, however the counters of other blocks in the same buckets move meanwhile; and they read empty
//! again once every block is forgotten.

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;

use crate::buckets::Buckets;
use crate::model;

type Small = Buckets<2, 4>;

/// Thread A notes page 1 and hands its block over (release); thread B, once it holds the block
/// (acquire), must see its buckets occupied, while thread C notes and forgets page 5 (the same
/// buckets at both levels) and page 3 (the same first-level bucket only).
#[test]
fn a_handed_off_block_is_always_found() {
    model(|| {
        let b = Arc::new(Small::new());
        let handed = Arc::new(AtomicBool::new(false));
        let a = {
            let (b, handed) = (b.clone(), handed.clone());
            thread::spawn(move || {
                b.noted(1);
                handed.store(true, Ordering::Release);
            })
        };
        let c = {
            let b = b.clone();
            thread::spawn(move || {
                b.noted(5);
                b.noted(3);
                b.forgotten(5);
                b.forgotten(3);
            })
        };
        if handed.load(Ordering::Acquire) {
            assert!(b.occupied(1), "a live sampled block's buckets read empty");
        }
        a.join().unwrap();
        c.join().unwrap();
        assert!(b.occupied(1));
        b.forgotten(1);
        assert!(!b.occupied(1) && !b.occupied(5) && !b.occupied(3), "the counters went back to zero");
    });
}

/// Two threads note and forget blocks of one bucket at once: the counts never lose an update, so
/// each reads its own block while it lives, and the buckets end empty.
#[test]
fn concurrent_notes_and_forgets_balance() {
    model(|| {
        let b = Arc::new(Small::new());
        let threads: Vec<_> = [1usize, 5]
            .into_iter()
            .map(|page| {
                let b = b.clone();
                thread::spawn(move || {
                    b.noted(page);
                    assert!(b.occupied(page));
                    b.forgotten(page);
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert!(!b.occupied(1) && !b.occupied(5));
    });
}
