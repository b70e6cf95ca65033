//! The heap's flight recorder: a bounded history of compact snapshots, one per publisher round, so
//! that a stair-step seen in a dashboard an hour ago can still be taken apart.
//!
//! **The bound.** The history has [`LEVELS`] levels of at most [`LEVEL_LEN`] snapshots each. A new
//! round goes into the first; when a level is over its length, its two oldest snapshots merge into
//! one that moves to the next level, and on the last level they merge in place, so old rounds get
//! coarser and are never dropped (at 5 s a round, the first level holds the last 8 minutes one by
//! one, the first three 56 minutes, all eight 34 hours before the oldest snapshot starts to widen).
//! A merged snapshot keeps its last round's figures and the lowest and highest resident bytes of
//! all its rounds. With at most [`MAX_SNAPSHOTS`] snapshots of bounded size, the history never
//! holds more than [`History::MAX_BYTES`] (1.4 MiB), whatever the program does; what it
//! holds is frag's own memory, never the program's.
//!
//! [`Publisher`](crate::Publisher) records each of its rounds here; [`history()`] returns a copy.
//! A process that publishes no metrics records it the same way: a publisher with no `metrics`
//! recorder installed emits nothing and still records, watches and explains.
//!
//! **The step explained.** [`History::compare`] sets two moments side by side, part by part, and
//! names the cause ([`Comparison`]; docs/DIAGNOSIS.md, "What happened at the step"); the publisher
//! does it for each step its watch sees, and [`History::mark`]s it. [`History::svg`] draws it all.

mod compare;
mod snapshot;
mod svg;

use core::time::Duration;
use std::collections::VecDeque;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::fork::Lock;
use crate::own;
use crate::report::Report;

pub use compare::{ClassSpan, Comparison, CrossThreadShare, MOVED_SCOPES, MOVED_SITES, PartMove, ScopeMove, SiteMove};
pub use snapshot::{CLASSES, ClassHoles, SCOPE_NAME, SCOPES, SITES, ScopeMark, SiteMark, Snapshot, Split};

/// Levels of the history.
pub const LEVELS: usize = 8;
/// Snapshots a level holds.
pub const LEVEL_LEN: usize = 96;
/// The most snapshots a history holds.
pub const MAX_SNAPSHOTS: usize = LEVELS * LEVEL_LEN;

/// The most steps a history keeps marked, the newest.
pub const STEPS: usize = 32;
/// Bytes of a step's label a history keeps (cut at a character boundary).
pub const STEP_LABEL: usize = 160;

/// A step of resident memory the watch saw, marked in the history with its cause in a few words.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct StepMark {
    /// When the previous plateau was last seen, on the history's clock.
    #[cfg_attr(feature = "serde", serde(rename = "before_ms", serialize_with = "snapshot::millis"))]
    pub before: Duration,
    /// When the new plateau held.
    #[cfg_attr(feature = "serde", serde(rename = "after_ms", serialize_with = "snapshot::millis"))]
    pub after: Duration,
    /// Resident bytes before and after.
    pub rss_bytes: (u64, u64),
    /// The cause, as the diagnosis names it.
    pub cause: Option<crate::report::diagnosis::FindingKind>,
    /// [`Comparison::headline`], at most [`STEP_LABEL`] bytes.
    pub label: Box<str>,
}

/// A bounded history of snapshots, oldest first (see the module docs for how it stays bounded).
///
/// ```
/// use std::time::Duration;
/// # #[global_allocator]
/// # static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
///
/// let report = frag::report();
/// let mut history = frag::history::History::new();
/// for i in 0..2_000u64 {
///     let at = Duration::from_secs(5 * i);
///     if let Some(s) = frag::history::Snapshot::of(&report, at, 0) {
///         history.record(s);
///     }
/// }
/// assert!(history.len() <= frag::history::MAX_SNAPSHOTS);
/// ```
#[derive(Clone, Debug, Default)]
pub struct History {
    /// Newest level first; within a level, oldest first.
    levels: [VecDeque<Snapshot>; LEVELS],
    /// The steps marked, oldest first, at most [`STEPS`].
    steps: VecDeque<StepMark>,
}

impl History {
    /// The most heap bytes a history holds (as requested of the allocator): its levels' buffers
    /// (each one snapshot longer than its level, for the one that moves on) and every snapshot at
    /// its largest.
    pub const MAX_BYTES: usize = LEVELS * (LEVEL_LEN + 1) * size_of::<Snapshot>()
        + MAX_SNAPSHOTS * Snapshot::MAX_HEAP_BYTES
        + (STEPS + 1) * size_of::<StepMark>()
        + STEPS * STEP_LABEL;

    /// An empty history.
    #[must_use]
    pub const fn new() -> Self {
        Self { levels: [const { VecDeque::new() }; LEVELS], steps: VecDeque::new() }
    }

    /// Adds a round, after every snapshot recorded before: its `from` should not be earlier than
    /// their `to` (the snapshots keep the order they are recorded in).
    pub fn record(&mut self, snapshot: Snapshot) {
        let mut moving = snapshot;
        for (i, level) in self.levels.iter_mut().enumerate() {
            if level.capacity() < LEVEL_LEN + 1 {
                level.reserve_exact(LEVEL_LEN + 1 - level.len());
            }
            level.push_back(moving);
            if level.len() <= LEVEL_LEN {
                return;
            }
            let (Some(older), Some(newer)) = (level.pop_front(), level.pop_front()) else { return };
            let merged = older.merge(newer);
            if i + 1 == LEVELS {
                level.push_front(merged);
                return;
            }
            moving = merged;
        }
    }

    /// Marks the step `comparison` explains (the newest [`STEPS`] are kept), for the picture.
    pub fn mark(&mut self, comparison: &Comparison) {
        if self.steps.capacity() < STEPS + 1 {
            self.steps.reserve_exact(STEPS + 1 - self.steps.len());
        }
        self.steps.push_back(StepMark {
            before: comparison.before,
            after: comparison.after,
            rss_bytes: comparison.rss_bytes,
            cause: comparison.cause,
            label: snapshot::cut(&comparison.headline(), STEP_LABEL),
        });
        if self.steps.len() > STEPS {
            self.steps.pop_front();
        }
    }

    /// The steps marked, oldest first.
    pub fn steps(&self) -> impl DoubleEndedIterator<Item = &StepMark> {
        self.steps.iter()
    }

    /// How many snapshots it holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.levels.iter().map(VecDeque::len).sum()
    }

    /// Whether it holds none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The snapshots, oldest first.
    pub fn snapshots(&self) -> impl DoubleEndedIterator<Item = &Snapshot> {
        self.levels.iter().rev().flat_map(|level| level.iter())
    }

    /// The snapshot covering `at` on the history's clock: the last one that began at or before it
    /// (the first when `at` is before them all); `None` when empty.
    #[must_use]
    pub fn at(&self, at: Duration) -> Option<&Snapshot> {
        let mut found = None;
        for s in self.snapshots() {
            if found.is_some() && s.from > at {
                break;
            }
            found = Some(s);
        }
        found
    }

    /// What moved between the snapshots covering `before` and `after` on the history's clock (see
    /// [`at`](Self::at)), part by part, and why; `None` when empty. The cross-thread share before
    /// is taken over as long a time before `before`. [`Comparison::explain`] names the sites and
    /// adds the remedy.
    ///
    /// ```no_run
    /// # #[global_allocator]
    /// # static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
    /// use std::time::Duration;
    ///
    /// // The step seen in a dashboard between minutes 50 and 52 of the history.
    /// let history = frag::history();
    /// if let Some(mut c) = history.compare(Duration::from_secs(50 * 60), Duration::from_secs(52 * 60)) {
    ///     c.explain(&frag::report());
    ///     println!("{c}");
    /// }
    /// ```
    #[must_use]
    pub fn compare(&self, before: Duration, after: Duration) -> Option<Comparison> {
        let (b, a) = (self.at(before)?, self.at(after)?);
        let earlier = self.at(b.to.saturating_sub(a.to.saturating_sub(b.to)))?;
        Some(Comparison::between(earlier, b, a))
    }

    /// The heap bytes it holds now: its levels' buffers and what its snapshots hold.
    #[must_use]
    pub fn heap_bytes(&self) -> usize {
        let levels: usize = self
            .levels
            .iter()
            .map(|l| l.capacity() * size_of::<Snapshot>() + l.iter().map(Snapshot::heap_bytes).sum::<usize>())
            .sum();
        let labels: usize = self.steps.iter().map(|s| s.label.len()).sum();
        levels + self.steps.capacity() * size_of::<StepMark>() + labels
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for History {
    /// As `{"snapshots": [...], "steps": [...]}`, oldest first.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        struct Seq<'a>(&'a History);
        impl serde::Serialize for Seq<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq(self.0.snapshots())
            }
        }
        let mut out = s.serialize_struct("History", 2)?;
        out.serialize_field("snapshots", &Seq(self))?;
        out.serialize_field("steps", &self.steps)?;
        out.end()
    }
}

/// The process's history, which publishers record into, with its clock's start (its first round).
/// Held across a `fork` (`fork::Lock`): a child goes on with the parent's history.
static RECORDED: Lock<(Option<Instant>, History)> = Lock::new((None, History::new()));

/// Records `report` as a round of the process's history, as frag's own work (a publisher's round);
/// returns when, on the history's clock, or `None` when the report has no resident figure.
pub(crate) fn record(report: &Report) -> Option<Duration> {
    let unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    own::run(|| {
        let mut recorded = RECORDED.lock();
        let (started, history) = &mut *recorded;
        let at = started.get_or_insert_with(Instant::now).elapsed();
        let snapshot = Snapshot::of(report, at, unix_ms)?;
        history.record(snapshot);
        Some(at)
    })
}

/// [`History::compare`] on the process's history, as frag's own work.
pub(crate) fn compare(before: Duration, after: Duration) -> Option<Comparison> {
    own::run(|| RECORDED.lock().1.compare(before, after))
}

/// [`History::mark`] on the process's history, as frag's own work.
pub(crate) fn mark(comparison: &Comparison) {
    own::run(|| RECORDED.lock().1.mark(comparison));
}

/// A copy of the history the process's [`Publisher`](crate::Publisher)s have recorded, oldest
/// first, on a clock that starts at the first round (empty while none has run).
///
/// ```no_run
/// # #[global_allocator]
/// # static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
/// let _publisher = frag::Publisher::new().spawn()?;
/// // ... later
/// for s in frag::history().snapshots() {
///     println!("{:?} {} MiB resident", s.to, s.rss_bytes >> 20);
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
#[must_use]
pub fn history() -> History {
    own::handed_over(|| RECORDED.lock().1.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    /// A round at `i` seconds with `rss` resident bytes.
    fn round(i: u64, rss: u64) -> Snapshot {
        Snapshot::bare(i, rss, i)
    }

    /// A series with a spike every 97 rounds and a step at round 5,000, against the history of it:
    /// the snapshots tile the rounds in order, each keeps its last round's figures and the lowest
    /// and highest of its span (from the series itself), the newest level is round by round, and
    /// the count stays bounded.
    #[test]
    fn the_snapshots_tile_the_rounds_and_keep_each_spans_extremes() {
        let rss = |i: u64| if i % 97 == 0 { 900 } else if i >= 5_000 { 300 } else { 100 } + i % 7;
        let n = 40_000u64;
        let mut h = History::new();
        for i in 0..n {
            h.record(round(i, rss(i)));
            assert!(h.len() <= MAX_SNAPSHOTS);
        }
        let mut next = 0u64;
        for s in h.snapshots() {
            let (from, to) = (s.from.as_secs(), s.to.as_secs());
            assert_eq!(from, next, "no gap, no overlap");
            assert_eq!(u64::from(s.rounds), to - from + 1);
            assert_eq!(s.allocated_bytes, to, "the last round's figures");
            assert_eq!(s.rss_low_bytes, (from..=to).map(rss).min().unwrap());
            assert_eq!(s.rss_high_bytes, (from..=to).map(rss).max().unwrap());
            next = to + 1;
        }
        assert_eq!(next, n);
        let newest: Vec<_> = h.snapshots().rev().take(LEVEL_LEN).collect();
        assert!(newest.iter().all(|s| s.rounds == 1));
        // A level sheds two snapshots when it is one over, so each holds one less at times.
        assert!(h.len() > MAX_SNAPSHOTS - LEVELS, "{}", h.len());
        assert_eq!(h.at(Duration::from_secs(n + 5)).map(|s| s.to.as_secs()), Some(n - 1));
        let covering = h.at(Duration::from_secs(5_000)).expect("a snapshot");
        assert!(covering.from.as_secs() <= 5_000 && 5_000 <= covering.to.as_secs(), "{covering:?}");
        assert_eq!(h.at(Duration::ZERO).map(|s| s.from), Some(Duration::ZERO));
    }

    /// The stated bound is what the module docs say.
    #[test]
    fn the_bound_is_what_the_docs_say() {
        assert_eq!(format!("{:.1} MiB", History::MAX_BYTES as f64 / f64::from(1 << 20)), "1.4 MiB");
    }
}
