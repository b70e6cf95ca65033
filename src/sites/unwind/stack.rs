//! The stack a walk may read: from the stack pointer of the frame where the walk starts up to a
//! bound that the kernel said is readable ([`super::readable`]), never one guessed.
//!
//! **The thread's own stack.** glibc places a thread's descriptor (what `pthread_self()` points to)
//! just above the stack it allocated (or one given with `pthread_attr_setstack`), and the main
//! thread's frames lie below `__libc_stack_end`: whichever lies just above the stack pointer is the
//! candidate top. The first sample of a thread asks the kernel whether every page from its stack
//! pointer to that top can be read; if so, `[stack pointer, top)` is the thread's own stack, kept in a
//! thread-local, and every later walk from a stack pointer inside it reads up to the top with no
//! question asked (a thread's stack is never unmapped while it runs; a walk from deeper down asks
//! about the new part only).
//!
//! **A stack the program switched to** (a `stacker` segment, a coroutine's or fiber's stack, a
//! signal handler's alternate stack): its stack pointer lies outside the thread's own stack, and its
//! top is unknown. The walk reads only what the kernel says is readable above the stack pointer, at
//! most [`SWITCHED_SPAN`] (a question of one system call): it ends at the segment's end, its guard
//! page or the span, whichever comes first. Such samples are counted ([`counts`]). Where the first
//! unreadable page above a switched stack was, is kept as a hint, so that the next sample on that
//! stack does not ask about the whole way up to the thread's top again; a stale hint costs a shorter
//! stack, never a read of memory not just asked about.
//!
//! **Refused.** Where the kernel refuses the question (a seccomp filter without
//! `process_vm_readv`), nothing is proven: stacks are not walked, and the refusals are counted (the
//! report warns). The limit that remains: a thread whose stack has no guard page below it (made with
//! a guard size of 0) and readable memory directly below, on which its first sample runs from a
//! switched stack there, takes that memory for its own stack.

use core::cell::Cell;

use super::readable::{self, Readable};
use super::walk::Stack;
use crate::sync::{AtomicU64, Ordering};

/// The most stack read above the stack pointer on a stack that is not the thread's own: about a
/// hundred frames of ordinary code, asked about in one system call.
pub(crate) const SWITCHED_SPAN: usize = 16 * readable::PAGE;

/// The live part of the stack the calling thread is running on: from the stack pointer of a frame
/// that is still live (the walk runs below it, called from it) up to a bound proven readable.
pub(crate) struct ThreadStack {
    lo: usize,
    hi: usize,
}

impl ThreadStack {
    /// The stack above `lo`, a stack pointer (or frame pointer) of a frame that stays live while the
    /// result is used: up to the thread's own top when `lo` lies in the thread's own stack, else as
    /// far as the kernel says is readable (see the module docs); `None` when nothing above `lo` is
    /// known to be readable.
    #[inline(always)]
    pub(crate) fn above(lo: usize) -> Option<Self> {
        let hi = match own_top(lo) {
            Some(hi) => hi,
            None => proven_top(lo),
        };
        (lo != 0 && hi > lo).then_some(Self { lo, hi })
    }

    /// [`ThreadStack::above`] on the thread's own stack alone, where no question is asked: `None` for
    /// any other stack, or before the thread's first sample.
    #[inline(always)]
    pub(crate) fn own(lo: usize) -> Option<Self> {
        own_top(lo).map(|hi| Self { lo, hi })
    }
}

impl Stack for ThreadStack {
    #[inline(always)]
    fn bounds(&self) -> (usize, usize) {
        (self.lo, self.hi)
    }

    #[inline(always)]
    fn prefetch(&self, addr: usize) {
        super::recent::prefetch(addr);
    }

    /// # Safety
    ///
    /// As [`Stack::read_checked`]: `addr` is an aligned word in `bounds()`.
    #[inline(always)]
    unsafe fn read_checked(&self, addr: usize) -> usize {
        // SAFETY: the caller's guarantee puts the aligned word in `[lo, hi)`: between the stack
        // pointer of a frame that is still live (`above`'s condition) and a bound up to which the
        // kernel said every page is readable (`proven_top`, or the part of the thread's own stack it
        // said so of, which stays mapped while the thread runs): the stack the thread is running
        // on, holding the suspended frames of the walk's callers, which do not change while it runs.
        unsafe { (addr as *const usize).read() }
    }
}

/// The candidate top of the thread's own stack for a stack pointer `sp` (see the module docs), or 0
/// when neither candidate lies just above it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn candidate_top(sp: usize) -> usize {
    unsafe extern "C" {
        static __libc_stack_end: *mut core::ffi::c_void;
    }
    let above = |top: usize| top > sp && top - sp < (1 << 30);
    // A thread that glibc started (or one on a stack given with `pthread_attr_setstack`) has its
    // descriptor just above its stack; so does the only thread of a child forked from such a thread,
    // even though it is the child's main thread now. The main thread's descriptor is elsewhere (in the
    // loader's memory, below the stack), and its frames lie below `__libc_stack_end`. Which is which
    // is told by the stack pointer, not by the thread's id.
    // SAFETY: reads the thread register; no memory is touched.
    let descriptor = unsafe { libc::pthread_self() as usize };
    if above(descriptor) {
        return descriptor;
    }
    // SAFETY: glibc's dynamic loader defines this word at start-up and never changes it.
    let main_top = unsafe { __libc_stack_end as usize };
    if above(main_top) { main_top } else { 0 }
}

/// No candidate off Linux with glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn candidate_top(_sp: usize) -> usize {
    0
}

std::thread_local! {
    /// The part of this thread's own stack proven readable, `[lo, top)` (empty until the first
    /// sample), and the first unreadable address found above a switched stack (0 for none). Follow
    /// the thread-local rules of `reentry` (const-initialised, no `Drop`, read with `try_with`).
    static OWN: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    static SWITCHED_END: Cell<usize> = const { Cell::new(0) };
    /// Whether this thread's last bound was found on a switched stack, until [`took_switched`] reads it.
    static SWITCHED_NOW: Cell<bool> = const { Cell::new(false) };
}

/// Whether the walk just taken on this thread ran on a switched stack (read once: clears it).
pub(crate) fn took_switched() -> bool {
    SWITCHED_NOW.try_with(|s| s.replace(false)).unwrap_or(false)
}

/// Counts a sample walked on a switched stack.
fn switched() {
    SWITCHED.fetch_add(1, Ordering::Relaxed);
    let _ = SWITCHED_NOW.try_with(|s| s.set(true));
}

/// Samples walked on a stack other than the thread's own, and samples not walked because the
/// kernel refused to say what is readable.
static SWITCHED: AtomicU64 = AtomicU64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// How many samples were walked on a stack the program switched to, and how many were not walked
/// at all because the kernel refused the question (see the module docs).
pub(crate) fn counts() -> (u64, u64) {
    (SWITCHED.load(Ordering::Relaxed), REFUSED.load(Ordering::Relaxed))
}

/// The top of the thread's own stack when `sp` lies in its proven part.
#[inline(always)]
fn own_top(sp: usize) -> Option<usize> {
    let (lo, hi) = OWN.try_with(Cell::get).unwrap_or((0, 0));
    (lo <= sp && sp < hi).then_some(hi)
}

/// The top of what a walk from `sp` may read, outside the proven part of the thread's own stack:
/// the thread's own top once the kernel says every page up to it is readable (kept), else as far as
/// it says a switched stack is (see the module docs); `sp` itself when nothing is known.
#[cold]
#[inline(never)]
fn proven_top(sp: usize) -> usize {
    let top = candidate_top(sp);
    let hint = SWITCHED_END.try_with(Cell::get).unwrap_or(0);
    if top != 0 && !(sp < hint && hint < top) {
        // Perhaps the thread's own stack: the part not yet proven, up to the top.
        let (lo, hi) = OWN.try_with(Cell::get).unwrap_or((0, 0));
        let upto = if hi == top && lo > sp { lo } else { top };
        match readable::until(sp, upto) {
            Readable::Until(end) if end == upto => {
                let _ = OWN.try_with(|own| own.set((sp, top)));
                return top;
            }
            Readable::Until(end) => {
                // Not the thread's stack: a gap or a guard page lies between.
                let _ = SWITCHED_END.try_with(|s| s.set(end));
                switched();
                return end.min(sp.saturating_add(SWITCHED_SPAN));
            }
            Readable::Refused => {}
        }
    } else {
        match readable::until(sp, sp.saturating_add(SWITCHED_SPAN)) {
            Readable::Until(end) => {
                switched();
                return end;
            }
            Readable::Refused => {}
        }
    }
    REFUSED.fetch_add(1, Ordering::Relaxed);
    sp
}
