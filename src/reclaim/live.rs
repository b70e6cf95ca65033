//! The live process as the reclaimer's [`Heap`]: the counters, `/proc`, the diagnosis and the
//! wrapped backend's action.

use std::time::Duration;

use super::engine::Heap;
use crate::backend::Backend;
use crate::backend::interface::KnownAllocator;
use crate::backend::knob::{Method, TuneError};
use crate::backend::list::with_backend;
use crate::backend::registry::registered;
use crate::process;
use crate::report::{self, diagnosis::Breakdown};

/// The wrapped backend, which can return memory on request.
pub(crate) struct Live {
    backend: Backend,
}

impl Live {
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
            Err(crate::backend::knob::unsupported(
                backend,
                KNOB,
                "it has no call that returns free memory; it decommits on its own schedule",
            ))
        }
    }
}

impl Heap for Live {
    fn allocated_total(&mut self) -> u64 {
        report::allocated_bytes_total()
    }

    fn rss(&mut self) -> Option<u64> {
        process::rss()
    }

    fn minor_faults(&mut self) -> u64 {
        process::minor_faults()
    }

    fn breakdown(&mut self) -> Option<Breakdown> {
        report::breakdown()
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
}
