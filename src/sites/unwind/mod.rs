//! Stack capture for allocation sites: which unwinder this build uses, where a walk starts, and the
//! bounds of the memory it may read.
//!
//! **Two unwinders** ([`Unwinder`], chosen when the crate is built):
//! - **Unwind tables** (x86-64 Linux with glibc, any build): the call-frame information that every
//!   such build carries (`.eh_frame`, the same information a panic unwinds with) is turned, off the
//!   allocation path, into compact rows of "where is the caller's frame" ([`rows`], built by [`cfi`]
//!   for each loaded module, published by [`modules`]); the walk ([`walk`]) looks up the rule of each
//!   return address (in [`recent`] rules first) and reads at most three words of stack per frame
//!   (a walk that starts cold first scans the stack's next 4 KiB to prefetch the rules it will
//!   need). It takes no lock (not even the loader's: the rows are ours) and allocates nothing.
//! - **Frame pointers** (builds with `-C force-frame-pointers=yes`, x86-64 or AArch64 Linux with
//!   glibc): the chain of frame records ([`fp`]), about 2-3x faster per frame, but it stops at the
//!   first frame built without the flag, in `std` included.
//!
//! Elsewhere (AArch64 without frame pointers, other systems) nothing is captured: sampled blocks are
//! still followed, their site is "no stack", and the report says which unwinder is in use.
//!
//! **Why a walk is safe.** Every read is a word between the stack pointer of the frame where the walk
//! starts (frag's outermost one, still live: the walk runs below it) and the top of the current
//! thread's stack, checked before it is read: a range that is mapped. glibc places a thread's
//! descriptor (what `pthread_self()` points to) at the top of the stack it allocated, and the main
//! thread's frames all lie below `__libc_stack_end`. A thread whose stack the program supplied itself
//! (its descriptor is elsewhere) gets no stacks. Each step must move the stack pointer up, so a wrong
//! rule or a corrupt stack ends the walk early instead of looping or faulting.
//!
//! **Where it starts.** frag's one out-of-line function on a sampled allocation's path records an
//! anchor ([`ColdFrame::here`]): its frame pointer, or for the tables its registers, where the walk
//! starts (frag's frames below it, the walk's own included, are never stepped through). The frames
//! recorded are those above the anchor: the first is the return address into the allocating code
//! (the `GlobalAlloc` methods are inlined there), which may also have reached frag's function by a
//! tail call (then the allocating function itself has no frame left, as in any unwinder); so frag's
//! own frames never appear. `__rust_alloc` may appear when the methods were inlined into it and it was not
//! inlined further; the profile trims it (and `alloc::` plumbing) when it names frames (see `profile`).

// The tables' parts are compiled (and unit-tested) in every Linux build; only the tables build uses
// them.
#[cfg_attr(not(frag_unwind = "tables"), allow(dead_code))]
pub(crate) mod cfi;
#[cfg(frag_unwind = "frame_pointers")]
mod fp;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[cfg_attr(not(frag_unwind = "tables"), allow(dead_code))]
pub(crate) mod modules;
#[cfg_attr(not(frag_unwind = "tables"), allow(dead_code))]
pub(crate) mod recent;
#[cfg_attr(not(frag_unwind = "tables"), allow(dead_code))]
pub(crate) mod rows;
#[cfg_attr(not(frag_unwind = "tables"), allow(dead_code))]
pub(crate) mod walk;

/// The deepest stack recorded, leaf first: as many as jemalloc's profiler keeps by default (Go's keeps
/// 32). Frames nearer the root are cut.
pub(crate) const MAX_FRAMES: usize = 64;

/// Return addresses, leaf first; unused entries are 0.
pub(crate) type Frames = [usize; MAX_FRAMES];

/// How this build captures the stacks of sampled allocations (see [`unwinder`](crate::unwinder)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize), serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Unwinder {
    /// Compact rows built from the binary's and libraries' `.eh_frame` (x86-64 Linux): stacks in any
    /// build, through `std` and libraries built without frame pointers.
    UnwindTables,
    /// The frame-pointer chain: the build has `-C force-frame-pointers=yes`. Faster per frame, but a
    /// stack ends at the first frame compiled without the flag (the standard library's, usually).
    FramePointers,
    /// No stacks on this target (AArch64 without frame pointers, systems other than Linux with
    /// glibc): sampled blocks have no site.
    None,
}

impl Unwinder {
    /// A short lower-case name, as the report and the publisher's log print it.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::UnwindTables => "unwind tables",
            Self::FramePointers => "frame pointers",
            Self::None => "none",
        }
    }
}

impl core::fmt::Display for Unwinder {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// The unwinder of this build.
pub(crate) const UNWINDER: Unwinder = if cfg!(frag_unwind = "tables") {
    Unwinder::UnwindTables
} else if cfg!(frag_unwind = "frame_pointers") {
    Unwinder::FramePointers
} else {
    Unwinder::None
};

/// Where a walk starts: frag's outermost out-of-line function on the allocation path (see the module
/// docs), whose callers are the frames recorded. For the frame-pointer walk, its frame pointer; for
/// the tables, its registers (instruction, stack pointer, `rbp`), so that the walk starts in that
/// frame and never steps through frag's own frames below it. Reading it costs a few register moves;
/// it is used only when a sample is taken, while that function's frame is still live.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ColdFrame {
    /// The stack pointer (frame pointer for that walk) of the function: frames whose CFA lies above
    /// it are its callers'.
    anchor: usize,
    /// The instruction and `rbp` where `anchor` was read (the tables' walk starts there).
    #[cfg(frag_unwind = "tables")]
    pc: usize,
    #[cfg(frag_unwind = "tables")]
    bp: usize,
}

impl ColdFrame {
    /// The anchor of the calling function, which must not be inlined, and must be the only frame of
    /// frag's between the allocating code and the walk's start: its callers (a tail call included)
    /// are the allocating code.
    #[inline(always)]
    pub(crate) fn here() -> Self {
        #[cfg(frag_unwind = "frame_pointers")]
        return Self { anchor: fp::frame_pointer() };
        #[cfg(frag_unwind = "tables")]
        {
            let (pc, sp, bp): (usize, usize, usize);
            // SAFETY: reads three registers; no memory is touched. The instruction pointer is that of
            // the next instruction, where the stack pointer read is the one the function's rule
            // (looked up at that instruction) applies to; `rbp` is the caller's there or saved as that
            // rule says (call-frame information tracks it whenever a function changes it).
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
            Self { anchor: sp, pc, bp }
        }
        #[cfg(not(any(frag_unwind = "frame_pointers", frag_unwind = "tables")))]
        Self { anchor: stack_pointer() }
    }
}

/// Walks the stack from `entry` into `out`; returns the number of frames recorded. Must run while
/// `entry`'s function is still on the stack (it is: capture runs below it).
pub(crate) fn capture(entry: ColdFrame, out: &mut Frames) -> usize {
    #[cfg(frag_unwind = "tables")]
    let started = tables::cycles();
    if entry.anchor == 0 {
        return 0;
    }
    let top = stack_top();
    if top == 0 {
        return 0;
    }
    #[cfg(frag_unwind = "frame_pointers")]
    return fp::walk(entry.anchor, top, out);
    #[cfg(frag_unwind = "tables")]
    return tables::walk_from(entry, top, out, started);
    #[cfg(not(any(frag_unwind = "frame_pointers", frag_unwind = "tables")))]
    {
        let _ = out;
        0
    }
}

/// Builds or refreshes the unwind tables (modules loaded or unloaded since the last time); nothing
/// for the other unwinders. Allocates and takes the loader's lock: never on the allocation path.
pub(crate) fn refresh() {
    #[cfg(frag_unwind = "tables")]
    modules::refresh();
}

/// What the unwind tables hold, as the report shows it (an allocation-site concern: see
/// [`unwinder`](crate::unwinder)).
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct UnwindTables {
    /// Modules (the executable and its libraries) with rows.
    pub modules: usize,
    /// Rows, each an address range and its rule.
    pub rows: usize,
    /// Bytes the rows and their indexes take (in mappings of their own, outside the heap frag
    /// measures).
    pub bytes: usize,
    /// Rows with a rule the walker cannot apply (a stack ends there).
    pub unknown_rows: usize,
    /// Call-frame entries that failed to parse (their code has no rows).
    pub failed_entries: usize,
    /// How long the last refresh took to build, in milliseconds (modules already built are reused).
    pub last_build_ms: f64,
}

/// What the published unwind tables hold; `None` for the other unwinders and before the first build.
pub(crate) fn summary() -> Option<UnwindTables> {
    #[cfg(frag_unwind = "tables")]
    return modules::summary();
    #[cfg(not(frag_unwind = "tables"))]
    None
}

#[cfg(frag_unwind = "tables")]
mod tables {
    use super::modules::{Reading, Set};
    use super::rows::{Rows, Rule};
    use super::walk::{self, Regs, Stack};
    use super::{Frames, MAX_FRAMES};

    /// The calling thread's live stack, from the stack pointer of the frame the walk starts in to the
    /// top.
    struct ThreadStack {
        lo: usize,
        hi: usize,
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
            // pointer of a frame that is still live (the walk runs below it, called from it) and the
            // top of this thread's stack, mapped memory that holds the suspended frames of the walk's
            // callers, which do not change while it runs.
            unsafe { (addr as *const usize).read() }
        }
    }

    /// The time-stamp counter: the cold test's clock (a few cycles to read, no system call).
    #[inline(always)]
    pub(super) fn cycles() -> u64 {
        // SAFETY: `rdtsc` is part of x86-64, reads a counter and touches no memory.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    /// Above this many cycles from the capture's start to the published set (the thread's stack top
    /// and three shared words: a few cycles when they are in cache, one miss to memory about 500 on
    /// this machine's counter), the walk's words are taken to be out of cache: it scans the stack
    /// first ([`prefetch_rules`]).
    const COLD_CYCLES: u64 = 600;

    /// Stack scanned by [`prefetch_rules`]: about 30 frames of a typical stack.
    const SCAN_BYTES: usize = 4096;

    /// Walks from `entry`'s registers: its own frame first, then its callers'. `started` is
    /// [`cycles`] at the capture's start.
    #[inline(never)]
    pub(super) fn walk_from(entry: super::ColdFrame, top: usize, out: &mut Frames, started: u64) -> usize {
        // Keeps the start-up constructor linked in whenever stacks can be captured.
        core::hint::black_box(&super::PREPARE_AT_START);
        let reading = Reading::enter();
        let Some(set) = reading.set() else { return 0 };
        let cold = set.scan_when_cold() && cycles().wrapping_sub(started) > COLD_CYCLES;
        walk_in(set, entry, top, out, cold)
    }

    /// Fetches, without waiting, the stack's first [`SCAN_BYTES`] and the recent-rule slots of every
    /// word there that may be a return address. A cold walk otherwise waits for two misses in turn
    /// per frame (the return address, then its rule); after the scan they are in flight together.
    /// Reads only inside `stack`.
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

    /// The walk on `set`, after a scan of the stack if `cold`. The frames are the same either way.
    #[inline(always)]
    fn walk_in(set: &Set, entry: super::ColdFrame, top: usize, out: &mut Frames, cold: bool) -> usize {
        let (pc, sp, bp) = (entry.pc, entry.anchor, entry.bp);
        if sp >= top {
            return 0;
        }
        let stack = ThreadStack { lo: sp, hi: top };
        if cold {
            prefetch_rules(&stack, set);
        }
        // A recent rule first; else the rows of the previous frame's module (usually the next
        // one's too), without going through the set.
        let recent = set.recent();
        let mut module: Option<&Rows> = None;
        let rules = |pc: usize| {
            if let Some(rule) = recent.get(pc) {
                return rule;
            }
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
        let n = walk::walk(&stack, rules, Regs { pc, sp, bp: Some(bp) }, sp, out);
        debug_assert!(n <= MAX_FRAMES);
        n
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use core::hint::black_box;

        /// Walks from `entry` twice on the published set, without and with the scan.
        #[inline(never)]
        fn walk_twice(entry: super::super::ColdFrame, top: usize) -> (Vec<usize>, Vec<usize>) {
            let reading = Reading::enter();
            let set = reading.set().expect("tables built before main");
            let (mut plain, mut scanned) = ([0; MAX_FRAMES], [0; MAX_FRAMES]);
            let n = walk_in(set, entry, top, &mut plain, false);
            // Never on valgrind: the scan reads uninitialised words, which memcheck would report.
            let m = walk_in(set, entry, top, &mut scanned, set.scan_when_cold());
            (plain[..n].to_vec(), scanned[..m].to_vec())
        }

        #[inline(never)]
        fn at_depth(depth: usize) -> (Vec<usize>, Vec<usize>) {
            if depth > 0 {
                return black_box(at_depth(black_box(depth - 1)));
            }
            walk_twice(super::super::ColdFrame::here(), super::super::stack_top())
        }

        /// The scan a cold walk starts with only fetches: the frames are the same with it, at
        /// depths from a few frames to more than the scan covers.
        #[test]
        fn the_cold_scan_leaves_the_frames_as_they_are() {
            super::super::refresh();
            for depth in [0, 5, 40, 120] {
                let (plain, scanned) = at_depth(depth);
                assert!(plain.len() > depth.min(MAX_FRAMES - 8), "{depth}: {} frames", plain.len());
                assert_eq!(plain, scanned, "depth {depth}");
            }
        }
    }
}

/// Builds the tables of the modules loaded at start-up, before `main` (an `.init_array` entry), so
/// that the first sampled allocation of `main` already has a stack. Allocations made before it (by
/// other libraries' constructors) have none.
#[cfg(frag_unwind = "tables")]
#[used]
#[unsafe(link_section = ".init_array")]
static PREPARE_AT_START: extern "C" fn() = {
    extern "C" fn prepare() {
        modules::refresh();
    }
    prepare
};

/// The current stack pointer (of the function this is inlined into).
#[inline(always)]
#[cfg_attr(frag_unwind = "frame_pointers", allow(dead_code))]
fn stack_pointer() -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        let sp: usize;
        // SAFETY: reads a register; no memory is touched.
        unsafe { core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags)) };
        sp
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let marker = 0u8;
        core::ptr::addr_of!(marker) as usize
    }
}

/// The top of the calling thread's stack, or 0 when it cannot be known without allocating.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn find_stack_top() -> usize {
    unsafe extern "C" {
        static __libc_stack_end: *mut core::ffi::c_void;
    }
    let sp = stack_pointer();
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

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn find_stack_top() -> usize {
    0
}

std::thread_local! {
    /// The top of this thread's stack: 0 until looked up, 1 when it cannot be known. Follows the
    /// thread-local rules of `reentry` (const-initialised, no `Drop`, read with `try_with`).
    static STACK_TOP: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
}

/// The top of the calling thread's stack, or 0 when unknown; looked up once per thread, without
/// allocating.
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
