//! A model heap for the reclaimer's tests: what the program allocates, its RSS and what is
//! reclaimable, on a clock the test drives.

use std::time::Duration;

use super::host::{Host, Statm};
use super::settings::Settings;
use crate::backend::tuning::{Decay, Method, TuneError};
use crate::report::diagnosis::{Breakdown, Source, Sources};

pub(crate) const MIB: u64 = 1 << 20;

/// A model heap: what the program allocates, its RSS, what is reclaimable; an action releases it
/// all, at `action_ns_per_mib` of CPU per MiB; a round's reading of the heap costs `poll_cpu`.
#[derive(Default)]
pub(crate) struct Model {
    pub(crate) allocated: u64,
    pub(crate) rss: u64,
    pub(crate) reclaimable: u64,
    pub(crate) actions: u32,
    pub(crate) action_ns_per_mib: u64,
    pub(crate) poll_cpu: Duration,
    pub(crate) cpu: Duration,
    /// Each request to idle threads opened (`true`) or closed, with the model's allocated bytes.
    pub(crate) asked: Vec<(bool, u64)>,
    /// Each purge delay shortened (`true`) or restored.
    pub(crate) decay_changes: Vec<bool>,
    /// Each request for allocating threads' help opened (`true`) or closed.
    pub(crate) assists_wanted: Vec<bool>,
    /// How often the process's memory (`statm`) and the breakdown were read.
    pub(crate) statm_reads: u32,
    pub(crate) breakdowns: u32,
    /// The allocating threads' assists' CPU time, process-wide.
    pub(crate) assist_cpu: Duration,
}

impl Host for Model {
    fn allocated_total(&mut self) -> u64 {
        self.allocated
    }
    fn statm(&mut self) -> Option<Statm> {
        self.statm_reads += 1;
        Some(Statm { rss: self.rss, anon: self.rss })
    }
    fn minor_faults(&mut self) -> u64 {
        0
    }
    fn breakdown(&mut self, at: Statm) -> Breakdown {
        self.breakdowns += 1;
        self.cpu += self.poll_cpu;
        Breakdown {
            rss_bytes: at.rss,
            live_bytes: at.rss - self.reclaimable,
            rounding_bytes: 0,
            frag_bytes: 0,
            holes_bytes: 0,
            reclaimable_bytes: self.reclaimable,
            metadata_bytes: 0,
            outside_heap_bytes: 0,
            unexplained_bytes: 0,
            sources: Sources {
                live: Source::Measured,
                rounding: Source::Measured,
                frag: Source::Measured,
                holes: Source::Measured,
                reclaimable: Source::Measured,
                metadata: Source::Measured,
                outside_heap: Source::Measured,
            },
            not_split: Vec::new(),
        }
    }
    fn reclaim(&mut self, _: u64, _: Duration) -> Result<Method, TuneError> {
        self.cpu += Duration::from_nanos(self.reclaimable / MIB * self.action_ns_per_mib);
        self.rss -= self.reclaimable;
        self.reclaimable = 0;
        self.actions += 1;
        Ok(Method::Collect)
    }
    fn cpu(&mut self) -> Duration {
        self.cpu
    }
    fn ask_threads(&mut self, open: bool) {
        self.asked.push((open, self.allocated));
    }
    fn shorten_decay(&mut self) -> Option<Decay> {
        self.decay_changes.push(true);
        Some(Decay::After(Duration::from_secs(10)))
    }
    fn restore_decay(&mut self, previous: Decay) {
        assert_eq!(previous, Decay::After(Duration::from_secs(10)));
        self.decay_changes.push(false);
    }
    fn want_assists(&mut self, on: bool) {
        self.assists_wanted.push(on);
    }
    fn assist_cpu(&mut self) -> Duration {
        self.assist_cpu
    }
}

pub(crate) fn settings() -> Settings {
    Settings {
        poll: Duration::from_millis(250),
        quiet: Duration::from_secs(1),
        quiet_share: 0.1,
        min_bytes: 16 * MIB,
        min_share: 0.1,
        keep: 0,
        min_interval: Duration::from_secs(5),
        cpu_share: 0.01,
        refault_window: Duration::from_secs(2),
        target_share: 0.95,
        max_cpu_share: 0.1,
        eta_horizon: Duration::from_secs(300),
    }
}
