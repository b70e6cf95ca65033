//! Reading the counters into report rows: [`totals()`] and [`size_classes()`], which allocate
//! nothing and take no lock, and the report's thread and class rows.

use super::figures::{FragItself, HeapCounts, RowKind, SizeClassRow, ThreadRow};
use super::origin as origin_section;
use crate::backend::registry::{Registration, registered};
use crate::estimate::{self, effective_samples, units};
use crate::origin::TALLY;
use crate::process;
use crate::stats::class::{self, NUM_CLASSES};
use crate::stats::live;
use crate::stats::pool;
use crate::stats::shard::{Shard, Totals};
use crate::stats::snapshot::{self, ClassSums, ClassUsable, add_classes};
use crate::sync::Ordering;

/// Process-wide counters without building a report: allocation-free, lock-free, O(threads × classes).
/// Exact in the [`Exact`](crate::Exact) tier, estimates in the sampled one
/// ([`HeapCounts::estimated`]).
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
/// let before = frag::report::totals();
/// let v: Vec<u64> = Vec::with_capacity(16);
/// assert_eq!(frag::report::totals().allocations - before.allocations, 1);
/// # drop(v);
/// ```
#[must_use]
pub fn totals() -> HeapCounts {
    let mut totals = Totals::default();
    let mut classes = [ClassSums::default(); NUM_CLASSES];
    for shard in all_shards() {
        totals = totals.plus(shard.totals());
        add_classes(&mut classes, shard);
    }
    tracked_stats(totals, &classes, registered())
}

/// frag's own counters (see [`FragItself`]), as [`totals()`] gives the
/// program's: what frag allocated for its own work, which no other figure includes. The two add up
/// to everything the wrapped allocator served. Allocation- and lock-free; `peak_allocated_bytes` is
/// 0.
///
/// ```no_run
/// # #[global_allocator]
/// # static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
/// let (program, frag) = (frag::report::totals(), frag::report::own_totals());
/// println!("{} B live, of which frag's own {} B", program.allocated_bytes + frag.allocated_bytes, frag.allocated_bytes);
/// ```
#[must_use]
pub fn own_totals() -> HeapCounts {
    let shard = pool::frag();
    let mut classes = [ClassSums::default(); NUM_CLASSES];
    add_classes(&mut classes, shard);
    stats_of(shard.totals(), &classes, registered())
}

/// Bytes handed out since start (requested bytes of every allocation and reallocation), over every
/// shard: how busy the heap is, for the reclaimer. Allocation- and lock-free. A slot a new thread
/// reuses may start over, so a caller takes a drop as no activity.
pub(crate) fn allocated_bytes_total() -> u64 {
    all_shards().map(|s| s.totals().allocated_bytes).fold(0, u64::wrapping_add)
}

/// frag's own figures, from its shard (`own`). Allocation- and lock-free.
pub(crate) fn frag_itself() -> FragItself {
    let own = own_totals();
    FragItself {
        estimated: own.estimated,
        live_bytes: own.allocated_bytes,
        usable_bytes: own.usable_bytes,
        allocated_total_bytes: pool::frag().totals().allocated_bytes,
        symbol_cache_kept: crate::sites::symbols::cache_kept(),
    }
}

/// Every shard that may hold counts of the program's: the pool's used slots and the overflow shard.
fn all_shards() -> impl Iterator<Item = &'static Shard> {
    pool::used_slots().iter().chain(core::iter::once(pool::overflow()))
}

pub(super) fn tracked_stats(t: Totals, classes: &[ClassSums; NUM_CLASSES], reg: Option<Registration>) -> HeapCounts {
    let stats = stats_of(t, classes, reg);
    HeapCounts { peak_allocated_bytes: live::observe_exact(stats.allocated_bytes), ..stats }
}

/// [`tracked_stats`] without the peak (0).
fn stats_of(t: Totals, classes: &[ClassSums; NUM_CLASSES], reg: Option<Registration>) -> HeapCounts {
    let mut usable_bytes = 0;
    // Live blocks and bytes are the nets of all classes together, clamped once: a class may hold
    // more frees than allocations of its counters' own (a block of frag's own freed by the program
    // in the exact tier, `own`), and clamping it alone would count that block twice.
    let (mut net_blocks, mut net_bytes) = (0i128, 0i128);
    for (i, c) in classes.iter().enumerate() {
        net_blocks += i128::from(c.allocs) - i128::from(c.frees);
        net_bytes += i128::from(c.req_in) - i128::from(c.req_out);
        if c.allocs > 0 {
            usable_bytes += c.live(reg.map_or(ClassUsable::Requested, |r| r.class_usable(i))).2;
        }
    }
    let clamp = |v: i128| v.clamp(0, i128::from(u64::MAX)) as u64;
    let (live_blocks, allocated_bytes) = (clamp(net_blocks), clamp(net_bytes));
    let estimated = crate::stats::sampled();
    let [allocs, frees, live] = if estimated { count_spreads(classes) } else { Default::default() };
    let freed = t.deallocations.saturating_add(t.reallocations);
    HeapCounts {
        estimated,
        sampled_in_jemalloc: crate::sampler::reported(),
        allocations: t.allocations,
        deallocations: t.deallocations,
        reallocations: t.reallocations,
        live_blocks,
        allocated_bytes,
        usable_bytes,
        allocations_interval: estimated.then(|| allocs.interval(t.allocations, u64::MAX)),
        // The frees' spread is that of deallocations and reallocations together: the classes see both.
        deallocations_interval: estimated.then(|| {
            let (lo, hi) = frees.interval(freed, u64::MAX);
            (lo.saturating_sub(t.reallocations), hi.saturating_sub(t.reallocations))
        }),
        live_blocks_interval: estimated.then(|| live.interval(live_blocks, u64::MAX)),
        peak_allocated_bytes: 0,
    }
}

/// Bounds the sampled tier's live-block interval by the allocator's own count of the blocks it
/// holds (`classes`: every live block of the process is one of them), where it has one: on tiny
/// blocks that exact bound is far below what the samples can rule out.
pub(super) fn bound_by_allocator(tracked: &mut HeapCounts, classes: &[crate::backend::AllocatorClass]) {
    if classes.is_empty() {
        return;
    }
    let held = classes.iter().map(|c| c.held).fold(0u64, u64::saturating_add);
    if let Some((lo, hi)) = tracked.live_blocks_interval.as_mut() {
        *hi = (*hi).min(held).max(tracked.live_blocks);
        *lo = (*lo).min(*hi);
    }
}

/// The spreads of the sampled tier's allocations (blocks entering a class), frees (leaving one) and
/// live blocks, class by class (see [`estimate::ClassSum`]). Allocation- and lock-free.
fn count_spreads(classes: &[ClassSums; NUM_CLASSES]) -> [estimate::ClassSum; 3] {
    let mean = crate::sampler::interval_mean();
    let mut sums = [estimate::ClassSum::default(); 3];
    for (i, c) in classes.iter().enumerate() {
        let weights = crate::stats::class::weights(i, mean);
        let (entered, _) = TALLY.class_variance(i, false);
        let (live, _) = TALLY.class_variance(i, true);
        let live_blocks = c.allocs.saturating_sub(c.frees);
        sums[0].add(c.allocs.saturating_mul(estimate::W_ONE), entered, weights);
        sums[1].add(c.frees.saturating_mul(estimate::W_ONE), entered.saturating_sub(live), weights);
        sums[2].add(live_blocks.saturating_mul(estimate::W_ONE), live, weights);
    }
    sums
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

pub(super) fn thread_rows(snap: &snapshot::Snapshot) -> Vec<ThreadRow> {
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

pub(super) fn class_rows(classes: &[ClassSums; NUM_CLASSES], reg: Option<Registration>) -> Vec<SizeClassRow> {
    classes.iter().enumerate().filter(|(_, c)| c.allocs > 0).map(|(i, c)| class_row(i, c, reg)).collect()
}

fn class_row(i: usize, c: &ClassSums, reg: Option<Registration>) -> SizeClassRow {
    let (live_blocks, live_bytes, usable_bytes) = c.live(reg.map_or(ClassUsable::Requested, |r| r.class_usable(i)));
    let (cross_thread_ratio, cross_thread_ratio_interval, cross_thread_samples) = origin_section::class_ratio(i);
    let estimated = crate::stats::sampled();
    let weights = class::weights(i, crate::sampler::interval_mean());
    let interval = |live: bool, bytes: bool, estimate: u64| {
        let (w2, bytes_var) = TALLY.class_variance(i, live);
        estimated.then(|| {
            if bytes {
                estimate::bytes_interval(estimate, bytes_var, u64::MAX)
            } else {
                estimate::class_count_interval(estimate, estimate.saturating_mul(estimate::W_ONE), w2, weights)
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
/// [`totals()`]. Index `i` is class `i` of [`NUM_CLASSES`], empty classes
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
/// let classes = frag::report::size_classes();
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

    /// The allocator's count of held blocks caps the live-block interval, never below the estimate.
    #[test]
    fn held_blocks_bound_the_live_interval() {
        let class = |held| crate::backend::AllocatorClass { size: 8, requests: held, held, slabs: None };
        let mut t =
            HeapCounts { live_blocks: 1_000, live_blocks_interval: Some((700, 2_000_000)), ..Default::default() };
        bound_by_allocator(&mut t, &[class(900), class(400)]);
        assert_eq!(t.live_blocks_interval, Some((700, 1_300)));
        // An estimate above what the allocator holds keeps its own value as the upper end.
        bound_by_allocator(&mut t, &[class(500)]);
        assert_eq!(t.live_blocks_interval, Some((700, 1_000)));
        // No classes (another backend): unchanged.
        bound_by_allocator(&mut t, &[]);
        assert_eq!(t.live_blocks_interval, Some((700, 1_000)));
    }

    /// The size `size_classes()` documents for its array.
    #[test]
    fn size_classes_array_is_as_documented() {
        assert_eq!((NUM_CLASSES, size_of::<SizeClassRow>()), (89, 200));
        assert_eq!(format!("{:.1} KiB", size_of::<[SizeClassRow; NUM_CLASSES]>() as f64 / 1024.0), "17.4 KiB");
    }
}
