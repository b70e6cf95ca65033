//! What the reclaimer did and why not: one [`Round`] per poll, each [`Action`] with its prediction,
//! its measured release and, once its refault window has passed, what came back; and the totals.

use core::fmt;
use std::time::Duration;

use crate::backend::tuning::{Method, TuneError};
use crate::format::Bytes;
use crate::report::diagnosis::{Breakdown, Part};

/// The outcome of one reclaimer round.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Round {
    /// The backend was asked to return memory.
    Acted(Action),
    /// Nothing was done, and why.
    Skipped(Skip),
}

/// Why a round did not act. The [`name`](Skip::name)s label `frag_reclaim_skipped_total`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Skip {
    /// The first round: an allocation rate takes two rounds, so nothing is decided yet.
    FirstRound,
    /// The heap is busy: it handed out more bytes per second than the quiet rate.
    Busy {
        /// Bytes allocated per second since the previous round (estimated in the sampled tier).
        bytes_per_sec: f64,
        /// The rate below which the heap counts as quiet now.
        quiet_below: f64,
    },
    /// The heap is quiet, but not yet for the whole quiet window.
    Settling {
        /// How long it has been quiet.
        quiet_for: Duration,
        /// The window it must be quiet for (the configured one, lengthened after refaults).
        window: Duration,
    },
    /// The last action ended less than the minimum interval ago.
    Interval {
        /// Time since the last action ended.
        since: Duration,
        /// The minimum interval.
        min: Duration,
    },
    /// The diagnosis predicts less than the threshold would release.
    Small {
        /// Bytes the action would release (the diagnosis's prediction, less the bytes to keep).
        predicted: u64,
        /// The threshold: the larger of the bytes and the share of RSS configured.
        threshold: u64,
    },
    /// The CPU budget is spent: the reclaimer waits until its share of a core has paid for it.
    Budget {
        /// CPU time owed: spent beyond the share so far (zero before any credit was earned).
        short_by: Duration,
    },
    /// The wrapped backend's figures do not say what is reclaimable (no statistics, or no `/proc`).
    NotSplit,
    /// The backend refused the action.
    Failed(TuneError),
}

impl Skip {
    /// A short name for labels: `first_round`, `busy`, `settling`, `interval`, `small`, `budget`,
    /// `not_split`, `failed`.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::FirstRound => "first_round",
            Self::Busy { .. } => "busy",
            Self::Settling { .. } => "settling",
            Self::Interval { .. } => "interval",
            Self::Small { .. } => "small",
            Self::Budget { .. } => "budget",
            Self::NotSplit => "not_split",
            Self::Failed(_) => "failed",
        }
    }
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FirstRound => f.write_str("first round: the allocation rate is known from the second on"),
            Self::Busy { bytes_per_sec, quiet_below } => write!(
                f,
                "heap busy: {}/s allocated, quiet below {}/s",
                Bytes(*bytes_per_sec as u64),
                Bytes(*quiet_below as u64)
            ),
            Self::Settling { quiet_for, window } => write!(f, "quiet for {quiet_for:.1?} of {window:.1?}"),
            Self::Interval { since, min } => write!(f, "last action {since:.1?} ago, minimum interval {min:.1?}"),
            Self::Small { predicted, threshold } => {
                write!(f, "{} reclaimable, threshold {} (estimated)", Bytes(*predicted), Bytes(*threshold))
            }
            Self::Budget { short_by } => write!(f, "CPU budget short by {short_by:.1?}"),
            Self::NotSplit => f.write_str("the backend's figures do not say what is reclaimable"),
            Self::Failed(e) => write!(f, "the backend refused: {e}"),
        }
    }
}

/// One action: what the diagnosis predicted, what the backend was asked, what the kernel saw.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Action {
    /// Time since the reclaimer started, at the action's start.
    pub at: Duration,
    /// What the backend did.
    pub method: Method,
    /// Bytes the diagnosis predicted the action would release (estimated): its `reclaimable` part,
    /// less the bytes to keep.
    pub predicted_bytes: u64,
    /// The breakdown part the prediction came from: [`Part::Reclaimable`], or [`Part::Holes`] (an
    /// upper bound) on a backend that does not split free pages from partly used ones (mimalloc).
    pub predicted_from: Part,
    /// Process RSS before the action (`/proc/self/statm`).
    pub rss_before: u64,
    /// Process RSS after it.
    pub rss_after: u64,
    /// Wall time of the action: for glibc's trim, an upper bound on how long any one thread waited
    /// for an arena lock it held.
    pub wall: Duration,
    /// CPU time of the action (user and system, the reclaimer's thread).
    pub cpu: Duration,
    /// What came back within the refault window; `None` until the window has passed.
    pub refault: Option<Refault>,
}

impl Action {
    /// RSS released: before minus after (zero if RSS grew meanwhile).
    #[must_use]
    pub fn released_bytes(&self) -> u64 {
        self.rss_before.saturating_sub(self.rss_after)
    }

    /// Released over predicted (`None` when nothing was predicted). The reclaimer's target range is
    /// 0.5 to 1.6.
    #[must_use]
    pub fn release_ratio(&self) -> Option<f64> {
        (self.predicted_bytes > 0).then(|| self.released_bytes() as f64 / self.predicted_bytes as f64)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: released {} of {} predicted from {} (estimated), RSS {} -> {}, {:.2?} ({:.2?} CPU)",
            self.method,
            Bytes(self.released_bytes()),
            Bytes(self.predicted_bytes),
            self.predicted_from.name(),
            Bytes(self.rss_before),
            Bytes(self.rss_after),
            self.wall,
            self.cpu
        )?;
        match &self.refault {
            Some(r) => write!(f, "; {r}"),
            None => Ok(()),
        }
    }
}

/// What came back after an action, within the refault window: the sign that memory was released
/// that the program was about to reuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refault {
    /// The window.
    pub window: Duration,
    /// Highest RSS seen in the window above the RSS right after the action, up to what the action
    /// released (estimated: new live data counts too).
    pub regained_bytes: u64,
    /// Minor page faults of the whole process within the window.
    pub minor_faults: u64,
}

impl fmt::Display for Refault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "within {:.1?}: {} regained (estimated), {} minor faults",
            self.window,
            Bytes(self.regained_bytes),
            self.minor_faults
        )
    }
}

/// Skipped rounds by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Skips {
    /// [`Skip::FirstRound`].
    pub first_round: u64,
    /// [`Skip::Busy`].
    pub busy: u64,
    /// [`Skip::Settling`].
    pub settling: u64,
    /// [`Skip::Interval`].
    pub interval: u64,
    /// [`Skip::Small`].
    pub small: u64,
    /// [`Skip::Budget`].
    pub budget: u64,
    /// [`Skip::NotSplit`].
    pub not_split: u64,
    /// [`Skip::Failed`].
    pub failed: u64,
}

impl Skips {
    pub(crate) fn count(&mut self, skip: &Skip) {
        *match skip {
            Skip::FirstRound => &mut self.first_round,
            Skip::Busy { .. } => &mut self.busy,
            Skip::Settling { .. } => &mut self.settling,
            Skip::Interval { .. } => &mut self.interval,
            Skip::Small { .. } => &mut self.small,
            Skip::Budget { .. } => &mut self.budget,
            Skip::NotSplit => &mut self.not_split,
            Skip::Failed(_) => &mut self.failed,
        } += 1;
    }
}

/// Everything the reclaimer has done since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Totals {
    /// Time since the reclaimer started.
    pub elapsed: Duration,
    /// Rounds run.
    pub rounds: u64,
    /// Actions taken.
    pub actions: u64,
    /// Rounds skipped, by reason.
    pub skipped: Skips,
    /// RSS released by the actions (each action's before minus after).
    pub released_bytes: u64,
    /// Bytes the diagnosis predicted the actions would release (estimated).
    pub predicted_bytes: u64,
    /// CPU time of every round, polls and actions.
    pub cpu: Duration,
    /// CPU time of the actions alone.
    pub action_cpu: Duration,
    /// RSS regained within the refault windows (estimated).
    pub refault_bytes: u64,
    /// Minor faults within the refault windows.
    pub refault_minor_faults: u64,
    /// The quiet window's current multiple of the configured one (1 unless releases were refaulted).
    pub backoff: u32,
    /// What idle threads released through [`idle`](super::idle) (process-wide, as of the last round).
    pub threads: super::threads::ThreadReleases,
    /// Time RSS spent over the memory limit's target (see [`MemoryLimit`](super::MemoryLimit)).
    pub over_target: Duration,
    /// Rounds over the target in which nothing the reclaimer could release would bring RSS under it:
    /// live data and the allocator's floor exceed the limit.
    pub exhausted_rounds: u64,
    /// The share of a core the reclaimer may spend now: `cpu_share`, or more while RSS is over the
    /// limit's target, up to `max_cpu_share`.
    pub share: f64,
    /// Allocating threads' assists over the limit's target (process-wide, as of the last round): at
    /// their sampled allocations, each released what only it can, at most once per round per thread.
    pub assists: u64,
    /// The CPU time those assists took, on the allocating threads.
    pub assist_cpu: Duration,
    /// The memory limit in force, in bytes.
    pub limit_bytes: Option<u64>,
    /// Its target: the RSS over which the reclaimer acts while the heap is busy.
    pub target_bytes: Option<u64>,
    /// What held RSS over the target at the last round, by part; `None` under it (or where the
    /// backend's figures do not split the heap).
    pub held: Option<Held>,
}

/// Resident memory over the memory limit's target, by what holds it: the report's breakdown at the
/// round, in the parts that decide whether a release can help. A release returns `reclaimable`;
/// `holes` come back only as the live blocks in their pages are freed; `live` is the program's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Held {
    /// The process's RSS at the round.
    pub rss: u64,
    /// The program's live blocks, their rounding and frag's own.
    pub live: u64,
    /// Free space inside pages that still hold live blocks (with free pages not yet returned, on a
    /// backend that does not tell them apart: mimalloc).
    pub holes: u64,
    /// Free pages a release returns.
    pub reclaimable: u64,
    /// The allocator's bookkeeping, memory outside the heap and what the split leaves unexplained.
    pub other: u64,
}

impl Held {
    /// The parts by their label in `frag_memory_limit_held_bytes{part}`.
    #[must_use]
    pub fn parts(&self) -> [(&'static str, u64); 4] {
        [("live", self.live), ("holes", self.holes), ("reclaimable", self.reclaimable), ("other", self.other)]
    }
}

impl From<&Breakdown> for Held {
    fn from(b: &Breakdown) -> Self {
        let live = b.live_bytes + b.rounding_bytes + b.frag_bytes;
        let (holes, reclaimable) = (b.holes_bytes, b.reclaimable_bytes);
        Self {
            rss: b.rss_bytes,
            live,
            holes,
            reclaimable,
            other: b.rss_bytes.saturating_sub(live + holes + reclaimable),
        }
    }
}

impl Totals {
    /// CPU time over elapsed time: the share of one core the reclaimer has used.
    #[must_use]
    pub fn cpu_share(&self) -> f64 {
        if self.elapsed.is_zero() { 0.0 } else { self.cpu.as_secs_f64() / self.elapsed.as_secs_f64() }
    }
}

impl fmt::Display for Totals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} actions in {:.1?}: released {} of {} predicted (estimated), CPU {:.1?} ({:.3}% of a core), \
             {} regained after releases (estimated), {} rounds skipped, {} releases by idle threads, {} assists \
             by allocating threads ({:.1?} CPU)",
            self.actions,
            self.elapsed,
            Bytes(self.released_bytes),
            Bytes(self.predicted_bytes),
            self.cpu,
            self.cpu_share() * 100.0,
            Bytes(self.refault_bytes),
            self.rounds - self.actions,
            self.threads.total(),
            self.assists,
            self.assist_cpu
        )
    }
}
