//! `Tracked<A>`: the `GlobalAlloc` wrapper. This file is the hot path and nothing else.
//!
//! Every method forwards to the inner allocator with the caller's layout, unchanged (no headers, no
//! trailers: changing layouts would move blocks into other size classes and change the very
//! fragmentation being measured), then records the result in the calling thread's shard. Recording
//! never allocates, never locks, never panics: one thread-local load, the size class, and a count and
//! a byte total added (plain load + store) into one cache line of the thread's own shard; a usable
//! size is looked up per block only where the backend's classes are not uniform (`backend::usable`).

use core::alloc::{GlobalAlloc, Layout};
use core::fmt;

use crate::backend::usable::{self, Usable};
use crate::backend::{self, Probe, Registration, kind_of};
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
}

impl<A> Tracked<A> {
    /// Wraps `inner`. Usable in a `static`.
    #[must_use]
    pub const fn new(inner: A) -> Self {
        Self { inner, probe: None }
    }

    /// Wraps an allocator this crate does not know, with a [`Probe`] that supplies its usable sizes
    /// and statistics. For the known backends the probe is only consulted for its name.
    #[must_use]
    pub const fn with_probe(inner: A, probe: &'static dyn Probe) -> Self {
        Self { inner, probe: Some(probe) }
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
        Registration { kind: kind_of::<A>(), type_name: core::any::type_name::<A>(), probe: self.probe }
    }

    #[inline(always)]
    fn usable(&self, ptr: *mut u8, layout: Layout) -> Usable {
        usable::of::<A>(self.probe, ptr, layout)
    }

    /// The shard for a thread without one of its own yet (or ever): see `pool::slow`.
    #[cold]
    #[inline(never)]
    fn slow_shard(&self) -> &'static Shard {
        pool::slow(|| backend::register(self.registration()))
    }

    #[inline(always)]
    fn on_alloc(&self, ptr: *mut u8, layout: Layout) {
        let (class, size, usable) = (class_of(layout.size()), layout.size(), self.usable(ptr, layout));
        match pool::owned() {
            Some(s) => s.on_alloc::<Owner>(class, size, usable),
            None => self.slow_alloc(class, size, usable),
        }
    }

    #[cold]
    #[inline(never)]
    fn slow_alloc(&self, class: usize, size: usize, usable: Usable) {
        self.slow_shard().on_alloc::<Anyone>(class, size, usable);
    }

    #[cold]
    #[inline(never)]
    fn slow_dealloc(&self, class: usize, size: usize, usable: Usable) {
        self.slow_shard().on_dealloc::<Anyone>(class, size, usable);
    }

    #[cold]
    #[inline(never)]
    fn slow_realloc(&self, old: (usize, usize, Usable), new: (usize, usize, Usable)) {
        self.slow_shard().on_realloc::<Anyone>(old, new);
    }
}

// SAFETY: every method forwards to `A` with exactly the caller's arguments and returns `A`'s result
// unchanged, so `A`'s guarantees carry over; the bookkeeping around the calls never touches the
// memory handed out.
unsafe impl<A: GlobalAlloc + 'static> GlobalAlloc for Tracked<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees about `layout`.
        let ptr = unsafe { self.inner.alloc(layout) };
        if !ptr.is_null() {
            self.on_alloc(ptr, layout);
        }
        ptr
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees about `layout`.
        let ptr = unsafe { self.inner.alloc_zeroed(layout) };
        if !ptr.is_null() {
            self.on_alloc(ptr, layout);
        }
        ptr
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // The usable size is read while the block is still live (pointer-based backends need that).
        let (class, size, usable) = (class_of(layout.size()), layout.size(), self.usable(ptr, layout));
        // SAFETY: forwarded with the caller's guarantees: `ptr` came from this allocator with `layout`.
        unsafe { self.inner.dealloc(ptr, layout) };
        match pool::owned() {
            Some(s) => s.on_dealloc::<Owner>(class, size, usable),
            None => self.slow_dealloc(class, size, usable),
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = (class_of(layout.size()), layout.size(), self.usable(ptr, layout));
        // SAFETY: forwarded with the caller's guarantees about `ptr`, `layout` and `new_size`.
        let new_ptr = unsafe { self.inner.realloc(ptr, layout, new_size) };
        if new_ptr.is_null() {
            // The old block is untouched and still live: nothing happened.
            return new_ptr;
        }
        // SAFETY: `realloc`'s contract guarantees `new_size`, rounded up to `layout.align()`, does not
        // overflow `isize`, which is all `Layout` requires.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let new = (class_of(new_size), new_size, self.usable(new_ptr, new_layout));
        match pool::owned() {
            Some(s) => s.on_realloc::<Owner>(old, new),
            None => self.slow_realloc(old, new),
        }
        new_ptr
    }
}
