//! Compact unwind rows: for every address of a module, how to find its caller's frame.
//!
//! One [`Rule`] per address range, 8 bytes, in the shape the walker can apply with two bounded
//! stack reads: where the canonical frame address (CFA, the stack pointer just before the call) is,
//! and where the caller's `rbp` was saved. The return address is always the word below the CFA (the
//! builder turns any other return-address rule into [`Cfa::Unknown`]). What the shape cannot express
//! becomes [`Cfa::Unknown`], and the walk stops there.
//!
//! [`Rows`] holds one module's rows (a start address and its rule, 12 bytes) sorted by address, with
//! a bucket index that narrows each look-up to the rows of one 256-byte stretch of code (one to
//! three rows, typically, in one cache line), so that a look-up is two dependent reads and a short
//! scan. Built once off the allocation path; read without locks.

/// How the CFA of a frame is found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Cfa {
    /// `rsp + offset`.
    Sp = 0,
    /// `rbp + offset`.
    Bp = 1,
    /// The word at `rbp + offset` (the stack-realigning prologue's `DW_OP_breg6 N; DW_OP_deref`).
    DerefBp = 2,
    /// The outermost frame: its return address is undefined (a thread's or the process's start).
    End = 3,
    /// No rule the walker can apply (no unwind information, or a rule outside this shape).
    Unknown = 4,
}

/// Where the caller's `rbp` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Bp {
    /// Unchanged by this frame.
    Same = 0,
    /// Saved at `CFA + bp_offset`.
    Saved = 1,
    /// Not recoverable by the walker (a rule outside the shape): frames that need it stop the walk.
    Lost = 2,
}

/// One address range's rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct Rule {
    pub(crate) cfa_offset: i32,
    pub(crate) bp_offset: i16,
    pub(crate) cfa: Cfa,
    pub(crate) bp: Bp,
}

impl Rule {
    /// No rule: the walk stops.
    pub(crate) const UNKNOWN: Self = Self { cfa_offset: 0, bp_offset: 0, cfa: Cfa::Unknown, bp: Bp::Lost };
    /// The outermost frame.
    pub(crate) const END: Self = Self { cfa_offset: 0, bp_offset: 0, cfa: Cfa::End, bp: Bp::Lost };
}

/// log2 of the bytes of code one bucket of the index covers. The index costs 4 bytes per bucket (1.6%
/// of the code's size); a bucket of a typical Rust or C module holds one to three rows.
pub(crate) const BUCKET_SHIFT: u32 = 8;

/// Buckets with more rows than this are searched by bisection rather than scanned.
const SCAN: usize = 8;

/// A rule and the first address it applies to, as an offset from the module's [`Rows`] start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
struct Row {
    pc: u32,
    rule: Rule,
}

/// One module's rules, sorted by address, with the page index. The arrays live in pages of their own
/// ([`Pages`]), not in the heap that frag measures.
#[derive(Debug, Default)]
pub(crate) struct Rows {
    /// The address the offsets below count from: the lowest address with a rule.
    start: usize,
    /// One past the highest address with a rule.
    end: usize,
    /// Strictly ascending by `pc`; `rows[0].pc == 0`.
    rows: Pages<Row>,
    /// For each bucket of `[start, end)`: the index of the row covering the bucket's first byte; one
    /// more entry for the end. The row of an offset in bucket `b` is in `index[b] ..= index[b + 1]`.
    index: Pages<u32>,
}

/// A read-only array in an anonymous mapping of its own: the tables (hundreds of KiB to MiBs for a
/// service) stay out of the allocator frag wraps, where they would count as the program's live
/// data, sit in its size classes and fragment its heap. Its pages show in the report's process view
/// (outside the heap).
pub(crate) struct Pages<T> {
    ptr: core::ptr::NonNull<T>,
    len: usize,
}

// SAFETY: the array is never written after `Pages::copy_of` returns, and `T` is plain data.
unsafe impl<T: Copy + Send + Sync> Send for Pages<T> {}
// SAFETY: as above.
unsafe impl<T: Copy + Send + Sync> Sync for Pages<T> {}

impl<T> Default for Pages<T> {
    fn default() -> Self {
        Self { ptr: core::ptr::NonNull::dangling(), len: 0 }
    }
}

impl<T: core::fmt::Debug> core::fmt::Debug for Pages<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Pages({} entries)", self.len)
    }
}

impl<T: Copy> Pages<T> {
    /// `items` copied into a fresh mapping; empty if there is none to be had.
    fn copy_of(items: &[T]) -> Self {
        let bytes = size_of_val(items);
        if bytes == 0 {
            return Self::default();
        }
        // SAFETY: a private anonymous mapping of `bytes` bytes; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Self::default();
        }
        // SAFETY: the mapping is `bytes` long, page-aligned (so aligned for `T`), and nobody else
        // knows it.
        unsafe { core::ptr::copy_nonoverlapping(items.as_ptr(), p.cast::<T>(), items.len()) };
        // SAFETY: the same mapping: read-only from now on.
        unsafe { libc::mprotect(p, bytes, libc::PROT_READ) };
        // The mapping is not null (MAP_FAILED was ruled out, and no mapping is placed at 0).
        core::ptr::NonNull::new(p.cast::<T>()).map_or_else(Self::default, |ptr| Self { ptr, len: items.len() })
    }

    #[inline(always)]
    fn as_slice(&self) -> &[T] {
        // SAFETY: `len` initialised elements at `ptr` (or a dangling pointer and 0), alive until drop.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    #[inline(always)]
    fn get(&self, i: usize) -> Option<&T> {
        self.as_slice().get(i)
    }

    fn len(&self) -> usize {
        self.len
    }
}

impl<T> Drop for Pages<T> {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: the mapping `copy_of` made, of this many bytes, unmapped once.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len * size_of::<T>()) };
        }
    }
}

/// An address range `[start, end)` and its rule, as the builder finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) rule: Rule,
}

/// Modules whose code spans more than this are cut at it (offsets are 32-bit).
const MAX_SPAN: usize = u32::MAX as usize;

impl Rows {
    /// The rows of `spans` (in any order, possibly overlapping: the one that starts first wins, as
    /// for overlapping FDEs in a binary search of `.eh_frame_hdr`). Addresses not covered get
    /// [`Rule::UNKNOWN`]; neighbours with equal rules merge.
    pub(crate) fn from_spans(mut spans: Vec<Span>) -> Self {
        spans.retain(|s| s.start < s.end);
        // Built from a sorted FDE table they are sorted already (sorting is most of a debug build's
        // time otherwise).
        if !spans.is_sorted_by_key(|s| (s.start, s.end)) {
            spans.sort_unstable_by_key(|s| (s.start, s.end));
        }
        let Some(first) = spans.first() else { return Self::default() };
        let start = first.start;
        let mut rows: Vec<Row> = Vec::with_capacity(spans.len() + spans.len() / 4);
        let mut covered = start; // everything below has a row
        let push = |at: usize, rule: Rule, rows: &mut Vec<Row>| {
            if rows.last().is_some_and(|r| r.rule == rule) {
                return;
            }
            // `at - start` fits: callers stop at MAX_SPAN.
            rows.push(Row { pc: (at - start) as u32, rule });
        };
        for s in &spans {
            if s.start - start >= MAX_SPAN {
                break;
            }
            let end = s.end.min(start.saturating_add(MAX_SPAN));
            if end <= covered {
                continue; // wholly inside an earlier span
            }
            if s.start > covered {
                push(covered, Rule::UNKNOWN, &mut rows);
            }
            push(s.start.max(covered), s.rule, &mut rows);
            covered = end;
        }
        let end = covered;
        let buckets = ((end - start - 1) >> BUCKET_SHIFT) + 1;
        let mut index = Vec::with_capacity(buckets + 1);
        let mut row = 0usize;
        for b in 0..=buckets {
            let at = (b << BUCKET_SHIFT).min(end - start) as u64;
            while row + 1 < rows.len() && u64::from(rows[row + 1].pc) <= at {
                row += 1;
            }
            index.push(row as u32);
        }
        Self { start, end, rows: Pages::copy_of(&rows), index: Pages::copy_of(&index) }
    }

    /// The address range the rows cover.
    pub(crate) fn range(&self) -> (usize, usize) {
        (self.start, self.end)
    }

    /// Whether `pc` is in that range.
    #[inline(always)]
    pub(crate) fn contains(&self, pc: usize) -> bool {
        self.start <= pc && pc < self.end
    }

    /// Rows kept.
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    /// Bytes of the arrays (in mappings of their own, each rounded up to whole pages).
    pub(crate) fn bytes(&self) -> usize {
        let mapped = |bytes: usize| bytes.div_ceil(4096) * 4096;
        mapped(self.rows.len() * size_of::<Row>()) + mapped(self.index.len() * size_of::<u32>())
    }

    /// The rule for the instruction at `pc`. Never panics; allocation-free.
    #[inline]
    pub(crate) fn rule(&self, pc: usize) -> Rule {
        if pc < self.start || pc >= self.end {
            return Rule::UNKNOWN;
        }
        // Below `end - start`, which is at most MAX_SPAN.
        let off = (pc - self.start) as u32;
        let bucket = (off >> BUCKET_SHIFT) as usize;
        let (Some(&lo), Some(&hi)) = (self.index.get(bucket), self.index.get(bucket + 1)) else {
            return Rule::UNKNOWN;
        };
        let rows = self.rows.as_slice();
        // The row wanted is the last in `lo ..= hi` whose pc is at most `off`; rows[lo].pc <= off
        // (the bucket's first row covers its first byte).
        let (mut lo, hi) = (lo as usize, (hi as usize).min(rows.len().saturating_sub(1)));
        if hi - lo.min(hi) > SCAN {
            let mut top = hi + 1;
            while top - lo > 1 {
                let mid = lo + (top - lo) / 2;
                match rows.get(mid) {
                    Some(r) if r.pc <= off => lo = mid,
                    _ => top = mid,
                }
            }
        } else {
            while lo < hi && rows.get(lo + 1).is_some_and(|r| r.pc <= off) {
                lo += 1;
            }
        }
        rows.get(lo).map_or(Rule::UNKNOWN, |r| r.rule)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rule(n: i32) -> Rule {
        Rule { cfa_offset: n, bp_offset: 0, cfa: Cfa::Sp, bp: Bp::Same }
    }

    /// The model: the first span (by start, then end) that contains `pc`.
    fn model(spans: &[Span], pc: usize) -> Rule {
        let mut sorted = spans.to_vec();
        sorted.sort_by_key(|s| (s.start, s.end));
        sorted.iter().find(|s| s.start <= pc && pc < s.end).map_or(Rule::UNKNOWN, |s| s.rule)
    }

    #[test]
    fn gaps_are_unknown_and_neighbours_merge() {
        let base = 0x40_0000;
        let rows = Rows::from_spans(vec![
            Span { start: base, end: base + 8, rule: rule(8) },
            Span { start: base + 8, end: base + 16, rule: rule(8) },
            Span { start: base + 0x3000, end: base + 0x3010, rule: rule(16) },
        ]);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows.rule(base + 15), rule(8));
        assert_eq!(rows.rule(base + 16), Rule::UNKNOWN);
        assert_eq!(rows.rule(base + 0x2fff), Rule::UNKNOWN);
        assert_eq!(rows.rule(base + 0x3000), rule(16));
        assert_eq!(rows.rule(base + 0x3010), Rule::UNKNOWN);
        assert_eq!(rows.rule(base - 1), Rule::UNKNOWN);
    }

    /// Buckets crowded with rows (one per byte) are bisected, not scanned.
    #[test]
    fn crowded_buckets_agree_with_a_scan() {
        let base = 0x1000;
        let spans: Vec<Span> =
            (0..700).map(|i| Span { start: base + i, end: base + i + 1, rule: rule((i % 3) as i32) }).collect();
        let rows = Rows::from_spans(spans.clone());
        for pc in base - 2..base + 703 {
            assert_eq!(rows.rule(pc), model(&spans, pc), "pc {pc:#x}");
        }
    }

    proptest! {
        /// Every look-up agrees with a linear scan of the spans, on overlapping spans, across pages.
        #[test]
        fn look_up_agrees_with_a_scan(
            raw in proptest::collection::vec((0usize..40_000, 1usize..3_000, 0i32..4), 0..60),
            probes in proptest::collection::vec(0usize..45_000, 64),
        ) {
            let base = 0x7f00_0000_0000usize;
            let spans: Vec<Span> =
                raw.iter().map(|&(s, l, r)| Span { start: base + s, end: base + s + l, rule: rule(r) }).collect();
            let rows = Rows::from_spans(spans.clone());
            for p in probes {
                prop_assert_eq!(rows.rule(base + p), model(&spans, base + p), "pc offset {}", p);
            }
        }
    }
}
