//! Building a `Report`: reads the counters (`counters`), the backend and `/proc`, computes the ratios
//! (`ratio`), says what the reader should know (`warn`) and draws the diagnosis. Never runs on the
//! allocation path.

use super::document::Report;
use super::figures::{ShardPool, ThreadRow};
use super::origin as origin_section;
use super::origin::Origin;
use super::warn::Warning;
use super::{counters, ratio, warn};
use crate::backend::WrappedBackend;
use crate::backend::classes::AllocatorClass;
use crate::backend::registry::Registration;
use crate::backend::registry::registered;
use crate::backend::stats::AllocatorStats;
use crate::own;
use crate::process::{self, ProcessStats};
use crate::reentry::Guard;
use crate::report::diagnosis::{self, Diagnosis};
use crate::sites::unwind;
use crate::stats::shard::Totals;
use crate::stats::snapshot;

/// The diagnosis's breakdown of RSS `rss` (of which `anon` anonymous, as `/proc/self/statm` gave
/// them) without the rest of a report: the counters' totals and the wrapped allocator's statistics
/// read now, for a caller that polls (the reclaimer, which reads the process once per round).
/// Allocator statistics that cannot be read leave the heap not split.
pub(crate) fn breakdown(rss: u64, anon: u64) -> diagnosis::Breakdown {
    own::handed_over(|| breakdown_now(rss, anon))
}

fn breakdown_now(rss: u64, anon: u64) -> diagnosis::Breakdown {
    // No refresh of the unwind tables here: the reclaimer's rounds are paid from its CPU budget.
    let guard = Guard::enter();
    let tracked = counters::totals();
    let reg = registered();
    let allocator = match (reg, &guard) {
        (Some(r), Some(_)) => r.stats().ok().flatten(),
        _ => None,
    };
    let known = reg.map(|r| r.wrapped()).and_then(WrappedBackend::known);
    let frag = counters::frag_itself().usable_bytes;
    diagnosis::split(rss, Some(anon), known, &tracked, frag, allocator.as_ref())
}

/// The allocator's own size classes, with its own counts of them, without the rest of a report:
/// exact figures where the allocator keeps them (jemalloc's bin and large-extent statistics; empty
/// on other backends and when no `Tracked` is installed). See [`AllocatorClass`]
/// for what they include. Allocates its list before it reads, so the counts include it.
///
/// # Example
///
/// ```no_run
/// #[global_allocator]
/// static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
///
/// // Live blocks of the process, at most: every block it holds, parked ones included.
/// let held: u64 = frag::report::allocator_classes().iter().map(|c| c.held).sum();
/// println!("{held} blocks held by the allocator");
/// ```
#[must_use]
pub fn allocator_classes() -> Vec<crate::backend::AllocatorClass> {
    let guard = Guard::enter();
    match (registered(), guard) {
        (Some(r), Some(_)) => r.classes().unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// Resident bytes as [`Report::resident_bytes`] reads them (the allocator's figure, else the
/// process's), without the rest of a report.
pub(crate) fn resident_bytes() -> Option<u64> {
    let guard = Guard::enter();
    let allocator = match (registered(), guard) {
        (Some(r), Some(_)) => r.stats().ok().flatten(),
        _ => None,
    };
    allocator.and_then(|a| a.resident).or_else(|| ProcessStats::read().rss_bytes)
}

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
    own::handed_over(report_now)
}

fn report_now() -> Report {
    let guard = Guard::enter();
    if guard.is_some() {
        unwind::refresh();
    }
    let snap = snapshot::read();
    let mut warnings = Vec::new();
    let reg = registered();
    if reg.is_none() {
        warnings.push(warn::not_installed());
    }

    let thread_total = snap.owners.iter().map(|o| o.totals).fold(snap.retired.plus(snap.overflow), Totals::plus);
    let mut tracked = counters::tracked_stats(thread_total, &snap.classes, reg);

    let (allocator, allocator_classes) = allocator_figures(reg, guard.is_some(), &mut warnings);
    warnings.extend(warn::select_fallback());
    counters::bound_by_allocator(&mut tracked, &allocator_classes);
    let process = ProcessStats::read();
    let fragmentation = ratio::fragmentation(&tracked, allocator.as_ref(), &process);
    warnings.extend(warn::small_heap(tracked.usable_bytes));
    warnings.extend(warn::pool_full(snap.unslotted_threads));

    let threads = counters::thread_rows(&snap);
    let origin = origin_of(&thread_total, &threads, tracked.estimated);
    warnings.extend(origin.as_ref().and_then(warn::dropped_samples));
    let traps: &[crate::tune::Trap] = if guard.is_some() { crate::tune::checked() } else { &[] };
    warnings.extend(traps.iter().map(warn::config_trap));
    warnings.extend(warn::sampling());
    let shares = super::pins::current(&allocator_classes, reg);
    let sites = super::sites::section(shares.as_ref());
    warnings.extend(sites.as_ref().into_iter().flat_map(warn::sites));
    let scopes = super::scopes::section(shares.as_ref());
    warnings.extend(scopes.as_ref().and_then(warn::scopes));

    let size_classes = counters::class_rows(&snap.classes, reg);
    let wrapped = reg.map(|r| r.wrapped());
    let known = wrapped.and_then(WrappedBackend::known);
    let frag_itself = counters::frag_itself();
    let step = diagnosis::recent_step(std::time::Instant::now());
    let diagnosis = process.rss_bytes.map(|rss| {
        let breakdown =
            diagnosis::split(rss, process.anon_bytes, known, &tracked, frag_itself.usable_bytes, allocator.as_ref());
        let evidence = diagnosis::Evidence {
            backend: known,
            breakdown: &breakdown,
            classes: &size_classes,
            origin: origin.as_ref(),
            sites: sites.as_ref(),
            traps,
            limit: diagnosis::limit_in_force(),
            step: step.as_ref(),
        };
        Diagnosis { findings: diagnosis::find(&evidence), breakdown }
    });

    Report {
        backend: wrapped,
        usable_source: reg.map(|r| r.usable_source()),
        tracked,
        allocator,
        allocator_classes: allocator_classes.into_iter().filter(|c| c.requests > 0 || c.held > 0).collect(),
        process,
        fragmentation,
        threads,
        size_classes,
        origin,
        sites,
        scopes,
        shards: ShardPool {
            capacity: crate::stats::pool::POOL_SIZE,
            used: snap.slots_used,
            live: snap.slots_live,
            unslotted_threads: snap.unslotted_threads,
        },
        diagnosis,
        warnings,
        frag_itself,
    }
}

/// Each site id's estimated pinned bytes (see [`SiteRow::pinned_bytes`](crate::report::SiteRow)), from the
/// allocator's classes now; `None` where the allocator gives no free space by class.
pub(crate) fn pinned_by_site() -> Option<std::collections::HashMap<u32, f64>> {
    super::pins::current(&allocator_classes(), registered()).map(|s| s.by_site)
}

/// The wrapped allocator's own figures and size classes, where it has them and the report may read
/// them (`reading`: not re-entered from an `Introspect`); what could not be read is said in `warnings`.
fn allocator_figures(
    reg: Option<Registration>,
    reading: bool,
    warnings: &mut Vec<Warning>,
) -> (Option<AllocatorStats>, Vec<AllocatorClass>) {
    let Some(r) = reg else { return (None, Vec::new()) };
    if !reading {
        warnings.push(warn::reentered());
        return (None, Vec::new());
    }
    let stats = r.stats().unwrap_or_else(|e| {
        warnings.push(warn::allocator_stats(&e));
        None
    });
    let classes = r.classes().unwrap_or_else(|e| {
        warnings.push(warn::allocator_stats(&e));
        Vec::new()
    });
    (stats, classes)
}

/// The origin section, from every thread's totals and rows: frees counted exactly in the exact tier
/// (`estimated` false), estimated in the sampled one.
fn origin_of(total: &Totals, threads: &[ThreadRow], estimated: bool) -> Option<Origin> {
    let thread_facts = |tid: u64| {
        let row = threads.iter().find(|r| r.tid == Some(tid));
        origin_section::ThreadFacts {
            name: row.and_then(|r| r.name.clone()).or_else(|| process::thread_comm(tid)),
            freed: row.filter(|r| !r.estimated).map(|r| (r.deallocations + r.reallocations, r.freed_bytes)),
        }
    };
    let exact = (!estimated).then(|| (total.deallocations.saturating_add(total.reallocations), total.freed_bytes));
    origin_section::section(total.origin, exact, &thread_facts)
}
