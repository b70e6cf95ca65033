//! A spawned reclaimer's handle, and what the thread shares with it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::error::ReclaimError;
use super::limit::MemoryLimit;
use super::limit::follow::Setting;
use super::outcome::{Action, Totals};
use crate::publish::worker::Worker;

/// The process that runs a spawned reclaimer, if any (0: none): one per process.
pub(super) static RUNNING: AtomicU32 = AtomicU32::new(0);

/// What a running reclaimer shares with its handle.
#[derive(Debug, Default)]
pub(super) struct Shared {
    pub(super) totals: Totals,
    pub(super) actions: VecDeque<Action>,
    /// A limit set through the handle, for the thread's next round to take.
    pub(super) new_limit: Option<Setting>,
}

/// Reads `Shared` for [`Reclaimer`](super::Reclaimer) and [`ReclaimerHandle`] alike.
pub(super) fn read<T>(shared: &Mutex<Shared>, f: impl FnOnce(&Shared) -> T) -> T {
    f(&shared.lock().unwrap_or_else(PoisonError::into_inner))
}

/// A running reclaimer thread; dropping it stops the thread (after the round in progress). In a
/// child of `fork`, which starts without the thread, dropping it does nothing.
#[derive(Debug)]
pub struct ReclaimerHandle {
    worker: Worker,
    shared: Arc<Mutex<Shared>>,
}

impl ReclaimerHandle {
    /// The handle of the thread `worker` runs, sharing `shared`.
    pub(super) fn new(worker: Worker, shared: Arc<Mutex<Shared>>) -> Self {
        Self { worker, shared }
    }

    /// Everything done so far.
    #[must_use]
    pub fn totals(&self) -> Totals {
        read(&self.shared, |s| s.totals)
    }

    /// The latest actions (up to 256), oldest first.
    #[must_use]
    pub fn actions(&self) -> Vec<Action> {
        read(&self.shared, |s| s.actions.iter().cloned().collect())
    }

    /// Sets or removes the memory limit; the thread takes it at its next round.
    ///
    /// # Errors
    ///
    /// [`ReclaimError::Limit`] when it cannot be resolved on this machine; the limit in force then
    /// stays.
    pub fn set_limit(&self, limit: Option<MemoryLimit>) -> Result<Option<u64>, ReclaimError> {
        let setting = Setting::given(limit);
        let bytes = setting.resolve()?;
        self.shared.lock().unwrap_or_else(PoisonError::into_inner).new_limit = Some(setting);
        Ok(bytes)
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.worker.stop();
        crate::report::diagnosis::set_limit_in_force(None);
        // In a fork's child this clears the parent's claim from the child's copy, where none runs.
        let _ = RUNNING.compare_exchange(self.worker.pid(), 0, Ordering::AcqRel, Ordering::Acquire);
    }
}

impl Drop for ReclaimerHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}
