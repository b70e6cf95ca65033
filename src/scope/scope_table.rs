//! The scope table: each scope's name and tallies, in a fixed array of [`CAPACITY`] slots.
//!
//! Slot [`NONE`] holds the samples taken outside every scope, slot [`OTHER`] those of the names
//! that found no room; named scopes take the others in order. A slot is never freed, so a sample
//! names its scope by index for as long as it lives, whatever happens to the handles. Names are
//! interned under a lock and kept for the life of the process (frag's own memory); the sampled path
//! only indexes the array and adds to its tallies: no lock, no allocation.
//!
//! Memory: [`CAPACITY`] slots of 352 bytes ≈ 352 KiB of zero-initialised static memory, resident
//! only where touched.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use crate::estimate::SampleSums;
use crate::fork::Lock;
use crate::sync::{AtomicBool, AtomicU64, Ordering};
use crate::tally::Tallies;

/// The publisher's label for allocations outside every scope.
pub(crate) const NO_SCOPE: &str = "none";
/// The scope of the names refused for want of room, and the publisher's label for the scopes not
/// published.
pub(crate) const OTHER_SCOPES: &str = "other";

/// The process's scopes.
pub(crate) static SCOPES: Table = Table::new();

/// Slots, the two reserved ones included.
pub(crate) const CAPACITY: usize = 1024;
/// The slot of samples taken outside every scope.
pub(crate) const NONE: u16 = 0;
/// The slot of the names that found no room.
pub(crate) const OTHER: u16 = 1;
/// The most scopes published under their own names (the label's cardinality).
pub(crate) const MAX_PUBLISHED: usize = 64;
/// The longest name taken, in bytes.
pub(crate) const MAX_NAME: usize = 128;

struct Slot {
    name: OnceLock<&'static str>,
    /// Published under its own name by the publisher (else in `scope="other"`).
    published: AtomicBool,
    tallies: Tallies,
}

impl Slot {
    const fn new() -> Self {
        Self { name: OnceLock::new(), published: AtomicBool::new(false), tallies: Tallies::new() }
    }
}

/// The process's scopes (`scope::SCOPES`).
pub(crate) struct Table {
    slots: [Slot; CAPACITY],
    /// Name to slot, for interning (never on the sampled path); held across a `fork` (`fork::Lock`).
    names: Lock<BTreeMap<&'static str, u16>>,
    /// Names that found no room (each counted once per `Scope::new`).
    refused: AtomicU64,
}

impl Table {
    pub(crate) const fn new() -> Self {
        Self { slots: [const { Slot::new() }; CAPACITY], names: Lock::new(BTreeMap::new()), refused: AtomicU64::new(0) }
    }

    /// The slot of `name` (not empty, at most [`MAX_NAME`] bytes), interned on first sight;
    /// [`OTHER`] when the table is full (counted). Allocates: never on the sampled path.
    pub(crate) fn intern(&'static self, name: &str) -> u16 {
        let mut names = self.names.lock();
        if let Some(&id) = names.get(name) {
            return id;
        }
        let next = names.len() + 2;
        let Some(slot) = self.slots.get(next) else {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return OTHER;
        };
        let kept: &'static str = Box::leak(name.into());
        let _ = slot.name.set(kept);
        let id = next as u16;
        names.insert(kept, id);
        id
    }

    /// The tallies of slot `id` ([`OTHER`]'s for an id out of range).
    pub(crate) fn tallies(&self, id: u16) -> &Tallies {
        match self.slots.get(usize::from(id)) {
            Some(slot) => &slot.tallies,
            None => &self.slots[usize::from(OTHER)].tallies,
        }
    }

    /// The name of slot `id`; `None` for [`NONE`], [`OTHER`] and free slots.
    pub(crate) fn name(&self, id: u16) -> Option<&'static str> {
        self.slots.get(usize::from(id)).and_then(|s| s.name.get().copied())
    }

    /// Whether the publisher publishes slot `id` under its own name.
    pub(crate) fn published(&self, id: u16) -> bool {
        self.slots.get(usize::from(id)).is_some_and(|s| s.published.load(Ordering::Relaxed))
    }

    /// Publishes slot `id` under its own name, or not; `false` when that would publish more than
    /// [`MAX_PUBLISHED`] scopes.
    pub(crate) fn set_published(&'static self, id: u16, on: bool) -> bool {
        let _names = self.names.lock();
        let Some(slot) = self.slots.get(usize::from(id)) else { return false };
        if on && !slot.published.load(Ordering::Relaxed) {
            let published = self.slots.iter().filter(|s| s.published.load(Ordering::Relaxed)).count();
            if published >= MAX_PUBLISHED {
                return false;
            }
        }
        slot.published.store(on, Ordering::Relaxed);
        true
    }

    /// Slots in use: the two reserved ones and every named scope.
    pub(crate) fn used(&'static self) -> usize {
        self.names.lock().len() + 2
    }

    /// Names that found no room.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// A sample adding `sums` was taken in scope `id`.
    pub(crate) fn arrived(&self, id: u16, sums: SampleSums) {
        self.tallies(id).sampled(sums);
    }

    /// A sample of scope `id` was freed after `lifetime_ns`, under another scope when `elsewhere`.
    pub(crate) fn departed(&self, id: u16, sums: SampleSums, elsewhere: bool, lifetime_ns: u64) {
        self.tallies(id).freed(sums, elsewhere, lifetime_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module docs state the slot size and the table's memory.
    #[test]
    fn memory_is_as_documented() {
        assert_eq!(size_of::<Slot>(), 352);
        assert_eq!((CAPACITY * size_of::<Slot>()) >> 10, 352);
    }

    /// A name interns once; the table, once full, gives `OTHER` and counts each refusal.
    #[test]
    fn names_intern_once_and_overflow_to_other() {
        // Leaked: a table's lock is listed for `fork` for the life of the process (`fork::Lock`).
        let table: &'static Table = Box::leak(Box::new(Table::new()));
        let a = table.intern("a");
        assert_eq!((a, table.intern("a"), table.intern("b")), (2, 2, 3));
        assert_eq!(table.name(a), Some("a"));
        assert_eq!((table.name(NONE), table.name(OTHER)), (None, None));
        for i in 0..CAPACITY {
            let _ = table.intern(&format!("n{i}"));
        }
        assert_eq!(table.used(), CAPACITY);
        assert_eq!(table.refused(), 4);
        assert_eq!(table.intern("late"), OTHER);
        assert_eq!(table.intern("a"), a, "known names still resolve");
        assert_eq!(table.refused(), 5);
    }
}
