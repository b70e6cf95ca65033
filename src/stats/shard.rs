//! One shard of counters: a size-class table plus a few per-thread figures.
//!
//! A shard is written by exactly one thread at a time (its owner) with relaxed load + store, or, for
//! the shared overflow shard, by anyone with atomic adds. Counters only ever grow; live figures are
//! differences taken at report time, summed over all shards, so a block allocated on one thread and
//! freed on another balances out in the totals without any shard going negative.

use crate::stats::class::NUM_CLASSES;
use crate::stats::live;
use crate::sync::{AtomicI64, AtomicU8, AtomicU64, CachePadded, Ordering, owned_add, shared_add};

/// Counters for one size class in one shard; 48 bytes padded to one cache line so an update touches
/// exactly one line.
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub(crate) struct ClassCounters {
    /// Blocks that entered the class (allocations and the new side of reallocations).
    pub(crate) allocs: AtomicU64,
    /// Blocks that left the class (deallocations and the old side of reallocations).
    pub(crate) frees: AtomicU64,
    /// Requested bytes that entered / left the class.
    pub(crate) req_in: AtomicU64,
    pub(crate) req_out: AtomicU64,
    /// Usable bytes (as the backend rounds them) that entered / left the class.
    pub(crate) usable_in: AtomicU64,
    pub(crate) usable_out: AtomicU64,
}

impl ClassCounters {
    const fn new() -> Self {
        Self {
            allocs: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            req_in: AtomicU64::new(0),
            req_out: AtomicU64::new(0),
            usable_in: AtomicU64::new(0),
            usable_out: AtomicU64::new(0),
        }
    }
}

/// Figures the owning thread updates besides the class table.
#[derive(Debug, Default)]
pub(crate) struct Hot {
    pub(crate) reallocs: AtomicU64,
    /// Net requested bytes not yet folded into the process-wide live counter (see `stats::live`).
    pub(crate) pending: AtomicI64,
}

/// Slot bookkeeping: who owns the shard and what the counters stood at when they took it.
#[derive(Debug, Default)]
pub(crate) struct Meta {
    pub(crate) state: AtomicU8,
    /// Bumped on every claim, so a reader can tell a slot changed hands while it was reading.
    pub(crate) generation: AtomicU64,
    pub(crate) tid: AtomicU64,
    /// The kernel's thread name (at most 15 bytes plus NUL), packed little-endian.
    pub(crate) name: [AtomicU64; 2],
    /// Thread-level totals at claim time; the owner's own figures are `current - base`.
    pub(crate) base: [AtomicU64; Totals::FIELDS],
}

/// Thread-level totals of a shard (or of several).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    /// Successful `alloc` and `alloc_zeroed` calls.
    pub(crate) allocations: u64,
    /// `dealloc` calls.
    pub(crate) deallocations: u64,
    /// Successful `realloc` calls.
    pub(crate) reallocations: u64,
    /// Requested bytes handed out, counting the new size of every reallocation.
    pub(crate) allocated_bytes: u64,
    /// Requested bytes given back, counting the old size of every reallocation.
    pub(crate) freed_bytes: u64,
}

impl Totals {
    const FIELDS: usize = 5;

    fn to_array(self) -> [u64; Self::FIELDS] {
        [self.allocations, self.deallocations, self.reallocations, self.allocated_bytes, self.freed_bytes]
    }

    fn from_array(a: [u64; Self::FIELDS]) -> Self {
        Self { allocations: a[0], deallocations: a[1], reallocations: a[2], allocated_bytes: a[3], freed_bytes: a[4] }
    }

    /// Field-wise `self - other`, saturating (a concurrent reader can see a shard mid-update).
    pub(crate) fn minus(self, other: Self) -> Self {
        let (a, b) = (self.to_array(), other.to_array());
        Self::from_array(core::array::from_fn(|i| a[i].saturating_sub(b[i])))
    }

    /// Field-wise sum.
    pub(crate) fn plus(self, other: Self) -> Self {
        let (a, b) = (self.to_array(), other.to_array());
        Self::from_array(core::array::from_fn(|i| a[i].wrapping_add(b[i])))
    }
}

/// A slot in the pool (or the overflow shard).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Shard {
    pub(crate) hot: CachePadded<Hot>,
    pub(crate) classes: [ClassCounters; NUM_CLASSES],
    pub(crate) meta: CachePadded<Meta>,
}

/// Whether an update comes from the shard's single owner or from any thread.
pub(crate) trait Writer {
    fn add(counter: &AtomicU64, v: u64);
    fn live(shard: &Shard, delta: i64);
}

/// The owning thread: plain load + store.
pub(crate) enum Owner {}
/// Anyone (the overflow shard): atomic adds.
pub(crate) enum Anyone {}

impl Writer for Owner {
    #[inline(always)]
    fn add(counter: &AtomicU64, v: u64) {
        owned_add(counter, v);
    }
    #[inline(always)]
    fn live(shard: &Shard, delta: i64) {
        let pending = shard.hot.pending.load(Ordering::Relaxed).wrapping_add(delta);
        if pending.unsigned_abs() < live::FLUSH_BYTES {
            shard.hot.pending.store(pending, Ordering::Relaxed);
        } else {
            shard.hot.pending.store(0, Ordering::Relaxed);
            live::flush(pending);
        }
    }
}

impl Writer for Anyone {
    #[inline]
    fn add(counter: &AtomicU64, v: u64) {
        shared_add(counter, v);
    }
    #[inline]
    fn live(_: &Shard, delta: i64) {
        live::flush(delta);
    }
}

impl Shard {
    pub(crate) const fn new() -> Self {
        Self {
            hot: CachePadded(Hot { reallocs: AtomicU64::new(0), pending: AtomicI64::new(0) }),
            classes: [const { ClassCounters::new() }; NUM_CLASSES],
            meta: CachePadded(Meta {
                state: AtomicU8::new(0),
                generation: AtomicU64::new(0),
                tid: AtomicU64::new(0),
                name: [const { AtomicU64::new(0) }; 2],
                base: [const { AtomicU64::new(0) }; Totals::FIELDS],
            }),
        }
    }

    #[inline(always)]
    pub(crate) fn on_alloc<W: Writer>(&self, class: usize, size: usize, usable: usize) {
        if let Some(row) = self.classes.get(class) {
            W::add(&row.allocs, 1);
            W::add(&row.req_in, size as u64);
            W::add(&row.usable_in, usable as u64);
        }
        W::live(self, size as i64);
    }

    #[inline(always)]
    pub(crate) fn on_dealloc<W: Writer>(&self, class: usize, size: usize, usable: usize) {
        if let Some(row) = self.classes.get(class) {
            W::add(&row.frees, 1);
            W::add(&row.req_out, size as u64);
            W::add(&row.usable_out, usable as u64);
        }
        W::live(self, (size as i64).wrapping_neg());
    }

    /// A reallocation moves the block out of its old class and into its new one.
    #[inline(always)]
    pub(crate) fn on_realloc<W: Writer>(&self, old: (usize, usize, usize), new: (usize, usize, usize)) {
        W::add(&self.hot.reallocs, 1);
        if let Some(row) = self.classes.get(old.0) {
            W::add(&row.frees, 1);
            W::add(&row.req_out, old.1 as u64);
            W::add(&row.usable_out, old.2 as u64);
        }
        if let Some(row) = self.classes.get(new.0) {
            W::add(&row.allocs, 1);
            W::add(&row.req_in, new.1 as u64);
            W::add(&row.usable_in, new.2 as u64);
        }
        W::live(self, (new.1 as i64).wrapping_sub(old.1 as i64));
    }

    /// Folds the owner's not-yet-published live delta into the process-wide counter.
    pub(crate) fn flush_pending(&self) {
        let pending = self.hot.pending.swap(0, Ordering::Relaxed);
        if pending != 0 {
            live::flush(pending);
        }
    }

    /// Thread-level totals accumulated in this shard since it was first used. Allocation-free.
    pub(crate) fn totals(&self) -> Totals {
        let mut t = Totals { reallocations: self.hot.reallocs.load(Ordering::Relaxed), ..Totals::default() };
        for row in &self.classes {
            t.allocations += row.allocs.load(Ordering::Relaxed);
            t.deallocations += row.frees.load(Ordering::Relaxed);
            t.allocated_bytes += row.req_in.load(Ordering::Relaxed);
            t.freed_bytes += row.req_out.load(Ordering::Relaxed);
        }
        // Class rows count both sides of every reallocation; thread totals count it once, as such.
        t.allocations = t.allocations.saturating_sub(t.reallocations);
        t.deallocations = t.deallocations.saturating_sub(t.reallocations);
        t
    }

    pub(crate) fn base(&self) -> Totals {
        Totals::from_array(core::array::from_fn(|i| self.meta.base[i].load(Ordering::Relaxed)))
    }

    pub(crate) fn set_base(&self, t: Totals) {
        for (slot, v) in self.meta.base.iter().zip(t.to_array()) {
            slot.store(v, Ordering::Relaxed);
        }
    }

    pub(crate) fn set_name(&self, bytes: [u8; 16]) {
        let lo = u64::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7]]);
        let hi =
            u64::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]]);
        self.meta.name[0].store(lo, Ordering::Relaxed);
        self.meta.name[1].store(hi, Ordering::Relaxed);
    }

    pub(crate) fn name(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.meta.name[0].load(Ordering::Relaxed).to_le_bytes());
        out[8..].copy_from_slice(&self.meta.name[1].load(Ordering::Relaxed).to_le_bytes());
        out
    }
}
