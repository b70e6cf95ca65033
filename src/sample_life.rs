//! A sampled block's life, below both front ends that take samples (`Tracked`'s cold path, and the
//! hooks that take jemalloc's: `hooked`): it arrives ([`entry`], then [`arrived`] once the side
//! table holds it), it is counted in a shard ([`home_of`]) and in the origin, site and scope tallies
//! (`scope`: the scope current on the allocating thread), and it departs, freed or reallocated away
//! ([`departed`]). Whatever follows every sample attaches here: the tallies, and the OpenTelemetry
//! memory probes that tracers attach to (`usdt`), fired as the sample arrives and as it departs.
//! The functions that fire them are never inlined, so that each probe has one site in a binary
//! (two for `alloc`: [`arrived`] and [`stayed`]) and tracers attach one uprobe per site.
//!
//! A sample of frag's own work (`own`) has no site or scope and stays out of the tallies,
//! which are the program's; it counts in frag's own shard from its arrival to its departure,
//! whichever thread frees it.

use crate::estimate::SampleSums;
use crate::origin;
use crate::sampler::{self, side_table::SampledBlock};
use crate::scope;
use crate::sites;
use crate::stats::live;
use crate::stats::pool::{self, CallingThread, Home};
use crate::stats::shard::Shard;
use crate::usdt;

/// The entry of a block of `size` bytes requested, weighing `weight` (the inverse of its sampling
/// probability), sampled now by the calling thread in its current scope; its site from `site` (given
/// the scope), which frag's own work does not call (its samples have none). `marked`, `lead` and `twin` as in
/// [`SampledBlock`].
#[inline(always)]
pub(crate) fn entry(
    size: u64,
    weight: f64,
    site: impl FnOnce(u16) -> u32,
    marked: bool,
    lead: u16,
    twin: usize,
) -> SampledBlock {
    let frag = pool::frag_work();
    let caller = pool::calling_thread();
    let scope = if frag { scope::NONE } else { scope::current_slot() };
    SampledBlock {
        tid: caller.tid,
        slot: caller.slot,
        size,
        weight,
        born: sampler::now_ns(),
        site: if frag { sites::NO_SITE } else { site(scope) },
        marked,
        lead,
        twin,
        frag,
        scope,
    }
}

/// The sample `e` at `user` (the address handed to the program) arrived: the side table holds it.
/// Counted in the origin, site and scope tallies; `otel_memory:alloc` fires.
#[inline(never)]
pub(crate) fn arrived(e: &SampledBlock, user: *const u8) {
    if e.frag {
        return;
    }
    let sums = SampleSums::of(e.weight, e.size);
    origin::arrived(e.size, sums);
    sites::arrived(e.site, sums);
    scope::arrived(e.scope, sums);
    usdt::alloc(user, e.size, e.weight);
}

/// The sample `e` at `user` departed, freed (or reallocated away) by the thread `caller`, which still
/// holds the block: [`departing`], then [`counted_out`].
pub(crate) fn departed(caller: &CallingThread, e: &SampledBlock, user: *const u8) {
    departing(e, user);
    counted_out(caller, e);
}

/// The sample `e` at `user` is departing: `otel_memory:free` fires, while the caller still holds the
/// block (its address cannot have gone to another sample yet). A reallocation in place calls this
/// before the allocator moves the block, then [`counted_out`], or [`stayed`] if the allocator failed.
#[inline(never)]
pub(crate) fn departing(e: &SampledBlock, user: *const u8) {
    if !e.frag {
        usdt::free(user);
    }
}

/// The sample `e`, departed by the thread `caller`: counted_out in the origin, site and scope tallies.
pub(crate) fn counted_out(caller: &CallingThread, e: &SampledBlock) {
    if e.frag {
        return;
    }
    let lifetime_ns = sampler::now_ns().saturating_sub(e.born);
    let sums = SampleSums::of(e.weight, e.size);
    origin::departed(caller, e, sums, lifetime_ns);
    sites::departed(e.site, sums, e.tid != caller.tid, lifetime_ns);
    scope::departed(e.scope, sums, lifetime_ns);
}

/// The sample `e` at `user` was [`departing`], and stays: the reallocation failed, the block is
/// untouched and its entry is back in the side table. `otel_memory:alloc` fires again (its tallies
/// never moved).
#[inline(never)]
pub(crate) fn stayed(e: &SampledBlock, user: *const u8) {
    if !e.frag {
        usdt::alloc(user, e.size, e.weight);
    }
}

/// Where the counts of sample `e` go, on a thread whose own are in `home`: frag's own shard for
/// frag's samples wherever they are freed, and the overflow shard for the program's samples that
/// frag's own work frees (neither happens once a value is handed over: `own::handed_over`).
pub(crate) fn home_of(e: &SampledBlock, home: Home) -> Home {
    match (e.frag, home) {
        (true, Home::Frag(_)) | (false, Home::Owned(_) | Home::Overflow(_)) => home,
        (true, _) => Home::Frag(pool::frag()),
        (false, Home::Frag(_)) => Home::Overflow(pool::overflow()),
    }
}

/// Folds the owner's live figure into the process's once `moved` bytes went through its shard since
/// the last time.
#[inline]
pub(crate) fn fold_live_if_due(s: &Shard, moved: u64) {
    if moved >= live::FOLD_BYTES {
        fold_live(s);
    }
}

/// Folds the owner's live figure in ([`fold_live_if_due`]'s work, out of line: once in many samples).
#[cold]
#[inline(never)]
fn fold_live(s: &Shard) {
    s.fold_live();
    s.hot.clock.folded();
}
