//! Allocation sites: which code allocates the blocks that stay resident, cross threads or live long.
//!
//! Every block the sampler picks (`sampler`) walks its stack (`unwind`: the unwind tables built from
//! each module's `.eh_frame`, or the frame-pointer chain in a build that keeps frame pointers) and
//! interns it in a fixed table of sites (`site_table`); the site goes into the block's
//! side-table entry, and its free (on which thread, after how long) is credited to the site. Nothing
//! here allocates or locks on the allocation path.
//!
//! Read the sites through [`Report::sites`](crate::Report::sites) (the top sites by bytes in use,
//! with their leaf frames) or as a pprof heap profile (`frag::profile::heap_pprof`).

mod last;
pub(crate) mod read;
pub(crate) mod site_table;
pub(crate) mod symbols;
pub(crate) mod unwind;

use crate::estimate::SampleSums;
use crate::sync::{AtomicBool, AtomicU64, Ordering};
pub(crate) use site_table::CAPACITY as SITE_CAPACITY;
pub(crate) use site_table::NO_SITE;
pub(crate) use site_table::SITES;
pub use symbols::keep_symbol_cache;
use unwind::{ColdFrame, Frames, MAX_FRAMES};
pub use unwind::{UnwindTables, Unwinder};

/// How this build captures the stacks of sampled allocations: [`Unwinder::UnwindTables`] on x86-64
/// Linux in any build, [`Unwinder::FramePointers`] in a build with `-C force-frame-pointers=yes`.
///
/// ```
/// assert_ne!(frag::sites::unwinder(), frag::sites::Unwinder::None, "no stacks on this target");
/// ```
#[must_use]
pub const fn unwinder() -> Unwinder {
    unwind::UNWINDER
}

/// Whether sampled allocations capture their stack (on unless [`set_stacks`] turned it off).
static STACKS: AtomicBool = AtomicBool::new(true);

/// Turns stack capture on or off for the allocations sampled from now on. Off, a sample costs no
/// walk and its site is "no stack"; the sampler, the origin and every other estimate are unchanged.
/// On by default.
///
/// ```
/// frag::sites::set_stacks(false);
/// assert!(!frag::sites::stacks());
/// frag::sites::set_stacks(true);
/// ```
pub fn set_stacks(on: bool) {
    STACKS.store(on, Ordering::Relaxed);
}

/// Whether sampled allocations capture their stack (see [`set_stacks`]).
#[must_use]
pub fn stacks() -> bool {
    STACKS.load(Ordering::Relaxed)
}

/// Brings the unwind tables up to date with the modules loaded now: builds the rows of libraries
/// loaded with `dlopen` since the last call, and drops those of libraries unloaded. Does nothing
/// when nothing was loaded or unloaded, or when the unwinder is not [`Unwinder::UnwindTables`].
///
/// The tables of the executable and the libraries it starts with are built before `main`;
/// `frag::report()` and the `frag::Publisher`'s ticks call this too (not the reclaimer's rounds,
/// which are paid from its CPU budget). Call it yourself right after a `dlopen` whose code allocates, for stacks through
/// that code from its first sample. Allocates and takes the dynamic loader's lock.
///
/// ```no_run
/// frag::sites::refresh_unwind_tables();
/// ```
pub fn refresh_unwind_tables() {
    let Some(_guard) = crate::reentry::Guard::enter() else { return };
    crate::own::run(unwind::refresh);
}

/// What the unwind tables hold now; `None` for the other unwinders.
#[must_use]
pub fn unwind_tables() -> Option<UnwindTables> {
    unwind::summary()
}

/// The site of the allocation being sampled in scope `scope`, standing for `weighted` bytes: its
/// stack, walked from `entry` (or the thread's last walk's, when it would repeat: `last`) and
/// interned; [`NO_SITE`] while stacks are off, without a stack (no unwinder, stack memory the system
/// would not prove readable, no tables yet) or when the table is full. A walk on a stack the program
/// switched to counts its bytes ([`switched_bytes`]).
// Never inlined: `scripts/instructions.py` counts the stack walk's cost per request by this
// function's name (inclusive), and fails where the name is gone.
#[cold]
#[inline(never)]
pub(crate) fn capture(entry: ColdFrame, scope: u16, weighted: u64) -> u32 {
    if !STACKS.load(Ordering::Relaxed) {
        return NO_SITE;
    }
    let site = last::site(entry, scope);
    if unwind::took_switched() {
        SWITCHED_BYTES.fetch_add(weighted, Ordering::Relaxed);
    }
    site
}

/// Estimated bytes allocated by the samples walked on switched stacks.
static SWITCHED_BYTES: AtomicU64 = AtomicU64::new(0);

/// Estimated bytes allocated by the samples walked on stacks the program switched to.
pub(crate) fn switched_bytes() -> u64 {
    SWITCHED_BYTES.load(Ordering::Relaxed)
}

/// The stack from `entry` into `out`, leaf first; the number of frames (0 while stacks are off).
#[cfg_attr(not(feature = "jemalloc"), allow(dead_code))] // used by `hooked` alone
pub(crate) fn walk(entry: ColdFrame, out: &mut Frames) -> usize {
    if !STACKS.load(Ordering::Relaxed) {
        return 0;
    }
    let depth = unwind::capture(entry, out, None);
    // jemalloc's profiler weighs its sample later: a switched stack's walk is counted, its bytes not.
    let _ = unwind::took_switched();
    depth
}

/// The site of the first `depth` frames of `frames` (a stack walked earlier) in scope `scope`,
/// interned.
#[cfg_attr(not(feature = "jemalloc"), allow(dead_code))] // used by `hooked` alone
pub(crate) fn intern(frames: &Frames, depth: usize, scope: u16) -> u32 {
    SITES.intern(frames, depth, scope)
}

/// The calling function's stack, captured as a sampled allocation's is, into `out`; returns the
/// number of frames. For the unwind bench (`benches/unwind.rs`), not an API.
#[doc(hidden)]
#[inline(never)]
pub fn capture_for_bench(out: &mut [usize; MAX_FRAMES]) -> usize {
    unwind::capture(ColdFrame::here(), out, None)
}

/// A block sampled at `site`, adding `sums` to the estimates, is in the side table.
pub(crate) fn arrived(site: u32, sums: SampleSums) {
    SITES.tallies(site).sampled(sums);
}

/// A sampled block was freed (or reallocated), by another thread than the allocating one when
/// `cross`.
pub(crate) fn departed(site: u32, sums: SampleSums, cross: bool, lifetime_ns: u64) {
    SITES.tallies(site).freed(sums, cross, lifetime_ns);
}
