//! A background thread that runs rounds until stopped: the publisher's and the reclaimer's. Stopping
//! wakes it from its wait; in a child of `fork`, where the thread does not exist, stopping only
//! forgets it.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// A running background thread.
#[derive(Debug)]
pub(crate) struct Worker {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    /// The process that spawned the thread.
    pid: u32,
}

impl Worker {
    /// Spawns thread `name`, which calls `round` at once and again after each wait it returns, until
    /// it returns `None` or the worker is stopped.
    pub(crate) fn spawn(
        name: &str,
        mut round: impl FnMut() -> Option<Duration> + Send + 'static,
    ) -> std::io::Result<Self> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new().name(name.to_owned()).spawn(move || {
            let (lock, wake) = &*flag;
            // Each round is frag's own work: what it allocates is not the program's.
            while let Some(wait) = crate::own::run(&mut round) {
                let stopped = lock.lock().unwrap_or_else(PoisonError::into_inner);
                let (stopped, _) =
                    wake.wait_timeout_while(stopped, wait, |s| !*s).unwrap_or_else(PoisonError::into_inner);
                if *stopped {
                    return;
                }
            }
        })?;
        Ok(Self { stop, thread: Some(thread), pid: std::process::id() })
    }

    /// The process that spawned the thread.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Stops the thread after the round in progress and waits for it. In a child of `fork` the thread
    /// was the parent's: only its handle was copied, and the stop flag's lock may have been held at
    /// the fork, so the handle is forgotten. Idempotent.
    pub(crate) fn stop(&mut self) {
        let Some(thread) = self.thread.take() else { return };
        if std::process::id() != self.pid {
            core::mem::forget(thread);
            return;
        }
        let (lock, wake) = &*self.stop;
        *lock.lock().unwrap_or_else(PoisonError::into_inner) = true;
        wake.notify_all();
        let _ = thread.join();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop();
    }
}
