//! What a reclaimer round reads of the process and its allocator, and does to them ([`Host`]: the
//! live process in `this_process`, a model in the tests), and the round's one reading of the process
//! ([`Reading`]).

use std::cell::OnceCell;
use std::time::Duration;

use crate::backend::tuning::{Decay, Method, TuneError};
use crate::report::diagnosis::Breakdown;

/// The process's memory as `/proc/self/statm` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Statm {
    /// Resident bytes.
    pub(crate) rss: u64,
    /// Anonymous resident bytes.
    pub(crate) anon: u64,
}

/// The reclaimer's host: what a round reads of the process and its allocator, and does to them.
/// What the round has to say about them it returns (`engine::Step`), for the reclaimer to emit.
pub(crate) trait Host {
    /// Requested bytes handed out since start.
    fn allocated_total(&mut self) -> u64;
    /// The process's resident bytes now.
    fn statm(&mut self) -> Option<Statm>;
    /// Minor faults of the process so far.
    fn minor_faults(&mut self) -> u64;
    /// The diagnosis's breakdown of the process's memory as read `at`.
    fn breakdown(&mut self, at: Statm) -> Breakdown;
    /// The backend's action, keeping `keep` bytes, stopping between steps once it has used
    /// `cpu_limit` of CPU time.
    fn reclaim(&mut self, keep: u64, cpu_limit: Duration) -> Result<Method, TuneError>;
    /// CPU time of the calling thread so far.
    fn cpu(&mut self) -> Duration;
    /// Asks idle threads to return what only they can (`open`), or stops asking.
    fn ask_threads(&mut self, open: bool);
    /// Shortens the backend's purge delay for the time RSS is over the limit's target; returns the
    /// delay it replaced (`None`: nothing changed, the backend has none or it is as short already).
    fn shorten_decay(&mut self) -> Option<Decay>;
    /// Sets the purge delay back to `previous`, unless the one in force is no longer the one
    /// [`shorten_decay`](Self::shorten_decay) set (somebody set another meanwhile: theirs stays).
    fn restore_decay(&mut self, previous: Decay);
    /// Asks allocating threads to help return memory at their next sampled allocation, once each
    /// (`true`), or stops asking.
    fn want_assists(&mut self, on: bool);
    /// CPU time the allocating threads' assists have taken so far, process-wide.
    fn assist_cpu(&mut self) -> Duration;
}

/// One round's reading of the process, taken when the round first needs it and kept for the rest
/// of it: `/proc/self/statm` once, and the breakdown (the allocator's statistics) from that reading,
/// once. Only an action's own effect is read again (`engine`'s RSS after it).
#[derive(Debug, Default)]
pub(crate) struct Reading {
    statm: OnceCell<Option<Statm>>,
    breakdown: OnceCell<Option<Breakdown>>,
}

impl Reading {
    /// The round's RSS.
    pub(crate) fn rss(&self, host: &mut impl Host) -> Option<u64> {
        self.statm.get_or_init(|| host.statm()).map(|s| s.rss)
    }

    /// The round's breakdown, at the round's RSS.
    pub(crate) fn breakdown(&self, host: &mut impl Host) -> Option<&Breakdown> {
        let statm = *self.statm.get_or_init(|| host.statm());
        self.breakdown.get_or_init(|| statm.map(|at| host.breakdown(at))).as_ref()
    }
}
