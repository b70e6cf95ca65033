//! loom model of the shard registry (`src/stats/registry.rs`): threads claim slots, write their
//! counters, exit (release) and new threads recycle the slots. Each slot's counters are a loom
//! `UnsafeCell` written with no synchronisation of its own, so loom reports any interleaving in which
//! two threads could touch one slot at once, or in which a new owner could miss what the previous one
//! wrote; the counts show that no claim, and no update, is lost.

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use loom::thread;

use crate::model;
use crate::registry::{Claimable, Registry};

/// A slot: the state word and a counter its owner writes as plain memory.
struct Slot {
    state: AtomicU8,
    count: UnsafeCell<u64>,
}

impl Slot {
    fn new() -> Self {
        Self { state: AtomicU8::new(0), count: UnsafeCell::new(0) }
    }
}

impl Claimable for Slot {
    fn state(&self) -> &AtomicU8 {
        &self.state
    }
}

// SAFETY: `count` is only touched by the slot's owner, which the registry makes exclusive; that is
// exactly what the model checks.
unsafe impl Sync for Slot {}

/// What a thread does in its life: claim a slot (or find none), count, exit.
fn thread_life<const N: usize>(registry: &Registry<Slot, N>, no_slot: &AtomicUsize) {
    match registry.claim() {
        Some(slot) => {
            // Setting up: read the previous owner's figures as a base (a plain read).
            // SAFETY: this thread owns the slot (the property under test; loom checks it).
            let base = slot.count.with(|c| unsafe { *c });
            registry.expose(slot);
            // SAFETY: as above.
            slot.count.with_mut(|c| unsafe { *c = base + 1 });
            registry.vacate(slot);
        }
        None => {
            no_slot.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn run<const N: usize>(threads: usize) {
    model(move || {
        let registry = Arc::new(Registry::<Slot, N>::new(core::array::from_fn(|_| Slot::new())));
        let no_slot = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (registry, no_slot) = (Arc::clone(&registry), Arc::clone(&no_slot));
                thread::spawn(move || thread_life(&registry, &no_slot))
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        // SAFETY: every thread was joined; nothing else touches the slots.
        let counted: u64 = registry.used().iter().map(|s| s.count.with(|c| unsafe { *c })).sum();
        let claims = threads as u64 - no_slot.load(Ordering::Relaxed) as u64;
        assert_eq!(counted, claims, "every claim's update survives recycling");
        assert!(registry.used().len() <= N);
        assert!(claims >= 1, "a free slot is never refused to every thread");
    });
}

/// One slot, two threads: the second either waits its turn (recycles the slot) or finds none.
#[test]
fn one_slot_recycled_between_two_threads() {
    run::<1>(2);
}

/// Two slots, three threads: claims through the high-water mark and through recycling race.
#[test]
fn two_slots_three_threads() {
    run::<2>(3);
}
