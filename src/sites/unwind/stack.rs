//! The calling thread's stack, as a walk may read it: from the stack pointer of the frame where the
//! walk starts up to the top of the stack (see the parent module on why those words are mapped).

use super::walk::Stack;

/// The live part of the calling thread's stack: from the stack pointer of a frame that is still live
/// (the walk runs below it, called from it) to the top.
pub(crate) struct ThreadStack {
    lo: usize,
    hi: usize,
}

impl ThreadStack {
    /// The calling thread's stack above `lo`, a stack pointer (or frame pointer) of a frame that
    /// stays live while the result is used; `None` when the top is unknown or not above `lo`.
    #[inline(always)]
    pub(crate) fn above(lo: usize) -> Option<Self> {
        let hi = top();
        (lo != 0 && hi > lo).then_some(Self { lo, hi })
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
        // pointer of a frame that is still live (`above`'s condition) and the top of this thread's
        // stack, mapped memory that holds the suspended frames of the walk's callers, which do not
        // change while it runs.
        unsafe { (addr as *const usize).read() }
    }
}

/// The current stack pointer (of the function this is inlined into).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn pointer() -> usize {
    let sp: usize;
    // SAFETY: reads a register; no memory is touched.
    unsafe { core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags)) };
    sp
}

/// The current stack pointer, near enough (the address of a local of the function this is inlined
/// into).
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub(crate) fn pointer() -> usize {
    let marker = 0u8;
    core::ptr::addr_of!(marker) as usize
}

/// The top of the calling thread's stack, or 0 when it cannot be known without allocating.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn find_top() -> usize {
    unsafe extern "C" {
        static __libc_stack_end: *mut core::ffi::c_void;
    }
    let sp = pointer();
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
    // Neither just above this frame: a stack the program switched to itself (a coroutine's): no
    // walking there.
    if above(main_top) { main_top } else { 0 }
}

/// The top of the calling thread's stack: unknown off Linux with glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn find_top() -> usize {
    0
}

std::thread_local! {
    /// The top of this thread's stack: 0 until looked up, 1 when it cannot be known. Follows the
    /// thread-local rules of `reentry` (const-initialised, no `Drop`, read with `try_with`).
    static TOP: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
}

/// The top of the calling thread's stack, or 0 when unknown; looked up once per thread, without
/// allocating.
pub(crate) fn top() -> usize {
    match TOP.try_with(core::cell::Cell::get) {
        Ok(0) => {
            let top = find_top();
            let _ = TOP.try_with(|t| t.set(top.max(1)));
            top
        }
        Ok(1) => 0,
        Ok(top) => top,
        Err(_) => find_top(),
    }
}
