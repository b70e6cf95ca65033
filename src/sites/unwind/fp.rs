//! The frame-pointer unwinder, for builds with `-C force-frame-pointers=yes` (x86-64 or AArch64
//! Linux with glibc): the chain of frame records, `[saved fp, return address]`, from frag's cold
//! frame up.
//!
//! Every read goes through [`Stack::load`], inside the thread's stack; each record must lie above
//! the previous one, so a corrupt chain ends the walk instead of looping. The standard library is not
//! rebuilt by the flag; the walk stops where a frame without a frame pointer breaks the chain
//! (usually in `std`'s thread start, below every frame of interest, but also inside `std` functions
//! that allocate).
//!
//! Exports what every unwinder exports: [`ColdFrame`], [`capture`], [`repeats`], [`refresh`], [`summary`].

use super::frames::{Frames, MAX_FRAMES};
use super::stack::ThreadStack;
use super::summary::UnwindTables;
use super::trace::{Start, Trace, Traced};
use super::walk::Stack;

/// Where a walk starts (see the parent module): the frame pointer of frag's outermost out-of-line
/// function on the allocation path, whose record links to its callers'.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ColdFrame {
    fp: usize,
}

impl ColdFrame {
    /// The frame pointer of the calling function, which must not be inlined, and must be the only
    /// frame of frag's between the allocating code and the walk's start.
    #[inline(always)]
    pub(crate) fn here() -> Self {
        Self { fp: frame_pointer() }
    }
}

/// This function's own frame pointer (it is inlined into its caller, so: the caller's).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn frame_pointer() -> usize {
    let fp: usize;
    // SAFETY: reads a register; no memory is touched.
    unsafe { core::arch::asm!("mov {}, rbp", out(reg) fp, options(nomem, nostack, preserves_flags)) };
    fp
}

/// This function's own frame pointer (it is inlined into its caller, so: the caller's).
#[cfg(target_arch = "aarch64")]
#[inline(always)]
fn frame_pointer() -> usize {
    let fp: usize;
    // SAFETY: reads a register; no memory is touched.
    unsafe { core::arch::asm!("mov {}, x29", out(reg) fp, options(nomem, nostack, preserves_flags)) };
    fp
}

/// Walks the chain from `entry`'s record into `out`; returns the number of frames recorded. Must
/// run while `entry`'s function is still on the stack (it is: capture runs below it). With a
/// `trace`, the walk is kept there, to be checked by [`repeats`].
pub(crate) fn capture(entry: ColdFrame, out: &mut Frames, trace: Option<&Trace>) -> usize {
    let Some(stack) = ThreadStack::above(entry.fp) else { return 0 };
    let Some(trace) = trace else { return walk(entry.fp, &stack, out) };
    trace.begin();
    let n = walk(entry.fp, &Traced { stack: &stack, trace }, out);
    trace.finish(start(entry, &stack));
    n
}

/// Whether a walk from `entry` would record what the one kept in `trace` did ([`Trace::repeats`]).
#[inline]
pub(crate) fn repeats(entry: ColdFrame, trace: &Trace) -> bool {
    ThreadStack::own(entry.fp).is_some_and(|stack| trace.repeats(&start(entry, &stack), &stack))
}

/// What a walk of the chain depends on besides the words it reads: the first record and the top.
fn start(entry: ColdFrame, stack: &ThreadStack) -> Start {
    Start { pc: 0, sp: entry.fp, bp: None, top: stack.bounds().1, epoch: 0 }
}

/// The chain from the record at `fp` on `stack`, into `out`.
#[inline(always)]
fn walk<S: Stack>(mut fp: usize, stack: &S, out: &mut Frames) -> usize {
    let mut n = 0;
    while n < MAX_FRAMES {
        let (Some(next), Some(ret)) = (stack.load(fp), stack.load(fp.wrapping_add(8))) else { break };
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

/// Nothing to build: the chain is in the stack.
pub(crate) fn refresh() {}

/// No tables with this unwinder.
pub(crate) fn summary() -> Option<UnwindTables> {
    None
}
