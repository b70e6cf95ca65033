//! The frame-pointer walk, for builds with `-C force-frame-pointers=yes`: the chain of frame
//! records, `[saved fp, return address]`, from frag's entry frame up.
//!
//! Each frame record must lie inside the thread's stack, above the previous one, so a corrupt chain
//! ends the walk instead of looping. The standard library is not rebuilt by the flag; the walk stops
//! where a frame without a frame pointer breaks the chain (usually in `std`'s thread start, below
//! every frame of interest, but also inside `std` functions that allocate).

use super::{Frames, MAX_FRAMES};

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

/// Walks from the frame record at `fp`, reading only below `top` (the top of this thread's stack).
pub(super) fn walk(mut fp: usize, top: usize, out: &mut Frames) -> usize {
    let sp = super::stack_pointer();
    let mut n = 0;
    while n < MAX_FRAMES && fp >= sp && fp.saturating_add(16) <= top && fp % 8 == 0 {
        // SAFETY: the frame record [fp, fp + 16) lies in the mapped part of this thread's stack
        // (the loop condition): a saved frame pointer, then a return address.
        let (next, ret) = unsafe { ((fp as *const usize).read(), ((fp + 8) as *const usize).read()) };
        if ret == 0 {
            break;
        }
        if let Some(slot) = out.get_mut(n) {
            *slot = ret;
        }
        n += 1;
        if next <= fp {
            break;
        }
        fp = next;
    }
    n
}
