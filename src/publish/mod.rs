//! Publishing reports through the `metrics` facade and `tracing`, on a background thread or from a
//! task of your own. Never called from the allocator; a library never installs a recorder (with none
//! installed, every emission is a no-op).

pub(crate) mod names;
mod samples;
pub(crate) mod worker;

use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Duration;

use metrics::Label;

use self::names::{MetricKind, Names, Series};
use self::worker::Worker;
use crate::backend::WrappedBackend;
use crate::own;
use crate::report::Report;
use crate::report::collect::report;
use crate::report::diagnosis::{FindingKind, Severity};
use crate::watch::{Alert, Watch, WatchConfig};

/// The metrics the publisher emits (the reclaimer emits the others).
fn publisher_metric(m: names::Metric) -> bool {
    !names::of_reclaimer(m)
}

fn emit(names: &Names, base: &[Label], report: &Report, threads: Option<usize>) {
    for s in samples::samples(report, threads) {
        let Some(value) = names.value(s.metric, s.value) else { continue };
        let name = names.get(s.metric);
        let mut labels = base.to_vec();
        labels.extend(s.labels.into_iter().map(|(k, v)| Label::new(k, v)));
        match names::kind_of(s.metric) {
            MetricKind::Gauge | MetricKind::Total => metrics::gauge!(name, labels).set(value),
            MetricKind::Counter => metrics::counter!(name, labels).absolute(value as u64),
            MetricKind::Histogram => metrics::histogram!(name, labels).record(value),
        }
    }
}

/// Publishes `report` through the `metrics` facade with the default prefix (`frag_`): gauges for
/// sizes and ratios, absolute counters for totals, per size class `frag_size_class_*{class="64"}`.
/// Every metric is described (with its unit) on the first call.
///
/// **Series without a value.** A series appears with its first value. A figure this process cannot
/// have is therefore never published: the allocator figures of the other backends (below), PSS
/// until `frag::process::set_pss(true)`, the cgroup figures outside a memory cgroup and its limit when none is
/// set. A series that had a value and has none this round (a ratio over too little live data, a
/// figure the allocator failed to give) is set to NaN, so that no gauge keeps showing a value that
/// no longer holds.
///
/// The allocator's own figures (`frag_allocator_*_bytes`), by backend:
///
/// | backend | series |
/// |---|---|
/// | jemalloc | `allocated`, `active`, `metadata`, `resident`, `mapped`, `retained` |
/// | glibc | `allocated`, `free` |
/// | mimalloc | `committed` |
/// | snmalloc | `mapped` |
/// | others | none |
///
/// With no recorder installed this only builds the sample list. For periodic publishing, per-thread
/// series, custom prefixes or labels and `tracing` alerts, use [`Publisher`].
///
/// # Example
///
/// ```no_run
/// # #[global_allocator]
/// # static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
/// // with any exporter installed, e.g. metrics-exporter-prometheus:
/// let report = frag::report();
/// frag::publish::once(&report);
/// ```
pub fn once(report: &Report) {
    // Built once and kept; not a `OnceLock`, whose initialisation a child of `fork` could find
    // running for good. Two first callers at once both build it; one is kept.
    static NAMES: AtomicPtr<Names> = AtomicPtr::new(core::ptr::null_mut());
    let mut names = NAMES.load(Ordering::Acquire);
    if names.is_null() {
        let fresh = Names::new(Publisher::DEFAULT_PREFIX);
        fresh.describe(publisher_metric);
        let built = Box::into_raw(Box::new(fresh));
        names = match NAMES.compare_exchange(core::ptr::null_mut(), built, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => built,
            Err(kept) => {
                // SAFETY: `built` came from `Box::into_raw` just above and was never shared.
                drop(unsafe { Box::from_raw(built) });
                kept
            }
        };
    }
    // SAFETY: a published pointer came from `Box::into_raw` and is never freed.
    let names: &'static Names = unsafe { &*names };
    own::run(|| emit(names, &[], report, None));
}

/// Periodic publishing with alerts: a builder, then [`spawn`](Self::spawn) for a background thread
/// or [`publish_once`](Self::publish_once) from a task you already run.
///
/// Each round takes a [`report()`], publishes it like [`once`], records it in the process's
/// [`history()`](crate::history()), feeds resident and allocated bytes to a [`Watch`] and turns its
/// alerts into `tracing` warnings (target `frag`), each with its figures as fields. The first round
/// also emits one `info` event with the backend, the allocator's effective configuration and the
/// origin sample rate.
///
/// # Example
///
/// ```no_run
/// # #[global_allocator]
/// # static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
/// use std::time::Duration;
///
/// let handle = frag::Publisher::new()
///     .interval(Duration::from_secs(10))
///     .label("service", "checkout")
///     .per_thread(true)
///     .spawn()
///     .expect("spawn the frag publisher thread");
/// // ... the service runs; dropping the handle stops the thread.
/// drop(handle);
/// ```
pub struct Publisher {
    interval: Duration,
    series: Series,
    threads: Option<usize>,
    thread_cap: usize,
    watch: Watch,
    announced: bool,
}

impl Default for Publisher {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Publisher")
            .field("interval", &self.interval)
            .field("series", &self.series)
            .field("per_thread", &self.threads)
            .field("watch", self.watch.config())
            .finish_non_exhaustive()
    }
}

impl Publisher {
    /// The default metric name prefix.
    pub const DEFAULT_PREFIX: &'static str = "frag_";

    /// Default interval between reports of a spawned publisher.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);

    /// Default cap on per-thread series (see [`Publisher::per_thread`]).
    pub const DEFAULT_THREAD_CAP: usize = 32;

    /// Default settings: every 5 s, prefix `frag_`, no extra labels, no per-thread series, default
    /// [`WatchConfig`].
    #[must_use]
    pub fn new() -> Self {
        Self {
            interval: Self::DEFAULT_INTERVAL,
            series: Series::new(Self::DEFAULT_PREFIX, publisher_metric),
            threads: None,
            thread_cap: Self::DEFAULT_THREAD_CAP,
            watch: Watch::new(WatchConfig::default()),
            announced: false,
        }
    }

    /// Time between rounds of a spawned publisher (at least 10 ms).
    #[must_use]
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval.max(Duration::from_millis(10));
        self
    }

    names::series_settings!("");

    /// Per-thread series (`frag_thread_*{thread="name"}`), off by default: threads of the same name
    /// are summed, and at most [`thread_cap`](Self::thread_cap) names are published (the rest as
    /// `thread="other"`), to bound label cardinality.
    #[must_use]
    pub fn per_thread(mut self, on: bool) -> Self {
        self.threads = on.then_some(self.thread_cap);
        self
    }

    /// The most thread names published (default 32, at least 1).
    #[must_use]
    pub fn thread_cap(mut self, cap: usize) -> Self {
        self.thread_cap = cap.max(1);
        if self.threads.is_some() {
            self.threads = Some(self.thread_cap);
        }
        self
    }

    /// Thresholds of the stair-step and fragmentation alerts.
    #[must_use]
    pub fn watch(mut self, config: WatchConfig) -> Self {
        self.watch = Watch::new(config);
        self
    }

    /// Every metric name this publisher can emit, with its prefix. Which ones appear depends on the
    /// backend (the table in [`once`]), on what the process has (PSS, a memory
    /// cgroup) and on [`per_thread`](Self::per_thread).
    #[must_use]
    pub fn metric_names(&self) -> Vec<String> {
        self.series.metric_names()
    }

    /// Takes a report, publishes it and raises alerts; returns the report. For calling from a task
    /// of your own at your own interval (it reads `/proc`: from async code, prefer
    /// `spawn_blocking`).
    // Never inlined: `scripts/instructions.py` leaves the publisher's rounds out of its counts by
    // this function's name.
    #[inline(never)]
    pub fn publish_once(&mut self) -> Report {
        let report = report();
        self.observe(&report);
        report
    }

    /// Publishes an existing report, feeds it to the watch and returns the alerts it raised (each
    /// also logged). Named apart from the free function [`once`], which only
    /// publishes.
    pub fn observe(&mut self, report: &Report) -> Vec<Alert> {
        own::handed_over(|| self.observe_now(report))
    }

    /// [`observe`](Self::observe), as frag's own work.
    fn observe_now(&mut self, report: &Report) -> Vec<Alert> {
        if !self.announced {
            self.announced = true;
            tracing::info!(
                target: "frag",
                backend = %report.backend.map_or("none", WrappedBackend::name),
                allocator_config = %crate::tune::effective_config(),
                sampling = ?crate::sampler::sampling(),
                sampler = if crate::sampler::reported() { "jemalloc's profiler" } else { "frag's" },
                unwinder = %crate::sites::unwinder(),
                "frag publishing heap metrics"
            );
        }
        let threads = self.threads;
        let (names, labels) = self.series.names();
        emit(names, labels, report, threads);
        // The watch runs on the history's clock, so that a step's two moments are snapshots of it.
        let (Some(at), Some(rss)) = (crate::history::record(report), report.resident_bytes()) else {
            return Vec::new();
        };
        let mut alerts = self.watch.observe(at, rss, report.tracked.allocated_bytes, report.fragmentation.ratio);
        let backend = report.backend.map_or("none", WrappedBackend::name);
        for alert in &mut alerts {
            if let Some((before, after)) = alert.span() {
                // Naming the sites reads the debug information; the pages it frees may stay
                // resident a while, and are no step of the program's.
                let resident = crate::report::collect::resident_bytes();
                alert.set_cause(crate::history::compare(before, after), report);
                if let (Some(was), Some(now)) = (resident, crate::report::collect::resident_bytes()) {
                    self.watch.absorb(now.saturating_sub(was));
                }
                let severity = if matches!(alert, Alert::StairStep { .. }) { Severity::Warn } else { Severity::Info };
                if let Some(c) = alert.cause() {
                    crate::report::diagnosis::set_last_step(c.finding(severity));
                    crate::history::mark(c);
                }
            }
            let cause = alert.cause().and_then(|c| c.cause).map_or("unknown", FindingKind::name);
            match *alert {
                Alert::StairStep { rss_from, rss_to, allocated_from, allocated_to, .. }
                | Alert::LiveGrowth { rss_from, rss_to, allocated_from, allocated_to, .. } => tracing::warn!(
                    target: "frag",
                    rss_from,
                    rss_to,
                    allocated_from,
                    allocated_to,
                    cause,
                    backend = %backend,
                    "{alert}"
                ),
                Alert::HighFragmentation { ratio, samples } => tracing::warn!(
                    target: "frag",
                    ratio,
                    samples,
                    inputs = %report.fragmentation.ratio_inputs,
                    "{alert}"
                ),
            }
        }
        alerts
    }

    /// Runs the publisher on a background thread named `frag-publisher`, one round per interval
    /// (the first at once). The returned handle stops and joins the thread when dropped.
    ///
    /// # Errors
    ///
    /// The thread could not be spawned.
    pub fn spawn(mut self) -> std::io::Result<PublisherHandle> {
        let interval = self.interval;
        let worker = Worker::spawn("frag-publisher", move || {
            self.publish_once();
            Some(interval)
        })?;
        Ok(PublisherHandle { worker })
    }
}

/// A running publisher thread; dropping it stops the thread (after the round in progress, if any).
/// In a child of `fork`, which starts without the thread, dropping it does nothing.
#[derive(Debug)]
pub struct PublisherHandle {
    worker: Worker,
}

impl PublisherHandle {
    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.worker.stop();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_class_label_is_the_upper_bound() {
        assert_eq!(super::samples::class_label(Some(64)), "64");
        assert_eq!(super::samples::class_label(None), "+Inf");
    }
}
