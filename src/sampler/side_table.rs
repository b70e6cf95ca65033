//! The side table of sampled blocks: who allocated each one, when, how large it was, its site,
//! whether it carries the mark, and its twin.
//!
//! A fixed array of [`CAPACITY`] entries with open addressing (at most [`MAX_PROBE`] slots from a
//! block's home slot), plus a filter of one byte per home slot counting the entries that live there.
//! A free that reaches the table (a marked pointer, see `sampler::mark`) reads the filter byte for
//! its address first; a block whose byte is zero (almost every unsampled block) costs nothing more.
//!
//! Lock-free and allocation-free:
//! - an insert claims a free slot (`EMPTY` or `TOMB`) with a compare-and-swap to `BUSY`, writes the
//!   entry, raises the filter byte, then publishes the key with a release store;
//! - only the thread freeing a block removes it (it owns the block), so removal is a plain lookup
//!   and a store of `TOMB`, made *before* the block goes back to the allocator: a recycled address
//!   can never meet a stale entry;
//! - a tombstone never turns back into `EMPTY`, so a lookup may stop at the first `EMPTY` slot;
//! - a full neighbourhood drops the sample and counts it.
//!
//! Memory: 56 bytes per entry plus one filter byte per slot, static and zero-initialised (resident
//! only where touched): [`CAPACITY`] × 57 B ≈ 912 KiB.
//!
//! The table is generic over its capacity so that the loom model (`tests/loom/src/table_model.rs`) can check the protocol
//! on a table of four slots, where every probe sequence wraps and collides.

use crate::sync::{AtomicU8, AtomicU64, AtomicUsize, Ordering, atomic_array, atomics_ctor};

/// Number of entries. At the default mean (one sample per 512 KiB allocated) a full table stands for
/// about 8 GiB of live blocks; past that, samples are dropped and counted (and a dropped block is
/// allocated without the mark).
pub(crate) const CAPACITY: usize = 1 << 14;
/// Longest run of slots an entry may be placed in, counted from its home slot (fewer in a table
/// smaller than that). Exact mode with 10,000 live blocks fills 61% of the table, where linear
/// probing makes long runs: in simulation (10,400 random homes, 100 runs) 64 dropped samples in 3
/// runs and 128 in none, and `tests/origin_exact.rs` saw a drop at 64 in CI. A run is scanned only by
/// a free that reaches the table and whose home holds an entry (the filter byte), on the cold path.
pub(crate) const MAX_PROBE: usize = 128;

const EMPTY: usize = 0;
const BUSY: usize = 1;
const TOMB: usize = 2;

/// What the table remembers about a sampled block.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct SampledBlock {
    /// Allocating thread: OS thread id.
    pub(crate) tid: u32,
    /// Allocating thread's pool slot and that slot's generation (low 16 bits), if it had a slot.
    pub(crate) slot: Option<(u16, u16)>,
    /// Requested size.
    pub(crate) size: u64,
    /// The inverse of the probability that the block was sampled: what one sample stands for in
    /// the estimates.
    pub(crate) weight: f64,
    /// Monotonic time of the allocation, in nanoseconds.
    pub(crate) born: u64,
    /// The block's allocation site (`sites`).
    pub(crate) site: u32,
    /// Whether the block was allocated with the mark (`sampler::mark`): then it must be freed with
    /// the marked layout.
    pub(crate) marked: bool,
    /// For a marked block handed out at its head (`KnownAllocator::owns_its_head`): how many bytes
    /// past the address handed out the allocator's block starts, a multiple of 16 below 4 KiB; 0 for
    /// any other block.
    pub(crate) lead: u16,
    /// The address of the marked block's twin, 0 for none: a block of the caller's layout allocated
    /// and freed with it, in its natural place, whose slab the allocator can be asked about
    /// (`KnownAllocator::TWIN_MAX`).
    pub(crate) twin: usize,
    /// Whether frag's own work allocated it (`own`): counted in frag's own shard, wherever freed.
    pub(crate) frag: bool,
    /// The scope current on the allocating thread (`scope`'s slot, 0 for none).
    pub(crate) scope: u16,
}

const NO_SLOT: u32 = u32::MAX;

impl SampledBlock {
    fn who(self) -> u64 {
        let slot = self.slot.map_or(NO_SLOT, |(i, g)| (u32::from(i) << 16) | u32::from(g));
        (u64::from(self.tid) << 32) | u64::from(slot)
    }

    /// `lead / 16 << 56 | scope << 40 | site << 2 | frag << 1 | marked`.
    fn how(self) -> u64 {
        (u64::from(self.lead / 16) << 56)
            | (u64::from(self.scope) << 40)
            | (u64::from(self.site) << 2)
            | (u64::from(self.frag) << 1)
            | u64::from(self.marked)
    }

    fn unpack(who: u64, size: u64, weight: u64, born: u64, how: u64, twin: usize) -> Self {
        let slot = who as u32;
        Self {
            tid: (who >> 32) as u32,
            slot: (slot != NO_SLOT).then_some(((slot >> 16) as u16, slot as u16)),
            size,
            weight: f64::from_bits(weight),
            born,
            site: (how >> 2) as u32,
            marked: how & 1 == 1,
            lead: ((how >> 56) as u16) * 16,
            twin,
            frag: how & 2 == 2,
            scope: (how >> 40) as u16,
        }
    }
}

#[repr(C)]
struct Slot {
    key: AtomicUsize,
    who: AtomicU64,
    size: AtomicU64,
    weight: AtomicU64,
    born: AtomicU64,
    how: AtomicU64,
    twin: AtomicUsize,
}

impl Slot {
    /// The entry's fields as stored (relaxed loads: the caller orders them against the key).
    #[inline(always)]
    fn entry(&self) -> SampledBlock {
        SampledBlock::unpack(
            self.who.load(Ordering::Relaxed),
            self.size.load(Ordering::Relaxed),
            self.weight.load(Ordering::Relaxed),
            self.born.load(Ordering::Relaxed),
            self.how.load(Ordering::Relaxed),
            self.twin.load(Ordering::Relaxed),
        )
    }

    atomics_ctor! {
        fn empty() -> Self {
            Self {
                key: AtomicUsize::new(EMPTY),
                who: AtomicU64::new(0),
                size: AtomicU64::new(0),
                weight: AtomicU64::new(0),
                born: AtomicU64::new(0),
                how: AtomicU64::new(0),
                twin: AtomicUsize::new(0),
            }
        }
    }
}

/// The table, of `N` slots (a power of two). One static instance serves the process
/// (`sampler::TABLE`); tests build their own.
pub(crate) struct Table<const N: usize = CAPACITY> {
    slots: [Slot; N],
    filter: [AtomicU8; N],
    dropped: AtomicU64,
}

impl<const N: usize> Table<N> {
    const MASK: usize = {
        assert!(N.is_power_of_two() && N >= 2);
        N - 1
    };
    const PROBE: usize = if N < MAX_PROBE { N } else { MAX_PROBE };

    atomics_ctor! {
        pub(crate) fn new() -> Self {
            Self { slots: atomic_array![Slot::empty(); N], filter: atomic_array![AtomicU8::new(0); N], dropped: AtomicU64::new(0) }
        }
    }

    /// Home slot of an address: a multiply, an xor-shift and a second multiply, keeping the top bits.
    /// A multiply alone (Fibonacci hashing) maps evenly spaced addresses onto few slots for some
    /// spacings: 3,000 glibc chunks of 1,008 bytes lost 1,287 samples to full neighbourhoods, which
    /// `tests/sites_exact.rs` caught in "every block" mode. Cold path only.
    #[inline(always)]
    pub(crate) fn home(ptr: usize) -> usize {
        let h = (ptr as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let h = (h ^ (h >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        (h >> (64 - N.trailing_zeros())) as usize & Self::MASK
    }

    /// Whether `ptr` may be in the table: one relaxed byte load. `false` is definite.
    ///
    /// A block's insert happened before the allocation returned it, and any thread that frees it got
    /// the pointer through some synchronisation after that, so a relaxed load sees the raised byte.
    #[inline(always)]
    pub(crate) fn may_contain(&self, ptr: *mut u8) -> bool {
        self.filter.get(Self::home(ptr as usize)).is_some_and(|f| f.load(Ordering::Relaxed) != 0)
    }

    /// Records a sampled block. `false` (and a counted drop) when its neighbourhood is full.
    pub(crate) fn insert(&self, ptr: *mut u8, entry: SampledBlock) -> bool {
        let key = ptr as usize;
        if key <= TOMB {
            return false;
        }
        let h = Self::home(key);
        let who = entry.who();
        for i in 0..Self::PROBE {
            let Some(slot) = self.slots.get((h + i) & Self::MASK) else { break };
            let k = slot.key.load(Ordering::Relaxed);
            if (k == EMPTY || k == TOMB)
                && slot.key.compare_exchange(k, BUSY, Ordering::Acquire, Ordering::Relaxed).is_ok()
            {
                slot.who.store(who, Ordering::Relaxed);
                slot.size.store(entry.size, Ordering::Relaxed);
                slot.weight.store(entry.weight.to_bits(), Ordering::Relaxed);
                slot.born.store(entry.born, Ordering::Relaxed);
                slot.how.store(entry.how(), Ordering::Relaxed);
                slot.twin.store(entry.twin, Ordering::Relaxed);
                if let Some(f) = self.filter.get(h) {
                    f.fetch_add(1, Ordering::Relaxed);
                }
                slot.key.store(key, Ordering::Release);
                return true;
            }
        }
        self.dropped.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// The entry for `ptr`, if it was sampled, left in place. Only the thread that owns the block
    /// may call this (so that nobody removes it meanwhile).
    pub(crate) fn get(&self, ptr: *mut u8) -> Option<SampledBlock> {
        self.find(ptr, false)
    }

    /// Removes and returns the entry for `ptr`, if it was sampled. Only the thread that owns the
    /// block (is freeing or reallocating it) may call this, before the block goes back to the
    /// allocator.
    pub(crate) fn remove(&self, ptr: *mut u8) -> Option<SampledBlock> {
        self.find(ptr, true)
    }

    fn find(&self, ptr: *mut u8, remove: bool) -> Option<SampledBlock> {
        let key = ptr as usize;
        let h = Self::home(key);
        if !self.may_contain(ptr) {
            return None;
        }
        for i in 0..Self::PROBE {
            let slot = self.slots.get((h + i) & Self::MASK)?;
            match slot.key.load(Ordering::Acquire) {
                k if k == key => {
                    let e = slot.entry();
                    if remove {
                        slot.key.store(TOMB, Ordering::Release);
                        if let Some(f) = self.filter.get(h) {
                            f.fetch_sub(1, Ordering::Relaxed);
                        }
                    }
                    return Some(e);
                }
                EMPTY => return None,
                _ => {}
            }
        }
        None
    }

    /// Calls `f(slot, address, entry)` with every entry in the table (report side: O(capacity), no
    /// lock, no allocation; [`Table::holds`] asks later whether the slot still holds that address).
    ///
    /// Entries come and go meanwhile: an entry is passed on when its key reads the same before and
    /// after its fields, so a slot reused during the read is skipped (or, if the same address was
    /// freed and sampled again in between, read as a mix of two entries of that address: an estimate
    /// may take that; the allocation path never reads it).
    pub(crate) fn for_each(&self, mut f: impl FnMut(usize, usize, SampledBlock)) {
        for (i, slot) in self.slots.iter().enumerate() {
            let key = slot.key.load(Ordering::Acquire);
            if key <= TOMB {
                continue;
            }
            let e = slot.entry();
            crate::sync::fence(Ordering::Acquire);
            if slot.key.load(Ordering::Relaxed) == key {
                f(i, key, e);
            }
        }
    }

    /// Whether slot `i` holds the block at `address` with the twin `twin` (as [`Table::for_each`]
    /// saw it, or a block allocated at the same address since, with a twin at the same address):
    /// the key and the twin read the same around a fence, as in `for_each`.
    pub(crate) fn holds(&self, i: usize, address: usize, twin: usize) -> bool {
        let Some(s) = self.slots.get(i) else { return false };
        if s.key.load(Ordering::Acquire) != address || s.twin.load(Ordering::Relaxed) != twin {
            return false;
        }
        crate::sync::fence(Ordering::Acquire);
        s.key.load(Ordering::Relaxed) == address
    }

    /// Samples dropped because the table was full around their home slot.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Entries currently held (O(capacity)).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.key.load(Ordering::Relaxed) > TOMB).count()
    }

    /// Whether every filter byte is back to zero.
    #[cfg(test)]
    pub(crate) fn filter_is_clear(&self) -> bool {
        self.filter.iter().all(|f| f.load(Ordering::Relaxed) == 0)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Arc;

    fn entry(tid: u32, size: u64) -> SampledBlock {
        SampledBlock {
            tid,
            slot: Some((7, 3)),
            size,
            weight: 1024.5,
            born: 99,
            site: 4095,
            marked: true,
            lead: 4080,
            twin: 0x7f00_0000_2040,
            frag: false,
            scope: 7,
        }
    }

    fn table() -> Box<Table> {
        // Built on the heap: 912 KiB is too much for a test thread's stack.
        let layout = std::alloc::Layout::new::<Table>();
        // SAFETY: all-zero bytes are a valid `Table` (atomics at zero, EMPTY keys); the box takes
        // ownership of memory allocated with the global allocator and `Table`'s layout.
        unsafe {
            let p = std::alloc::alloc_zeroed(layout) as *mut Table;
            assert!(!p.is_null());
            Box::from_raw(p)
        }
    }

    /// The memory the module documentation states: 56 B per entry plus a filter byte, about 912 KiB.
    #[test]
    fn table_size_is_as_documented() {
        assert_eq!(size_of::<Slot>(), 56);
        assert_eq!(size_of::<Table>() / CAPACITY, 57);
        assert_eq!(size_of::<Table>() >> 10, 912);
    }

    #[test]
    fn entries_round_trip() {
        let e = SampledBlock {
            tid: 4_000_000,
            slot: None,
            size: u64::MAX,
            weight: 1.0,
            born: u64::MAX,
            site: u32::MAX,
            marked: false,
            lead: 0,
            twin: 0,
            frag: true,
            scope: u16::MAX,
        };
        assert_eq!(SampledBlock::unpack(e.who(), e.size, e.weight.to_bits(), e.born, e.how(), e.twin), e);
        let e = entry(1, 12345);
        assert_eq!(SampledBlock::unpack(e.who(), e.size, e.weight.to_bits(), e.born, e.how(), e.twin), e);
    }

    #[test]
    fn insert_remove_and_reuse() {
        let t = table();
        let p = 0x7f00_0000_1000usize as *mut u8;
        assert!(!t.may_contain(p));
        assert!(t.insert(p, entry(1, 64)));
        assert!(t.may_contain(p));
        assert_eq!(t.remove(p), Some(entry(1, 64)));
        // The address is reused for an unsampled block: no stale entry answers.
        assert_eq!(t.remove(p), None);
        assert!(!t.may_contain(p));
        assert_eq!(t.len(), 0);
    }

    /// Evenly spaced addresses (blocks of one size class) spread over the table for every spacing
    /// of a 16-byte-aligned allocator up to 8 KiB: no sample is dropped at a fifth of capacity.
    #[test]
    fn evenly_spaced_blocks_find_room() {
        let t = table();
        for spacing in (16..=8192).step_by(16) {
            let addrs: Vec<usize> = (0..CAPACITY / 5).map(|i| 0x5555_5555_a000 + i * spacing).collect();
            for &a in &addrs {
                t.insert(a as *mut u8, entry(1, 8));
            }
            for &a in &addrs {
                t.remove(a as *mut u8);
            }
        }
        assert_eq!(t.dropped(), 0);
    }

    #[test]
    fn full_neighbourhood_drops_and_counts() {
        let t = table();
        // Find MAX_PROBE + 1 addresses sharing a home slot.
        let target = Table::<CAPACITY>::home(0x1000);
        let same: Vec<usize> =
            (1..).map(|i| i * 16).filter(|&a| Table::<CAPACITY>::home(a) == target).take(MAX_PROBE + 1).collect();
        for &a in &same[..MAX_PROBE] {
            assert!(t.insert(a as *mut u8, entry(1, 8)));
        }
        assert!(!t.insert(same[MAX_PROBE] as *mut u8, entry(1, 8)));
        assert_eq!(t.dropped(), 1);
        // Everything inserted is still found, in any order.
        for &a in same[..MAX_PROBE].iter().rev() {
            assert!(t.remove(a as *mut u8).is_some());
        }
        assert_eq!(t.len(), 0);
    }

    /// Threads insert, hand blocks over and remove them concurrently, reusing a small set of addresses
    /// as an allocator would; every removal must return exactly what its insertion stored.
    #[test]
    fn concurrent_insert_remove_matches_a_model() {
        let t: Arc<Table> = Arc::from(table());
        let threads = 4;
        let rounds = 20_000;
        let handles: Vec<_> = (0..threads)
            .map(|id| {
                let t = Arc::clone(&t);
                std::thread::spawn(move || {
                    let mut model: HashMap<usize, SampledBlock> = HashMap::new();
                    for r in 0..rounds {
                        // Each thread owns addresses congruent to `id`: disjoint, heavily reused.
                        let addr = ((r * 7919) % 512 * threads + id + 1) * 16;
                        if let Some(e) = model.remove(&addr) {
                            assert_eq!(t.remove(addr as *mut u8), Some(e), "thread {id} round {r}");
                        } else {
                            let e = entry(id as u32, r as u64);
                            if t.insert(addr as *mut u8, e) {
                                model.insert(addr, e);
                            }
                        }
                    }
                    for (addr, e) in model {
                        assert_eq!(t.remove(addr as *mut u8), Some(e));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(t.len(), 0);
        assert!(t.filter_is_clear());
    }
}
