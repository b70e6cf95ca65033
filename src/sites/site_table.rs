//! The site table: each distinct sampled stack, interned once per scope (`scope`) it was sampled in,
//! with its tallies.
//!
//! A fixed array of [`CAPACITY`] sites with open addressing on a 64-bit hash of the stack (at most
//! [`MAX_PROBE`] slots from the home slot). Lock-free and allocation-free, like the sampler's side table:
//! a new stack claims an empty slot with a compare-and-swap to `BUSY`, writes its frames, then
//! publishes its hash with a release store; a reader that meets a `BUSY` slot probes on (two threads
//! racing to intern one stack may make two sites of it, which the report merges). Slots are never
//! freed: a site keeps its tallies for the life of the process. A full neighbourhood counts a drop, and
//! the sample goes to the "no stack" site ([`NO_SITE`]), so totals still add up.
//!
//! Two stacks with the same 64-bit hash share a site (odds about `n² / 2^65` for `n` stacks: one in
//! 10^12 for 4,096).
//!
//! Memory: [`CAPACITY`] slots of 848 bytes (64 frames, tallies, 32 lifetime buckets) ≈ 3.3 MiB of
//! zero-initialised static memory, resident only where touched (one or two pages per site seen).

use super::unwind::{Frames, MAX_FRAMES};
use crate::sync::{AtomicU64, AtomicUsize, Ordering};
use crate::tally::Tallies;

/// Sites kept.
pub(crate) const CAPACITY: usize = 1 << 12;
/// Longest run of slots a site may be placed in, from its home slot.
pub(crate) const MAX_PROBE: usize = 64;

/// The site of samples without a stack (no frame pointers, a foreign stack, a full table).
pub(crate) const NO_SITE: u32 = 0;

const EMPTY: u64 = 0;
const BUSY: u64 = 1;

struct Slot {
    key: AtomicU64,
    /// The stack's depth (low 8 bits) and the scope it was sampled in (the bits above).
    shape: AtomicUsize,
    frames: [AtomicUsize; MAX_FRAMES],
    tallies: Tallies,
}

impl Slot {
    const fn new() -> Self {
        Self {
            key: AtomicU64::new(EMPTY),
            shape: AtomicUsize::new(0),
            frames: [const { AtomicUsize::new(0) }; MAX_FRAMES],
            tallies: Tallies::new(),
        }
    }
}

/// The process's sites.
pub(crate) static SITES: Table = Table::new();

/// A table of sites (the process's: [`SITES`]).
pub(crate) struct Table {
    /// The "no stack" site.
    none: Tallies,
    slots: [Slot; CAPACITY],
    /// Stacks that found no room.
    dropped: AtomicU64,
}

impl Table {
    pub(crate) const fn new() -> Self {
        Self { none: Tallies::new(), slots: [const { Slot::new() }; CAPACITY], dropped: AtomicU64::new(0) }
    }

    /// The site of the stack `frames[..depth]` sampled in scope `scope`, interned on first sight;
    /// [`NO_SITE`] for an empty stack or a full neighbourhood (counted).
    pub(crate) fn intern(&self, frames: &Frames, depth: usize, scope: u16) -> u32 {
        let stack = frames.get(..depth).unwrap_or(&[]);
        if stack.is_empty() {
            return NO_SITE;
        }
        let key = hash(stack, scope);
        let home = (key as usize) & (CAPACITY - 1);
        for i in 0..MAX_PROBE {
            let index = (home + i) & (CAPACITY - 1);
            let Some(slot) = self.slots.get(index) else { break };
            let k = slot.key.load(Ordering::Acquire);
            if k == key {
                return index as u32 + 1;
            }
            if k == EMPTY && slot.key.compare_exchange(EMPTY, BUSY, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                for (to, &pc) in slot.frames.iter().zip(stack) {
                    to.store(pc, Ordering::Relaxed);
                }
                slot.shape.store(stack.len() | usize::from(scope) << 8, Ordering::Relaxed);
                slot.key.store(key, Ordering::Release);
                return index as u32 + 1;
            }
        }
        self.dropped.fetch_add(1, Ordering::Relaxed);
        NO_SITE
    }

    /// The tallies of site `id` (the "no stack" site for [`NO_SITE`] or an unknown id).
    pub(crate) fn tallies(&self, id: u32) -> &Tallies {
        match (id as usize).checked_sub(1).and_then(|i| self.slots.get(i)) {
            Some(slot) => &slot.tallies,
            None => &self.none,
        }
    }

    /// Stacks that found no room in the table.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Every published site: its id, stack and scope (allocates: report side only). The "no stack"
    /// site has no scope (0).
    pub(crate) fn stacks(&self) -> Vec<(u32, Vec<usize>, u16)> {
        let mut out = vec![(NO_SITE, Vec::new(), 0)];
        for (i, slot) in self.slots.iter().enumerate() {
            if slot.key.load(Ordering::Acquire) > BUSY {
                let shape = slot.shape.load(Ordering::Relaxed);
                let depth = (shape & 0xff).min(MAX_FRAMES);
                let stack = slot.frames.iter().take(depth).map(|f| f.load(Ordering::Relaxed)).collect();
                out.push((i as u32 + 1, stack, (shape >> 8) as u16));
            }
        }
        out
    }
}

/// A 64-bit hash of a stack and its scope, never `EMPTY` or `BUSY`.
fn hash(stack: &[usize], scope: u16) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ stack.len() as u64 ^ u64::from(scope) << 32;
    for &pc in stack {
        h = crate::stats::clock::splitmix64(h ^ pc as u64);
    }
    h.max(BUSY + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module docs state the slot size and the table's memory.
    #[test]
    fn memory_is_as_documented() {
        assert_eq!(size_of::<Slot>(), 848);
        assert_eq!((size_of::<Table>() as f64 / (1u64 << 20) as f64 * 10.0).round() / 10.0, 3.3);
    }

    #[test]
    fn stacks_intern_once_and_overflow_to_no_site() {
        // Built on the heap: 3.5 MiB is too much for a test thread's stack.
        let layout = std::alloc::Layout::new::<Table>();
        // SAFETY: all-zero bytes are a valid `Table` (atomics at zero, EMPTY keys); the box takes
        // ownership of memory allocated with the global allocator and `Table`'s layout.
        let t: Box<Table> = unsafe {
            let p = std::alloc::alloc_zeroed(layout) as *mut Table;
            assert!(!p.is_null());
            Box::from_raw(p)
        };
        let mut a: Frames = [0; MAX_FRAMES];
        a[..3].copy_from_slice(&[0x1000, 0x2000, 0x3000]);
        let id = t.intern(&a, 3, 0);
        assert_ne!(id, NO_SITE);
        assert_eq!(t.intern(&a, 3, 0), id);
        assert_ne!(t.intern(&a, 2, 0), id, "a shorter stack is another site");
        let scoped = t.intern(&a, 3, 1000);
        assert_ne!(scoped, id, "the stack in another scope is another site");
        assert_eq!(t.intern(&a, 0, 0), NO_SITE);
        let stacks = t.stacks();
        assert!(stacks.contains(&(id, vec![0x1000, 0x2000, 0x3000], 0)));
        assert!(stacks.contains(&(scoped, vec![0x1000, 0x2000, 0x3000], 1000)));
        // Fill the table: every stack beyond the capacity is dropped to NO_SITE and counted.
        let mut distinct = 0;
        for i in 0..CAPACITY * 2 {
            a[0] = 0x10_0000 + i * 16;
            if t.intern(&a, 3, 0) != NO_SITE {
                distinct += 1;
            }
        }
        assert!(distinct <= CAPACITY, "{distinct}");
        assert!(t.dropped() >= (CAPACITY as u64) - 2, "{}", t.dropped());
    }
}
