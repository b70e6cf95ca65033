//! Allocation sites: which code allocates the blocks that stay resident, cross threads or live long.
//!
//! Every block the sampler picks (`sampler`) walks its stack through the frame-pointer chain
//! (`unwind`) and interns it in a fixed table of sites (`table`); the site goes into the block's
//! side-table entry, and its free (on which thread, after how long) is credited to the site. Nothing
//! here allocates or locks on the allocation path.
//!
//! Read the sites through [`Report::sites`](crate::Report::sites) (the top sites by bytes in use,
//! with their leaf frames) or as a pprof heap profile (`frag::profile::heap_pprof`).

pub(crate) mod read;
pub(crate) mod symbols;
pub(crate) mod table;
pub(crate) mod unwind;

use crate::estimate::SampleSums;
use table::{NO_SITE, Table};
use unwind::{ColdFrame, Frames, MAX_FRAMES};

pub(crate) static SITES: Table = Table::new();

/// Whether this build captures stacks: built with `-C force-frame-pointers=yes`, on Linux with glibc,
/// x86-64 or AArch64.
#[must_use]
pub const fn frame_pointers() -> bool {
    unwind::AVAILABLE
}

/// The site of the allocation being sampled: its stack, walked from `entry` and interned;
/// [`NO_SITE`] without frame pointers, for a foreign stack or when the table is full.
#[cold]
pub(crate) fn capture(entry: ColdFrame) -> u32 {
    let mut frames: Frames = [0; MAX_FRAMES];
    let depth = unwind::capture(entry, &mut frames);
    if depth == 0 { NO_SITE } else { SITES.intern(&frames, depth) }
}

/// A block sampled at `site`, adding `sums` to the estimates, is in the side table.
pub(crate) fn taken(site: u32, sums: SampleSums) {
    SITES.tallies(site).sampled(sums);
}

/// A sampled block was freed (or reallocated), by another thread than the allocating one when
/// `cross`.
pub(crate) fn freed(site: u32, sums: SampleSums, cross: bool, lifetime_ns: u64) {
    SITES.tallies(site).freed(sums, cross, lifetime_ns);
}
