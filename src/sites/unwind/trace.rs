//! A walk's trace: where it started and every word of stack it read, so that a later walk can tell,
//! by reading those words again, that it would find the same frames without walking.
//!
//! A walk is a function of its start (the registers it starts from, the stack's bounds, the unwind
//! rules in force) and of the words it reads: each address it reads follows from the start and the
//! words read before it. So when a new walk starts where a traced one did and every word the traced
//! walk read still holds what it held, the new walk would read the same words and record the same
//! frames ([`Trace::repeats`]). That is the case for a loop that allocates: its samples come from
//! one stack, at the same stack addresses, sample after sample. Checking costs a comparison per word
//! read (one or two a frame), where a walk costs about 70 instructions a frame.
//!
//! A trace holds at most [`WORDS`] reads; a longer walk is not kept.

use core::cell::Cell;

use super::walk::Stack;

/// Reads a trace holds: two a frame for 32 frames (a frame reads one word, or two when its rule
/// restores `rbp`).
pub(crate) const WORDS: usize = 64;

/// What a walk depends on besides the words it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Start {
    /// The first frame's instruction and stack pointer.
    pub(crate) pc: usize,
    pub(crate) sp: usize,
    /// The first frame's `rbp`, where a rule used it before any frame restored it (`None` when the
    /// walk did not use it: then it may differ).
    pub(crate) bp: Option<usize>,
    /// The top of the stack: with `sp`, the bounds of the reads.
    pub(crate) top: usize,
    /// Which unwind rules were in force (`modules::epoch`; 0 for the frame-pointer walk).
    pub(crate) epoch: usize,
}

impl Start {
    const NONE: Self = Self { pc: 0, sp: 0, bp: None, top: 0, epoch: 0 };

    /// Whether a walk from `self` starts as one from `kept` did, as far as `kept`'s walk depended on it.
    #[inline(always)]
    fn matches(&self, kept: &Self) -> bool {
        self.pc == kept.pc
            && self.sp == kept.sp
            && self.top == kept.top
            && self.epoch == kept.epoch
            && (kept.bp.is_none() || self.bp == kept.bp)
    }
}

/// One thread's trace of its last walk (`sites::last` keeps it in a thread-local). Interior
/// mutability: the walk records through a shared reference ([`Traced`]).
pub(crate) struct Trace {
    start: Cell<Start>,
    /// Words read: more than [`WORDS`] means too many to keep; [`Trace::FORGOTTEN`] none kept.
    reads: Cell<usize>,
    at: [Cell<usize>; WORDS],
    was: [Cell<usize>; WORDS],
    /// Whether the walk's frames depend on the word: not a saved `rbp` that no rule used.
    needed: [Cell<bool>; WORDS],
    /// Where the walk's `rbp` came from while recording: the read at this index, or
    /// [`Trace::ENTRY`] (the first frame's register).
    bp_from: Cell<usize>,
    /// Whether a rule used the first frame's `rbp`.
    entry_bp_used: Cell<bool>,
}

impl Trace {
    /// No walk kept.
    const FORGOTTEN: usize = usize::MAX;
    /// `bp_from`: the first frame's `rbp`.
    const ENTRY: usize = usize::MAX;

    /// No walk kept. All zeros, so that a thread-local of it costs a new thread nothing to set up: a
    /// start of zeros matches no walk (no stack pointer is 0: `ThreadStack::above`).
    pub(crate) const fn new() -> Self {
        Self {
            start: Cell::new(Start::NONE),
            reads: Cell::new(0),
            at: [const { Cell::new(0) }; WORDS],
            was: [const { Cell::new(0) }; WORDS],
            needed: [const { Cell::new(false) }; WORDS],
            bp_from: Cell::new(0),
            entry_bp_used: Cell::new(false),
        }
    }

    /// Forgets the walk kept; the next one's reads are recorded from the first.
    #[inline]
    pub(crate) fn begin(&self) {
        self.reads.set(0);
        self.start.set(Start::NONE);
        self.bp_from.set(Self::ENTRY);
        self.entry_bp_used.set(false);
    }

    /// Keeps the walk recorded since [`Trace::begin`] as one from `start`, if its reads fit: the
    /// words its frames depend on, and `start.bp` only if a rule used it.
    #[inline]
    pub(crate) fn finish(&self, start: Start) {
        let reads = self.reads.get();
        if reads > WORDS {
            self.forget();
            return;
        }
        let mut kept = 0;
        for i in 0..reads {
            if let (Some(true), Some(at), Some(was)) =
                (self.needed.get(i).map(Cell::get), self.at.get(i), self.was.get(i))
            {
                if let (Some(to_at), Some(to_was)) = (self.at.get(kept), self.was.get(kept)) {
                    to_at.set(at.get());
                    to_was.set(was.get());
                }
                kept += 1;
            }
        }
        self.reads.set(kept);
        let bp = if self.entry_bp_used.get() { start.bp } else { None };
        self.start.set(Start { bp, ..start });
    }

    /// Keeps no walk.
    #[inline]
    pub(crate) fn forget(&self) {
        self.reads.set(Self::FORGOTTEN);
    }

    /// Records the word the walk read at `addr`: an address [`Stack::read_checked`] was given, so
    /// 8-aligned, which [`Trace::repeats`] relies on. Only [`Traced`] calls it.
    #[inline(always)]
    fn note(&self, addr: usize, word: usize) {
        let i = self.reads.get();
        if let (Some(at), Some(was), Some(needed)) = (self.at.get(i), self.was.get(i), self.needed.get(i)) {
            at.set(addr);
            was.set(word);
            needed.set(true);
        }
        self.reads.set(i.saturating_add(1));
    }

    /// The word read last was a saved `rbp`: needed only once a rule uses it.
    #[inline(always)]
    fn restored_bp(&self) {
        let last = self.reads.get().wrapping_sub(1);
        if let Some(needed) = self.needed.get(last) {
            needed.set(false);
        }
        self.bp_from.set(last);
    }

    /// A rule used `rbp`: the word it came from is needed (or the first frame's register).
    #[inline(always)]
    fn used_bp(&self) {
        match self.bp_from.get() {
            Self::ENTRY => self.entry_bp_used.set(true),
            i => {
                if let Some(needed) = self.needed.get(i) {
                    needed.set(true);
                }
            }
        }
    }

    /// Whether a walk from `start` on `stack` would record what the kept one did: it starts as the
    /// kept one did and every word the kept one read holds the same now (read inside `stack`'s
    /// bounds).
    #[inline]
    pub(crate) fn repeats<S: Stack>(&self, start: &Start, stack: &S) -> bool {
        let reads = self.reads.get();
        if reads > WORDS || !start.matches(&self.start.get()) {
            return false;
        }
        let (lo, hi) = stack.bounds();
        let span = hi.wrapping_sub(lo).saturating_sub(7);
        for (at, was) in self.at.iter().zip(&self.was).take(reads) {
            let at = at.get();
            if at.wrapping_sub(lo) >= span {
                return false;
            }
            // SAFETY: `at` is inside the bounds (just checked: `Stack::load`'s test less its
            // alignment part) and 8-aligned: only `note` writes it, with an address
            // `read_checked` was given, whose contract requires that.
            if unsafe { stack.read_checked(at) } != was.get() {
                return false;
            }
        }
        true
    }
}

/// A stack whose reads are recorded into a trace.
pub(crate) struct Traced<'a, S> {
    pub(crate) stack: &'a S,
    pub(crate) trace: &'a Trace,
}

impl<S: Stack> Stack for Traced<'_, S> {
    #[inline(always)]
    fn bounds(&self) -> (usize, usize) {
        self.stack.bounds()
    }

    #[inline(always)]
    fn prefetch(&self, addr: usize) {
        self.stack.prefetch(addr);
    }

    #[inline(always)]
    fn used_bp(&self) {
        self.trace.used_bp();
    }

    #[inline(always)]
    fn restored_bp(&self) {
        self.trace.restored_bp();
    }

    /// # Safety
    ///
    /// As [`Stack::read_checked`].
    #[inline(always)]
    unsafe fn read_checked(&self, addr: usize) -> usize {
        // SAFETY: the caller's guarantee, passed on unchanged.
        let word = unsafe { self.stack.read_checked(addr) };
        self.trace.note(addr, word);
        word
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stack of words at a made-up address.
    struct Words {
        base: usize,
        words: Vec<usize>,
    }

    impl Stack for Words {
        fn bounds(&self) -> (usize, usize) {
            (self.base, self.base + self.words.len() * 8)
        }
        /// # Safety
        ///
        /// None needed: the words are a `Vec`.
        unsafe fn read_checked(&self, addr: usize) -> usize {
            self.words[(addr - self.base) / 8]
        }
    }

    const BASE: usize = 0x7000_0000;

    fn start(bp: Option<usize>) -> Start {
        Start { pc: 0x1234, sp: BASE, bp, top: BASE + 64 * 8, epoch: 3 }
    }

    /// Records reads of words 2 and 5 of `stack`, as a walk from `start` (whose `rbp` a rule used
    /// first if it is given).
    fn traced(stack: &Words, start: Start) -> Trace {
        let trace = Trace::new();
        trace.begin();
        let t = Traced { stack, trace: &trace };
        if start.bp.is_some() {
            t.used_bp();
        }
        assert_eq!(t.load(BASE + 2 * 8), Some(stack.words[2]));
        assert_eq!(t.load(BASE + 5 * 8), Some(stack.words[5]));
        assert_eq!(t.load(BASE - 8), None, "outside the bounds: nothing read, nothing recorded");
        trace.finish(start);
        trace
    }

    #[test]
    fn repeats_only_while_the_words_read_and_the_start_are_the_same() {
        let mut stack = Words { base: BASE, words: (0..64).map(|i| i * 11).collect() };
        let trace = traced(&stack, start(None));
        assert!(trace.repeats(&start(None), &stack));
        // The walk did not use `rbp`: another value still repeats.
        assert!(trace.repeats(&start(Some(7)), &stack));
        // A word read changed: no.
        stack.words[5] += 1;
        assert!(!trace.repeats(&start(None), &stack));
        stack.words[5] -= 1;
        // A word not read changed: still yes.
        stack.words[3] += 1;
        assert!(trace.repeats(&start(None), &stack));
        // Any part of the start changed: no.
        for other in [
            Start { pc: 0x1235, ..start(None) },
            Start { sp: BASE + 8, ..start(None) },
            Start { top: BASE + 63 * 8, ..start(None) },
            Start { epoch: 4, ..start(None) },
        ] {
            assert!(!trace.repeats(&other, &stack), "{other:?}");
        }
        // A walk that used `rbp` repeats only with the same `rbp`.
        let trace = traced(&stack, start(Some(9)));
        assert!(trace.repeats(&start(Some(9)), &stack));
        assert!(!trace.repeats(&start(Some(10)), &stack));
    }

    /// A saved `rbp` is checked only once a rule used it; the first frame's only if a rule used it
    /// before any frame restored another.
    #[test]
    fn a_saved_rbp_counts_only_once_used() {
        let mut stack = Words { base: BASE, words: (0..64).map(|i| i * 11).collect() };
        let walk = |stack: &Words, use_restored: bool| {
            let trace = Trace::new();
            trace.begin();
            let t = Traced { stack, trace: &trace };
            t.load(BASE + 8); // a return address
            t.load(BASE + 16); // a saved rbp
            t.restored_bp();
            t.load(BASE + 24); // the next return address
            if use_restored {
                t.used_bp();
            }
            trace.finish(start(Some(5)));
            trace
        };
        let unused = walk(&stack, false);
        let used = walk(&stack, true);
        // The first frame's rbp was never used: another one repeats.
        assert!(unused.repeats(&start(Some(6)), &stack));
        stack.words[2] += 1;
        assert!(unused.repeats(&start(None), &stack), "the saved rbp no rule used may change");
        assert!(!used.repeats(&start(None), &stack), "the saved rbp a rule used may not");
        stack.words[2] -= 1;
        stack.words[3] += 1;
        assert!(!unused.repeats(&start(None), &stack), "a return address is always checked");
    }

    #[test]
    fn a_walk_longer_than_the_trace_or_forgotten_never_repeats() {
        let stack = Words { base: BASE, words: vec![1; 128] };
        let trace = Trace::new();
        assert!(!trace.repeats(&start(None), &stack), "nothing kept yet");
        trace.begin();
        let t = Traced { stack: &stack, trace: &trace };
        for i in 0..=WORDS {
            assert_eq!(t.load(BASE + i * 8), Some(1));
        }
        trace.finish(start(None));
        assert!(!trace.repeats(&start(None), &stack));
        let trace = traced(&stack, start(None));
        trace.forget();
        assert!(!trace.repeats(&start(None), &stack));
    }
}
