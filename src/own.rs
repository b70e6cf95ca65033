//! frag's own work, and the memory it takes: reports, symbolizing, profiles, the publisher's ticks
//! and the reclaimer's rounds allocate, and none of it is the program's.
//!
//! While a thread does frag's own work ([`run`]), its slot word says so (`stats::thread::FRAG_WORK`)
//! and its fast path sees the parked shard: each of its allocations and frees takes the cold path,
//! which counts it in frag's own shard (`stats::pool::frag`), outside every figure of the
//! program's, and samples it there without a site (`sample_life`). A sample of frag's counts there until
//! it is freed, by whichever thread. The report shows frag's own figures on a line of their own.
//!
//! What frag hands to the program (a `Report`, a profile's bytes, the names `symbolize` writes) is
//! built as frag's own work and copied out of it ([`handed_over`]): the copy is the program's, the
//! original is freed as frag's. So no block of frag's reaches the program's frees, which in the exact
//! tier are counted in the freeing thread's shard whoever allocated the block.

use crate::stats::pool::frag_work;
use crate::stats::thread::{self, FRAG_WORK};

/// A thread doing frag's own work, for as long as it lives: the slot word it had before (`None`
/// when the work is nested in another, which restores it).
struct Work {
    before: Option<usize>,
}

impl Work {
    fn enter() -> Self {
        if frag_work() {
            return Self { before: None };
        }
        let before = thread::slot();
        thread::set_slot(FRAG_WORK);
        Self { before: Some(before) }
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        if let Some(before) = self.before {
            thread::set_slot(before);
        }
    }
}

/// Runs `work` as frag's own: what it allocates is frag's.
pub(crate) fn run<T>(work: impl FnOnce() -> T) -> T {
    let _work = Work::enter();
    work()
}

/// Builds a value as frag's own work with `build`, and hands the program a copy of it: the copy is
/// allocated as the program's and the original freed as frag's. Inside frag's own work (a
/// publisher's tick asking for a report) the value stays frag's, uncopied.
pub(crate) fn handed_over<T: Clone>(build: impl FnOnce() -> T) -> T {
    hand_over(run(build))
}

/// Hands the program a copy of `built`, a value frag's own work allocated, and frees the original as
/// frag's: outside frag's own work; inside it, `built` stays frag's, uncopied.
pub(crate) fn hand_over<T: Clone>(built: T) -> T {
    if frag_work() {
        return built;
    }
    let copy = built.clone();
    run(move || drop(built));
    copy
}

/// A value of frag's own work that waits in the program's code (a delta profile's first snapshot,
/// across an `await`): it is freed as frag's, wherever it is dropped.
#[cfg_attr(not(feature = "tokio"), allow(dead_code))]
pub(crate) struct Kept<T>(Option<T>);

#[cfg_attr(not(feature = "tokio"), allow(dead_code))]
impl<T> Kept<T> {
    /// Keeps `value`, built as frag's own work.
    pub(crate) fn new(value: T) -> Self {
        Self(Some(value))
    }

    /// The value, to be used (and dropped) inside frag's own work.
    pub(crate) fn take(mut self) -> Option<T> {
        self.0.take()
    }
}

impl<T> Drop for Kept<T> {
    fn drop(&mut self) {
        if let Some(value) = self.0.take() {
            run(move || drop(value));
        }
    }
}
