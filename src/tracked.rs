//! `Tracked<A>`: the `GlobalAlloc` wrapper. This file is the hot path and nothing else.
//!
//! Every method forwards to the inner allocator with the caller's layout, unchanged (no headers, no
//! trailers: changing layouts would move blocks into other size classes and change the very
//! fragmentation being measured), and records the operation in the calling thread's shard.
//!
//! **The allocation-path contract**, enforced here: recording never allocates, never locks, never
//! panics. Thread-locals are const-initialised, without `Drop`, read with `try_with` (`guard`);
//! anything that may allocate runs outside these methods, under the reentrancy guard (`report`).
//!
//! **The fast path**, taken by a plain request (default alignment, at most 32 KiB) whose address is
//! not eligible for sampling (`origin::gate`, 63 blocks in 64 at the default rate):
//! - `alloc`: the inner call, then one test on the thread's shard (one thread-local pointer) and the
//!   address: the shard's gate lane (its copy of the key and the limit: a load, a multiply, a compare)
//!   passes neither an eligible address, nor a null pointer (it hashes to 0), nor a thread without a
//!   shard (its pointer is the parked shard, whose lane passes nothing). Then the size class (one
//!   table load that gives the row's offset) and a count and a byte total added to that class's one
//!   cache line (plain load + store, no atomic read-modify-write); for backends whose usable size is
//!   not uniform per class (glibc, mimalloc, a probe) the usable size and a block count too. Only the
//!   size lives across the inner call: the cold path after it needs no `self`.
//! - `dealloc`: the same bookkeeping *before* the inner call, which is then a tail call: the free
//!   path has no stack frame of its own.
//!
//! Nothing on the fast path reads memory outside the thread's own shard and the class table.
//! Everything else takes the out-of-line cold path: over-aligned and large requests (usable sizes
//! per block, every such block eligible), eligible addresses (the sampling countdown, the side table
//! of sampled blocks), a thread without a shard yet, `realloc`. A failed allocation (null) is never
//! counted. The `GlobalAlloc` methods themselves are never inlined: `__rust_alloc` jumps to them,
//! and call sites across the program stay as small as with the bare allocator.

use core::alloc::{GlobalAlloc, Layout};
use core::fmt;

use crate::backend::usable::{self, Usable};
use crate::backend::{self, Probe, Registration, kind_of};
use crate::origin::sampler::Countdown;
use crate::origin::{self, Sampling, gate};
use crate::sites::unwind::Entry as Frame;
use crate::stats::class::{self, Class};
use crate::stats::pool;
use crate::stats::shard::{Anyone, Owner, Shard};

// The fast path finds every class in the table.
const _: () = assert!(gate::SMALL_MAX <= class::TABLE_MAX);

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
    /// and statistics. For the allocators this crate knows by type (see [`Backend`](crate::Backend))
    /// the probe is not consulted: their own interfaces are used.
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

    /// The shard for a thread without one of its own yet (or ever): see `pool::slow`.
    #[cold]
    #[inline(never)]
    fn slow_shard(&self) -> &'static Shard {
        pool::slow(|| backend::register(self.registration()))
    }

    /// Counts the allocation of `ptr` (non-null, `size` bytes requested) on the cold path: any
    /// layout, any address, any thread state. Returns `ptr`.
    #[inline(never)]
    fn record_alloc(&self, ptr: *mut u8, size: usize, usable: Usable, frame: Frame) -> *mut u8 {
        self.record(ptr, size, usable, Some(frame));
        ptr
    }

    /// Counts the free of `ptr` (still live) on the cold path; the caller forwards it afterwards.
    #[inline(never)]
    fn record_free(&self, ptr: *mut u8, size: usize, usable: Usable) {
        self.record(ptr, size, usable, None);
    }

    /// The cold path's bookkeeping of a block of `size` requested bytes entering (allocated, with the
    /// frame its stack starts from) or leaving (freed, `None`): counted in the thread's shard, and
    /// passed to origin tracking when its address is eligible.
    #[inline(always)]
    fn record(&self, ptr: *mut u8, size: usize, usable: Usable, entering: Option<Frame>) {
        match pool::owned() {
            Some(s) => record_in::<Owner>(s, ptr, size, usable, entering),
            None => record_in::<Anyone>(self.slow_shard(), ptr, size, usable, entering),
        }
    }
}

/// [`Tracked::record`] in shard `s`, written by `W`.
#[inline(always)]
fn record_in<W: Countdown>(s: &'static Shard, ptr: *mut u8, size: usize, usable: Usable, entering: Option<Frame>) {
    let class = Class::of(size);
    if entering.is_some() {
        s.count_in::<W>(class, size, usable);
    } else {
        s.count_out::<W>(class, size, usable);
    }
    if gate::eligible(ptr, size) {
        match entering {
            Some(frame) => origin::on_alloc::<W>(s, ptr, size, frame),
            None => origin::on_free::<W>(s, ptr, size),
        }
    }
}

impl<A: GlobalAlloc + 'static> Tracked<A> {
    /// `alloc` or `alloc_zeroed`, forwarded.
    #[inline(always)]
    unsafe fn inner_alloc(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees about `layout`.
        unsafe { if zeroed { self.inner.alloc_zeroed(layout) } else { self.inner.alloc(layout) } }
    }

    /// Both allocation entry points: the fast path, or the cold one.
    #[inline(always)]
    unsafe fn allocate(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        let kind = backend::kind_of_value(&self.inner);
        let Some(rule) = usable::fast(kind, self.probe, layout) else {
            // SAFETY: the caller's guarantees, passed on.
            return unsafe { self.allocate_cold(layout, zeroed) };
        };
        let probe = rule.probe(self.probe);
        // SAFETY: the caller's guarantees, passed on.
        let ptr = unsafe { self.inner_alloc(layout, zeroed) };
        // One test for three things: the address is not eligible, the pointer is not null (it
        // hashes to 0), and the thread has a shard of its own (the parked one passes nothing).
        let s = pool::current();
        if s.hot.lane.passes(ptr) {
            // SAFETY: the fast path only takes requests of at most SMALL_MAX <= TABLE_MAX bytes.
            let class = unsafe { Class::of_small(layout.size()) };
            s.count_in::<Owner>(class, layout.size(), rule.resolve(kind, probe, ptr, layout.size()));
            ptr
        } else {
            Self::allocated_cold(ptr, layout.size(), rule, probe)
        }
    }

    /// A fast-path allocation that needs the cold path after all: a null result, an eligible
    /// address, or a thread without a shard.
    ///
    /// It takes no `self`, so that the fast path keeps only the size alive across the inner call (one
    /// saved register, not two). The one thing `self` would give, registering the allocator before
    /// the process's first shard claim, waits for the next cold path that has it (any free or
    /// reallocation on a thread without a shard takes one): until then the block is counted in the
    /// overflow shard.
    #[inline(never)]
    fn allocated_cold(ptr: *mut u8, size: usize, rule: usable::Rule, probe: Option<&'static dyn Probe>) -> *mut u8 {
        if ptr.is_null() {
            return ptr;
        }
        let frame = Frame::here();
        let usable = rule.resolve(kind_of::<A>(), probe, ptr, size);
        match pool::owned() {
            Some(s) => record_in::<Owner>(s, ptr, size, usable, Some(frame)),
            None => record_in::<Anyone>(pool::slow_if_registered(), ptr, size, usable, Some(frame)),
        }
        ptr
    }

    /// An allocation off the fast path (over-aligned or large): usable size per block.
    #[inline(never)]
    unsafe fn allocate_cold(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        // SAFETY: the caller's guarantees, passed on.
        let ptr = unsafe { self.inner_alloc(layout, zeroed) };
        if ptr.is_null() {
            return ptr;
        }
        let usable = usable::of(backend::kind_of_value(&self.inner), self.probe, ptr, layout);
        self.record_alloc(ptr, layout.size(), usable, Frame::here())
    }

    /// A free off the fast path: counted (and settled with origin tracking) before the block goes
    /// back to the allocator.
    #[inline(never)]
    unsafe fn deallocate_cold(&self, ptr: *mut u8, layout: Layout) {
        self.record_free(ptr, layout.size(), usable::of(backend::kind_of_value(&self.inner), self.probe, ptr, layout));
        // SAFETY: forwarded with the caller's guarantees: `ptr` came from this allocator with `layout`.
        unsafe { self.inner.dealloc(ptr, layout) }
    }
}

// SAFETY: every method forwards to `A` with exactly the caller's arguments and returns `A`'s result
// unchanged, so `A`'s guarantees carry over; the bookkeeping around the calls never touches the
// memory handed out.
unsafe impl<A: GlobalAlloc + 'static> GlobalAlloc for Tracked<A> {
    #[inline(never)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.allocate(layout, false) }
    }

    #[inline(never)]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.allocate(layout, true) }
    }

    #[inline(never)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let kind = backend::kind_of_value(&self.inner);
        if let Some(rule) = usable::fast(kind, self.probe, layout) {
            let s = pool::current();
            if s.hot.lane.passes(ptr) {
                // SAFETY: the fast path only takes requests of at most SMALL_MAX <= TABLE_MAX bytes.
                let class = unsafe { Class::of_small(layout.size()) };
                s.count_out::<Owner>(class, layout.size(), rule.resolve(kind, self.probe, ptr, layout.size()));
                // SAFETY: forwarded with the caller's guarantees: `ptr` came from this allocator
                // with `layout`.
                return unsafe { self.inner.dealloc(ptr, layout) };
            }
        }
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.deallocate_cold(ptr, layout) }
    }

    #[inline(never)]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let kind = backend::kind_of_value(&self.inner);
        let old_usable = usable::of(kind, self.probe, ptr, layout);
        let moving = origin::Move::start(ptr, layout.size());
        // SAFETY: forwarded with the caller's guarantees about `ptr`, `layout` and `new_size`.
        let new_ptr = unsafe { self.inner.realloc(ptr, layout, new_size) };
        if new_ptr.is_null() {
            // The old block is untouched and still live: nothing happened.
            moving.failed();
            return new_ptr;
        }
        // SAFETY: `realloc`'s contract guarantees `new_size`, rounded up to `layout.align()`, does not
        // overflow `isize`, which is all `Layout` requires.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let new_usable = usable::of(kind, self.probe, new_ptr, new_layout);
        let (old, new) = ((layout.size(), old_usable), (new_size, new_usable));
        match pool::owned() {
            Some(s) => {
                s.count_realloc::<Owner>(old, new);
                moving.finish::<Owner>(s, new_ptr, new_size);
            }
            None => {
                let s = self.slow_shard();
                s.count_realloc::<Anyone>(old, new);
                moving.finish::<Anyone>(s, new_ptr, new_size);
            }
        }
        new_ptr
    }
}
