//! The report's `sites` section: the allocation sites holding the most bytes in use.

use super::pins::{PinMethod, Shares};
use crate::estimate::bytes_interval;
use crate::own;
use crate::sampler::{self, Sampling};
use crate::sites::read::{self, Grouping, SiteFigures};
use crate::sites::symbols::{Symbols, trimmed};
use crate::sites::{self, UnwindTables, Unwinder};

/// Sites listed in the report (the profile has them all).
pub(crate) const TOP: usize = 10;
/// Frames named per site, from the leaf; more, up to [`MAX_NAMED`], where two sites would read the
/// same (two paths below one leaf).
pub(super) const LEAF_FRAMES: usize = 4;
const MAX_NAMED: usize = 16;

/// Allocation sites, estimated from sampled allocations (see [`Sampling`]). Every figure named
/// `est_*` is an estimate weighted by the inverse sampling probability.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Sites {
    /// The sampling in effect; serialises as `{"mean_bytes": n}`, `"every_block"` or `"off"`.
    pub sampling: Sampling,
    /// How this build captures stacks (see [`unwinder`](crate::sites::unwinder)).
    pub unwinder: Unwinder,
    /// What the unwind tables hold, with [`Unwinder::UnwindTables`]; `None` otherwise, or when they
    /// are not built.
    pub unwind_tables: Option<UnwindTables>,
    /// Sampled allocations, with or without a stack.
    pub samples: u64,
    /// Distinct stacks seen.
    pub sites: usize,
    /// How many distinct stacks the site table holds (sites are kept for the life of the process);
    /// past it, or where a stack's neighbourhood in the table is full, new stacks count as "no stack"
    /// (`dropped_stacks`).
    pub site_capacity: usize,
    /// Stacks lost because the site table was full (their blocks count under "no stack").
    pub dropped_stacks: u64,
    /// Samples taken on a stack the program switched to (a `stacker` segment, a coroutine's or
    /// fiber's stack, a signal handler's alternate stack): walked as far as the kernel said that
    /// stack is readable, and counted under their sites like any other (docs/UNWIND.md).
    pub switched_stacks: u64,
    /// Estimated bytes allocated by those samples (each sample's size over its sampling
    /// probability; a `Tracked`'s samples: sampling inside jemalloc counts them without their
    /// bytes). JSON: `est_switched_stacks_bytes`.
    #[cfg_attr(feature = "serde", serde(rename = "est_switched_stacks_bytes"))]
    pub switched_stacks_bytes: u64,
    /// Samples whose stack was not walked because the system refused the call that says which stack
    /// memory is readable (`process_vm_readv`, under a seccomp filter): their blocks count under "no
    /// stack", and the report warns.
    pub unproven_stacks: u64,
    /// Estimated bytes in use of sampled blocks that have no stack.
    #[cfg_attr(feature = "serde", serde(rename = "est_no_stack_inuse_bytes"))]
    pub no_stack_inuse_bytes: u64,
    /// The sites holding the most bytes in use, largest first (ties by bytes allocated; at most 10),
    /// then the sites pinning the most holes that are not among them (up to 3 more).
    pub top: Vec<SiteRow>,
    /// How the free space in the allocator's slabs is shared among the sites (each row's
    /// `pinned_bytes`); `None` where the backend gives no free space by size class (glibc, mimalloc,
    /// snmalloc: "not split").
    pub pinned: Option<PinnedHoles>,
    /// Whether `frames` hold names ([`Sites::symbolize`] ran).
    pub symbolized: bool,
}

impl Sites {
    /// Names the leaf frames of every row, from the binary's own debug information (the `backtrace`
    /// crate), inlined functions included where the binary has line tables. `report()` does not do
    /// this itself: it reads the debug information of the program (its cost is in
    /// `docs/PERFORMANCE.md`), which a report published every few seconds should not impose. That
    /// memory is frag's own ([`FragItself`](crate::report::FragItself)), released when done unless
    /// [`keep_symbol_cache`](crate::sites::keep_symbol_cache) keeps it; the names written here are the
    /// program's, as the rest of the report is. Does nothing in a process forked while another
    /// thread was symbolizing (the symbolizer's lock may be held forever there).
    ///
    /// # Example
    ///
    /// ```no_run
    /// #[global_allocator]
    /// static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
    ///
    /// let mut report = frag::report();
    /// if let Some(sites) = report.sites.as_mut() {
    ///     sites.symbolize();
    /// }
    /// println!("{report}");
    /// ```
    pub fn symbolize(&mut self) {
        let stacks: Vec<Vec<usize>> =
            self.top.iter().map(|row| row.stack.iter().map(|&pc| pc as usize).collect()).collect();
        let Some(frames) = own::handed_over(|| told_apart(&stacks)) else { return };
        for (row, frames) in self.top.iter_mut().zip(frames) {
            row.frames = frames;
        }
        self.symbolized = true;
    }
}

/// The names of each stack's frames, from the leaf: the first [`LEAF_FRAMES`], or as many more as
/// it takes to tell it from the others. `None` where the process cannot symbolize (see
/// [`Symbols::new`]).
pub(crate) fn told_apart(stacks: &[Vec<usize>]) -> Option<Vec<Vec<String>>> {
    let mut symbols = Symbols::new()?;
    let named: Vec<Vec<String>> = stacks.iter().map(|stack| named_frames(&mut symbols, stack, MAX_NAMED)).collect();
    let told = named
        .iter()
        .enumerate()
        .map(|(i, frames)| {
            let mut n = LEAF_FRAMES.min(frames.len());
            while n < frames.len()
                && named.iter().enumerate().any(|(j, other)| j != i && other.get(..n) == frames.get(..n))
            {
                n += 1;
            }
            frames[..n].to_vec()
        })
        .collect();
    Some(told)
}

/// The free space in the allocator's slabs (jemalloc's small classes), and how much of it the
/// sites' pins account for. Per class, `(slabs × regions − allocated regions) × region size` from the
/// allocator's own statistics; each site's part is an estimate (see [`SiteRow::pinned_bytes`]),
/// exact with [`PinMethod::Slabs`] and every block sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct PinnedHoles {
    /// Free bytes in the slabs of every class, from the allocator (exact at report time).
    pub holes_bytes: u64,
    /// Estimated part of `holes_bytes` pinned by blocks without a stack (the "no stack" site).
    #[cfg_attr(feature = "serde", serde(rename = "est_no_stack_bytes"))]
    pub no_stack_bytes: u64,
    /// Estimated part pinned by the sites not listed in [`Sites::top`]. The listed rows' pins, this,
    /// `no_stack_bytes` and `unattributed_bytes` add up to `holes_bytes` (up to rounding).
    #[cfg_attr(feature = "serde", serde(rename = "est_other_sites_bytes"))]
    pub other_sites_bytes: u64,
    /// Holes no site was given: those of classes in which no sampled block is live (or whose
    /// sampled blocks all sit in full slabs); where every block is sampled, also the parts of
    /// regions parked in thread caches and of blocks the side table does not hold.
    pub unattributed_bytes: u64,
    /// How each site's blocks were matched to the slabs they pin.
    pub method: PinMethod,
}

/// One allocation site.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct SiteRow {
    /// The site's stack: return addresses, leaf first (the first is in the function that called
    /// the allocator, often `__rust_alloc` or the standard library's allocation plumbing).
    pub stack: Vec<u64>,
    /// The leaf frames, leaf first. Before [`Sites::symbolize`]: the first 4 addresses of `stack` in
    /// hex. After: `function (file:line)` from the leaf after the allocation machinery (frag,
    /// `__rust_alloc`, `alloc::`), the address in hex where no name is known; 4 frames, or more (up
    /// to 16) where that is what tells two rows apart.
    pub frames: Vec<String>,
    /// Estimated bytes in use.
    #[cfg_attr(feature = "serde", serde(rename = "est_inuse_bytes"))]
    pub inuse_bytes: u64,
    /// Estimated blocks in use.
    #[cfg_attr(feature = "serde", serde(rename = "est_inuse_blocks"))]
    pub inuse_blocks: u64,
    /// Estimated bytes allocated since start (requested sizes).
    #[cfg_attr(feature = "serde", serde(rename = "est_alloc_bytes"))]
    pub alloc_bytes: u64,
    /// 95% intervals of `inuse_bytes` and `alloc_bytes`: each sample of `s` bytes and weight `w`
    /// adds `w(w − 1)s²` to an estimate's variance (see [`Origin::frees_interval`](crate::report::Origin)).
    /// Exact (a single point) with every block sampled. JSON: `est_inuse_bytes_interval`,
    /// `est_alloc_bytes_interval`.
    #[cfg_attr(feature = "serde", serde(rename = "est_inuse_bytes_interval"))]
    pub inuse_bytes_interval: (u64, u64),
    /// See `inuse_bytes_interval`.
    #[cfg_attr(feature = "serde", serde(rename = "est_alloc_bytes_interval"))]
    pub alloc_bytes_interval: (u64, u64),
    /// Estimated blocks allocated since start.
    #[cfg_attr(feature = "serde", serde(rename = "est_alloc_blocks"))]
    pub alloc_blocks: u64,
    /// Sampled allocations behind the estimates.
    pub samples: u64,
    /// Estimated share of the site's freed blocks that were freed on another thread than the
    /// allocating one; `None` under 30 sampled frees.
    #[cfg_attr(feature = "serde", serde(rename = "est_cross_thread_share"))]
    pub cross_thread_share: Option<f64>,
    /// Sampled frees behind the share and the lifetime.
    pub free_samples: u64,
    /// Estimated median lifetime of the site's freed blocks (power-of-two resolution); `None`
    /// under 30 sampled frees.
    #[cfg_attr(feature = "serde", serde(rename = "est_median_lifetime_ns"))]
    pub median_lifetime_ns: Option<u64>,
    /// Estimated free bytes in the allocator's slabs that this site's live blocks keep resident (a
    /// slab cannot be returned while any block in it lives, so each live block is charged an equal
    /// part of its slab's free space): by each block's own slab or by class shares, as
    /// [`PinnedHoles::method`] says. `None` where the backend does not split its holes by class
    /// ([`Sites::pinned`]).
    #[cfg_attr(feature = "serde", serde(rename = "est_pinned_bytes"))]
    pub pinned_bytes: Option<u64>,
}

/// Sites pinning the most holes that are listed beside the top sites by bytes in use.
const TOP_PINNING: usize = 3;

/// The section; `None` when site sampling is off and nothing was sampled. `shares`: the holes of the
/// allocator's slabs shared among sites, where it has slabs (`pins::current`).
pub(crate) fn section(shares: Option<&Shares>) -> Option<Sites> {
    let sampling = sampler::sampling();
    let none = std::collections::HashMap::new();
    let all = read::snapshot(shares.map_or(&none, |s| &s.by_site), Grouping::Stack);
    if all.is_empty() && sampling == Sampling::Off {
        return None;
    }
    let split = shares.is_some();
    let (no_stack, stacked): (Vec<&SiteFigures>, Vec<&SiteFigures>) = all.iter().partition(|s| s.stack.is_empty());
    let mut top: Vec<SiteRow> = stacked.iter().take(TOP).map(|s| row(s, split)).collect();
    let mut others: Vec<&&SiteFigures> = stacked.iter().skip(TOP).collect();
    if split {
        others.sort_by(|a, b| b.pinned_bytes.total_cmp(&a.pinned_bytes));
        let pinning = others.iter().take(TOP_PINNING).take_while(|s| s.pinned_bytes >= 1.0).count();
        top.extend(others.drain(..pinning).map(|s| row(s, split)));
    }
    let other_sites_bytes = others.iter().map(|s| s.pinned_bytes).sum::<f64>().round() as u64;
    Some(Sites {
        sampling,
        unwinder: sites::unwinder(),
        unwind_tables: sites::unwind_tables(),
        samples: all.iter().map(|s| s.tally.samples).sum(),
        sites: stacked.len(),
        site_capacity: sites::SITE_CAPACITY,
        dropped_stacks: read::dropped(),
        switched_stacks: read::stack_counts().0,
        switched_stacks_bytes: sites::switched_bytes(),
        unproven_stacks: read::stack_counts().1,
        no_stack_inuse_bytes: no_stack.iter().map(|s| s.tally.inuse_bytes.round() as u64).sum(),
        top,
        pinned: shares.map(|s| PinnedHoles {
            holes_bytes: s.holes,
            no_stack_bytes: no_stack.iter().map(|s| s.pinned_bytes.round() as u64).sum(),
            other_sites_bytes,
            unattributed_bytes: s.unattributed,
            method: s.method,
        }),
        symbolized: false,
    })
}

/// The first `max` frames of `stack`, named, after the allocation machinery.
fn named_frames(symbols: &mut Symbols, stack: &[usize], max: usize) -> Vec<String> {
    let mut frames = Vec::new();
    for (pc, first) in trimmed(symbols, stack) {
        let lines = symbols.lines(pc);
        if lines.len() <= first {
            frames.push(format!("{pc:#x}"));
        }
        for l in lines.iter().skip(first) {
            let file = l.file.rsplit('/').next().unwrap_or_default();
            frames.push(if file.is_empty() {
                l.function.clone()
            } else {
                format!("{} ({file}:{})", l.function, l.line)
            });
        }
        if frames.len() >= max {
            break;
        }
    }
    frames.truncate(max);
    frames
}

fn row(s: &SiteFigures, pins_by_slab: bool) -> SiteRow {
    let inuse_bytes = s.tally.inuse_bytes.round() as u64;
    let alloc_bytes = s.tally.alloc_bytes.round() as u64;
    SiteRow {
        stack: s.stack.iter().map(|&pc| pc as u64).collect(),
        frames: s.stack.iter().take(LEAF_FRAMES).map(|pc| format!("{pc:#x}")).collect(),
        inuse_bytes,
        inuse_bytes_interval: bytes_interval(inuse_bytes, s.tally.inuse_bytes_var, u64::MAX),
        inuse_blocks: s.tally.inuse_blocks.round() as u64,
        alloc_bytes,
        alloc_bytes_interval: bytes_interval(alloc_bytes, s.tally.alloc_bytes_var, u64::MAX),
        alloc_blocks: s.tally.alloc_blocks.round() as u64,
        samples: s.tally.samples,
        cross_thread_share: s.tally.cross_share(),
        free_samples: s.tally.free_samples,
        median_lifetime_ns: s.tally.median_lifetime_ns(),
        pinned_bytes: pins_by_slab.then(|| s.pinned_bytes.round() as u64),
    }
}
