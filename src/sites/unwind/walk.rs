//! The table walk: from one frame's registers to its caller's, by the rows of [`super::rows`].
//!
//! Each step looks up the rule of the frame's instruction, computes the CFA, reads the return
//! address below it and, if the rule says so, the caller's saved `rbp`: at most three words, each
//! checked against the stack's bounds before it is read ([`Stack::load`] is the one place that
//! reads). The walk ends at the outermost frame, at a rule it cannot apply, at a read out of bounds,
//! when the CFA does not grow (so it cannot loop), or after [`MAX_STEPS`] steps. It takes no lock,
//! calls nothing that can, and allocates nothing.

use super::frames::{Frames, MAX_FRAMES};
use super::rows::{Bp, Cfa, Rule};

/// Steps taken at most: the frames kept, and frag's own frames below them.
pub(crate) const MAX_STEPS: usize = MAX_FRAMES + 32;

/// The memory a walk may read: `[lo, hi)`.
pub(crate) trait Stack {
    /// The bounds.
    fn bounds(&self) -> (usize, usize);

    /// The word at `addr`.
    ///
    /// # Safety
    ///
    /// `addr` is 8-aligned and `[addr, addr + 8)` lies inside the bounds ([`Stack::load`] checks it).
    unsafe fn read_checked(&self, addr: usize) -> usize;

    /// A hint that the words from `addr` on will be read soon (nothing by default). A hint reads
    /// nothing: an address outside the bounds is harmless.
    #[inline(always)]
    fn prefetch(&self, addr: usize) {
        let _ = addr;
    }

    /// The walk used `rbp`: a rule computed the CFA from it. Nothing by default; a trace records it
    /// (`trace::Traced`).
    #[inline(always)]
    fn used_bp(&self) {}

    /// The walk restored `rbp` from the word it read last. Nothing by default.
    #[inline(always)]
    fn restored_bp(&self) {}

    /// The word at `addr` if it lies wholly inside the bounds.
    #[inline(always)]
    fn load(&self, addr: usize) -> Option<usize> {
        let (lo, hi) = self.bounds();
        // `lo <= addr && addr + 8 <= hi` in one comparison: an address below `lo` wraps to an offset
        // past any stack's size.
        let inside = addr % 8 == 0 && addr.wrapping_sub(lo) < hi.wrapping_sub(lo).saturating_sub(7);
        // SAFETY: `inside` is the precondition.
        inside.then(|| unsafe { self.read_checked(addr) })
    }
}

/// A frame's registers: the instruction, the stack pointer, and `rbp` if known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Regs {
    pub(crate) pc: usize,
    pub(crate) sp: usize,
    pub(crate) bp: Option<usize>,
}

/// Walks from `regs` (the registers of a running frame: its `pc` is the instruction itself, not a
/// return address) with `rules`, recording into `out` the return addresses of the frames whose CFA
/// lies above `anchor` (frag's entry point's stack pointer: the frames below it are frag's). Returns
/// the number recorded.
#[cfg(test)]
fn walk<S: Stack>(
    stack: &S,
    mut rules: impl FnMut(usize) -> Rule,
    regs: Regs,
    anchor: usize,
    out: &mut Frames,
) -> usize {
    walk_by(|pc, regs| step(stack, regs, rules(pc)), regs, anchor, out)
}

/// `walk` (the tests') with the step given: `next(pc, regs)` is [`step`] from `regs` by the rule of `pc` (the
/// address looked up: the instruction itself in the first frame, the call before the return
/// address in the others). A caller with rules from two sources steps by each separately, so that
/// neither rule is built in memory for the other's sake.
#[inline(always)]
pub(crate) fn walk_by(
    mut next: impl FnMut(usize, Regs) -> Option<Regs>,
    mut regs: Regs,
    anchor: usize,
    out: &mut Frames,
) -> usize {
    let mut n = 0;
    let mut running = true;
    for _ in 0..MAX_STEPS {
        // A return address points after the call, which may be the last instruction of its function
        // (a call to a function that does not return): look up the call itself.
        let pc = if running { regs.pc } else { regs.pc.wrapping_sub(1) };
        running = false;
        let Some(caller) = next(pc, regs) else { break };
        regs = caller;
        if regs.sp > anchor {
            if let Some(slot) = out.get_mut(n) {
                *slot = regs.pc;
                n += 1;
            } else {
                break;
            }
        }
        if n == MAX_FRAMES {
            break;
        }
    }
    n
}

/// The caller's registers by `rule`, or `None` where the walk ends.
#[inline(always)]
pub(crate) fn step<S: Stack>(stack: &S, regs: Regs, rule: Rule) -> Option<Regs> {
    // Addresses wrap rather than stop the walk on overflow: `load` reads only inside the stack, so a
    // wrapped address is refused or, were it to land inside, read safely (a garbage frame at worst,
    // as any garbage `rbp` gives); a CFA that wrapped below the stack pointer fails the test after.
    let offset = rule.cfa_offset as isize;
    let cfa = match rule.cfa {
        Cfa::Sp => regs.sp.wrapping_add_signed(offset),
        Cfa::Bp => {
            stack.used_bp();
            regs.bp?.wrapping_add_signed(offset)
        }
        Cfa::DerefBp => {
            stack.used_bp();
            stack.load(regs.bp?.wrapping_add_signed(offset))?
        }
        Cfa::End | Cfa::Unknown => return None,
    };
    if cfa <= regs.sp {
        return None;
    }
    // The caller's frame starts at the CFA: its words are what the next steps read, and on a stack
    // not in cache a miss each (the rules' look-ups wait on them).
    stack.prefetch(cfa.wrapping_add(64));
    stack.prefetch(cfa.wrapping_add(128));
    let pc = stack.load(cfa.wrapping_sub(8))?;
    if pc == 0 {
        return None;
    }
    let bp = match rule.bp {
        Bp::Same => regs.bp,
        Bp::Saved => {
            let bp = stack.load(cfa.wrapping_add_signed(rule.bp_offset as isize))?;
            stack.restored_bp();
            Some(bp)
        }
        Bp::Lost => None,
    };
    Some(Regs { pc, sp: cfa, bp })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A stack held in a vector at a made-up address; a read out of bounds fails the test.
    struct Fake {
        base: usize,
        words: Vec<usize>,
    }

    impl Stack for Fake {
        fn bounds(&self) -> (usize, usize) {
            (self.base, self.base + self.words.len() * 8)
        }
        /// # Safety
        ///
        /// None needed: the words are a `Vec` (the trait's contract is kept anyway).
        unsafe fn read_checked(&self, addr: usize) -> usize {
            assert!(addr >= self.base && addr % 8 == 0, "read at {addr:#x} below the stack");
            self.words[(addr - self.base) / 8]
        }
    }

    const BASE: usize = 0x7ffd_0000_0000;

    fn sp_rule(off: i32) -> Rule {
        Rule { cfa_offset: off, bp_offset: 0, cfa: Cfa::Sp, bp: Bp::Same }
    }

    /// A model stack of frames, leaf first, each `(function, frame words, uses rbp)`: pushes return
    /// addresses and saved `rbp`s as a compiler would, and gives each function's rule. The walker
    /// must recover every return address, in order.
    #[test]
    fn recovers_the_return_addresses_of_a_model_stack() {
        // Functions at 0x1000 * k, each 0x100 long; frame k has `sizes[k]` words of locals.
        let sizes = [2usize, 0, 5, 1, 3, 7, 0, 2];
        let uses_bp = [false, true, false, true, true, false, false, true];
        let mut words = vec![0usize; 256];
        // Build from the root down: the root's CFA is the top.
        let top = BASE + words.len() * 8;
        let mut cfa = top - 8; // room for the root's own return address (0: end)
        let mut frames = Vec::new(); // (pc inside, sp, rbp, rule)
        let mut caller_bp = 0usize;
        let mut ret = 0usize; // return address into the caller (0 for the root)
        for k in (0..sizes.len()).rev() {
            words[(cfa - 8 - BASE) / 8] = ret;
            let mut sp = cfa - 8;
            let rule = if uses_bp[k] {
                sp -= 8;
                words[(sp - BASE) / 8] = caller_bp;
                let bp = sp;
                sp -= sizes[k] * 8;
                caller_bp = bp;
                Rule { cfa_offset: 16, bp_offset: -16, cfa: Cfa::Bp, bp: Bp::Saved }
            } else {
                sp -= sizes[k] * 8;
                sp_rule((cfa - sp) as i32)
            };
            let pc = 0x1000 * (k + 1) + 0x10;
            frames.push((pc, sp, caller_bp, rule));
            ret = 0x1000 * (k + 1) + 0x40; // the call inside function k
            cfa = sp;
        }
        frames.reverse(); // leaf first
        let rules = |pc: usize| {
            frames
                .iter()
                .enumerate()
                .find(|(k, _)| (0x1000 * (k + 1)..0x1000 * (k + 1) + 0x100).contains(&pc))
                .map_or(Rule::UNKNOWN, |(_, f)| f.3)
        };
        let stack = Fake { base: BASE, words };
        let (pc, sp, bp, _) = frames[0];
        let mut out = [0; MAX_FRAMES];
        let n = walk(&stack, rules, Regs { pc, sp, bp: Some(bp) }, 0, &mut out);
        let want: Vec<usize> = (1..sizes.len()).map(|k| 0x1000 * (k + 1) + 0x40).collect();
        assert_eq!(&out[..n], &want[..]);
        // From an anchor in frame 2's body: frames 0 and 1 are frag's; the first recorded is the
        // return address out of frame 2.
        let n = walk(&stack, rules, Regs { pc, sp, bp: Some(bp) }, frames[2].1, &mut out);
        assert_eq!(&out[..n], &want[2..]);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

        /// Arbitrary stack contents and arbitrary rules: the walk reads only inside the stack, ends,
        /// and records at most `MAX_FRAMES`.
        #[test]
        fn arbitrary_stacks_never_fault_or_loop(
            contents in proptest::collection::vec(any::<usize>(), 1..96),
            pointers in proptest::collection::vec((0usize..96, 0usize..800), 0..48),
            table in proptest::collection::vec((0u8..5, -64i32..900, 0u8..3, -80i16..80), 1..8),
            start_sp in 0usize..768,
            bp in proptest::option::of(0usize..900),
        ) {
            let mut words = contents;
            let n = words.len();
            // Plant words that point back into the stack, so that rules have something to follow.
            for (i, off) in pointers {
                words[i % n] = BASE + off;
            }
            let rules: Vec<Rule> = table
                .iter()
                .map(|&(c, off, b, boff)| Rule {
                    cfa_offset: off,
                    bp_offset: boff,
                    cfa: [Cfa::Sp, Cfa::Bp, Cfa::DerefBp, Cfa::End, Cfa::Unknown][c as usize],
                    bp: [Bp::Same, Bp::Saved, Bp::Lost][b as usize],
                })
                .collect();
            let stack = Fake { base: BASE, words };
            let mut out = [0; MAX_FRAMES];
            let regs = Regs { pc: 3, sp: BASE + start_sp, bp: bp.map(|b| BASE + b) };
            let k = walk(&stack, |pc| rules[pc % rules.len()], regs, 0, &mut out);
            prop_assert!(k <= MAX_FRAMES);
        }
    }
}
