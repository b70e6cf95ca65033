//! Heap misbehaviour over time: a stair-step in resident memory that live data does not explain, a
//! rise that live data does explain (growth or a leak, not fragmentation), and a fragmentation ratio
//! that stays high. A plain state machine fed one sample per interval, so it
//! can be tested on synthetic series; [`Publisher`](crate::Publisher) feeds it from reports and turns
//! its alerts into `tracing` warnings.

use core::time::Duration;

use crate::format::Bytes;
use crate::history::{Comparison, History};
use crate::report::Report;

/// Thresholds of a [`Watch`].
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct WatchConfig {
    /// A step is a rise of resident memory by at least this fraction of the current plateau
    /// (default 0.2: +20%).
    pub step_ratio: f64,
    /// ...that holds (stays above the midpoint of the rise) for at least this many samples,
    /// counting the first one above (default 3).
    pub plateau_samples: usize,
    /// ...while tracked allocated bytes grew by less than this fraction of the resident rise
    /// (default 0.5): growth matched by live data is not fragmentation.
    pub explained_share: f64,
    /// The fragmentation ratio above which the high-fragmentation alert counts (default 1.0: resident
    /// twice allocated).
    pub fragmentation_ratio: f64,
    /// ...for this many consecutive samples (default 5).
    pub fragmentation_samples: usize,
    /// At most one alert of each kind per this window (default 10 minutes).
    pub window: Duration,
}

impl Default for WatchConfig {
    fn default() -> Self {
        Self {
            step_ratio: 0.2,
            plateau_samples: 3,
            explained_share: 0.5,
            fragmentation_ratio: 1.0,
            fragmentation_samples: 5,
            window: Duration::from_secs(600),
        }
    }
}

impl WatchConfig {
    /// The thresholds a [`Watch`] uses: sample counts of at least 1, and a ratio that is not a
    /// positive finite number (NaN, negative) replaced by its default. The one place they are
    /// checked, whether set through the fields or the setters.
    #[must_use]
    pub fn normalized(self) -> Self {
        let d = Self::default();
        let ratio = |v: f64, default: f64| if v.is_finite() && v >= 0.0 { v } else { default };
        Self {
            step_ratio: ratio(self.step_ratio, d.step_ratio),
            plateau_samples: self.plateau_samples.max(1),
            explained_share: ratio(self.explained_share, d.explained_share),
            fragmentation_ratio: ratio(self.fragmentation_ratio, d.fragmentation_ratio),
            fragmentation_samples: self.fragmentation_samples.max(1),
            window: self.window,
        }
    }

    /// Sets [`step_ratio`](Self::step_ratio).
    #[must_use]
    pub fn step_ratio(mut self, v: f64) -> Self {
        self.step_ratio = v;
        self
    }
    /// Sets [`plateau_samples`](Self::plateau_samples).
    #[must_use]
    pub fn plateau_samples(mut self, v: usize) -> Self {
        self.plateau_samples = v;
        self
    }
    /// Sets [`explained_share`](Self::explained_share).
    #[must_use]
    pub fn explained_share(mut self, v: f64) -> Self {
        self.explained_share = v;
        self
    }
    /// Sets [`fragmentation_ratio`](Self::fragmentation_ratio).
    #[must_use]
    pub fn fragmentation_ratio(mut self, v: f64) -> Self {
        self.fragmentation_ratio = v;
        self
    }
    /// Sets [`fragmentation_samples`](Self::fragmentation_samples).
    #[must_use]
    pub fn fragmentation_samples(mut self, v: usize) -> Self {
        self.fragmentation_samples = v;
        self
    }
    /// Sets [`window`](Self::window).
    #[must_use]
    pub fn window(mut self, v: Duration) -> Self {
        self.window = v;
        self
    }
}

/// What a [`Watch`] found.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Alert {
    /// Resident memory rose to a new plateau that live data does not explain.
    StairStep {
        /// Resident bytes on the previous plateau.
        rss_from: u64,
        /// Resident bytes on the new plateau (its lowest sample).
        rss_to: u64,
        /// Tracked allocated bytes on the previous plateau.
        allocated_from: u64,
        /// Tracked allocated bytes now.
        allocated_to: u64,
        /// When the previous plateau was last seen (its last sample before the rise), on the clock
        /// [`Watch::observe`] is given.
        before: Duration,
        /// When the new plateau held long enough (this sample).
        at: Duration,
        /// What moved between the two, part by part, and why: set by [`explain`](Alert::explain)
        /// (the publisher explains each step from the process's history); `None` from a bare watch.
        cause: Option<Box<Comparison>>,
    },
    /// Resident memory rose to a new plateau **with** live data: a leak or real growth of the
    /// program's data, not fragmentation (tracked allocated bytes grew by at least
    /// [`explained_share`](WatchConfig::explained_share) of the rise).
    LiveGrowth {
        /// Resident bytes on the previous plateau.
        rss_from: u64,
        /// Resident bytes on the new plateau (its lowest sample).
        rss_to: u64,
        /// Tracked allocated bytes on the previous plateau.
        allocated_from: u64,
        /// Tracked allocated bytes now.
        allocated_to: u64,
        /// When the previous plateau was last seen.
        before: Duration,
        /// When the new plateau held long enough.
        at: Duration,
        /// What moved, as for [`StairStep`](Alert::StairStep).
        cause: Option<Box<Comparison>>,
    },
    /// The fragmentation ratio stayed above the threshold.
    HighFragmentation {
        /// The latest ratio.
        ratio: f64,
        /// Consecutive samples above the threshold.
        samples: usize,
    },
}

/// The alert in one sentence, with what it means and where to look, as the publisher logs it.
impl core::fmt::Display for Alert {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::StairStep { cause: Some(c), .. } => {
                write!(f, "resident memory stepped up to a new plateau: {c}")
            }
            Self::LiveGrowth { cause: Some(c), .. } => {
                write!(f, "resident memory rose to a new plateau with live data: {c}")
            }
            &Self::StairStep { rss_from, rss_to, allocated_from, allocated_to, .. } => write!(
                f,
                "resident memory stepped up from {} to {} while live data went from {} to {}: fragmentation, not \
                 a leak (see frag::report() size classes and origin)",
                Bytes(rss_from),
                Bytes(rss_to),
                Bytes(allocated_from),
                Bytes(allocated_to)
            ),
            &Self::LiveGrowth { rss_from, rss_to, allocated_from, allocated_to, .. } => write!(
                f,
                "resident memory rose from {} to {} with live data, from {} to {}: the program's own data grew \
                 (a leak or real growth), not fragmentation (see frag::report() live_data)",
                Bytes(rss_from),
                Bytes(rss_to),
                Bytes(allocated_from),
                Bytes(allocated_to)
            ),
            &Self::HighFragmentation { ratio, samples } => {
                write!(f, "fragmentation ratio {ratio:.2} for {samples} consecutive reports")
            }
        }
    }
}

impl Alert {
    /// The two moments a step alert compares: when the previous plateau was last seen and when the
    /// new one held; `None` for the other alerts.
    #[must_use]
    pub fn span(&self) -> Option<(Duration, Duration)> {
        match *self {
            Self::StairStep { before, at, .. } | Self::LiveGrowth { before, at, .. } => Some((before, at)),
            Self::HighFragmentation { .. } => None,
        }
    }

    /// What moved, for a step alert that has been [explained](Self::explain).
    #[must_use]
    pub fn cause(&self) -> Option<&Comparison> {
        match self {
            Self::StairStep { cause, .. } | Self::LiveGrowth { cause, .. } => cause.as_deref(),
            Self::HighFragmentation { .. } => None,
        }
    }

    /// Explains a step alert from `history`, kept on the same clock as the watch was fed: the
    /// snapshot of the previous plateau against that of the new one
    /// ([`History::compare`]), its sites named and the remedy taken from `report`
    /// ([`Comparison::explain`]). Does nothing to the other alerts, or where the history has no
    /// snapshot.
    pub fn explain(&mut self, history: &History, report: &Report) {
        if let Some((before, at)) = self.span() {
            self.set_cause(history.compare(before, at), report);
        }
    }

    /// Sets the cause of a step alert to `comparison`, explained from `report`.
    pub(crate) fn set_cause(&mut self, comparison: Option<Comparison>, report: &Report) {
        if let Self::StairStep { cause, .. } | Self::LiveGrowth { cause, .. } = self {
            *cause = comparison.map(|mut c| {
                c.explain(report);
                Box::new(c)
            });
        }
    }
}

/// A rise being watched: where it started and its lowest point since.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    held: usize,
    low: u64,
}

/// The stair-step and fragmentation detector. Feed it one sample per interval with
/// [`observe`](Self::observe).
///
/// ```
/// use std::time::Duration;
/// use frag::watch::{Alert, Watch, WatchConfig};
///
/// let mut watch = Watch::new(WatchConfig::default());
/// let mut alerts = Vec::new();
/// // 100 MiB resident, 50 MiB live; then resident steps to 160 MiB and stays, live data does not grow.
/// for (i, rss) in [100, 100, 100, 160, 161, 160, 162].into_iter().enumerate() {
///     let at = Duration::from_secs(10 * i as u64);
///     alerts.extend(watch.observe(at, rss << 20, 50 << 20, None));
/// }
/// assert!(matches!(alerts[..], [Alert::StairStep { rss_from, .. }] if rss_from == 100 << 20));
/// ```
#[derive(Clone, Debug)]
pub struct Watch {
    config: WatchConfig,
    /// The current plateau: resident and allocated bytes.
    base: Option<(u64, u64)>,
    /// When it was last seen.
    base_at: Duration,
    candidate: Option<Candidate>,
    /// Samples below the plateau by a step, for lowering it.
    below: usize,
    high_ratio: usize,
    last_step: Option<Duration>,
    last_growth: Option<Duration>,
    last_ratio: Option<Duration>,
}

impl Watch {
    /// A detector with these thresholds, [normalized](WatchConfig::normalized).
    #[must_use]
    pub fn new(config: WatchConfig) -> Self {
        Self {
            config: config.normalized(),
            base: None,
            base_at: Duration::ZERO,
            candidate: None,
            below: 0,
            high_ratio: 0,
            last_step: None,
            last_growth: None,
            last_ratio: None,
        }
    }

    /// The thresholds.
    #[must_use]
    pub fn config(&self) -> &WatchConfig {
        &self.config
    }

    fn allowed(last: &mut Option<Duration>, at: Duration, window: Duration) -> bool {
        match *last {
            Some(t) if at.saturating_sub(t) < window => false,
            _ => {
                *last = Some(at);
                true
            }
        }
    }

    /// Raises the current plateau by `bytes` of resident memory that are not the program's: frag's
    /// own work between two samples, such as the symbolizing that explains a step, whose freed
    /// pages the allocator may keep resident for a while. They make no step; once the allocator
    /// gives them back, the plateau comes down as after any fall.
    pub fn absorb(&mut self, bytes: u64) {
        if let Some((rss, _)) = &mut self.base {
            *rss = rss.saturating_add(bytes);
        }
    }

    /// One sample: the time since any fixed start, resident bytes, tracked allocated bytes and the
    /// fragmentation ratio if known. Returns the alerts this sample completes (rate-limited to one
    /// per kind per window).
    pub fn observe(&mut self, at: Duration, rss: u64, allocated: u64, ratio: Option<f64>) -> Vec<Alert> {
        let mut alerts = Vec::new();
        let c = self.config;
        let Some((base_rss, base_alloc)) = self.base else {
            self.base = Some((rss, allocated));
            self.base_at = at;
            return alerts;
        };
        let step = (base_rss as f64 * c.step_ratio) as u64;
        if rss >= base_rss + step.max(1) {
            self.below = 0;
            let cand = self.candidate.get_or_insert(Candidate { held: 0, low: rss });
            cand.held += 1;
            cand.low = cand.low.min(rss);
            if cand.held >= c.plateau_samples {
                let rise = cand.low.saturating_sub(base_rss);
                let grown = allocated.saturating_sub(base_alloc);
                let low = cand.low;
                self.candidate = None;
                self.base = Some((low, allocated));
                let before = core::mem::replace(&mut self.base_at, at);
                let (rss_from, rss_to, allocated_from, allocated_to) = (base_rss, low, base_alloc, allocated);
                let stair = (grown as f64) < c.explained_share * rise as f64;
                let last = if stair { &mut self.last_step } else { &mut self.last_growth };
                if Self::allowed(last, at, c.window) {
                    let cause = None;
                    alerts.push(if stair {
                        Alert::StairStep { rss_from, rss_to, allocated_from, allocated_to, before, at, cause }
                    } else {
                        Alert::LiveGrowth { rss_from, rss_to, allocated_from, allocated_to, before, at, cause }
                    });
                }
            }
        } else if let Some(cand) = self.candidate {
            // Fell back before holding: a sawtooth, unless it stays above the midpoint of the rise.
            if rss > base_rss + step / 2 {
                self.candidate = Some(Candidate { held: cand.held + 1, low: cand.low.min(rss) });
            } else {
                self.candidate = None;
                self.base_at = at;
            }
        } else if rss + step < base_rss {
            // Resident memory fell by a step: once that holds, it is the new plateau.
            self.below += 1;
            if self.below >= c.plateau_samples {
                self.base = Some((rss, allocated));
                self.base_at = at;
                self.below = 0;
            }
        } else {
            self.below = 0;
            self.base_at = at;
        }

        match ratio {
            Some(r) if r > c.fragmentation_ratio => {
                self.high_ratio += 1;
                if self.high_ratio >= c.fragmentation_samples && Self::allowed(&mut self.last_ratio, at, c.window) {
                    alerts.push(Alert::HighFragmentation { ratio: r, samples: self.high_ratio });
                }
            }
            _ => self.high_ratio = 0,
        }
        alerts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn run(config: WatchConfig, series: &[(u64, u64)]) -> Vec<Alert> {
        let mut w = Watch::new(config);
        series
            .iter()
            .enumerate()
            .flat_map(|(i, (rss, alloc))| w.observe(Duration::from_secs(10 * i as u64), rss * MIB, alloc * MIB, None))
            .collect()
    }

    /// Thresholds set through the public fields are checked like those set through the setters.
    #[test]
    fn fields_cannot_bypass_the_checks() {
        let c =
            WatchConfig { plateau_samples: 0, fragmentation_samples: 0, step_ratio: f64::NAN, ..Default::default() };
        let w = Watch::new(c);
        assert_eq!(w.config().plateau_samples, 1);
        assert_eq!(w.config().fragmentation_samples, 1);
        assert_eq!(w.config().step_ratio, 0.2);
        assert_eq!(Watch::new(WatchConfig::default().plateau_samples(0)).config().plateau_samples, 1);
    }

    #[test]
    fn fires_on_a_step_that_holds() {
        let series = [(100, 40), (101, 41), (99, 40), (130, 42), (131, 41), (130, 40), (129, 42), (130, 41)];
        let alerts = run(WatchConfig::default(), &series);
        assert_eq!(
            alerts,
            vec![Alert::StairStep {
                rss_from: 100 * MIB,
                rss_to: 130 * MIB,
                allocated_from: 40 * MIB,
                allocated_to: 40 * MIB,
                before: Duration::from_secs(20),
                at: Duration::from_secs(50),
                cause: None,
            }]
        );
    }

    #[test]
    fn fires_once_per_step_of_a_staircase() {
        let series = [(100, 40), (130, 40), (130, 40), (130, 40), (170, 41), (170, 41), (171, 40), (171, 40)];
        let alerts = run(WatchConfig::default().window(Duration::ZERO), &series);
        assert_eq!(alerts.len(), 2, "{alerts:?}");
        assert!(
            matches!(alerts[1], Alert::StairStep { rss_from, rss_to, .. } if rss_from == 130 * MIB && rss_to == 170 * MIB)
        );
    }

    #[test]
    fn ignores_a_sawtooth() {
        // jemalloc's rise and fall: up for one or two samples, then purged back down.
        let mut series = Vec::new();
        for _ in 0..10 {
            series.extend([(100, 40), (140, 60), (150, 60), (101, 40)]);
        }
        assert_eq!(run(WatchConfig::default(), &series), vec![]);
    }

    #[test]
    fn growth_matched_by_allocated_bytes_is_live_growth_not_a_stair_step() {
        let series = [(100, 60), (100, 60), (140, 95), (141, 96), (140, 95), (140, 95)];
        assert_eq!(
            run(WatchConfig::default(), &series),
            vec![Alert::LiveGrowth {
                rss_from: 100 * MIB,
                rss_to: 140 * MIB,
                allocated_from: 60 * MIB,
                allocated_to: 95 * MIB,
                before: Duration::from_secs(10),
                at: Duration::from_secs(40),
                cause: None,
            }]
        );
    }

    #[test]
    fn a_step_after_a_fall_is_measured_from_the_lower_plateau() {
        let series = [(200, 40), (100, 40), (100, 40), (100, 40), (130, 40), (130, 40), (130, 40)];
        let alerts = run(WatchConfig::default(), &series);
        assert!(matches!(alerts[..], [Alert::StairStep { rss_from, .. }] if rss_from == 100 * MIB), "{alerts:?}");
    }

    #[test]
    fn alerts_are_rate_limited_per_window() {
        let series = [(100, 40), (130, 40), (130, 40), (130, 40), (170, 40), (170, 40), (170, 40)];
        assert_eq!(run(WatchConfig::default(), &series).len(), 1, "second step within 10 minutes");
    }

    #[test]
    fn high_fragmentation_needs_consecutive_samples() {
        let mut w = Watch::new(WatchConfig::default().fragmentation_samples(3));
        let mut fired = Vec::new();
        for (i, r) in [1.5, 1.6, 0.5, 1.5, 1.5, 1.7, 1.8].into_iter().enumerate() {
            fired.extend(w.observe(Duration::from_secs(i as u64), 100 * MIB, 40 * MIB, Some(r)));
        }
        assert_eq!(fired, vec![Alert::HighFragmentation { ratio: 1.7, samples: 3 }]);
    }
}
