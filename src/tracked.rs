//! `Tracked<A>`: the `GlobalAlloc` wrapper. This file is the hot path and nothing else.
//!
//! Every method forwards to the inner allocator with the caller's layout, unchanged (no headers, no
//! trailers: changing layouts would move blocks into other size classes and change the very
//! fragmentation being measured), then records the result in the calling thread's shard. Recording
//! never allocates, never locks, never panics: one thread-local load, the size class, a count and a
//! byte total added (plain load + store) into one cache line of the thread's own shard, and the
//! thread's event countdown decremented; a usable size is looked up per block only where the
//! backend's classes are not uniform (`backend::usable`). Frees also read one filter byte of the
//! origin side table. Everything else (sampling, publishing live bytes) happens on the cold path
//! when the countdown runs out (`origin`).

use core::alloc::{GlobalAlloc, Layout};
use core::fmt;

use crate::backend::usable::{self, Usable};
use crate::backend::{self, Kind, Probe, Registration, kind_of};
use crate::origin::{self, Sampling};
use crate::stats::class::class_of;
use crate::stats::pool;
use crate::stats::shard::{Anyone, Owner, Shard};

/// A `GlobalAlloc` that forwards to `A` and counts what passes through.
///
/// Works with any allocator: `System`, `tikv_jemallocator::Jemalloc`, `mimalloc::MiMalloc`,
/// `snmalloc_rs::SnMalloc`, or your own. The counters are process-wide: read them with
/// [`report()`](crate::report) or [`totals()`](crate::totals).
///
/// # Example
///
/// ```no_run
/// #[global_allocator]
/// static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
///
/// fn main() {
///     let v: Vec<u64> = (0..1000).collect();
///     println!("{}", frag::report());
///     drop(v);
/// }
/// ```
pub struct Tracked<A> {
    inner: A,
    probe: Option<&'static dyn Probe>,
    sampling: Sampling,
}

impl<A> Tracked<A> {
    /// Wraps `inner`, with origin tracking at [`Sampling::DEFAULT`]. Usable in a `static`.
    #[must_use]
    pub const fn new(inner: A) -> Self {
        Self { inner, probe: None, sampling: Sampling::DEFAULT }
    }

    /// Wraps an allocator this crate does not know, with a [`Probe`] that supplies its usable sizes
    /// and statistics. For the known backends the probe is only consulted for its name.
    #[must_use]
    pub const fn with_probe(inner: A, probe: &'static dyn Probe) -> Self {
        Self { inner, probe: Some(probe), sampling: Sampling::DEFAULT }
    }

    /// Wraps `inner` with origin tracking at `sampling` from the process's first allocation on;
    /// [`set_sampling`](crate::set_sampling) changes it later.
    ///
    /// ```no_run
    /// use frag::{Sampling, Tracked};
    ///
    /// #[global_allocator]
    /// static A: Tracked<std::alloc::System> = Tracked::with_sampling(std::alloc::System, Sampling::EveryBlock);
    /// # fn main() {}
    /// ```
    #[must_use]
    pub const fn with_sampling(inner: A, sampling: Sampling) -> Self {
        Self { inner, probe: None, sampling }
    }

    /// The wrapped allocator.
    pub const fn inner(&self) -> &A {
        &self.inner
    }
}

impl<A: fmt::Debug> fmt::Debug for Tracked<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tracked").field("inner", &self.inner).finish_non_exhaustive()
    }
}

impl<A: 'static> Tracked<A> {
    fn registration(&self) -> Registration {
        Registration {
            kind: kind_of::<A>(),
            type_name: core::any::type_name::<A>(),
            probe: self.probe,
            sampling: self.sampling,
        }
    }

    /// The usable size of the live block `ptr`; `kind` is `kind_of::<A>()`.
    #[inline(always)]
    fn usable(&self, kind: Kind, ptr: *mut u8, layout: Layout) -> Usable {
        usable::of(kind, self.probe, ptr, layout)
    }

    /// The shard for a thread without one of its own yet (or ever): see `pool::slow`.
    #[cold]
    #[inline(never)]
    fn slow_shard(&self) -> &'static Shard {
        pool::slow(|| backend::register(self.registration()))
    }

    /// Counts the allocation of `ptr` and returns it. Every call it may make is a tail call, so the
    /// hot path needs no stack frame of its own beyond what the inner allocator's call needs.
    #[inline(always)]
    fn on_alloc(&self, ptr: *mut u8, layout: Layout) -> *mut u8 {
        // After the inner call: for `Select`, the first allocation is what picks the backend.
        let kind = kind_of::<A>();
        let (class, size, usable) = (class_of(layout.size()), layout.size(), self.usable(kind, ptr, layout));
        match pool::owned() {
            Some(s) if s.on_alloc::<Owner>(class, size, usable) => alloc_event(s, ptr, size),
            Some(_) => ptr,
            None => self.slow_alloc(ptr, class, size, usable),
        }
    }

    #[cold]
    #[inline(never)]
    fn slow_alloc(&self, ptr: *mut u8, class: usize, size: usize, usable: Usable) -> *mut u8 {
        let s = self.slow_shard();
        if s.on_alloc::<Anyone>(class, size, usable) {
            origin::event::<Anyone>(s, Some((ptr, size)));
        }
        ptr
    }

    #[cold]
    #[inline(never)]
    fn slow_dealloc(&self, class: usize, size: usize, usable: Usable) {
        let s = self.slow_shard();
        if s.on_dealloc::<Anyone>(class, size, usable) {
            origin::event::<Anyone>(s, None);
        }
    }

    #[cold]
    #[inline(never)]
    fn slow_realloc(&self, new_ptr: *mut u8, old: (usize, usize, Usable), new: (usize, usize, Usable), sampled: bool) {
        let s = self.slow_shard();
        if s.on_realloc::<Anyone>(old, new) {
            origin::event::<Anyone>(s, (!sampled).then_some((new_ptr, new.1)));
        }
    }
}

impl<A: GlobalAlloc + 'static> Tracked<A> {
    /// Forwards a free and counts it (the block is not sampled, or its entry is settled already).
    #[inline(always)]
    unsafe fn dealloc_counted(&self, ptr: *mut u8, layout: Layout) {
        // A usable size that needs the block is read while it is still live; any other is computed
        // after the inner call, so nothing but the layout is kept across it.
        let kind = kind_of::<A>();
        let early = usable::needs_block(kind, self.probe, layout).then(|| self.usable(kind, ptr, layout));
        // SAFETY: forwarded with the caller's guarantees: `ptr` came from this allocator with `layout`.
        unsafe { self.inner.dealloc(ptr, layout) };
        let usable = early.unwrap_or_else(|| usable::of_layout(kind, layout));
        let (class, size) = (class_of(layout.size()), layout.size());
        match pool::owned() {
            Some(s) if s.on_dealloc::<Owner>(class, size, usable) => origin::event::<Owner>(s, None),
            Some(_) => {}
            None => self.slow_dealloc(class, size, usable),
        }
    }

    /// A free of a block that may be sampled: its entry leaves the side table before its address can
    /// be handed out again.
    #[cold]
    #[inline(never)]
    unsafe fn dealloc_sampled(&self, ptr: *mut u8, layout: Layout) {
        origin::freed(ptr);
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.dealloc_counted(ptr, layout) }
    }
}

/// The countdown of the calling thread's shard ran out on allocating `ptr`: a tail call that
/// returns `ptr`.
#[cold]
#[inline(never)]
fn alloc_event(s: &'static Shard, ptr: *mut u8, size: usize) -> *mut u8 {
    origin::event::<Owner>(s, Some((ptr, size)));
    ptr
}

// SAFETY: every method forwards to `A` with exactly the caller's arguments and returns `A`'s result
// unchanged, so `A`'s guarantees carry over; the bookkeeping around the calls never touches the
// memory handed out.
unsafe impl<A: GlobalAlloc + 'static> GlobalAlloc for Tracked<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees about `layout`.
        let ptr = unsafe { self.inner.alloc(layout) };
        if ptr.is_null() { ptr } else { self.on_alloc(ptr, layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees about `layout`.
        let ptr = unsafe { self.inner.alloc_zeroed(layout) };
        if ptr.is_null() { ptr } else { self.on_alloc(ptr, layout) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if origin::may_be_sampled(ptr) {
            // SAFETY: the caller's guarantees, passed on.
            unsafe { self.dealloc_sampled(ptr, layout) }
        } else {
            // SAFETY: the caller's guarantees, passed on.
            unsafe { self.dealloc_counted(ptr, layout) }
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let kind = kind_of::<A>();
        let early = usable::needs_block(kind, self.probe, layout).then(|| self.usable(kind, ptr, layout));
        // A sampled block's entry is taken out while the allocator may recycle its address.
        let entry = if origin::may_be_sampled(ptr) { origin::take(ptr) } else { None };
        // SAFETY: forwarded with the caller's guarantees about `ptr`, `layout` and `new_size`.
        let new_ptr = unsafe { self.inner.realloc(ptr, layout, new_size) };
        if new_ptr.is_null() {
            // The old block is untouched and still live: nothing happened.
            if let Some(e) = entry {
                origin::put_back(ptr, e, layout.size());
            }
            return new_ptr;
        }
        if let Some(e) = entry {
            origin::put_back(new_ptr, e, new_size);
        }
        let old = (class_of(layout.size()), layout.size(), early.unwrap_or_else(|| usable::of_layout(kind, layout)));
        // SAFETY: `realloc`'s contract guarantees `new_size`, rounded up to `layout.align()`, does not
        // overflow `isize`, which is all `Layout` requires.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let new = (class_of(new_size), new_size, self.usable(kind, new_ptr, new_layout));
        match pool::owned() {
            Some(s) => {
                if s.on_realloc::<Owner>(old, new) {
                    origin::event::<Owner>(s, entry.is_none().then_some((new_ptr, new_size)));
                }
            }
            None => self.slow_realloc(new_ptr, old, new, entry.is_some()),
        }
        new_ptr
    }
}
