//! One shard of counters: a size-class table plus a few per-thread figures.
//!
//! A shard is written by exactly one thread at a time (its owner) with relaxed load + store, or, for
//! the shared overflow shard, by anyone with atomic adds. Counters only ever grow; live figures are
//! differences taken at report time, summed over all shards, so a block allocated on one thread and
//! freed on another balances out in the totals without any shard going negative.

use crate::estimate::whole_and_fraction;
use crate::stats::class::{Class, NUM_CLASSES, ROW_WORDS};
use crate::stats::clock::Clock;
use crate::stats::live;
use crate::sync::{AtomicU8, AtomicU64, CachePadded, Ordering, owned_add, shared_add};

/// How a block's usable size is accounted for (the backends decide which: `backend::usable`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(any(feature = "jemalloc", feature = "snmalloc")), allow(dead_code))]
pub(crate) enum Usable {
    /// The class's uniform usable size (computed at report time).
    Uniform,
    /// This many bytes, recorded with the block and counted as an exception to the class's uniform
    /// size.
    Explicit(usize),
    /// This many bytes, recorded with the block, on a backend where every block records its usable
    /// size (glibc): no count of exceptions is kept, the report sums what was recorded.
    Recorded(usize),
    /// Unknown: the requested size stands in.
    Requested,
}

/// Counters for one size class in one shard: exactly one cache line ([`ROW_WORDS`] words), so an
/// update touches one line.
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
    /// Usable bytes of blocks whose usable size was recorded explicitly (see `backend::usable`).
    pub(crate) usable_in: AtomicU64,
    pub(crate) usable_out: AtomicU64,
    /// Number of such blocks that entered / left the class.
    pub(crate) explicit_in: AtomicU64,
    pub(crate) explicit_out: AtomicU64,
}

const _: () = assert!(size_of::<ClassCounters>() == ROW_WORDS * size_of::<AtomicU64>());

impl ClassCounters {
    const fn new() -> Self {
        Self {
            allocs: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            req_in: AtomicU64::new(0),
            req_out: AtomicU64::new(0),
            usable_in: AtomicU64::new(0),
            usable_out: AtomicU64::new(0),
            explicit_in: AtomicU64::new(0),
            explicit_out: AtomicU64::new(0),
        }
    }

    /// Requested bytes live in this class of this shard (can be "negative": blocks freed here that
    /// were allocated elsewhere), as a wrapping difference.
    fn net(&self) -> u64 {
        self.req_in.load(Ordering::Relaxed).wrapping_sub(self.req_out.load(Ordering::Relaxed))
    }
}

/// `x` rounded down, plus one with the probability of its fraction (`random`: 64 random bits): an
/// integer whose expectation is `x`, for `x` in [0, 2^63) (0 below, `i64::MAX` above:
/// `estimate::whole_and_fraction`).
fn round_at_random(x: f64, random: u64) -> u64 {
    let u = (random >> 11) as i64 as f64 / (1u64 << 53) as f64;
    match whole_and_fraction(x) {
        Ok((whole, fraction)) => whole + u64::from(fraction > u),
        Err(rounded) => rounded,
    }
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
    /// Origin estimates (see `origin`), in weighted fixed point.
    pub(crate) origin: OriginTotals,
}

/// Origin estimates of one thread (or several), from sampled blocks. Counts and bytes are weighted by
/// the inverse sampling probability and kept in fixed point (`estimate::W_ONE` = 1.0); the
/// squared weights (plain integers) give the estimate's variance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct OriginTotals {
    /// Frees this thread made of blocks it allocated itself.
    pub(crate) local: u64,
    pub(crate) local_bytes: u64,
    /// Frees other threads made of blocks this thread allocated.
    pub(crate) elsewhere: u64,
    pub(crate) elsewhere_bytes: u64,
    /// Frees this thread made of blocks other threads allocated.
    pub(crate) remote: u64,
    pub(crate) remote_bytes: u64,
    /// Sums of squared weights of this thread's local and remote frees.
    pub(crate) local_w2: u64,
    pub(crate) remote_w2: u64,
    /// Variances of the local and remote freed bytes (`estimate::SampleSums::bytes_var`).
    pub(crate) local_bytes_var: u64,
    pub(crate) remote_bytes_var: u64,
}

impl OriginTotals {
    pub(crate) const FIELDS: usize = 10;

    pub(crate) fn to_array(self) -> [u64; Self::FIELDS] {
        [
            self.local,
            self.local_bytes,
            self.elsewhere,
            self.elsewhere_bytes,
            self.remote,
            self.remote_bytes,
            self.local_w2,
            self.remote_w2,
            self.local_bytes_var,
            self.remote_bytes_var,
        ]
    }

    pub(crate) fn from_array(a: [u64; Self::FIELDS]) -> Self {
        Self {
            local: a[0],
            local_bytes: a[1],
            elsewhere: a[2],
            elsewhere_bytes: a[3],
            remote: a[4],
            remote_bytes: a[5],
            local_w2: a[6],
            remote_w2: a[7],
            local_bytes_var: a[8],
            remote_bytes_var: a[9],
        }
    }

    /// Reads a block of origin counters.
    pub(crate) fn read(counters: &[AtomicU64; Self::FIELDS]) -> Self {
        Self::from_array(core::array::from_fn(|i| counters[i].load(Ordering::Relaxed)))
    }
}

/// Indices into a shard's origin counters (same order as `OriginTotals::to_array`).
pub(crate) mod origin_field {
    pub(crate) const LOCAL: usize = 0;
    pub(crate) const ELSEWHERE: usize = 2;
    pub(crate) const REMOTE: usize = 4;
    pub(crate) const LOCAL_W2: usize = 6;
    pub(crate) const REMOTE_W2: usize = 7;
    pub(crate) const LOCAL_BYTES_VAR: usize = 8;
    pub(crate) const REMOTE_BYTES_VAR: usize = 9;
}

impl Totals {
    const FIELDS: usize = 5 + OriginTotals::FIELDS;

    fn to_array(self) -> [u64; Self::FIELDS] {
        let o = self.origin.to_array();
        core::array::from_fn(|i| match i {
            0 => self.allocations,
            1 => self.deallocations,
            2 => self.reallocations,
            3 => self.allocated_bytes,
            4 => self.freed_bytes,
            i => o.get(i - 5).copied().unwrap_or(0),
        })
    }

    fn from_array(a: [u64; Self::FIELDS]) -> Self {
        Self {
            allocations: a[0],
            deallocations: a[1],
            reallocations: a[2],
            allocated_bytes: a[3],
            freed_bytes: a[4],
            origin: OriginTotals::from_array(core::array::from_fn(|i| a[i + 5])),
        }
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

/// The owner's per-operation state besides the class counters: one cache line.
#[derive(Debug)]
pub(crate) struct OwnerLine {
    /// The sampling clock, which the fast path counts down on every allocation (see `stats::clock`).
    pub(crate) clock: Clock,
    pub(crate) reallocs: AtomicU64,
}

/// A slot in the pool (or the overflow shard).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Shard {
    pub(crate) hot: CachePadded<OwnerLine>,
    pub(crate) classes: [ClassCounters; NUM_CLASSES],
    /// The classes' `net()` summed, as last folded into the process-wide live counter. Touched only
    /// by `fold_live`, on events.
    folded: AtomicU64,
    /// Origin estimates, written with atomic adds (other threads credit "freed elsewhere" here).
    pub(crate) origin: CachePadded<[AtomicU64; OriginTotals::FIELDS]>,
    pub(crate) meta: CachePadded<Meta>,
}

/// Whether an update comes from the shard's single owner or from any thread.
pub(crate) trait Writer {
    /// Whether other threads may write at the same time (atomic read-modify-writes needed).
    const SHARED: bool;
    fn add(counter: &AtomicU64, v: u64);
    /// Adds `size` to one of class `class`'s requested-bytes counters (`req_in` when `entering`,
    /// else `req_out`).
    fn bytes(row: &ClassCounters, entering: bool, size: u64);
}

/// The owning thread: plain load + store.
pub(crate) enum Owner {}
/// Anyone (the overflow shard): atomic adds.
pub(crate) enum Anyone {}
/// Anyone doing frag's own work (frag's own shard, `own`): atomic adds, kept out of the process-wide
/// live figure, which is the program's.
pub(crate) enum Frag {}

impl Writer for Owner {
    const SHARED: bool = false;

    #[inline(always)]
    fn add(counter: &AtomicU64, v: u64) {
        owned_add(counter, v);
    }

    #[inline(always)]
    fn bytes(row: &ClassCounters, entering: bool, size: u64) {
        owned_add(if entering { &row.req_in } else { &row.req_out }, size);
    }
}

impl Writer for Anyone {
    const SHARED: bool = true;

    #[inline]
    fn add(counter: &AtomicU64, v: u64) {
        shared_add(counter, v);
    }

    /// The overflow shard has no single owner to fold its classes in, so it keeps the process-wide
    /// live figure exact directly.
    #[inline]
    fn bytes(row: &ClassCounters, entering: bool, size: u64) {
        Frag::bytes(row, entering, size);
        live::flush(if entering { size as i64 } else { (size as i64).wrapping_neg() });
    }
}

/// As [`Anyone`], without the process-wide live figure.
impl Writer for Frag {
    const SHARED: bool = true;

    #[inline]
    fn add(counter: &AtomicU64, v: u64) {
        Anyone::add(counter, v);
    }

    #[inline]
    fn bytes(row: &ClassCounters, entering: bool, size: u64) {
        shared_add(if entering { &row.req_in } else { &row.req_out }, size);
    }
}

impl Shard {
    pub(crate) const fn new() -> Self {
        Self {
            hot: CachePadded(OwnerLine { clock: Clock::new(), reallocs: AtomicU64::new(0) }),
            classes: [const { ClassCounters::new() }; NUM_CLASSES],
            folded: AtomicU64::new(0),
            origin: CachePadded([const { AtomicU64::new(0) }; OriginTotals::FIELDS]),
            meta: CachePadded(Meta {
                state: AtomicU8::new(0),
                generation: AtomicU64::new(0),
                tid: AtomicU64::new(0),
                name: [const { AtomicU64::new(0) }; 2],
                base: [const { AtomicU64::new(0) }; Totals::FIELDS],
            }),
        }
    }

    /// The counters of class `class`, addressed from the class's word offset (no multiply).
    #[inline(always)]
    fn row(&self, class: Class) -> &ClassCounters {
        // SAFETY: a `Class`'s index is below NUM_CLASSES (its invariant, upheld in `stats::class`),
        // the length of `classes`, and `row_words()` is that index times ROW_WORDS, the number of
        // words in a row; so the offset lands on the start of an element of `classes`.
        unsafe { &*self.classes.as_ptr().cast::<AtomicU64>().add(class.row_words()).cast::<ClassCounters>() }
    }

    /// Counts a block entering class `class` (an allocation, or the new side of a reallocation).
    #[inline(always)]
    pub(crate) fn count_in<W: Writer>(&self, class: Class, size: usize, usable: Usable) {
        let row = self.row(class);
        W::add(&row.allocs, 1);
        W::bytes(row, true, size as u64);
        match usable {
            Usable::Explicit(u) => {
                W::add(&row.usable_in, u as u64);
                W::add(&row.explicit_in, 1);
            }
            Usable::Recorded(u) => W::add(&row.usable_in, u as u64),
            Usable::Uniform | Usable::Requested => {}
        }
    }

    /// Counts a block leaving class `class` (a deallocation, or the old side of a reallocation).
    #[inline(always)]
    pub(crate) fn count_out<W: Writer>(&self, class: Class, size: usize, usable: Usable) {
        let row = self.row(class);
        W::add(&row.frees, 1);
        W::bytes(row, false, size as u64);
        match usable {
            Usable::Explicit(u) => {
                W::add(&row.usable_out, u as u64);
                W::add(&row.explicit_out, 1);
            }
            Usable::Recorded(u) => W::add(&row.usable_out, u as u64),
            Usable::Uniform | Usable::Requested => {}
        }
    }

    /// Counts a sampled block entering (`entering`) or leaving class `class` in the sampled tier: each
    /// figure weighted by `weight` (the inverse of its sampling probability), rounded to a whole
    /// number at random (up with the probability of the fraction) so that the counters stay integers
    /// and their sums unbiased. `random` is 64 random bits.
    pub(crate) fn count_weighted<W: Writer>(
        &self,
        entering: bool,
        class: Class,
        size: usize,
        usable: Usable,
        weight: f64,
        random: u64,
    ) {
        let row = self.row(class);
        let scaled = |n: usize| round_at_random(n as i64 as f64 * weight, random);
        W::add(if entering { &row.allocs } else { &row.frees }, scaled(1));
        W::bytes(row, entering, scaled(size));
        let (usable_row, explicit_row) =
            if entering { (&row.usable_in, &row.explicit_in) } else { (&row.usable_out, &row.explicit_out) };
        match usable {
            Usable::Explicit(u) => {
                W::add(usable_row, scaled(u));
                W::add(explicit_row, scaled(1));
            }
            Usable::Recorded(u) => W::add(usable_row, scaled(u)),
            Usable::Uniform | Usable::Requested => {}
        }
    }

    /// Sampled tier: a sampled reallocation stands for `weight` of them.
    pub(crate) fn count_reallocs<W: Writer>(&self, weight: f64, random: u64) {
        W::add(&self.hot.reallocs, round_at_random(weight, random));
    }

    /// A reallocation moves the block out of its old class and into its new one.
    #[inline]
    pub(crate) fn count_realloc<W: Writer>(&self, old: (usize, Usable), new: (usize, Usable)) {
        W::add(&self.hot.reallocs, 1);
        self.count_out::<W>(Class::of(old.0), old.0, old.1);
        self.count_in::<W>(Class::of(new.0), new.0, new.1);
    }

    /// Folds the shard's not-yet-folded net bytes into the process-wide live counter, in one
    /// update (so the peak sees the net of all classes at once): on events once enough bytes moved,
    /// and at thread exit, so a released shard holds nothing unfolded. Owner only.
    pub(crate) fn fold_live(&self) {
        let net = self.classes.iter().fold(0u64, |sum, row| sum.wrapping_add(row.net()));
        let delta = net.wrapping_sub(self.folded.load(Ordering::Relaxed)) as i64;
        self.folded.store(net, Ordering::Relaxed);
        if delta != 0 {
            live::flush(delta);
        }
    }

    /// Thread-level totals accumulated in this shard since it was first used. Allocation-free.
    pub(crate) fn totals(&self) -> Totals {
        let mut t = Totals {
            reallocations: self.hot.reallocs.load(Ordering::Relaxed),
            origin: OriginTotals::read(&self.origin),
            ..Totals::default()
        };
        for row in &self.classes {
            t.allocations += row.allocs.load(Ordering::Relaxed);
            t.deallocations += row.frees.load(Ordering::Relaxed);
            t.allocated_bytes += row.req_in.load(Ordering::Relaxed);
            t.freed_bytes += row.req_out.load(Ordering::Relaxed);
        }
        // Class rows count both sides of every reallocation; thread totals count it once, as such.
        t.allocations = t.allocations.saturating_sub(t.reallocations);
        t.deallocations = t.deallocations.saturating_sub(t.reallocations);
        if super::sampled() {
            // The rows hold estimates; the clock counts every byte.
            t.allocated_bytes = self.hot.clock.allocated();
        }
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
        let (lo, hi) = bytes.split_at(8);
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
        self.meta.name[0].store(word(lo), Ordering::Relaxed);
        self.meta.name[1].store(word(hi), Ordering::Relaxed);
    }

    pub(crate) fn name(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.meta.name[0].load(Ordering::Relaxed).to_le_bytes());
        out[8..].copy_from_slice(&self.meta.name[1].load(Ordering::Relaxed).to_le_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rounded at random, a figure keeps its expectation: over evenly spread random bits the mean of
    /// the rounded values is the figure itself (to the spread's resolution), and a whole figure never
    /// moves. Outside [0, 2^63) it saturates.
    #[test]
    fn rounding_at_random_keeps_the_expectation() {
        const DRAWS: u64 = 1 << 16;
        for x in [0.0, 0.25, 1.0, 5.3, 7.999, 1234.5678, (1u64 << 40) as f64 + 0.75] {
            let sum: u64 = (0..DRAWS).map(|i| round_at_random(x, i.wrapping_mul(u64::MAX / DRAWS))).sum();
            let mean = sum as f64 / DRAWS as f64;
            assert!((mean - x).abs() <= 1.0 / DRAWS as f64 + x * f64::EPSILON, "{x}: mean {mean}");
            let (lo, hi) = (x.floor() as u64, x.ceil() as u64);
            assert!((0..DRAWS).all(|i| (lo..=hi).contains(&round_at_random(x, i.wrapping_mul(0x9E37_79B9_7F4A_7C15)))));
        }
        assert_eq!((round_at_random(-3.5, 0), round_at_random(f64::NAN, 0)), (0, 0));
        assert_eq!(round_at_random(1e30, 0), i64::MAX as u64);
    }
}
