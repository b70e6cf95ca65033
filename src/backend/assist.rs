//! Threads that allocate while RSS is over the memory limit's target help return memory, as Go's
//! allocating goroutines do over `GOMEMLIMIT`: what only the thread itself can release (jemalloc's
//! thread cache, mimalloc's pages that other threads freed into its heap) is out of the reclaimer's
//! reach from its own thread, and a worker that never parks never passes `frag::reclaim::idle`.
//!
//! The reclaimer asks ([`ask`]) at each of its rounds while RSS is over the target, releasing would
//! help and its CPU budget is not in debt: each request is a new generation. A thread helps at its
//! next sampled allocation (the cold path it already takes, about once per 512 KiB allocated; the
//! fast path is unchanged), once per generation, with its backend's
//! [`assist`](super::known::KnownAllocator::assist): at most once per round (250 ms by
//! default) per thread. What the assists cost is spent from the reclaimer's budget, so that it and
//! they stay within its CPU share together. Allocation-, lock- and panic-free, as everything on the
//! allocation path.
//!
//! Not from jemalloc's own sample hook (`frag::sample_in_jemalloc`): that runs inside jemalloc's
//! allocation, and a `mallctl` there would re-enter it. There threads help at `idle` only.

use crate::sync::{AtomicU64, Ordering::Relaxed};
use core::cell::Cell;

use super::known::KnownAllocator;
use super::list::{Backend, with_backend};

/// The request's generation; 0 while none is open.
static REQUEST: AtomicU64 = AtomicU64::new(0);
/// The last generation opened.
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// Assists made, and their CPU time in nanoseconds.
static COUNT: AtomicU64 = AtomicU64::new(0);
static NANOS: AtomicU64 = AtomicU64::new(0);

std::thread_local! {
    /// The generation this thread served last. Const-initialised, no `Drop`, read with `try_with`.
    static SERVED: Cell<u64> = const { Cell::new(0) };
}

/// Asks allocating threads to help once more each (`true`: a new generation), or stops asking.
pub(crate) fn ask(on: bool) {
    let generation = if on { GENERATION.fetch_add(1, Relaxed) + 1 } else { 0 };
    REQUEST.store(generation, Relaxed);
}

/// At a sampled allocation on `backend`'s allocator: helps if asked and this thread has not served
/// this request yet. One relaxed load when nobody asks.
#[inline(always)]
pub(crate) fn at_sample(backend: Option<Backend>) {
    let request = REQUEST.load(Relaxed);
    if request != 0 {
        if let Some(b) = backend {
            help(b, request);
        }
    }
}

#[cold]
#[inline(never)]
fn help(backend: Backend, request: u64) {
    // Once per generation and thread; a thread whose locals are gone helps no more.
    match SERVED.try_with(|s| s.replace(request)) {
        Ok(seen) if seen != request => {}
        _ => return,
    }
    let cpu = crate::process::thread_cpu_time();
    if with_backend!(backend, A => A::assist()) {
        let spent = crate::process::thread_cpu_time().saturating_sub(cpu);
        COUNT.fetch_add(1, Relaxed);
        NANOS.fetch_add(u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX), Relaxed);
    }
}

/// Assists made so far in this process, and the CPU time they took on the allocating threads.
pub(crate) fn made() -> (u64, core::time::Duration) {
    (COUNT.load(Relaxed), core::time::Duration::from_nanos(NANOS.load(Relaxed)))
}
