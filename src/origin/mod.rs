//! Allocation origin: which thread allocated each block that a thread frees.
//!
//! In a work-stealing runtime a block is usually freed on another thread than the one that allocated
//! it, and most allocators handle such *cross-thread frees* worse than local ones (they go back to the
//! allocating thread's cache or arena, later or through a slower path, and pin its pages meanwhile).
//! This module estimates that share without changing any block's layout:
//!
//! - **eligibility** (`gate`): only blocks at addresses in a keyed-hash subset (and every large
//!   block) can be sampled, so that every other free needs no look-up;
//! - **sampling** (`sampler`): a per-thread countdown over the eligible operations picks blocks at
//!   allocation, about one small block in [`Sampling::OneIn`]`(n)` overall and large blocks in
//!   proportion to their size;
//! - **a side table** (`table`) remembers each sampled block's allocating thread, size and birth
//!   time; only a free of an eligible block looks it up; the entry is removed before the block goes
//!   back to the allocator, and moved by `realloc`, so a recycled address is never attributed to its previous owner;
//! - **tallies** (`tally` and each thread's shard): weighted by the inverse sampling probability,
//!   per thread (local frees, frees of its blocks elsewhere, frees it made of others' blocks), per
//!   size class, per lifetime decade, and per (allocating thread → freeing thread) pair.
//!
//! A reallocated block keeps its origin: it counts as freed by the thread that finally frees it,
//! and as allocated by the thread that first allocated it.

pub(crate) mod gate;
pub(crate) mod sampler;
pub(crate) mod table;
pub(crate) mod tally;

use core::fmt;

use crate::sites::unwind::Entry as Frame;
use crate::sites::{self, Mark};
use crate::stats::class::class_of;
use crate::stats::pool::{self, Me};
use crate::stats::shard::{Shard, origin_field};
use crate::sync::{AtomicBool, Ordering};
use sampler::{Countdown, W_ONE};
use table::{Entry, Table};
use tally::Tally;

pub(crate) static TABLE: Table = Table::new();
pub(crate) static TALLY: Tally = Tally::new();

/// Default rate: about one small block in 2^10 = 1024.
pub(crate) const DEFAULT_RATE_LOG2: u64 = 10;

/// How many blocks origin tracking samples.
///
/// Set it with [`set_sampling`] or [`Tracked::with_sampling`](crate::Tracked::with_sampling). The
/// cost on the allocation path does not depend on the rate: a block can only be sampled if its
/// address falls in a subset chosen by a keyed hash (one address in 64 at the default rate, every
/// block above 32 KiB; the key is drawn per process), so every other free knows from its pointer
/// alone that there is nothing to look up. Operations on those eligible blocks take the cold path (a
/// countdown, and on free a look-up in the side table of sampled blocks); each sampled block costs a
/// few hundred nanoseconds there.
///
/// **Bias.** Eligible blocks are charged and weighted 64 times as much, so the estimates keep their
/// rate and are unbiased over the random key. But eligibility belongs to an address: a workload that
/// reuses a few addresses over and over (one block allocated and freed in a tight loop) is either
/// seen through all of them or through none, so its estimates vary more between processes than the
/// sample count suggests. Workloads with many live blocks at many addresses are not affected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Sampling {
    /// No origin tracking. The report has no `origin` section.
    Off,
    /// Every block: exact figures, for tests and debugging. Every allocation and free takes the cold
    /// path (about 100 ns per allocation + free, 12 to 20 times an untracked jemalloc pair), and live
    /// blocks beyond the side table's capacity (16,384) are dropped from the figures. Once set, frees
    /// keep taking the cold path for the rest of the process, even after a coarser rate is set (they
    /// must still find the blocks sampled now).
    EveryBlock,
    /// About one block of `n` among small blocks; a block of `s` bytes is sampled with probability
    /// about `1 - exp(-(s + 8 KiB) / (n × 8 KiB))`, so large blocks, which hold most bytes, more often.
    /// `n` is rounded up to a power of two (at most 2^31); 1 is the same as `EveryBlock`. Below 1024
    /// the eligible share of addresses grows (every address from 16 down), and with it the cost.
    OneIn(u32),
}

impl Sampling {
    /// The default: about one small block in 1024. Chosen from measurements: 1,000,000 small
    /// allocations give about 1,000 samples and a cross-thread ratio within ±3 points (95%), while
    /// the sampling events cost nothing measurable next to the base bookkeeping (see README).
    pub const DEFAULT: Self = Self::OneIn(1 << DEFAULT_RATE_LOG2);

    /// The rate as log2 of "one in N", or `None` for `Off`.
    const fn rate_log2(self) -> Result<Option<u32>, SamplingError> {
        match self {
            Self::Off => Ok(None),
            Self::EveryBlock => Ok(Some(0)),
            Self::OneIn(0) => Err(SamplingError::Zero),
            // Above 2^31 there is no power of two in a u32: the rarest rate is one in 2^31.
            Self::OneIn(n) => match n.checked_next_power_of_two() {
                Some(p) => Ok(Some(p.trailing_zeros())),
                None => Ok(Some(31)),
            },
        }
    }

    fn from_log2(r: Option<u32>) -> Self {
        match r {
            None => Self::Off,
            Some(0) => Self::EveryBlock,
            Some(r) => Self::OneIn(1u32.checked_shl(r).unwrap_or(1 << 31)),
        }
    }
}

impl Default for Sampling {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A [`Sampling`] that cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SamplingError {
    /// `OneIn(0)`: "one in zero" means nothing; use `EveryBlock` or `Off`.
    Zero,
}

impl fmt::Display for SamplingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Zero => f.write_str("Sampling::OneIn(0) is not a rate: use Sampling::EveryBlock or Sampling::Off"),
        }
    }
}

impl std::error::Error for SamplingError {}

/// Sets the sampling of origin tracking for the whole process, from now on. Threads pick the new
/// rate up at their next sampling event; blocks sampled before keep the weight they were sampled with.
///
/// Returns the effective setting (`OneIn(n)` rounded up to a power of two).
///
/// # Errors
///
/// [`SamplingError::Zero`] for `OneIn(0)`.
///
/// # Example
///
/// ```no_run
/// #[global_allocator]
/// static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
///
/// // Exact figures while debugging a test:
/// frag::set_sampling(frag::Sampling::EveryBlock).unwrap();
/// ```
pub fn set_sampling(s: Sampling) -> Result<Sampling, SamplingError> {
    let r = s.rate_log2()?;
    EXPLICIT.store(true, Ordering::Relaxed);
    gate::adapt(r);
    sampler::set_rate_log2(r);
    Ok(Sampling::from_log2(r))
}

/// Whether `set_sampling` was called: a `Tracked`'s configured sampling then no longer applies.
static EXPLICIT: AtomicBool = AtomicBool::new(false);

/// The current sampling setting.
#[must_use]
pub fn sampling() -> Sampling {
    Sampling::from_log2(sampler::rate_log2())
}

/// Applies a `Tracked`'s configured sampling at registration (first allocation in the process).
pub(crate) fn configure(s: Sampling) {
    // An invalid const configuration (OneIn(0)) keeps the default; the report warns about it. A
    // rate set at run time before the first allocation of this `Tracked` (when it is not the global
    // allocator) wins.
    if let (Ok(r), false) = (s.rate_log2(), EXPLICIT.load(Ordering::Relaxed)) {
        gate::adapt(r);
        sampler::set_rate_log2(r);
    }
}

/// Monotonic nanoseconds, from the vDSO: no allocation, no lock.
fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC is always available on our targets.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// An eligible block (see `gate`) was just allocated at `ptr` and counted in `shard` by its writer
/// `W`: take its charge off the countdowns, and sample it (for its origin, its site, or both) if an
/// event is due. `frame` leads to the allocating code's stack (see `sites::unwind`).
#[cold]
#[inline(never)]
pub(crate) fn on_alloc<W: Countdown>(shard: &'static Shard, ptr: *mut u8, size: usize, frame: Frame) {
    let (charge, shift) = sampler::charge(size);
    let weight = match sampler::consume::<W>(shard, charge) {
        Some(Some(rate)) => sampler::weight(charge, shift, rate),
        _ => 0.0,
    };
    let site = sites::pick::<W>(shard, size, frame);
    if weight > 0.0 || site.is_some() {
        sample(ptr, size, weight, site);
    }
}

/// An eligible block at `ptr` is being freed, before it goes back to the allocator: settle its entry
/// if it was sampled, and take its charge off the countdown of `shard` (its writer `W`).
#[cold]
#[inline(never)]
pub(crate) fn on_free<W: Countdown>(shard: &'static Shard, ptr: *mut u8, size: usize) {
    if let Some(e) = TABLE.remove(ptr) {
        record_free(&pool::me(), e);
    }
    let _ = sampler::consume::<W>(shard, sampler::charge(size).0);
}

/// Puts the block at `ptr` in the side table, with the weight it was sampled at for its origin (0:
/// not sampled for its origin) and its site mark.
fn sample(ptr: *mut u8, size: usize, weight: f64, site: Option<Mark>) {
    // Before the key is drawn (the first claim draws it) a free could not tell the block is sampled.
    if !gate::keyed() || !gate::eligible(ptr, size) {
        return;
    }
    let me = pool::me();
    let entry = Entry { tid: me.tid, slot: me.slot, size: size as u64, weight, born: now_ns(), site: Mark::pack(site) };
    if TABLE.insert(ptr, entry) {
        if weight > 0.0 {
            TALLY.sampled.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(m) = site {
            sites::taken(m, size);
        }
    }
}

/// A reallocation, as far as origin tracking is concerned: the old block and its entry, if it was
/// sampled; then the new one, once the allocator returned it.
pub(crate) struct Move {
    old: *mut u8,
    entry: Option<Entry>,
}

impl Move {
    /// Before the inner `realloc`: a sampled block's entry is taken out while the allocator may
    /// recycle its address.
    #[inline(always)]
    pub(crate) fn start(ptr: *mut u8, size: usize) -> Self {
        Self { old: ptr, entry: if gate::eligible(ptr, size) { take(ptr) } else { None } }
    }

    /// The inner `realloc` failed: the old block is untouched, its entry goes back.
    #[inline(always)]
    pub(crate) fn failed(self) {
        if let Some(e) = self.entry {
            put_back(self.old, e);
        }
    }

    /// The block now lives at `ptr` with `size` bytes and was counted in `shard` by `W`.
    #[inline(always)]
    pub(crate) fn finish<W: Countdown>(self, shard: &'static Shard, ptr: *mut u8, size: usize) {
        let new_eligible = gate::eligible(ptr, size);
        if new_eligible || self.entry.is_some() {
            moved::<W>(shard, self, ptr, size, new_eligible);
        }
    }
}

#[cold]
#[inline(never)]
fn take(ptr: *mut u8) -> Option<Entry> {
    TABLE.remove(ptr)
}

#[cold]
#[inline(never)]
fn put_back(ptr: *mut u8, e: Entry) {
    TABLE.insert(ptr, e);
}

/// The cold half of [`Move::finish`]. A sampled block keeps its entry (and its origin and site) if
/// its new address is eligible too. Moving to a new small address keeps it with probability `2^-E`,
/// so a survivor stands for `2^E` times as many blocks: its weights grow by that factor and the
/// estimates stay unbiased. In place, the address stays eligible: nothing changes but the size.
/// Called directly by `Tracked::realloc` (its frame leads to the reallocating code's stack).
#[cold]
#[inline(never)]
fn moved<W: Countdown>(shard: &'static Shard, m: Move, ptr: *mut u8, size: usize, new_eligible: bool) {
    let frame = Frame::here();
    if let Some(mut e) = m.entry {
        let (old_size, old_site) = (e.size, Mark::unpack(e.site));
        let mut kept = None;
        // An entry whose new address is not eligible is let go: the survivors' weights stand for it.
        // A full neighbourhood drops it, and the table counts that.
        if new_eligible {
            let factor = if ptr == m.old { 1.0 } else { (1u64 << gate::shift_for(size)) as f64 };
            let new_site = old_site.map(|o| Mark { site: o.site, weight: (f64::from(o.weight) * factor) as f32 });
            e.weight *= factor;
            e.site = Mark::pack(new_site);
            e.size = size as u64;
            kept = TABLE.insert(ptr, e).then_some(new_site);
        }
        match (old_site, kept) {
            (Some(o), Some(Some(n))) => sites::moved(o, old_size, n, size as u64),
            (Some(o), _) => sites::let_go(o, old_size),
            (None, _) => {}
        }
    }
    if new_eligible {
        let (charge, shift) = sampler::charge(size);
        let weight = match sampler::consume::<W>(shard, charge) {
            Some(Some(rate)) => sampler::weight(charge, shift, rate),
            _ => 0.0,
        };
        // A block already sampled keeps its entry: only a new one is offered to the site sampler.
        if m.entry.is_none() {
            let site = sites::pick::<W>(shard, size, frame);
            if weight > 0.0 || site.is_some() {
                sample(ptr, size, weight, site);
            }
        }
    }
}

fn record_free(me: &Me, e: Entry) {
    let cross = e.tid != me.tid;
    let lifetime_ns = now_ns().saturating_sub(e.born);
    if let Some(m) = Mark::unpack(e.site) {
        sites::freed(m, e.size, cross, lifetime_ns);
    }
    if e.weight <= 0.0 {
        // Sampled for its site only.
        return;
    }
    let w_f = e.weight;
    let w = ((w_f * W_ONE as f64).round() as u64).max(1);
    let wb = (w_f * e.size as f64 * W_ONE as f64).round() as u64;
    let w2 = (w_f * w_f).round().max(1.0) as u64;
    let add = |shard: &Shard, field: usize, v: u64| {
        if let Some(c) = shard.origin.get(field) {
            c.fetch_add(v, Ordering::Relaxed);
        }
    };
    if cross {
        add(me.shard, origin_field::REMOTE, w);
        add(me.shard, origin_field::REMOTE + 1, wb);
        add(me.shard, origin_field::REMOTE_W2, w2);
        let owner = match e.slot {
            Some((index, generation)) => pool::slot_if_generation(index, generation),
            None => Some(pool::overflow()),
        };
        match owner {
            Some(owner) => {
                add(owner, origin_field::ELSEWHERE, w);
                add(owner, origin_field::ELSEWHERE + 1, wb);
            }
            None => {
                TALLY.retired_elsewhere[0].fetch_add(w, Ordering::Relaxed);
                TALLY.retired_elsewhere[1].fetch_add(wb, Ordering::Relaxed);
            }
        }
    } else {
        add(me.shard, origin_field::LOCAL, w);
        add(me.shard, origin_field::LOCAL + 1, wb);
        add(me.shard, origin_field::LOCAL_W2, w2);
    }
    TALLY.free(&tally::SampledFree {
        class: class_of(e.size as usize),
        cross,
        lifetime_ns,
        alloc_tid: e.tid,
        free_tid: me.tid,
        w,
        wb,
    });
}
