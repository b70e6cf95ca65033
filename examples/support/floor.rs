//! The cheapest wrappers that still count: the floor any exact per-class counter pays, measured by
//! `scripts/instructions.py --floor` on the service example beside `Tracked`. Not part of the
//! crate; not a recommendation (no usable sizes, no origin, no report).
//!
//! - [`Forward`]: out of line, forwards and counts nothing (the price of a wrapper at all);
//! - [`CountInline`]: the same, inlined into every call site (what inlining buys a wrapper);
//! - [`Count`]: out of line, one per-thread count and byte total per size class (the class from one
//!   table load, no bounds checks) on alloc and free, the free a tail call. Nothing else: no usable
//!   sizes, no sampling, no shard registry, no report.
//! - [`SampleOnly`]: inlined, the least a sampler that decides before the call and marks its samples
//!   can do: a countdown in a thread-local, page-aligned samples in a fixed set, every free testing
//!   `ptr & 4095`. The floor of `Tracked`'s sampled tier (`benches/instructions.rs` uses it too).
//! - `CountInline<SampleOnly<_>>` (`count-sample`): both, the floor of `Tracked`'s exact tier.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;

/// Size classes the table tells apart (4 per doubling from 16 B to 32 KiB, and one for all larger).
const ROWS: usize = 48;
/// Requests up to this many bytes find their class in the table.
const TABLE_MAX: usize = 32 << 10;

/// `row × 4` (the row's offset in `u64` words) of every multiple of 8 up to `TABLE_MAX`.
static TABLE: [u16; TABLE_MAX / 8 + 1] = {
    let mut t = [0u16; TABLE_MAX / 8 + 1];
    let mut i = 1;
    while i < t.len() {
        let size = i * 8;
        // 4 classes per doubling: the top bit and the next two.
        let top = usize::BITS - 1 - size.leading_zeros();
        let sub = if top >= 2 { (size >> (top - 2)) & 3 } else { 0 };
        let row = (top as usize * 4 + sub).saturating_sub(12);
        let row = if row > ROWS - 2 { ROWS - 2 } else { row };
        t[i] = (row * 4) as u16;
        i += 1;
    }
    t
};

thread_local! {
    /// Per row: blocks allocated, their requested bytes, blocks freed, their requested bytes.
    static ROWS_TLS: [Cell<u64>; ROWS * 4] = const { [const { Cell::new(0) }; ROWS * 4] };
}

#[inline(always)]
fn row(size: usize) -> usize {
    if size <= TABLE_MAX { TABLE[size.div_ceil(8)] as usize } else { (ROWS - 1) * 4 }
}

/// Adds one block of `size` bytes to the thread's row of its class: `at` 0 for an allocation, 2 for
/// a free.
#[inline(always)]
fn count(size: usize, at: usize) {
    let r = row(size) + at;
    let _ = ROWS_TLS.try_with(|rows| {
        // SAFETY: the table's largest entry is `(ROWS - 2) * 4` and the large row `(ROWS - 1) * 4`,
        // so `r + 1 <= (ROWS - 1) * 4 + 3 < ROWS * 4`.
        let (n, bytes) = unsafe { (rows.get_unchecked(r), rows.get_unchecked(r + 1)) };
        n.set(n.get() + 1);
        bytes.set(bytes.get() + size as u64);
    });
}

/// Forwards, counts nothing.
pub struct Forward<A>(pub A);

// SAFETY: every method forwards to `A` with the caller's arguments and returns its result.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Forward<A> {
    #[inline(never)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.0.alloc(layout) }
    }
    #[inline(never)]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.0.alloc_zeroed(layout) }
    }
    #[inline(never)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.0.dealloc(ptr, layout) }
    }
    #[inline(never)]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.0.realloc(ptr, layout, new_size) }
    }
}

/// A counting wrapper `$name` whose methods carry `#[$inline]`.
macro_rules! counting {
    ($(#[$doc:meta])* $name:ident, $inline:meta) => {
        $(#[$doc])*
        pub struct $name<A>(pub A);

        // SAFETY: every method forwards to `A` with the caller's arguments and returns its result;
        // the counting touches only this module's thread-local counters.
        unsafe impl<A: GlobalAlloc> GlobalAlloc for $name<A> {
            #[$inline]
            unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
                // SAFETY: the caller's guarantees, passed on.
                let p = unsafe { self.0.alloc(layout) };
                if !p.is_null() {
                    count(layout.size(), 0);
                }
                p
            }
            #[$inline]
            unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
                // SAFETY: the caller's guarantees, passed on.
                let p = unsafe { self.0.alloc_zeroed(layout) };
                if !p.is_null() {
                    count(layout.size(), 0);
                }
                p
            }
            #[$inline]
            unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
                count(layout.size(), 2);
                // SAFETY: the caller's guarantees, passed on.
                unsafe { self.0.dealloc(ptr, layout) }
            }
            #[$inline]
            unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
                // SAFETY: the caller's guarantees, passed on.
                let p = unsafe { self.0.realloc(ptr, layout, new_size) };
                if !p.is_null() {
                    count(layout.size(), 2);
                    count(new_size, 0);
                }
                p
            }
        }
    };
}

counting!(
    /// Forwards, and counts blocks and requested bytes per thread and size class.
    Count,
    inline(never)
);

counting!(
    /// [`Count`], inlined into every caller (as the bare backend's shim is).
    CountInline,
    inline(always)
);

thread_local! {
    /// [`SampleOnly`]'s countdown: bytes left before the thread's next sample.
    static LEFT: Cell<i64> = const { Cell::new(0) };
}

/// [`SampleOnly`]'s sampled blocks: a fixed open-addressed set of addresses (0 = empty).
static SAMPLED: [std::sync::atomic::AtomicUsize; 4096] = [const { std::sync::atomic::AtomicUsize::new(0) }; 4096];

/// The alignment a sampled block gets, so that a free tells most unsampled blocks from the pointer.
const PAGE: usize = 4096;

/// Remembers a sampled block's address, or returns `false` when the set is full.
#[cold]
#[inline(never)]
fn remember(p: usize) -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    let h = (p / PAGE).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52;
    (0..SAMPLED.len()).any(|i| {
        let slot = &SAMPLED[(h + i) % SAMPLED.len()];
        // An empty slot, or one a forgotten block left (`usize::MAX`).
        [0, usize::MAX].into_iter().any(|free| slot.compare_exchange(free, p, Relaxed, Relaxed).is_ok())
    })
}

/// Forgets a sampled block's address: `true` when it was there.
#[cold]
#[inline(never)]
fn forget(p: usize) -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    let h = (p / PAGE).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52;
    for i in 0..SAMPLED.len() {
        let slot = &SAMPLED[(h + i) % SAMPLED.len()];
        match slot.load(Relaxed) {
            0 => return false,
            q if q == p => {
                slot.store(usize::MAX, Relaxed);
                return true;
            }
            _ => {}
        }
    }
    false
}

/// The cheapest wrapper that samples as `frag` does, inlined into every caller: a byte countdown in a
/// const thread-local before the inner call (512 KiB between samples, no randomness), a sampled block
/// allocated page-aligned and remembered in a fixed set, every free and reallocation testing
/// `ptr & 4095` and looking a page-aligned pointer up out of line. No stacks, no tallies, no report.
pub struct SampleOnly<A>(pub A);

impl<A: GlobalAlloc> SampleOnly<A> {
    #[cold]
    #[inline(never)]
    unsafe fn sample(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        let _ = LEFT.try_with(|l| l.set(512 << 10));
        let marked = Layout::from_size_align(layout.size(), layout.align().max(PAGE)).unwrap();
        // SAFETY: the caller's guarantees, with a larger alignment.
        let p = unsafe { if zeroed { self.0.alloc_zeroed(marked) } else { self.0.alloc(marked) } };
        if !p.is_null() && !remember(p as usize) {
            // SAFETY: just allocated with `marked`.
            unsafe { self.0.dealloc(p, marked) };
            // SAFETY: the caller's guarantees.
            return unsafe { self.0.alloc(layout) };
        }
        p
    }

    #[cold]
    #[inline(never)]
    unsafe fn free_aligned(&self, ptr: *mut u8, layout: Layout) {
        let layout = if forget(ptr as usize) {
            Layout::from_size_align(layout.size(), layout.align().max(PAGE)).unwrap()
        } else {
            layout
        };
        // SAFETY: the caller's guarantees, with the layout the block was allocated with.
        unsafe { self.0.dealloc(ptr, layout) }
    }

    #[cold]
    #[inline(never)]
    unsafe fn realloc_aligned(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = Layout::from_size_align(new_size, layout.align()).unwrap();
        // SAFETY: the caller's guarantees.
        let p = unsafe { self.alloc(new) };
        if !p.is_null() {
            // SAFETY: both blocks are valid for the smaller size.
            unsafe { std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size)) };
            // SAFETY: the caller's guarantees.
            unsafe { self.dealloc(ptr, layout) };
        }
        p
    }
}

#[inline(always)]
fn take(size: usize) -> bool {
    LEFT.try_with(|l| {
        let left = l.get().wrapping_sub(size as i64);
        l.set(left);
        left > 0
    })
    .unwrap_or(false)
}

// SAFETY: every method forwards to `A`; a sampled block is allocated with a larger alignment and freed
// with that same layout (the set says which blocks are sampled).
unsafe impl<A: GlobalAlloc> GlobalAlloc for SampleOnly<A> {
    #[inline(always)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if take(layout.size()) {
            // SAFETY: the caller's guarantees, passed on.
            return unsafe { self.0.alloc(layout) };
        }
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.sample(layout, false) }
    }
    #[inline(always)]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if take(layout.size()) {
            // SAFETY: the caller's guarantees, passed on.
            return unsafe { self.0.alloc_zeroed(layout) };
        }
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.sample(layout, true) }
    }
    #[inline(always)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if (ptr as usize) & (PAGE - 1) != 0 {
            // SAFETY: the caller's guarantees, passed on.
            return unsafe { self.0.dealloc(ptr, layout) };
        }
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.free_aligned(ptr, layout) }
    }
    #[inline(always)]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if (ptr as usize) & (PAGE - 1) != 0 && take(new_size) {
            // SAFETY: the caller's guarantees, passed on.
            return unsafe { self.0.realloc(ptr, layout, new_size) };
        }
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.realloc_aligned(ptr, layout, new_size) }
    }
}
