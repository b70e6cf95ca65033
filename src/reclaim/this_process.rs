//! The live process as the reclaimer's [`Host`]: the counters, `/proc`, the diagnosis and the
//! wrapped backend's action.

use std::time::Duration;

use super::host::{Host, Statm};
use crate::backend::Backend;
use crate::backend::list::with_backend;
use crate::backend::registry::registered;
use crate::backend::tuning::actions::Knobs;
use crate::backend::tuning::{Decay, Method, TuneError};
use crate::process;
use crate::report::{self, diagnosis::Breakdown};

/// This process, through its wrapped backend, which can return memory on request.
pub(crate) struct ThisProcess {
    backend: Backend,
}

impl ThisProcess {
    /// The wrapped backend, if it can return memory on request.
    pub(crate) fn new() -> Result<Self, TuneError> {
        const KNOB: &str = "reclaim";
        let Some(reg) = registered() else { return Err(TuneError::NotInstalled { knob: KNOB }) };
        let Some(backend) = reg.backend else {
            return Err(TuneError::Unsupported {
                backend: reg.wrapped(),
                knob: KNOB,
                hint: "frag returns memory only through the allocators it knows",
            });
        };
        if with_backend!(backend, A => A::RECLAIMS) {
            Ok(Self { backend })
        } else {
            Err(crate::backend::tuning::unsupported(
                backend,
                KNOB,
                "it has no call that returns free memory; it decommits on its own schedule",
            ))
        }
    }
}

impl Host for ThisProcess {
    fn allocated_total(&mut self) -> u64 {
        report::allocated_bytes_total()
    }

    fn statm(&mut self) -> Option<Statm> {
        process::statm().map(|(rss, anon)| Statm { rss, anon })
    }

    fn minor_faults(&mut self) -> u64 {
        process::minor_faults()
    }

    fn breakdown(&mut self, at: Statm) -> Breakdown {
        report::breakdown(at.rss, at.anon)
    }

    fn reclaim(&mut self, keep: u64, cpu_limit: Duration) -> Result<Method, TuneError> {
        let start = process::thread_cpu_time();
        let mut more = || process::thread_cpu_time().saturating_sub(start) < cpu_limit;
        with_backend!(self.backend, A => A::reclaim(keep, &mut more))
    }

    fn cpu(&mut self) -> Duration {
        process::thread_cpu_time()
    }

    fn ask_threads(&mut self, open: bool) {
        if open { super::threads::open() } else { super::threads::close() }
    }

    fn shorten_decay(&mut self) -> Option<Decay> {
        with_backend!(self.backend, A => {
            let short = A::PRESSURE_DECAY?;
            let current = A::purge_delay().ok()?;
            if !longer(current, short) {
                return None;
            }
            match A::set_purge_delay(short) {
                Ok(()) => {
                    tracing::info!(target: "frag", from = %current, to = %short, "frag reclaimer: over the memory limit's target, purge delay shortened until RSS is back under it");
                    Some(current)
                }
                Err(e) => {
                    tracing::warn!(target: "frag", error = %e, "frag reclaimer: the purge delay could not be shortened");
                    None
                }
            }
        })
    }

    fn restore_decay(&mut self, previous: Decay) {
        with_backend!(self.backend, A => {
            match A::purge_delay() {
                Ok(now) if Some(now) == A::PRESSURE_DECAY => match A::set_purge_delay(previous) {
                    Ok(()) => tracing::info!(target: "frag", to = %previous, "frag reclaimer: back under the memory limit's target, purge delay restored"),
                    Err(e) => tracing::warn!(target: "frag", error = %e, "frag reclaimer: the purge delay could not be restored"),
                },
                Ok(now) => tracing::info!(target: "frag", now = %now, "frag reclaimer: the purge delay was set meanwhile; left as set"),
                Err(e) => tracing::warn!(target: "frag", error = %e, "frag reclaimer: the purge delay could not be read to restore it"),
            }
        });
    }

    fn want_assists(&mut self, on: bool) {
        crate::backend::assist::ask(on);
    }

    fn assist_cpu(&mut self) -> Duration {
        crate::backend::assist::made().1
    }
}

/// Whether purge delay `a` keeps pages longer than `b` (never purging is the longest).
fn longer(a: Decay, b: Decay) -> bool {
    let rank = |d: Decay| match d {
        Decay::Immediate => Duration::ZERO,
        Decay::After(d) => d,
        Decay::Disabled => Duration::MAX,
    };
    rank(a) > rank(b)
}
