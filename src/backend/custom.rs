//! [`Introspect`]: what a user's allocator can tell the report about itself.

use core::alloc::Layout;

use super::stats::AllocatorStats;

/// Plugs a custom allocator's knowledge into the report.
///
/// Pass one to [`Tracked::with_introspect`](crate::Tracked::with_introspect). Every method has a default, so an
/// allocator that knows nothing about itself still gets every counter plus the process view.
///
/// # Example
///
/// ```no_run
/// use std::alloc::{GlobalAlloc, Layout, System};
///
/// /// An allocator that rounds every request up to 64 bytes.
/// struct Rounding;
///
/// unsafe impl GlobalAlloc for Rounding {
///     unsafe fn alloc(&self, l: Layout) -> *mut u8 {
///         // SAFETY: rounding a valid layout's size up to 64 keeps it valid.
///         unsafe { System.alloc(Layout::from_size_align_unchecked(l.size().next_multiple_of(64), l.align())) }
///     }
///     unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
///         // SAFETY: `p` was allocated by `alloc` above with the same rounded layout.
///         unsafe { System.dealloc(p, Layout::from_size_align_unchecked(l.size().next_multiple_of(64), l.align())) }
///     }
/// }
///
/// struct RoundingProbe;
///
/// impl frag::Introspect for RoundingProbe {
///     fn name(&self) -> &'static str {
///         "rounding"
///     }
///     fn usable_size(&self, _ptr: *mut u8, layout: Layout) -> Option<usize> {
///         Some(layout.size().next_multiple_of(64))
///     }
/// }
///
/// #[global_allocator]
/// static A: frag::Tracked<Rounding> = frag::Tracked::with_introspect(Rounding, &RoundingProbe);
///
/// fn main() {
///     let v = vec![0u8; 100];
///     assert_eq!(frag::report().backend, Some(frag::backend::WrappedBackend::Other("rounding")));
///     drop(v);
/// }
/// ```
pub trait Introspect: Sync {
    /// The name shown as the report's `backend`.
    fn name(&self) -> &'static str;

    /// The usable size of the live block at `ptr`, allocated with `layout`, or `None` if unknown (the
    /// requested size is used then and the report says so).
    ///
    /// Called on the allocation path, once when the block is handed out and once when it is freed:
    /// it must not allocate, lock, or panic, and must return the same value both times.
    fn usable_size(&self, ptr: *mut u8, layout: Layout) -> Option<usize> {
        let _ = (ptr, layout);
        None
    }

    /// The allocator's own figures, for the report's `allocator` section. Called from `report()`,
    /// outside the allocation path: it may allocate.
    ///
    /// The diagnosis's breakdown uses four of them when the `Introspect` gives them: `active` (bytes in
    /// pages that hold blocks: minus the tracked usable bytes, the holes), `dirty` (free pages it
    /// could return: reclaimable), `metadata`, and `resident` (all it holds resident: the rest of
    /// RSS is outside the heap). A bucket without its figure is left in `unexplained`.
    fn stats(&self) -> Option<AllocatorStats> {
        None
    }
}
