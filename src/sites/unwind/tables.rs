//! The unwind-tables unwinder (x86-64 Linux with glibc): a walk by the rows built from each loaded
//! module's `.eh_frame` ([`super::modules`]), starting in frag's cold frame's own registers.
//!
//! Exports what every unwinder exports: [`ColdFrame`], [`capture`], [`repeats`], [`refresh`], [`summary`].

use super::frames::{Frames, MAX_FRAMES};
use super::modules::{self, Reading, Set};
use super::rows::{Rows, Rule};
use super::stack::ThreadStack;
use super::summary::UnwindTables;
use super::trace::{Start, Trace, Traced};
use super::walk::{self, Regs, Stack};

/// Where a walk starts (see the parent module): the registers (instruction, stack pointer, `rbp`) of
/// frag's outermost out-of-line function on the allocation path, so that the walk starts in that
/// frame and never steps through frag's own frames below it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ColdFrame {
    pc: usize,
    /// The stack pointer: frames whose CFA lies above it are the function's callers'.
    sp: usize,
    bp: usize,
}

impl ColdFrame {
    /// The registers of the calling function, which must not be inlined, and must be the only frame
    /// of frag's between the allocating code and the walk's start: its callers (a tail call
    /// included) are the allocating code.
    #[inline(always)]
    pub(crate) fn here() -> Self {
        let (pc, sp, bp): (usize, usize, usize);
        // SAFETY: reads three registers; no memory is touched. The instruction pointer is that of the
        // next instruction, where the stack pointer read is the one the function's rule (looked up at
        // that instruction) applies to; `rbp` is the caller's there or saved as that rule says
        // (call-frame information tracks it whenever a function changes it).
        unsafe {
            core::arch::asm!(
                "lea {pc}, [rip]",
                "mov {sp}, rsp",
                "mov {bp}, rbp",
                pc = out(reg) pc,
                sp = out(reg) sp,
                bp = out(reg) bp,
                options(nomem, nostack, preserves_flags)
            );
        }
        Self { pc, sp, bp }
    }
}

/// Walks the stack from `entry` into `out`; returns the number of frames recorded. Must run while
/// `entry`'s function is still on the stack (it is: capture runs below it). With a `trace`, the walk
/// is kept there (`trace`'s module docs), to be checked by [`repeats`].
pub(crate) fn capture(entry: ColdFrame, out: &mut Frames, trace: Option<&Trace>) -> usize {
    let started = cycles();
    let Some(stack) = ThreadStack::above(entry.sp) else { return 0 };
    let Some(trace) = trace else { return walk_from(entry, &stack, &stack, out, started) };
    trace.begin();
    let epoch = modules::epoch();
    let n = walk_from(entry, &Traced { stack: &stack, trace }, &stack, out, started);
    trace.finish(Start { pc: entry.pc, sp: entry.sp, bp: Some(entry.bp), top: stack.bounds().1, epoch });
    n
}

/// Whether a walk from `entry` would record what the one kept in `trace` did ([`Trace::repeats`]).
#[inline]
pub(crate) fn repeats(entry: ColdFrame, trace: &Trace) -> bool {
    let Some(stack) = ThreadStack::own(entry.sp) else { return false };
    let start =
        Start { pc: entry.pc, sp: entry.sp, bp: Some(entry.bp), top: stack.bounds().1, epoch: modules::epoch() };
    trace.repeats(&start, &stack)
}

/// Builds or refreshes the tables (modules loaded or unloaded since the last time). Allocates and
/// takes the loader's lock: never on the allocation path.
pub(crate) fn refresh() {
    modules::refresh();
}

/// What the installed tables hold; `None` before the first build.
pub(crate) fn summary() -> Option<UnwindTables> {
    modules::summary()
}

/// Builds the tables of the modules loaded at start-up, before `main` (an `.init_array` entry), so
/// that the first sampled allocation of `main` already has a stack. Allocations made before it (by
/// other libraries' constructors) have none. What the build allocates is frag's own, as at every
/// later refresh.
#[used]
#[unsafe(link_section = ".init_array")]
static PREPARE_AT_START: extern "C" fn() = {
    extern "C" fn prepare() {
        let Some(_guard) = crate::reentry::Guard::enter() else { return };
        crate::own::run(modules::refresh);
    }
    prepare
};

/// The time-stamp counter: the cold test's clock (a few cycles to read, no system call).
#[inline(always)]
fn cycles() -> u64 {
    // SAFETY: `rdtsc` is part of x86-64, reads a counter and touches no memory.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Above this many cycles from the capture's start to the installed set (the thread's stack top
/// and three shared words: a few cycles when they are in cache, one miss to memory about 500 on
/// this machine's counter), the walk's words are taken to be out of cache: it scans the stack
/// first ([`prefetch_rules`]).
const COLD_CYCLES: u64 = 600;

/// Stack scanned by [`prefetch_rules`]: about 30 frames of a typical stack.
const SCAN_BYTES: usize = 4096;

/// Walks `stack` from `entry`'s registers: its own frame first, then its callers'. `started` is
/// [`cycles`] at the capture's start; `scan` is the stack a cold walk scans first (`stack` itself, or
/// what it records). Returns the frames recorded.
#[inline(never)]
fn walk_from<S: Stack>(entry: ColdFrame, stack: &S, scan: &ThreadStack, out: &mut Frames, started: u64) -> usize {
    // Keeps the start-up constructor linked in whenever stacks can be captured.
    core::hint::black_box(&PREPARE_AT_START);
    let reading = Reading::enter();
    let Some(set) = reading.set() else { return 0 };
    if set.scan_when_cold() && cycles().wrapping_sub(started) > COLD_CYCLES {
        prefetch_rules(scan, set);
    }
    walk_in(set, entry, stack, out)
}

/// Fetches, without waiting, the stack's first [`SCAN_BYTES`] and the recent-rule slots of every
/// word there that may be a return address. A cold walk otherwise waits for two misses in turn per
/// frame (the return address, then its rule); after the scan they are in flight together. Reads
/// only inside `stack`.
#[inline(never)]
#[cold]
fn prefetch_rules(stack: &ThreadStack, set: &Set) {
    let (lo, hi) = stack.bounds();
    let end = hi.min(lo.saturating_add(SCAN_BYTES));
    let mut line = lo & !63;
    while line < end {
        stack.prefetch(line);
        line += 64;
    }
    let recent = set.recent();
    let mut at = lo;
    while let Some(word) = if at < end { stack.load(at) } else { None } {
        if set.may_be_code(word) {
            // The walk looks up the call instruction, before the return address.
            recent.prefetch(word.wrapping_sub(1));
        }
        at += 8;
    }
}

/// The walk on `set`.
#[inline(always)]
fn walk_in<S: Stack>(set: &Set, entry: ColdFrame, stack: &S, out: &mut Frames) -> usize {
    // A recent rule first; else the rows of the previous frame's module (usually the next one's
    // too), without going through the set. Each source steps on its own (`walk_by`).
    let recent = set.recent();
    let mut module: Option<&Rows> = None;
    let mut looked_up = |pc: usize| {
        let rows = match module {
            Some(r) if r.contains(pc) => r,
            _ => match set.rows_for(pc) {
                Some(r) => *module.insert(r),
                None => return Rule::UNKNOWN,
            },
        };
        let rule = rows.rule(pc);
        recent.put(pc, rule);
        rule
    };
    let next = |pc: usize, regs: Regs| match recent.get(pc) {
        Some(rule) => walk::step(stack, regs, rule),
        None => walk::step(stack, regs, looked_up(pc)),
    };
    let regs = Regs { pc: entry.pc, sp: entry.sp, bp: Some(entry.bp) };
    let n = walk::walk_by(next, regs, entry.sp, out);
    debug_assert!(n <= MAX_FRAMES);
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::hint::black_box;

    /// Walks from `entry` twice on the installed set, without and with the scan.
    #[inline(never)]
    fn walk_twice(entry: ColdFrame) -> (Vec<usize>, Vec<usize>) {
        let reading = Reading::enter();
        let set = reading.set().expect("tables built before main");
        let stack = ThreadStack::above(entry.sp).expect("a thread glibc started");
        let (mut plain, mut scanned) = ([0; MAX_FRAMES], [0; MAX_FRAMES]);
        let n = walk_in(set, entry, &stack, &mut plain);
        // Never on valgrind: the scan reads uninitialised words, which memcheck would report.
        if set.scan_when_cold() {
            prefetch_rules(&stack, set);
        }
        let m = walk_in(set, entry, &stack, &mut scanned);
        (plain[..n].to_vec(), scanned[..m].to_vec())
    }

    #[inline(never)]
    fn at_depth(depth: usize) -> (Vec<usize>, Vec<usize>) {
        if depth > 0 {
            return black_box(at_depth(black_box(depth - 1)));
        }
        walk_twice(ColdFrame::here())
    }

    /// The scan a cold walk starts with only fetches: the frames are the same with it, at depths
    /// from a few frames to more than the scan covers.
    #[test]
    fn the_cold_scan_leaves_the_frames_as_they_are() {
        refresh();
        for depth in [0, 5, 40, 120] {
            let (plain, scanned) = at_depth(depth);
            assert!(plain.len() > depth.min(MAX_FRAMES - 8), "{depth}: {} frames", plain.len());
            assert_eq!(plain, scanned, "depth {depth}");
        }
    }
}
