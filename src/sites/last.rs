//! The calling thread's last site: the walk that found it is kept (`unwind::trace`), so that the
//! next sample taken from the same stack, as a loop's samples are, gets the site back by checking
//! the words that walk read instead of walking and interning again.
//!
//! One per thread, in a thread-local of about 1.1 KiB (const-initialised, no `Drop`: the rules of
//! `reentry`). A sample taken while the thread is already in here (from a signal handler) walks
//! without it.

use core::cell::Cell;

use super::site_table::{NO_SITE, SITES};
use super::unwind::{self, ColdFrame, Frames, MAX_FRAMES, Trace};

struct Last {
    trace: Trace,
    /// The site the kept walk found, and the scope it was interned in.
    site: Cell<u32>,
    scope: Cell<u16>,
    busy: Cell<bool>,
}

std::thread_local! {
    static LAST: Last = const {
        Last { trace: Trace::new(), site: Cell::new(NO_SITE), scope: Cell::new(0), busy: Cell::new(false) }
    };
}

/// The site of a sample whose stack starts at `entry`, in scope `scope`: the thread's last site when
/// the walk would repeat (`unwind::repeats`), else walked and interned, and kept when it found one.
pub(super) fn site(entry: ColdFrame, scope: u16) -> u32 {
    LAST.try_with(|last| {
        if last.busy.replace(true) {
            return fresh(entry, scope, None);
        }
        let site = if last.scope.get() == scope && unwind::repeats(entry, &last.trace) {
            last.site.get()
        } else {
            let site = fresh(entry, scope, Some(&last.trace));
            if site == NO_SITE {
                // No stack yet (no tables before `main`'s constructors ran) or no room: not kept.
                last.trace.forget();
            }
            last.site.set(site);
            last.scope.set(scope);
            site
        };
        last.busy.set(false);
        site
    })
    .unwrap_or_else(|_| fresh(entry, scope, None))
}

/// The site of a stack walked from `entry` now (kept in `trace`, if given), interned in `scope`.
/// Out of line: its frame buffer stays off the path of a repeat.
#[inline(never)]
fn fresh(entry: ColdFrame, scope: u16, trace: Option<&Trace>) -> u32 {
    let mut frames: Frames = [0; MAX_FRAMES];
    let depth = unwind::capture(entry, &mut frames, trace);
    if depth == 0 { NO_SITE } else { SITES.intern(&frames, depth, scope) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::hint::black_box;

    /// The site from here, through the thread's kept walk, and walked afresh without it.
    #[inline(never)]
    fn both(scope: u16) -> (u32, u32) {
        let entry = ColdFrame::here();
        black_box((site(entry, scope), fresh(entry, scope, None)))
    }

    #[inline(never)]
    fn from_a() -> (u32, u32) {
        black_box(both(7))
    }

    #[inline(never)]
    fn from_b() -> (u32, u32) {
        black_box(both(7))
    }

    /// Samples from one stack get the site a fresh walk finds, kept or not; a sample from another
    /// caller at the same depth (the same stack pointers, another return address) or in another
    /// scope gets its own.
    #[test]
    fn a_kept_walk_gives_the_site_a_fresh_walk_finds() {
        unwind::refresh();
        let mut seen = [NO_SITE; 2];
        for round in 0..20 {
            let (a, b) = (from_a(), from_b());
            assert_eq!(a.0, a.1, "round {round}: from a");
            assert_eq!(b.0, b.1, "round {round}: from b");
            // Twice in a row from one place: the second is the kept walk's.
            let again = from_b();
            assert_eq!(again.0, again.1, "round {round}: from b again");
            seen = [a.0, b.0];
        }
        assert_ne!(seen[0], NO_SITE, "stacks are walked here");
        assert_ne!(seen[0], seen[1], "two callers, two sites");
        let other = black_box(both(8));
        assert_eq!(other.0, other.1);
        assert_ne!(other.0, both(7).0, "another scope, another site");
    }
}
