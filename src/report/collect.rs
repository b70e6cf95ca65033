//! Building a `Report`: reads shards, the backend and `/proc`. Never runs on the allocation path.

use super::origin as origin_section;
use super::{
    Fragmentation, RatioInputs, Report, RowKind, ShardPool, SizeClassRow, ThreadRow, TrackedStats, Warning, WarningKind,
};
use crate::backend::registry::{Registration, registered};
use crate::backend::{AllocatorStats, WrappedBackend};
use crate::estimate::{self, effective_samples, units};
use crate::format::Bytes;
use crate::origin::TALLY;
use crate::process::{self, ProcessStats};
use crate::reentry::ReportGuard;
use crate::report::diagnosis::{self, Diagnosis};
use crate::stats::class::{self, NUM_CLASSES};
use crate::stats::live;
use crate::stats::pool::{self, POOL_SIZE};
use crate::stats::shard::{Shard, Totals};
use crate::stats::snapshot::{self, ClassSums, ClassUsable, add_classes};
use crate::sync::Ordering;

/// Below this much live data a fragmentation ratio mostly measures the allocator's fixed start-up
/// overhead (jemalloc maps several MiB of metadata before the first allocation), not fragmentation.
const MEANINGFUL_LIVE_BYTES: u64 = 8 << 20;

/// Takes a snapshot of the heap: per-thread counters, size classes, the allocator's own figures, the
/// process view and the fragmentation ratio.
///
/// Costs O(threads × size classes) plus a few small `/proc` reads; safe to call from any number of
/// threads while others allocate. Each counter is exact when read; figures derived from several
/// counters can be off by the operations that ran during the read.
///
/// # Example
///
/// ```no_run
/// #[global_allocator]
/// static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
///
/// let report = frag::report();
/// println!("{report}");
/// if let Some(ratio) = report.fragmentation.ratio {
///     eprintln!("fragmentation {ratio:.2} ({})", report.fragmentation.ratio_inputs);
/// }
/// ```
#[must_use]
pub fn report() -> Report {
    let guard = ReportGuard::enter();
    let snap = snapshot::take();
    let mut warnings = Vec::new();
    let reg = registered();
    if reg.is_none() {
        warnings.push(Warning::new(
            WarningKind::NotInstalled,
            "no Tracked allocator is installed (or it has not allocated yet): install frag::Tracked with \
             #[global_allocator]",
        ));
    }

    let thread_total = snap.owners.iter().map(|o| o.totals).fold(snap.retired.plus(snap.overflow), Totals::plus);
    let tracked = tracked_stats(thread_total, &snap.classes, reg);

    let allocator = match (reg, &guard) {
        (Some(r), Some(_)) => r.stats().unwrap_or_else(|e| {
            warnings.push(Warning::new(WarningKind::AllocatorStats, format!("allocator statistics unavailable: {e}")));
            None
        }),
        (Some(_), None) => {
            warnings.push(Warning::new(
                WarningKind::AllocatorStats,
                "report() re-entered (from a Probe?): allocator statistics skipped",
            ));
            None
        }
        (None, _) => None,
    };
    if let Some(w) = select_warning() {
        warnings.push(Warning::new(WarningKind::SelectFallback, w));
    }
    let process = ProcessStats::read();
    let fragmentation = fragmentation(&tracked, allocator.as_ref(), &process);
    if tracked.usable_bytes < MEANINGFUL_LIVE_BYTES {
        warnings.push(Warning::new(
            WarningKind::SmallHeap,
            format!(
                "less than {} live: fragmentation ratios are not shown (they would measure the allocator's \
                 fixed overhead)",
                Bytes(MEANINGFUL_LIVE_BYTES)
            ),
        ));
    }
    if snap.unslotted_threads > 0 {
        warnings.push(Warning::new(
            WarningKind::PoolFull,
            format!(
                "{} threads found all {POOL_SIZE} per-thread counter slots taken and are counted together in \
                 the overflow row",
                snap.unslotted_threads
            ),
        ));
    }

    let threads = thread_rows(&snap);
    let thread_facts = |tid: u64| {
        let row = threads.iter().find(|r| r.tid == Some(tid));
        origin_section::ThreadFacts {
            name: row.and_then(|r| r.name.clone()).or_else(|| process::thread_comm(tid)),
            freed: row.map(|r| (r.deallocations + r.reallocations, r.freed_bytes)),
        }
    };
    let exact_frees = thread_total.deallocations.saturating_add(thread_total.reallocations);
    let origin = origin_section::section(thread_total.origin, (exact_frees, thread_total.freed_bytes), &thread_facts);
    if let Some(o) = &origin {
        if o.dropped_samples > 0 {
            warnings.push(Warning::new(
                WarningKind::DroppedSamples,
                format!(
                    "{} origin samples dropped: the side table was full (raise the mean with frag::set_sampling)",
                    o.dropped_samples
                ),
            ));
        }
    }
    let traps: &[crate::tune::Trap] = if guard.is_some() { crate::tune::checked() } else { &[] };
    warnings.extend(traps.iter().map(|t| Warning::new(WarningKind::ConfigTrap, t.to_string())));
    if crate::stats::sampled() && crate::sampler::sampling() == crate::sampler::Sampling::Off {
        warnings.push(Warning::new(
            WarningKind::UnsampledTier,
            "the sampled tier runs with sampling off: counts, frees, per-class and live figures are not \
             estimated (only each thread's allocated bytes are known); turn sampling on with frag::set_sampling, \
             or count every call with Tracked<_, frag::Exact>",
        ));
    }
    if let Some(e) = crate::sampler::configured_error() {
        warnings.push(Warning::new(
            WarningKind::InvalidSampling,
            format!("Tracked configured with an invalid sampling ({e}): the default is used"),
        ));
    }

    let sites = super::sites::section();
    if let Some(s) = &sites {
        if !s.frame_pointers && s.samples > 0 {
            warnings.push(Warning::new(
                WarningKind::NoFramePointers,
                "allocation sites have no stacks: build with RUSTFLAGS=\"-C force-frame-pointers=yes\"",
            ));
        }
        if s.dropped_stacks > 0 {
            warnings.push(Warning::new(
                WarningKind::DroppedSites,
                format!(
                    "{} sampled stacks found the site table full and count as \"no stack\" (raise the mean with \
                     frag::set_sampling)",
                    s.dropped_stacks
                ),
            ));
        }
    }

    let size_classes = class_rows(&snap.classes, reg);
    let wrapped = reg.map(|r| r.wrapped());
    let known = wrapped.and_then(WrappedBackend::known);
    let diagnosis = process.rss_bytes.map(|rss| {
        let breakdown = diagnosis::split(rss, process.anon_bytes, known, &tracked, allocator.as_ref());
        let findings = diagnosis::find(&diagnosis::Evidence {
            backend: known,
            breakdown: &breakdown,
            classes: &size_classes,
            origin: origin.as_ref(),
            traps,
        });
        Diagnosis { breakdown, findings }
    });

    Report {
        backend: wrapped,
        usable_source: reg.map(|r| r.usable_source()),
        tracked,
        allocator,
        process,
        fragmentation,
        threads,
        size_classes,
        origin,
        sites,
        shards: ShardPool {
            capacity: POOL_SIZE,
            used: snap.slots_used,
            live: snap.slots_live,
            unslotted_threads: snap.unslotted_threads,
        },
        diagnosis,
        warnings,
    }
}

/// Process-wide counters without building a report: allocation-free, lock-free, O(threads × classes).
/// Exact in the [`Exact`](crate::Exact) tier, estimates in the sampled one
/// ([`TrackedStats::estimated`]).
///
/// Cheap enough to poll for a gauge, and usable where allocating is not allowed.
///
/// # Example
///
/// ```no_run
/// // An allocation budget in a test: the exact tier.
/// #[global_allocator]
/// static A: frag::Tracked<std::alloc::System, frag::Exact> = frag::Tracked::new(std::alloc::System);
///
/// let before = frag::totals();
/// let v: Vec<u64> = Vec::with_capacity(16);
/// assert_eq!(frag::totals().allocations - before.allocations, 1);
/// # drop(v);
/// ```
#[must_use]
pub fn totals() -> TrackedStats {
    let mut totals = Totals::default();
    let mut classes = [ClassSums::default(); NUM_CLASSES];
    for shard in all_shards() {
        totals = totals.plus(shard.totals());
        add_classes(&mut classes, shard);
    }
    tracked_stats(totals, &classes, registered())
}

/// A warning when `FRAG_ALLOCATOR` named no backend of this build and `Select` fell back.
fn select_warning() -> Option<String> {
    use crate::backend::select::{EnvStatus, SELECT_ENV};
    let status = crate::backend::select::env_status()?;
    let value = std::env::var(SELECT_ENV).unwrap_or_default();
    let used = registered().map_or("the default", |r| r.wrapped().name());
    match status {
        EnvStatus::Fine => None,
        EnvStatus::Unknown => Some(format!(
            "{SELECT_ENV}={value:?} names no allocator (system, jemalloc, mimalloc, snmalloc): using {used}"
        )),
        EnvStatus::NotCompiled => Some(format!(
            "{SELECT_ENV}={value:?}: that allocator's feature is not compiled into this build: using {used}"
        )),
    }
}

/// Every shard that may hold counts: the pool's used slots and the overflow shard.
fn all_shards() -> impl Iterator<Item = &'static Shard> {
    pool::used_slots().iter().chain(core::iter::once(pool::overflow()))
}

fn tracked_stats(t: Totals, classes: &[ClassSums; NUM_CLASSES], reg: Option<Registration>) -> TrackedStats {
    let (mut live_blocks, mut allocated_bytes, mut usable_bytes) = (0, 0, 0);
    for (i, c) in classes.iter().enumerate().filter(|(_, c)| c.allocs > 0) {
        let (blocks, bytes, usable) = c.live(reg.map_or(ClassUsable::Requested, |r| r.class_usable(i)));
        live_blocks += blocks;
        allocated_bytes += bytes;
        usable_bytes += usable;
    }
    TrackedStats {
        estimated: crate::stats::sampled(),
        allocations: t.allocations,
        deallocations: t.deallocations,
        reallocations: t.reallocations,
        live_blocks,
        allocated_bytes,
        usable_bytes,
        peak_allocated_bytes: live::observe_exact(allocated_bytes),
    }
}

fn ratio(resident: u64, allocated: u64) -> Option<f64> {
    (allocated > 0).then(|| (resident as f64 - allocated as f64) / allocated as f64)
}

/// The ratios, `None` below [`MEANINGFUL_LIVE_BYTES`] of live data: over a near-empty heap they
/// measure the allocator's and the process's fixed overhead (a ratio of 30,000 after everything was
/// freed), not fragmentation.
fn fragmentation(t: &TrackedStats, a: Option<&AllocatorStats>, p: &ProcessStats) -> Fragmentation {
    let meaningful = t.usable_bytes >= MEANINGFUL_LIVE_BYTES;
    let process_ratio = p.rss_bytes.and_then(|rss| ratio(rss, t.usable_bytes)).filter(|_| meaningful);
    let (ratio, ratio_inputs) = match a.and_then(|a| a.resident.zip(a.allocated)) {
        Some((resident, allocated)) => (ratio(resident, allocated).filter(|_| meaningful), RatioInputs::Allocator),
        None => (process_ratio, RatioInputs::Process),
    };
    Fragmentation {
        ratio,
        ratio_inputs,
        process_ratio,
        internal_bytes: t.usable_bytes.saturating_sub(t.allocated_bytes),
    }
}

/// A row's exact counts and its estimates, each estimate at most the exact count it is part of: the
/// thread's local and remote frees together are at most the blocks it freed.
fn row(kind: RowKind, t: Totals) -> ThreadRow {
    let freed_blocks = t.deallocations.saturating_add(t.reallocations);
    let (remote_frees, local_frees, _) =
        origin_section::clamp_parts(units(t.origin.remote), units(t.origin.local), freed_blocks);
    ThreadRow {
        estimated: crate::stats::sampled(),
        kind,
        tid: None,
        name: None,
        alive: false,
        allocations: t.allocations,
        deallocations: t.deallocations,
        reallocations: t.reallocations,
        allocated_bytes: t.allocated_bytes,
        freed_bytes: t.freed_bytes,
        local_frees,
        freed_elsewhere: units(t.origin.elsewhere),
        freed_elsewhere_bytes: units(t.origin.elsewhere_bytes),
        remote_frees,
        remote_freed_bytes: units(t.origin.remote_bytes).min(t.freed_bytes),
        free_samples: effective_samples(
            t.origin.local.saturating_add(t.origin.remote),
            t.origin.local_w2.saturating_add(t.origin.remote_w2),
        )
        .round() as u64,
    }
}

fn thread_rows(snap: &snapshot::Snapshot) -> Vec<ThreadRow> {
    // Liveness is the slot's state: the thread's exit hook releases it, and the fork handler releases
    // a parent's threads in a child. No /proc read: listing /proc/self/task costs about 0.35 ms with
    // 1,000 threads.
    let mut rows: Vec<ThreadRow> = snap
        .owners
        .iter()
        .map(|o| {
            let stored = String::from_utf8_lossy(o.name.split(|b| *b == 0).next().unwrap_or_default()).into_owned();
            let alive = o.alive;
            // The name stored at the claim; the kernel's only for a thread that had none then (a
            // thread named later), one file read each.
            let current = if alive && stored.is_empty() { process::thread_comm(o.tid) } else { None };
            ThreadRow {
                tid: Some(o.tid),
                name: Some(current.unwrap_or(stored)).filter(|n| !n.is_empty()),
                alive,
                ..row(RowKind::Thread, o.totals)
            }
        })
        .collect();
    rows.sort_by_key(|r| (!r.alive, core::cmp::Reverse(r.allocations)));
    let mut retired = snap.retired;
    retired.origin.elsewhere += TALLY.retired_elsewhere[0].load(Ordering::Relaxed);
    retired.origin.elsewhere_bytes += TALLY.retired_elsewhere[1].load(Ordering::Relaxed);
    rows.push(row(RowKind::Retired, retired));
    rows.push(row(RowKind::Overflow, snap.overflow));
    rows
}

fn class_rows(classes: &[ClassSums; NUM_CLASSES], reg: Option<Registration>) -> Vec<SizeClassRow> {
    classes.iter().enumerate().filter(|(_, c)| c.allocs > 0).map(|(i, c)| class_row(i, c, reg)).collect()
}

fn class_row(i: usize, c: &ClassSums, reg: Option<Registration>) -> SizeClassRow {
    let (live_blocks, live_bytes, usable_bytes) = c.live(reg.map_or(ClassUsable::Requested, |r| r.class_usable(i)));
    let (cross_thread_ratio, cross_thread_ratio_interval, cross_thread_samples) = origin_section::class_ratio(i);
    let estimated = crate::stats::sampled();
    let interval = |live: bool, bytes: bool, estimate: u64| {
        let (w2, bytes_var) = TALLY.class_variance(i, live);
        estimated.then(|| {
            if bytes {
                estimate::bytes_interval(estimate, bytes_var, u64::MAX)
            } else {
                estimate::count_interval(estimate * estimate::W_ONE, w2, u64::MAX)
            }
        })
    };
    SizeClassRow {
        estimated,
        min_size: class::lower_bound(i) as u64,
        max_size: class::upper_bound(i).map(|b| b as u64),
        allocations: c.allocs,
        deallocations: c.frees,
        live_blocks,
        live_bytes,
        usable_bytes,
        internal_bytes: usable_bytes.saturating_sub(live_bytes),
        cross_thread_ratio,
        cross_thread_ratio_interval,
        cross_thread_samples,
        allocations_interval: interval(false, false, c.allocs),
        live_blocks_interval: interval(true, false, live_blocks),
        live_bytes_interval: interval(true, true, live_bytes),
    }
}

/// Every size class's counters without building a report: allocation-free and lock-free, like
/// [`totals()`]. Index `i` is class `i` of [`NUM_CLASSES`](crate::NUM_CLASSES), empty classes
/// included; [`SizeClassRow::contains`] finds the class of a request size.
///
/// Made for places where allocating is not an option: an out-of-memory or signal handler that wants
/// to say which classes hold the heap, a watchdog polling one class, or a test comparing counts
/// exactly while a report's own allocations would disturb them. The array is 17.4 KiB (89 rows of 200 B),
/// returned on the stack.
///
/// # Example
///
/// ```no_run
/// #[global_allocator]
/// static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
///
/// let classes = frag::size_classes();
/// let biggest = classes.iter().max_by_key(|c| c.live_bytes).expect("89 classes");
/// eprintln!("most live bytes: {}..={:?} B, {} blocks", biggest.min_size, biggest.max_size, biggest.live_blocks);
/// ```
#[must_use]
pub fn size_classes() -> [SizeClassRow; NUM_CLASSES] {
    let mut classes = [ClassSums::default(); NUM_CLASSES];
    for shard in all_shards() {
        add_classes(&mut classes, shard);
    }
    let reg = registered();
    let mut class = 0;
    classes.map(|sums| {
        let row = class_row(class, &sums, reg);
        class += 1;
        row
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size `size_classes()` documents for its array.
    #[test]
    fn size_classes_array_is_as_documented() {
        assert_eq!((NUM_CLASSES, size_of::<SizeClassRow>()), (89, 200));
        assert_eq!(format!("{:.1} KiB", size_of::<[SizeClassRow; NUM_CLASSES]>() as f64 / 1024.0), "17.4 KiB");
    }

    /// A ratio over a near-empty heap is not shown; above the floor it is the plain formula.
    #[test]
    fn ratios_need_a_floor_of_live_data() {
        let p = ProcessStats { rss_bytes: Some(40 << 20), ..ProcessStats::default() };
        let small = TrackedStats { usable_bytes: 1 << 10, allocated_bytes: 1 << 10, ..TrackedStats::default() };
        let f = fragmentation(&small, None, &p);
        assert_eq!((f.ratio, f.process_ratio), (None, None));
        let big = TrackedStats { usable_bytes: 16 << 20, allocated_bytes: 16 << 20, ..TrackedStats::default() };
        let f = fragmentation(&big, None, &p);
        assert_eq!(f.process_ratio, Some(1.5));
        let a = AllocatorStats { resident: Some(20 << 20), allocated: Some(16 << 20), ..AllocatorStats::default() };
        assert_eq!(fragmentation(&big, Some(&a), &p).ratio, Some(0.25));
        assert_eq!(fragmentation(&small, Some(&a), &p).ratio, None);
    }
}
