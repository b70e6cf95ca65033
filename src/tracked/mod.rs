//! `Tracked<A, T, C>`: the `GlobalAlloc` wrapper, in two tiers. This file is the fast path; `cold.rs` is
//! everything else.
//!
//! **The allocation-path contract**, enforced here and in `cold.rs`, and stated nowhere else:
//! - every call is forwarded to the inner allocator with the caller's layout, unchanged (no headers,
//!   no trailers: they would move blocks into other size classes and change the very fragmentation
//!   being measured). The one exception is a *sampled* block (one per 512 KiB allocated by default),
//!   placed where frees can recognise it (`sampler::mark`): 4 KiB-aligned, and for a small request
//!   aligned to at most 8 bytes also 8 bytes larger, handed out 8 bytes in. Its size, and so its size
//!   class in our counters, stays the caller's;
//! - recording never allocates, never takes a lock, never panics: counters are plain stores to the
//!   thread's own shard (`stats::shard`), or atomic adds to the shared overflow shard; the side tables
//!   are fixed arrays updated with compare-and-swap (`sampler::side_table`, `sites::site_table`);
//! - thread-locals are const-initialised, have no `Drop`, and are read with `try_with` (`reentry`);
//! - anything that may allocate (`frag::report()`, formatting, symbolization) runs outside
//!   these methods, under the reentrancy guard (`reentry::Guard`).
//!
//! **The fast path of the sampled tier** ([`Sampled`], the default), taken by every request on a
//! thread with its own shard whose clock does not run out:
//! - `alloc`: the thread's sampling countdown, a thread-local, takes the request's size
//!   (`stats::thread::count_down_owing`: a subtraction from memory relative to the thread pointer
//!   and a branch on its sign, after a load of the thread-local's offset unless the program declared
//!   the countdown in its own crate: `stats::countdown`), and the inner call; on an event, one call
//!   (`allocate_cold_owing`), which gives the subtraction back;
//! - `dealloc`: the pointer tested against the marks (`sampler::may_carry_a_mark`: an `and` with a
//!   constant), and the inner call; a pointer 0 or 8 bytes past a 4 KiB boundary is then tested
//!   against its request's own mark (`sampler::at_its_own_mark`, inline: a few instructions with the
//!   layout's constants), and one at its mark calls `deallocate_at_mark`, which reads its page
//!   bucket's counters before the inner call;
//! - `realloc`: the same pointer test for the old block and the countdown for the new size (out of
//!   line in `reallocate_maybe_marked` for a pointer 0 or 8 past a boundary, as for `dealloc`).
//!
//! These are inlined into every call site (the `GlobalAlloc` methods are `#[inline(always)]`), as the
//! bare allocator's own shim is.
//!
//! **The fast path of the exact tier** ([`Exact`]), taken by a plain request (default alignment, at
//! most 32 KiB: `usable::fast`) on a thread with its own shard:
//! - `alloc`: the same countdown, the inner call, a null test, then the thread's shard (one
//!   thread-local load), the size class (one table load) and a count and a byte total added to that class's
//!   one cache line (plain load + store, no atomic read-modify-write); for backends whose usable size
//!   is not uniform per class (glibc, mimalloc, an `Introspect`) the usable size and a block count too.
//! - `dealloc`: the same mark test, the shard, a test that it is the thread's own (not the parked
//!   one), the same bookkeeping, and the inner call as a tail call.
//!
//! - `realloc`: the same mark test for the old block, both sizes on the fast path, the countdown for
//!   the new size, the old block's usable size where the rule needs the block, the inner call, a null
//!   test, and the block moved from its old class's counters to its new one's.
//!
//! `allocate_exact` and `deallocate_exact` are inlined into every call site too: on the service
//! example that costs about 30 KB of code and saves about 0.8% of the instructions per request
//! against calling them out of line (and about 8 instructions per pair). `reallocate_exact` is a call.
//!
//! Everything else takes the out-of-line cold path (`cold.rs`): a sampling event (the clock ran out:
//! this allocation is sampled), a marked pointer (maybe a sampled block: the side table says), a
//! thread without a shard yet, and in the exact tier over-aligned or large requests (usable sizes per
//! block) and a failed allocation (null), which is never counted. (In the sampled tier a
//! failed allocation keeps its charge on the clock: nothing after the inner call refunds it.)

mod cold;

use crate::stats::countdown::{Countdown, FragCountdown};

use core::alloc::{GlobalAlloc, Layout};
use core::fmt;
use core::marker::PhantomData;

use crate::backend::registry::{self, Registration};
use crate::backend::usable;
use crate::backend::{self, Introspect};
use crate::sampler::{self, Sampling};
use crate::stats::class::Class;
use crate::stats::pool;
use crate::stats::shard::{Owner, Shard};

/// A `GlobalAlloc` that forwards to `A` and measures what passes through, in tier `T`, with the
/// sampling countdown in `C`.
///
/// Works with any allocator: `System`, `tikv_jemallocator::Jemalloc`, `mimalloc::MiMalloc`,
/// `snmalloc_rs::SnMalloc`, or your own. The figures are process-wide: read them with
/// `frag::report()` or `frag::report::totals()`.
///
/// The tier is part of the type, so each build has one code path:
/// - [`Sampled`] (the default), for production: the allocation path holds only the sampler (a
///   countdown on allocation, a pointer test on free). A thread's allocated bytes stay exact (to
///   other threads as of its last sampling event, or its last reading of frag's figures: one
///   sampling interval, 512 KiB on average, at most behind); counts, frees, per-class and live
///   figures are estimated from the samples, and the report says so.
/// - [`Exact`], for tests, allocation budgets and staging: every call is counted, per thread and per
///   size class, on top of the same sampler.
///
/// The third parameter says where each thread's sampling countdown lives: frag's own thread-local
/// ([`FragCountdown`], the default), or one declared in the program's crate with
/// [`declare_countdown!`](crate::declare_countdown), which saves an instruction on every allocation.
///
/// `docs/PERFORMANCE.md` gives both tiers' measured costs.
///
/// # Example
///
/// ```no_run
/// // Production: the sampled tier.
/// #[global_allocator]
/// static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
/// // Tests and staging: `static A: frag::Tracked<std::alloc::System, frag::Exact> = frag::Tracked::new(std::alloc::System);`
///
/// fn main() {
///     let v: Vec<u64> = (0..1000).collect();
///     println!("{}", frag::report());
///     drop(v);
/// }
/// ```
pub struct Tracked<A, T: Tier = Sampled, C: Countdown = FragCountdown> {
    inner: A,
    introspect: Option<&'static dyn Introspect>,
    sampling: Sampling,
    tier: PhantomData<fn() -> (T, C)>,
}

/// How much a [`Tracked`] counts: [`Sampled`] or [`Exact`].
pub trait Tier: sealed::Sealed + 'static {
    /// Whether every call is counted.
    #[doc(hidden)]
    const EXACT: bool;
}

/// The production tier: only the sampler runs on the allocation path; figures other than a thread's
/// allocated bytes are estimates from the samples.
#[derive(Clone, Copy, Debug)]
pub enum Sampled {}

/// The exact tier: every call counted per thread and per size class, on top of the sampler.
#[derive(Clone, Copy, Debug)]
pub enum Exact {}

impl Tier for Sampled {
    const EXACT: bool = false;
}

impl Tier for Exact {
    const EXACT: bool = true;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Sampled {}
    impl Sealed for super::Exact {}
}

impl<A, T: Tier, C: Countdown> Tracked<A, T, C> {
    /// Wraps `inner`, sampling at [`Sampling::DEFAULT`]. Usable in a `static`; the tier comes from
    /// the static's type.
    #[must_use]
    pub const fn new(inner: A) -> Self {
        Self { inner, introspect: None, sampling: Sampling::DEFAULT, tier: PhantomData }
    }

    /// Wraps an allocator this crate does not know, with a [`Introspect`] that supplies its usable sizes
    /// and statistics. For the allocators this crate knows by type (see [`Backend`](crate::backend::Backend))
    /// the `Introspect` is not consulted: their own interfaces are used.
    #[must_use]
    pub const fn with_introspect(inner: A, introspect: &'static dyn Introspect) -> Self {
        Self { inner, introspect: Some(introspect), sampling: Sampling::DEFAULT, tier: PhantomData }
    }

    /// Wraps `inner`, sampling at `sampling` from the process's first allocation on;
    /// [`set_sampling`](crate::set_sampling) changes it later.
    ///
    /// ```no_run
    /// use frag::{Sampling, Tracked};
    ///
    /// #[global_allocator]
    /// static A: Tracked<std::alloc::System> = Tracked::with_sampling(std::alloc::System, Sampling::MeanBytes(128 << 10));
    /// # fn main() {}
    /// ```
    #[must_use]
    pub const fn with_sampling(inner: A, sampling: Sampling) -> Self {
        Self { inner, introspect: None, sampling, tier: PhantomData }
    }

    /// [`with_introspect`](Self::with_introspect) and [`with_sampling`](Self::with_sampling) at once.
    ///
    /// ```no_run
    /// # use std::alloc::{GlobalAlloc, Layout, System};
    /// # struct Mine;
    /// # unsafe impl GlobalAlloc for Mine {
    /// #     unsafe fn alloc(&self, l: Layout) -> *mut u8 { unsafe { System.alloc(l) } }
    /// #     unsafe fn dealloc(&self, p: *mut u8, l: Layout) { unsafe { System.dealloc(p, l) } }
    /// # }
    /// # struct MyProbe;
    /// # impl frag::Introspect for MyProbe {
    /// #     fn name(&self) -> &'static str { "mine" }
    /// # }
    /// #[global_allocator]
    /// static A: frag::Tracked<Mine> = frag::Tracked::with_introspect_and_sampling(Mine, &MyProbe, frag::Sampling::Off);
    /// # fn main() {}
    /// ```
    #[must_use]
    pub const fn with_introspect_and_sampling(
        inner: A,
        introspect: &'static dyn Introspect,
        sampling: Sampling,
    ) -> Self {
        Self { inner, introspect: Some(introspect), sampling, tier: PhantomData }
    }

    /// The wrapped allocator.
    pub const fn inner(&self) -> &A {
        &self.inner
    }
}

impl<A: fmt::Debug, T: Tier, C: Countdown> fmt::Debug for Tracked<A, T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tracked").field("inner", &self.inner).field("exact", &T::EXACT).finish_non_exhaustive()
    }
}

impl<A: 'static, T: Tier, C: Countdown> Tracked<A, T, C> {
    fn registration(&self) -> Registration {
        Registration {
            // The value, not the type: a `Select` decides its backend here if nothing did before (the
            // sampled tier's fast path never asks).
            backend: backend::backend_of_value(&self.inner),
            type_name: core::any::type_name::<A>(),
            introspect: self.introspect,
        }
    }

    /// The shard for a thread without one of its own yet (or ever): see `pool::slow`. The process's
    /// first claim registers the allocator and applies its configured sampling.
    #[cold]
    #[inline(never)]
    fn slow_shard(&self) -> &'static Shard {
        pool::slow(
            || {
                if registry::register(self.registration()) {
                    crate::stats::set_sampled(!T::EXACT);
                    sampler::register_tier(T::EXACT);
                    sampler::configure(self.sampling);
                }
            },
            sampler::mean,
        )
    }
}

impl<A: GlobalAlloc + 'static, T: Tier, C: Countdown> Tracked<A, T, C> {
    /// `alloc` or `alloc_zeroed`, forwarded.
    ///
    /// # Safety
    ///
    /// As `GlobalAlloc::alloc` (or `alloc_zeroed` when `zeroed`) for `layout`.
    #[inline(always)]
    unsafe fn inner_alloc(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees about `layout`.
        unsafe { if zeroed { self.inner.alloc_zeroed(layout) } else { self.inner.alloc(layout) } }
    }

    /// The exact tier's allocation: its fast path, or the cold one. Inlined (see the module docs).
    ///
    /// # Safety
    ///
    /// As `GlobalAlloc::alloc` (or `alloc_zeroed` when `zeroed`) for `layout`.
    #[inline(always)]
    unsafe fn allocate_exact(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        let backend = backend::backend_of_value(&self.inner);
        if let Some(rule) = usable::fast(backend, self.introspect, layout) {
            if pool::count_down::<C>(layout.size()) {
                let introspect = rule.introspect(self.introspect);
                // SAFETY: the caller's guarantees, passed on.
                let ptr = unsafe { self.inner_alloc(layout, zeroed) };
                if ptr.is_null() {
                    return Self::failed(layout.size());
                }
                // The shard is read again rather than kept across the call: only the size is.
                let s = pool::current();
                // SAFETY: the fast path only takes requests of at most `class::TABLE_MAX` bytes.
                let class = unsafe { Class::of_small(layout.size()) };
                s.count_in::<Owner>(class, layout.size(), rule.resolve(backend, introspect, ptr, layout.size()));
                return ptr;
            }
        }
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.allocate_cold(layout, zeroed) }
    }

    /// The exact tier's free: its fast path, or the cold one. Inlined, like [`Self::allocate_exact`].
    ///
    /// # Safety
    ///
    /// As `GlobalAlloc::dealloc`: `ptr` came from this allocator with `layout` and is freed once.
    #[inline(always)]
    unsafe fn deallocate_exact(&self, ptr: *mut u8, layout: Layout) {
        let backend = backend::backend_of_value(&self.inner);
        if !sampler::maybe_sampled(ptr, layout) {
            if let Some(rule) = usable::fast(backend, self.introspect, layout) {
                let s = pool::current();
                if !pool::is_parked(s) {
                    // SAFETY: the fast path only takes requests of at most `class::TABLE_MAX` bytes.
                    let class = unsafe { Class::of_small(layout.size()) };
                    s.count_out::<Owner>(
                        class,
                        layout.size(),
                        rule.resolve(backend, self.introspect, ptr, layout.size()),
                    );
                    // SAFETY: forwarded with the caller's guarantees: `ptr` came from this allocator
                    // with `layout`, and was not sampled, so that is the layout it has.
                    return unsafe { self.inner.dealloc(ptr, layout) };
                }
            }
        }
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.deallocate_cold(ptr, layout) }
    }

    /// The exact tier's reallocation: its fast path, or the cold one. Out of line (reallocations are
    /// rare enough that a call costs less than the code in every call site).
    ///
    /// # Safety
    ///
    /// As `GlobalAlloc::realloc`: `ptr` came from this allocator with `layout`, and `new_size` is non-zero and does not overflow `isize` once rounded to `layout.align()`.
    #[inline(never)]
    unsafe fn reallocate_exact(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let backend = backend::backend_of_value(&self.inner);
        // SAFETY: `realloc`'s contract guarantees `new_size`, rounded up to `layout.align()`, does not
        // overflow `isize`, which is all `Layout` requires.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if !sampler::maybe_sampled(ptr, layout) {
            if let (Some(old_rule), Some(new_rule)) =
                (usable::fast(backend, self.introspect, layout), usable::fast(backend, self.introspect, new_layout))
            {
                if pool::count_down::<C>(new_size) {
                    // Read before the call: the old block is gone after it.
                    let old_usable =
                        old_rule.resolve(backend, old_rule.introspect(self.introspect), ptr, layout.size());
                    let introspect = new_rule.introspect(self.introspect);
                    // SAFETY: forwarded with the caller's guarantees; the block was not sampled, so it
                    // has the caller's layout.
                    let p = unsafe { self.inner.realloc(ptr, layout, new_size) };
                    if p.is_null() {
                        return Self::failed(new_size);
                    }
                    let new_usable = new_rule.resolve(backend, introspect, p, new_size);
                    pool::current().count_realloc::<Owner>((layout.size(), old_usable), (new_size, new_usable));
                    return p;
                }
            }
        }
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.reallocate(ptr, layout, new_size) }
    }

    /// The sampled tier's reallocation of a pointer that may carry a mark, or whose clock ran out: as
    /// the inline path when the block is not sampled after all and the clock does not run out, else
    /// the cold path. Out of line, like [`Self::deallocate_at_mark`].
    ///
    /// # Safety
    ///
    /// As `GlobalAlloc::realloc`: `ptr` came from this allocator with `layout`, and `new_size` is non-zero and does not overflow `isize` once rounded to `layout.align()`.
    #[inline(never)]
    unsafe fn reallocate_maybe_marked(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !sampler::maybe_sampled_marked(ptr, layout) && pool::count_down::<C>(new_size) {
            // SAFETY: forwarded with the caller's guarantees; the block was not sampled, so it has
            // the caller's layout.
            return unsafe { self.inner.realloc(ptr, layout, new_size) };
        }
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.reallocate(ptr, layout, new_size) }
    }

    /// The sampled tier's free of a block at its request's own mark (`sampler::at_its_own_mark`):
    /// its page bucket's counters, then the inner call, or the cold path when a sampled block may
    /// live there. Out of line, so that call sites hold only the pointer tests. Its arguments come in
    /// the order of a backend's sized free (pointer, size), so that the call sites' common path keeps
    /// them in the registers it passes them in.
    ///
    /// # Safety
    ///
    /// As `GlobalAlloc::dealloc`: `ptr` came from `this` allocator with the layout of `size` bytes
    /// aligned to `align`, and is freed once.
    #[inline(never)]
    unsafe fn deallocate_at_mark(ptr: *mut u8, size: usize, align: usize, this: &Self) {
        // SAFETY: the caller's layout, taken apart by the call site.
        let layout = unsafe { Layout::from_size_align_unchecked(size, align) };
        if !sampler::in_an_occupied_bucket(ptr) {
            // SAFETY: forwarded with the caller's guarantees: `ptr` came from this allocator with
            // `layout`, and was not sampled, so that is the layout it has.
            return unsafe { this.inner.dealloc(ptr, layout) };
        }
        // SAFETY: the caller's guarantees, passed on.
        unsafe { this.deallocate_cold(ptr, layout) }
    }

    /// Both allocation entry points, inlined into every call site as the bare allocator's shim is.
    ///
    /// # Safety
    ///
    /// As `GlobalAlloc::alloc` (or `alloc_zeroed` when `zeroed`) for `layout`.
    #[inline(always)]
    unsafe fn allocate(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        if T::EXACT {
            // SAFETY: the caller's guarantees, passed on.
            return unsafe { self.allocate_exact(layout, zeroed) };
        }
        if pool::count_down_owing::<C>(layout.size()) {
            // SAFETY: the caller's guarantees, passed on.
            return unsafe { self.inner_alloc(layout, zeroed) };
        }
        // SAFETY: the caller's guarantees, passed on; the countdown owes `layout.size()` back.
        unsafe { self.allocate_cold_owing(layout, zeroed) }
    }
}

// SAFETY: every method forwards to `A` with the caller's arguments (a sampled block's alignment
// raised, and the block freed with that same layout: see `cold.rs`) and returns `A`'s result
// unchanged, so `A`'s guarantees carry over; the bookkeeping around the calls never touches the
// memory handed out.
unsafe impl<A: GlobalAlloc + 'static, T: Tier, C: Countdown> GlobalAlloc for Tracked<A, T, C> {
    /// # Safety
    ///
    /// As `GlobalAlloc::alloc`.
    #[inline(always)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.allocate(layout, false) }
    }

    /// # Safety
    ///
    /// As `GlobalAlloc::alloc_zeroed`.
    #[inline(always)]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.allocate(layout, true) }
    }

    /// # Safety
    ///
    /// As `GlobalAlloc::dealloc`.
    #[inline(always)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if T::EXACT {
            // SAFETY: the caller's guarantees, passed on.
            return unsafe { self.deallocate_exact(ptr, layout) };
        }
        // Two tests, the second only on a match of the first (one free in 14 in the churn
        // example, docs/PERFORMANCE.md): both inline, and nothing read but the pointer.
        if !sampler::may_carry_a_mark(ptr) || !sampler::at_its_own_mark(ptr, layout) {
            // SAFETY: forwarded with the caller's guarantees: `ptr` came from this allocator with
            // `layout`, and was not sampled, so that is the layout it has.
            return unsafe { self.inner.dealloc(ptr, layout) };
        }
        // SAFETY: the caller's guarantees, passed on.
        unsafe { Self::deallocate_at_mark(ptr, layout.size(), layout.align(), self) }
    }

    /// # Safety
    ///
    /// As `GlobalAlloc::realloc`.
    #[inline(always)]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if T::EXACT {
            // SAFETY: the caller's guarantees, passed on.
            return unsafe { self.reallocate_exact(ptr, layout, new_size) };
        }
        if !sampler::may_carry_a_mark(ptr) && pool::count_down::<C>(new_size) {
            // SAFETY: forwarded with the caller's guarantees; the block was not sampled, so it has
            // the caller's layout.
            return unsafe { self.inner.realloc(ptr, layout, new_size) };
        }
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.reallocate_maybe_marked(ptr, layout, new_size) }
    }
}
