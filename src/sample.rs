//! A sampled block's life, below both front ends that take samples (`Tracked`'s cold path, and the
//! hooks that take jemalloc's: `hooked`): it arrives ([`entry`], then [`arrived`] once the side
//! table holds it), it is counted in a shard ([`home_of`]) and in the origin, site and scope tallies
//! (`scope`: the scope current on the allocating thread), and it departs, freed or reallocated away
//! ([`departed`]). Whatever follows every sample attaches here.
//!
//! A sample of frag's own work (`own`) has no site or scope and stays out of the tallies,
//! which are the program's; it counts in frag's own shard from its arrival to its departure,
//! whichever thread frees it.

use crate::estimate::SampleSums;
use crate::origin;
use crate::sampler::{self, table::SampledBlock};
use crate::scope;
use crate::sites;
use crate::stats::live;
use crate::stats::pool::{self, CallingThread, Home};
use crate::stats::shard::Shard;

/// The entry of a block of `size` bytes requested, weighing `weight` (the inverse of its sampling
/// probability), sampled now by the calling thread in its current scope; its site from `site` (given
/// the scope), which frag's own work does not call (its samples have none). `marked` and `twin` as in [`SampledBlock`].
#[inline(always)]
pub(crate) fn entry(size: u64, weight: f64, site: impl FnOnce(u16) -> u32, marked: bool, twin: usize) -> SampledBlock {
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
        twin,
        frag,
        scope,
    }
}

/// The sample `e` arrived: the side table holds it. Counted in the origin and site tallies.
pub(crate) fn arrived(e: &SampledBlock) {
    if e.frag {
        return;
    }
    let sums = SampleSums::of(e.weight, e.size);
    origin::arrived(e.size, sums);
    sites::arrived(e.site, sums);
    scope::arrived(e.scope, sums);
}

/// The sample `e` departed, freed (or reallocated away) by the thread `caller`: settled in the
/// origin and site tallies.
pub(crate) fn departed(caller: &CallingThread, e: &SampledBlock) {
    if e.frag {
        return;
    }
    let lifetime_ns = sampler::now_ns().saturating_sub(e.born);
    let sums = SampleSums::of(e.weight, e.size);
    origin::departed(caller, e, sums, lifetime_ns);
    sites::departed(e.site, sums, e.tid != caller.tid, lifetime_ns);
    scope::departed(e.scope, sums, lifetime_ns);
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

/// Publishes the owner's live figure once `moved` bytes went through its shard since the last time.
pub(crate) fn publish_if_due(s: &Shard, moved: u64) {
    if moved >= live::PUBLISH_BYTES {
        s.publish_all();
        s.hot.clock.published();
    }
}
