//! Memory only its owning thread can release, and the hook idle threads call to release it.
//!
//! Some of what a burst leaves resident is out of the reclaimer's reach from its own thread:
//! mimalloc keeps a page that other threads freed into "used" until its owning thread collects it,
//! and jemalloc's thread caches hold blocks no arena purge can see. Only the owning thread can return
//! those, and a worker of a pool is idle exactly when the heap is quiet.
//!
//! **The request.** When the heap turns quiet after a busy period, the reclaimer opens a request
//! ([`open`]: a new generation in [`REQUEST`]); when it turns busy again, it closes it ([`close`]).
//! **The hook** ([`idle`]), called by a thread about to go idle (tokio's `on_thread_park`, or a pool's
//! own loop), reads [`REQUEST`] with one relaxed load and returns when none is open. While one is,
//! each thread serves it once: it makes the backend's own per-thread release (jemalloc's
//! `thread.idle`, mimalloc's `mi_collect(true)`), timed and with RSS read around it; releases take
//! turns. A child of `fork` starts with no request open and no release under way. glibc has no such
//! call (its thread caches empty only when the thread exits): there the hook does nothing, and says
//! so once in the log.

use core::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};

use crate::backend::list::with_backend;
use crate::backend::registry::registered;
use crate::backend::tuning::actions::Knobs;
use crate::backend::tuning::{ThreadMethod, TuneError};
use crate::process;

/// The open request's generation; 0 while none is open.
static REQUEST: AtomicU64 = AtomicU64::new(0);
/// The last generation opened.
static GENERATION: AtomicU64 = AtomicU64::new(0);

std::thread_local! {
    /// The generation this thread served last. Const-initialised, no `Drop`, read with `try_with`.
    static SERVED: Cell<u64> = const { Cell::new(0) };
}

/// Releases by method: jemalloc's `thread.idle`, mimalloc's collection.
static RELEASES: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
/// RSS before minus after, summed over the releases (estimated: the program's other threads run
/// meanwhile; the releases themselves take turns).
static RELEASED_BYTES: AtomicU64 = AtomicU64::new(0);
/// CPU time of the releases, in nanoseconds.
static RELEASE_NANOS: AtomicU64 = AtomicU64::new(0);
/// Set while a thread releases: releases take turns (see `serve`). A flag rather than a mutex, so
/// that a child of `fork` can reset it (a thread of its parent may have held it at the fork).
static RELEASING: AtomicBool = AtomicBool::new(false);
/// Registers [`after_fork_in_child`] once.
static FORK_HOOK: AtomicBool = AtomicBool::new(false);
/// Whether the backend's refusal was logged already.
static REFUSAL_LOGGED: AtomicBool = AtomicBool::new(false);

const METHODS: [ThreadMethod; 2] = [ThreadMethod::Idle, ThreadMethod::Collect];

/// Call from a thread that is about to go idle: when the reclaimer has asked (the heap turned
/// quiet after a busy period), this thread returns what only it can return; otherwise this is one
/// relaxed atomic load. Never call it from inside an allocator.
///
/// | backend | what the thread does |
/// |---|---|
/// | jemalloc | `thread.idle`: flushes its thread cache into its arena (the next purge returns those pages) and may purge that arena |
/// | mimalloc | `mi_collect(true)`: collects its heap, including the blocks other threads freed into its pages, and purges what is free |
/// | glibc | nothing: glibc has no call that empties a thread's cache before the thread exits (`GLIBC_TUNABLES=glibc.malloc.tcache_count=0` turns the caches off) |
/// | snmalloc, others | nothing |
///
/// Each thread serves a request once, so a worker that parks a thousand times a second pays for one
/// release per quiet period. A thread that stays parked from before the request until the next
/// burst keeps its memory until then: the hook runs only when the thread passes it.
///
/// # Example
///
/// ```no_run
/// #[global_allocator]
/// static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
///
/// let _reclaimer = frag::reclaim::Reclaimer::new().spawn().expect("start the reclaimer");
/// let runtime = tokio::runtime::Builder::new_multi_thread()
///     .enable_all()
///     .on_thread_park(frag::reclaim::idle)
///     .build()
///     .expect("a runtime");
/// # drop(runtime);
/// ```
#[inline]
pub fn idle() {
    let request = REQUEST.load(Relaxed);
    if request != 0 {
        serve(request);
    }
}

#[cold]
#[inline(never)]
fn serve(request: u64) {
    // Once per generation and thread; a thread whose locals are gone serves nothing.
    match SERVED.try_with(|s| s.replace(request)) {
        Ok(seen) if seen != request => {}
        _ => return,
    }
    let Some(backend) = registered().and_then(|r| r.backend) else { return };
    // One release at a time, so that the RSS read around one does not count another's.
    let _turn = Turn::take();
    let (rss, cpu) = (process::rss(), process::thread_cpu_time());
    let done = with_backend!(backend, A => A::release_thread());
    let spent = process::thread_cpu_time().saturating_sub(cpu);
    match done {
        Ok(method) => {
            let i = METHODS.iter().position(|m| *m == method).unwrap_or(0);
            RELEASES[i].fetch_add(1, Relaxed);
            let released = rss.zip(process::rss()).map_or(0, |(before, after)| before.saturating_sub(after));
            RELEASED_BYTES.fetch_add(released, Relaxed);
            RELEASE_NANOS.fetch_add(u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX), Relaxed);
        }
        Err(e) => refused(&e),
    }
}

fn refused(e: &TuneError) {
    if !REFUSAL_LOGGED.swap(true, Relaxed) {
        tracing::info!(target: "frag", error = %e, "frag::reclaim::idle: idle threads cannot release memory here");
    }
}

/// This thread's turn to release (see [`RELEASING`]); waits while another thread releases (a few
/// milliseconds: an idle thread may wait).
struct Turn;

impl Turn {
    fn take() -> Self {
        while RELEASING.compare_exchange(false, true, Acquire, Relaxed).is_err() {
            std::thread::sleep(core::time::Duration::from_micros(200));
        }
        Self
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        RELEASING.store(false, Release);
    }
}

/// In a child of `fork`: no request is open (the child has no reclaimer), and no release is under
/// way (the thread that was releasing stayed in the parent).
extern "C" fn after_fork_in_child() {
    REQUEST.store(0, Relaxed);
    RELEASING.store(false, Relaxed);
}

/// Opens a request: every thread that passes [`idle`] from now on serves it once.
pub(crate) fn open() {
    // A flag, not a `Once`: a child forked while another thread registered would find a `Once`
    // running for good.
    if !FORK_HOOK.swap(true, Relaxed) {
        // SAFETY: the handler has the C ABI, touches only atomics and stays valid for the life of
        // the process. A failure (ENOMEM) leaves a forked child with the parent's request open.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    }
    let generation = GENERATION.fetch_add(1, Relaxed) + 1;
    REQUEST.store(generation, Relaxed);
}

/// Closes the open request: [`idle`] is one load again.
pub(crate) fn close() {
    REQUEST.store(0, Relaxed);
}

/// What idle threads released so far, process-wide.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ThreadReleases {
    /// Releases by jemalloc's `thread.idle`.
    pub idle: u64,
    /// Releases by mimalloc's collection on the thread.
    pub collect: u64,
    /// RSS before minus after, summed over the releases (estimated: other threads run meanwhile;
    /// jemalloc's flush frees into the arena, and the reclaimer's next purge returns the pages).
    pub released_bytes: u64,
    /// CPU time the releases took, on the idle threads.
    pub cpu: core::time::Duration,
}

impl ThreadReleases {
    /// Releases of `method`.
    #[must_use]
    pub fn count(&self, method: ThreadMethod) -> u64 {
        match method {
            ThreadMethod::Idle => self.idle,
            ThreadMethod::Collect => self.collect,
        }
    }

    /// Releases of every method.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.idle + self.collect
    }
}

/// What idle threads have released so far, in this process (see [`idle`]).
#[must_use]
pub fn thread_releases() -> ThreadReleases {
    ThreadReleases {
        idle: RELEASES[0].load(Relaxed),
        collect: RELEASES[1].load(Relaxed),
        released_bytes: RELEASED_BYTES.load(Relaxed),
        cpu: core::time::Duration::from_nanos(RELEASE_NANOS.load(Relaxed)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served() -> u64 {
        SERVED.try_with(Cell::get).unwrap_or(u64::MAX)
    }

    /// A thread serves each generation once; none while no request is open. (No backend is
    /// registered in the unit tests, so serving reaches no allocator: what is checked is the
    /// thread's record.)
    #[test]
    fn each_thread_serves_a_request_once() {
        close();
        idle();
        assert_eq!(served(), 0, "no request: nothing served");
        open();
        let generation = REQUEST.load(Relaxed);
        idle();
        assert_eq!(served(), generation);
        std::thread::spawn(move || {
            idle();
            assert_eq!(served(), generation, "another thread serves it too");
        })
        .join()
        .unwrap();
        close();
        open();
        assert_ne!(REQUEST.load(Relaxed), generation);
        idle();
        assert_eq!(served(), REQUEST.load(Relaxed), "a new request is served again");
        close();
    }
}
