//! Every metric `frag` publishes: name suffix, kind, unit and description, in one table.

use std::sync::atomic::{AtomicBool, Ordering};

use metrics::{Label, SharedString, Unit};

/// Whether a metric is a gauge, a counter (set with `absolute`: the crate keeps the totals), a
/// histogram, or a total in fractional units (seconds), which the facade's integer counters cannot
/// hold: published as a gauge that only grows, so `rate()` applies as to a counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MetricKind {
    Gauge,
    Counter,
    Histogram,
    Total,
}

macro_rules! metrics_table {
    ($($id:ident: $kind:ident, $suffix:literal, $unit:expr, $help:literal;)+) => {
        /// One metric of the table.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub(crate) enum Metric { $($id),+ }

        pub(crate) const TABLE: &[(Metric, MetricKind, &str, Unit, &str)] = &[
            $((Metric::$id, MetricKind::$kind, $suffix, $unit, $help)),+
        ];
    };
}

metrics_table! {
    TrackedAllocated: Gauge, "tracked_allocated_bytes", Unit::Bytes, "Bytes requested by live blocks, counted by frag";
    TrackedUsable: Gauge, "tracked_usable_bytes", Unit::Bytes, "Usable bytes of live blocks as the allocator sized them";
    TrackedPeak: Gauge, "tracked_peak_allocated_bytes", Unit::Bytes, "Highest tracked allocated bytes seen";
    LiveBlocks: Gauge, "tracked_live_blocks", Unit::Count, "Live heap blocks";
    Allocations: Counter, "allocations_total", Unit::Count, "Heap allocations since start";
    Deallocations: Counter, "deallocations_total", Unit::Count, "Heap deallocations since start";
    Reallocations: Counter, "reallocations_total", Unit::Count, "Heap reallocations since start";
    AllocatorAllocated: Gauge, "allocator_allocated_bytes", Unit::Bytes, "Bytes in use as the allocator counts them";
    AllocatorActive: Gauge, "allocator_active_bytes", Unit::Bytes, "Bytes in pages holding application blocks (jemalloc)";
    AllocatorMetadata: Gauge, "allocator_metadata_bytes", Unit::Bytes, "Allocator bookkeeping bytes";
    AllocatorResident: Gauge, "allocator_resident_bytes", Unit::Bytes, "Resident bytes the allocator maps";
    AllocatorMapped: Gauge, "allocator_mapped_bytes", Unit::Bytes, "Bytes the allocator has mapped";
    AllocatorRetained: Gauge, "allocator_retained_bytes", Unit::Bytes, "Bytes kept mapped but returned to the OS (jemalloc)";
    AllocatorFree: Gauge, "allocator_free_bytes", Unit::Bytes, "Bytes in free chunks the allocator holds (glibc)";
    AllocatorCommitted: Gauge, "allocator_committed_bytes", Unit::Bytes, "Bytes committed (mimalloc)";
    ProcessRss: Gauge, "process_rss_bytes", Unit::Bytes, "Resident set size of the process";
    ProcessPss: Gauge, "process_pss_bytes", Unit::Bytes, "Proportional set size of the process";
    CgroupCurrent: Gauge, "cgroup_memory_bytes", Unit::Bytes, "Memory charged to the process's memory cgroup (all its processes, page cache included)";
    CgroupMax: Gauge, "cgroup_memory_max_bytes", Unit::Bytes, "The memory cgroup's limit (not published without one)";
    ProcessAnon: Gauge, "process_anon_bytes", Unit::Bytes, "Anonymous resident bytes of the process";
    FragmentationRatio: Gauge, "fragmentation_ratio", Unit::Count, "(resident - allocated) / allocated, from the allocator's figures where it has them";
    ProcessFragmentationRatio: Gauge, "process_fragmentation_ratio", Unit::Count, "(RSS - tracked usable bytes) / tracked usable bytes";
    InternalFragmentation: Gauge, "internal_fragmentation_bytes", Unit::Bytes, "Usable minus requested bytes of live blocks";
    CrossThreadFrees: Counter, "cross_thread_frees_total", Unit::Count, "Frees on another thread than the allocating one (estimated from samples)";
    CrossThreadFreedBytes: Counter, "cross_thread_freed_bytes_total", Unit::Bytes, "Bytes freed on another thread than the allocating one (estimated)";
    SampledFrees: Counter, "origin_frees_total", Unit::Count, "Frees of blocks: deallocations plus the old blocks of reallocations (exact in the exact tier, estimated from samples in the sampled one)";
    CrossThreadRatio: Gauge, "cross_thread_free_ratio", Unit::Count, "Share of frees on another thread than the allocating one (estimated)";
    ClassLiveBytes: Gauge, "size_class_live_bytes", Unit::Bytes, "Requested bytes of live blocks per size class (label: class upper bound)";
    ClassLiveBlocks: Gauge, "size_class_live_blocks", Unit::Count, "Live blocks per size class";
    ClassUsableBytes: Gauge, "size_class_usable_bytes", Unit::Bytes, "Usable bytes of live blocks per size class";
    ClassAllocations: Counter, "size_class_allocations_total", Unit::Count, "Blocks that entered each size class: allocations and the new blocks of reallocations (summed over classes: allocations_total + reallocations_total)";
    ThreadAllocations: Gauge, "thread_allocations", Unit::Count, "Allocations by the live threads of this name (exited threads move to thread=\"retired\")";
    ThreadAllocatedBytes: Gauge, "thread_allocated_bytes", Unit::Bytes, "Bytes allocated by the live threads of this name";
    ThreadFreedBytes: Gauge, "thread_freed_bytes", Unit::Bytes, "Bytes freed by the live threads of this name";
    ResidentPart: Gauge, "resident_bytes", Unit::Bytes, "Resident memory by part (live, rounding, holes, reclaimable, metadata, outside_heap, unexplained): the parts a backend can split, which with unexplained sum to process_rss_bytes";
    FindingBytes: Gauge, "finding_bytes", Unit::Bytes, "Resident bytes each kind of finding explains now (0 when not raised); for reclaimable, what its remedy would release";
    FindingsWarn: Gauge, "findings_warn", Unit::Count, "Findings of severity warn now, configuration traps included";
    ThreadFreedElsewhere: Gauge, "thread_freed_elsewhere", Unit::Count, "Blocks these threads allocated that others freed (estimated)";
    ScopeLiveBytes: Gauge, "scope_live_bytes", Unit::Bytes, "Bytes in use by scope, estimated from samples (label scope: the published scopes, none for outside every scope, other for the rest)";
    ScopeAllocatedBytes: Counter, "scope_allocated_bytes_total", Unit::Bytes, "Bytes allocated by scope since start, estimated from samples (labels as scope_live_bytes)";
    ReclaimedBytes: Counter, "reclaimed_bytes_total", Unit::Bytes, "Resident bytes the reclaimer's actions released (process RSS before minus after each action)";
    ReclaimPredicted: Counter, "reclaim_predicted_bytes_total", Unit::Bytes, "Bytes the diagnosis predicted the reclaimer's actions would release (estimated)";
    ReclaimSeconds: Total, "reclaim_seconds_total", Unit::Seconds, "CPU seconds the reclaimer's thread spent, polls and actions (a gauge that only grows)";
    ReclaimActions: Counter, "reclaim_actions_total", Unit::Count, "Reclaimer actions (label method: trim, purge, decay, decay+purge, collect)";
    ReclaimSkipped: Counter, "reclaim_skipped_total", Unit::Count, "Reclaimer rounds without an action (label reason: first_round, busy, settling, small, interval, budget, not_split, failed)";
    ReclaimReleaseRatio: Histogram, "reclaim_release_ratio", Unit::Count, "Per action: bytes released over bytes predicted (1 is a perfect prediction)";
    ReclaimRefaultBytes: Counter, "reclaim_refault_bytes_total", Unit::Bytes, "RSS regained within the refault window after actions, up to what each released (estimated)";
    ReclaimRefaultFaults: Counter, "reclaim_refault_minor_faults_total", Unit::Count, "Minor page faults of the process within the refault window after actions";
    ReclaimThreadReleases: Counter, "reclaim_thread_releases_total", Unit::Count, "Releases idle threads made when asked through frag::reclaim::idle (label method: idle, collect)";
    ReclaimThreadReleasedBytes: Counter, "reclaim_thread_released_bytes_total", Unit::Bytes, "RSS before minus after the idle threads' releases (estimated)";
    MemoryLimit: Gauge, "memory_limit_bytes", Unit::Bytes, "The soft memory limit the reclaimer keeps RSS under (absent without one)";
    MemoryLimitTarget: Gauge, "memory_limit_target_bytes", Unit::Bytes, "The RSS over which the reclaimer acts while the heap is busy: the limit's target share";
    ReclaimOverTarget: Total, "reclaim_over_target_seconds_total", Unit::Seconds, "Seconds RSS spent over the memory limit's target (a gauge that only grows)";
    MemoryLimitHeld: Gauge, "memory_limit_held_bytes", Unit::Bytes, "While RSS is over the memory limit's target: resident bytes by what holds them (label part: live, holes, reclaimable, other), from the last round's breakdown; 0 under the target. A release returns reclaimable; holes come back only as the live blocks in their pages are freed";
    ReclaimAssists: Counter, "reclaim_assists_total", Unit::Count, "Releases allocating threads made at their sampled allocations while RSS was over the memory limit's target";
    ReclaimAssistSeconds: Total, "reclaim_assist_seconds_total", Unit::Seconds, "CPU seconds those assists took on the allocating threads (a gauge that only grows)";
    ReclaimCpuShare: Gauge, "reclaim_cpu_share", Unit::Count, "The share of one core the reclaimer may spend now: cpu_share, rising to max_cpu_share as RSS goes over the limit's target";
}

/// The full names for one prefix, built once and shared (cloning a name is a reference count), and
/// which of them had a value so far.
pub(crate) struct Names {
    names: Vec<SharedString>,
    had_a_value: Vec<AtomicBool>,
}

impl Names {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            names: TABLE
                .iter()
                .map(|(_, _, suffix, _, _)| SharedString::from_shared(format!("{prefix}{suffix}").into()))
                .collect(),
            had_a_value: TABLE.iter().map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// What to publish for `m` this round, given the report's value: the value; for a round without
    /// one, nothing until the series first had a value (so a figure this process cannot have, such
    /// as another allocator's, PSS while it is off, or a cgroup limit that is not set, is never
    /// published), NaN after that (so a gauge does not keep showing a value that no longer holds).
    pub(crate) fn value(&self, m: Metric, value: Option<f64>) -> Option<f64> {
        let had = &self.had_a_value[m as usize];
        match value {
            Some(v) => {
                had.store(true, Ordering::Relaxed);
                Some(v)
            }
            None => had.load(Ordering::Relaxed).then_some(f64::NAN),
        }
    }

    pub(crate) fn get(&self, m: Metric) -> SharedString {
        self.names[m as usize].clone()
    }

    /// Describes the metrics `which` selects to the current recorder.
    pub(crate) fn describe(&self, which: fn(Metric) -> bool) {
        for (m, kind, _, unit, help) in TABLE.iter().filter(|(m, ..)| which(*m)) {
            let name = self.get(*m);
            match kind {
                MetricKind::Gauge | MetricKind::Total => metrics::describe_gauge!(name, *unit, *help),
                MetricKind::Counter => metrics::describe_counter!(name, *unit, *help),
                MetricKind::Histogram => metrics::describe_histogram!(name, *unit, *help),
            }
        }
    }
}

/// Where one emitter's series go: its prefix, the labels on every series, and the full names for that
/// prefix, built and described (for the metrics it emits) at the first use.
pub(crate) struct Series {
    prefix: String,
    labels: Vec<Label>,
    /// The metrics this emitter emits.
    which: fn(Metric) -> bool,
    names: Option<Names>,
}

impl core::fmt::Debug for Series {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Series").field("prefix", &self.prefix).field("labels", &self.labels).finish_non_exhaustive()
    }
}

impl Series {
    /// `prefix`, no labels.
    pub(crate) fn new(prefix: &str, which: fn(Metric) -> bool) -> Self {
        Self { prefix: prefix.to_owned(), labels: Vec::new(), which, names: None }
    }

    pub(crate) fn set_prefix(&mut self, prefix: String) {
        self.prefix = prefix;
        self.names = None;
    }

    pub(crate) fn add_label(&mut self, label: Label) {
        self.labels.push(label);
    }

    /// The full names, described to the recorder the first time, and the labels on every series.
    pub(crate) fn names(&mut self) -> (&Names, &[Label]) {
        let (prefix, which) = (&self.prefix, self.which);
        let names = self.names.get_or_insert_with(|| {
            let names = Names::new(prefix);
            names.describe(which);
            names
        });
        (names, &self.labels)
    }

    /// Every metric name this emitter can emit, with its prefix.
    pub(crate) fn metric_names(&self) -> Vec<String> {
        TABLE
            .iter()
            .filter(|(m, ..)| (self.which)(*m))
            .map(|(_, _, suffix, _, _)| format!("{}{suffix}", self.prefix))
            .collect()
    }
}

/// The builder methods of an emitter of series (the publisher, the reclaimer), on a type with a
/// field `series: Series`: `prefix` (its docs end with `$default`, how the default is chosen) and
/// `label`.
macro_rules! series_settings {
    ($default:literal) => {
        #[doc = concat!("Metric name prefix (default `frag_`", $default, ").")]
        #[must_use]
        pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
            self.series.set_prefix(prefix.into());
            self
        }

        /// A label added to every series.
        #[must_use]
        pub fn label(mut self, key: impl Into<metrics::SharedString>, value: impl Into<metrics::SharedString>) -> Self {
            self.series.add_label(metrics::Label::new(key, value));
            self
        }
    };
}
pub(crate) use series_settings;

/// Whether the reclaimer emits `m` (the publisher emits the others).
pub(crate) fn of_reclaimer(m: Metric) -> bool {
    m as usize >= Metric::ReclaimedBytes as usize
}

pub(crate) fn kind_of(m: Metric) -> MetricKind {
    TABLE[m as usize].1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_in_enum_order_and_names_follow_prometheus_conventions() {
        for (i, (m, kind, suffix, unit, _)) in TABLE.iter().enumerate() {
            assert_eq!(*m as usize, i);
            assert!(suffix.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "{suffix}");
            let total = matches!(kind, MetricKind::Counter | MetricKind::Total);
            assert_eq!(total, suffix.ends_with("_total"), "{suffix}");
            if *unit == Unit::Bytes {
                assert!(suffix.ends_with("_bytes") || suffix.ends_with("_bytes_total"), "{suffix}");
            }
        }
    }
}
