//! Stack capture for allocation sites: which unwinder this build uses, where a walk starts, and the
//! bounds of the memory it may read.
//!
//! **Two unwinders** ([`Unwinder`], chosen when the crate is built):
//! - **Unwind tables** (x86-64 Linux with glibc, any build): the call-frame information that every
//!   such build carries (`.eh_frame`, the same information a panic unwinds with) is turned, off the
//!   allocation path, into compact rows of "where is the caller's frame" ([`rows`], built by [`cfi`]
//!   for each loaded module, installed by [`modules`]); the walk ([`walk`]) looks up the rule of each
//!   return address (in [`recent`] rules first; [`tables`]) and reads at most three words of stack per frame
//!   (a walk that starts cold first scans the stack's next 4 KiB to prefetch the rules it will
//!   need). It takes no lock (not even the loader's: the rows are ours) and allocates nothing.
//! - **Frame pointers** (builds with `-C force-frame-pointers=yes`, x86-64 or AArch64 Linux with
//!   glibc): the chain of frame records (`fp`), about 2-3x faster per frame, but it stops at the
//!   first frame built without the flag, in `std` included.
//!
//! Elsewhere (AArch64 without frame pointers, other systems) nothing is captured (`none`): sampled
//! blocks are still followed, their site is "no stack", and the report says which unwinder is in use.
//!
//! Each unwinder is a module exporting the same names (`ColdFrame`, `capture`, `repeats`,
//! `refresh`, `summary`); the build chooses one here, and no function body depends on the choice. What they
//! share lies below them: the frames recorded ([`frames`]), the thread's stack and its bounds
//! ([`stack`]), the table walk's bounds-checked reads ([`walk::Stack`]), and a walk's trace
//! ([`trace`]), with which a later walk from the same frame is answered by checking the words it read
//! (`sites::last` keeps each thread's last one).
//!
//! **Why a walk is safe.** Every read is a word between the stack pointer of the frame where the walk
//! starts (frag's outermost one, still live: the walk runs below it) and a bound up to which the
//! kernel said every page is readable ([`stack`], by [`readable`]): the top of the thread's own stack,
//! proven once per thread, or on a stack the program switched to (a `stacker` segment, a coroutine's,
//! a signal handler's alternate stack) the readable part above the stack pointer, asked at each
//! sample. Nothing is read that was guessed to be mapped. Each step must move the stack pointer up,
//! so a wrong rule or a corrupt stack ends the walk early instead of looping or faulting.
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
mod frames;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[cfg_attr(not(frag_unwind = "tables"), allow(dead_code))]
pub(crate) mod modules;
#[cfg_attr(frag_unwind = "none", allow(dead_code))]
mod readable;
#[cfg_attr(not(frag_unwind = "tables"), allow(dead_code))]
pub(crate) mod recent;
#[cfg_attr(not(frag_unwind = "tables"), allow(dead_code))]
pub(crate) mod rows;
#[cfg_attr(frag_unwind = "none", allow(dead_code))]
mod stack;
mod summary;
#[cfg_attr(frag_unwind = "none", allow(dead_code))]
pub(crate) mod trace;
#[cfg_attr(not(frag_unwind = "tables"), allow(dead_code))]
pub(crate) mod walk;

#[cfg(frag_unwind = "frame_pointers")]
mod fp;
#[cfg(frag_unwind = "none")]
mod none;
#[cfg(frag_unwind = "tables")]
mod tables;

#[cfg(frag_unwind = "frame_pointers")]
use fp as chosen;
#[cfg(frag_unwind = "none")]
use none as chosen;
#[cfg(frag_unwind = "tables")]
use tables as chosen;

pub(crate) use chosen::{ColdFrame, capture, refresh, repeats, summary};
pub(crate) use frames::{Frames, MAX_FRAMES};
#[cfg_attr(frag_unwind = "none", allow(unused_imports))]
pub(crate) use stack::{counts as stack_counts, took_switched};
pub use summary::UnwindTables;
pub(crate) use trace::Trace;

/// How this build captures the stacks of sampled allocations (see [`unwinder`](crate::sites::unwinder)).
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
#[cfg(frag_unwind = "tables")]
pub(crate) const UNWINDER: Unwinder = Unwinder::UnwindTables;
/// The unwinder of this build.
#[cfg(frag_unwind = "frame_pointers")]
pub(crate) const UNWINDER: Unwinder = Unwinder::FramePointers;
/// The unwinder of this build.
#[cfg(frag_unwind = "none")]
pub(crate) const UNWINDER: Unwinder = Unwinder::None;
