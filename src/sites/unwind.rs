//! Stack capture for allocation sites: a walk of the frame-pointer chain.
//!
//! **Why frame pointers.** Measured on the CI machine (`experiments/unwind` on the `sites-groundwork`
//! branch), 100 frames deep: walking the chain costs 34 / 76 / 93 ns for 8 / 32 / 64 frames; the
//! `backtrace` crate's DWARF unwinder 2.8 / 6.8 / 14.0 µs, and it can take the dynamic loader's lock
//! (`dl_iterate_phdr`), which the allocation path must never do. The chain walk takes no lock, calls
//! nothing and allocates nothing.
//!
//! **What the build needs.** `RUSTFLAGS="-C force-frame-pointers=yes"` (the build script sees it and
//! sets `cfg(frag_frame_pointers)`). Without it the walk is compiled out: sampled blocks are still
//! followed, but their site is "no stack" and the report says why. The standard library is not
//! rebuilt by the flag; a walk stops where a frame without a frame pointer breaks the chain (deep in
//! `std`'s thread start, usually below every frame of interest).
//!
//! **Why the walk is safe.** It reads only words between the current stack pointer and the top of the
//! current thread's stack, a range that is mapped: glibc places a thread's descriptor (what
//! `pthread_self()` points to) at the top of the stack it allocated, and the main thread's frames all
//! lie below `__libc_stack_end`. A thread whose stack the program supplied itself (the descriptor is
//! elsewhere) or any other target gets no stacks. Each frame record must lie above the previous one, so
//! a corrupt chain ends the walk instead of looping.
//!
//! **Where it starts.** At the frame record of frag's cold function ([`ColdFrame::here`]): its return
//! address leads into the allocating code (the `GlobalAlloc` methods are inlined there), or into the
//! exact tier's out-of-line fast path, which is skipped; so frag's own frames never appear.
//! `__rust_alloc` may appear when the methods were inlined into it and it was not inlined further;
//! the profile trims it (and `alloc::` plumbing) when it names frames (see `profile`).

/// The deepest stack recorded, leaf first: as many as jemalloc's profiler keeps by default (Go's keeps
/// 32). Frames nearer the root are cut.
pub(crate) const MAX_FRAMES: usize = 64;

/// Return addresses, leaf first; unused entries are 0.
pub(crate) type Frames = [usize; MAX_FRAMES];

/// The frame record of one of frag's cold functions (never inlined), and whether its caller is
/// frag's own code too (the exact tier's out-of-line fast path) rather than the allocating code (the
/// inlined `GlobalAlloc` methods). Its return address leads into its caller: the first frame
/// recorded, or skipped when the caller is ours. Reading it costs one register move; it is checked
/// and followed only when a sample is taken, while that function's frame is still live.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ColdFrame {
    fp: usize,
    skip: bool,
}

impl ColdFrame {
    /// The frame record of the calling function, which must not be inlined; `skip`: its caller is
    /// frag's code, to be left out of the stack.
    #[inline(always)]
    pub(crate) fn here(skip: bool) -> Self {
        Self { fp: imp::frame_pointer(), skip }
    }
}

/// Walks the chain from `entry` into `out`; returns the number of frames recorded. Must run while
/// `entry`'s function is still on the stack (it is: capture runs below it).
pub(crate) fn capture(entry: ColdFrame, out: &mut Frames) -> usize {
    if entry.fp == 0 {
        return 0;
    }
    imp::walk(entry.fp, entry.skip, out)
}

/// Whether this build can capture stacks at all.
pub(crate) const AVAILABLE: bool = imp::AVAILABLE;

#[cfg(all(
    frag_frame_pointers,
    target_os = "linux",
    target_env = "gnu",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod imp {
    use super::{Frames, MAX_FRAMES};

    pub(super) const AVAILABLE: bool = true;

    /// This function's own frame pointer (it is inlined into its caller, so: the caller's).
    #[inline(always)]
    pub(super) fn frame_pointer() -> usize {
        let fp: usize;
        // SAFETY: reads a register; no memory is touched.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            core::arch::asm!("mov {}, rbp", out(reg) fp, options(nomem, nostack, preserves_flags))
        };
        // SAFETY: as above.
        #[cfg(target_arch = "aarch64")]
        unsafe {
            core::arch::asm!("mov {}, x29", out(reg) fp, options(nomem, nostack, preserves_flags))
        };
        fp
    }

    #[inline(always)]
    fn stack_pointer() -> usize {
        let marker = 0u8;
        core::ptr::addr_of!(marker) as usize
    }

    /// Walks from the frame record at `fp`, skipping its own return address when `skip` (a return
    /// into frag's own code).
    pub(super) fn walk(mut fp: usize, mut skip: bool, out: &mut Frames) -> usize {
        let (sp, top) = (stack_pointer(), super::stack_top());
        let mut n = 0;
        while n < MAX_FRAMES && fp >= sp && fp.saturating_add(16) <= top && fp % 8 == 0 {
            // SAFETY: the frame record [fp, fp + 16) lies in the mapped part of this thread's stack
            // (the loop condition): a saved frame pointer, then a return address.
            let (next, ret) = unsafe { ((fp as *const usize).read(), ((fp + 8) as *const usize).read()) };
            if ret == 0 {
                break;
            }
            if !skip {
                if let Some(slot) = out.get_mut(n) {
                    *slot = ret;
                }
                n += 1;
            }
            skip = false;
            if next <= fp {
                break;
            }
            fp = next;
        }
        n
    }

    /// The top of the calling thread's stack, or 0 when it cannot be known without allocating.
    pub(super) fn find_stack_top() -> usize {
        unsafe extern "C" {
            static __libc_stack_end: *mut core::ffi::c_void;
        }
        let sp = stack_pointer();
        // SAFETY: both calls only read the calling thread's and process's ids.
        let main = unsafe { libc::gettid() == libc::getpid() };
        let top = if main {
            // SAFETY: glibc's dynamic loader defines this word at start-up and never changes it.
            unsafe { __libc_stack_end as usize }
        } else {
            // SAFETY: reads the thread register; no memory is touched.
            unsafe { libc::pthread_self() as usize }
        };
        // A descriptor that is not just above this frame is not on this stack (a stack the program
        // supplied itself): no walking there.
        if top > sp && top - sp < (1 << 30) { top } else { 0 }
    }
}

#[cfg(not(all(
    frag_frame_pointers,
    target_os = "linux",
    target_env = "gnu",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
mod imp {
    use super::Frames;

    pub(super) const AVAILABLE: bool = false;

    #[inline(always)]
    pub(super) fn frame_pointer() -> usize {
        0
    }

    pub(super) fn walk(_fp: usize, _skip: bool, _out: &mut Frames) -> usize {
        0
    }

    pub(super) fn find_stack_top() -> usize {
        0
    }
}

use imp::find_stack_top;

std::thread_local! {
    /// The top of this thread's stack: 0 until looked up, 1 when it cannot be known. Follows the
    /// thread-local rules of `reentry` (const-initialised, no `Drop`, read with `try_with`).
    static STACK_TOP: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
}

/// The top of the calling thread's stack, or 0 when unknown; looked up once per thread, without
/// allocating.
#[cfg_attr(not(frag_frame_pointers), allow(dead_code))]
fn stack_top() -> usize {
    match STACK_TOP.try_with(core::cell::Cell::get) {
        Ok(0) => {
            let top = find_stack_top();
            let _ = STACK_TOP.try_with(|t| t.set(top.max(1)));
            top
        }
        Ok(1) => 0,
        Ok(top) => top,
        Err(_) => find_stack_top(),
    }
}
