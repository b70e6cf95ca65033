//! Size classes: log-linear buckets of requested sizes, four per power of two from 32 bytes.
//!
//! Class 0 holds every request of at most 8 bytes, classes 1 to 3 the 8-byte steps up to 32 bytes
//! (no allocator hands out blocks finer than 8 bytes). Above that each power-of-two range
//! `(2^k, 2^(k+1)]` is split into four equal steps, the same spacing jemalloc and mimalloc use for
//! their own classes, so a class row here lines up with what the allocator actually hands out. The
//! last class holds every request above 64 MiB.
//!
//! Every class bound up to 32 KiB is a multiple of 8, so the allocation path finds the class of a
//! request of at most 32 KiB with one load from a table of `(size + 7) / 8` (8 KiB). The table holds
//! each class scaled to the position of its counter row (see [`Class`]), so that the load gives an
//! address offset with no arithmetic after it.

/// Number of size classes, including the `≤ 8 B` and the `> 64 MiB` classes.
pub const NUM_CLASSES: usize = 89;

/// The largest bounded class ends at 64 MiB; anything larger lands in the last class.
const LAST_BOUNDED: usize = 64 << 20;

/// Requests up to this size find their class in a table (one byte load) instead of computing it.
pub(crate) const TABLE_MAX: usize = 32 << 10;

/// `computed_class` of every multiple of 8 up to `TABLE_MAX`, indexed by `(size + 7) / 8` and scaled
/// by [`ROW_WORDS`]: a class bound below `TABLE_MAX` is a multiple of 8, so every size rounds to the
/// same class as its index. Built (and its entries checked) at compile time.
static SMALL_CLASSES: [u16; TABLE_MAX / 8 + 1] = {
    let mut t = [0u16; TABLE_MAX / 8 + 1];
    let mut i = 0;
    while i <= TABLE_MAX / 8 {
        let c = computed_class(i * 8);
        // The invariant of `Class`, for the table's entries.
        assert!(c < NUM_CLASSES);
        // Every size in `(8 (i - 1), 8 i]` has the class of `8 i`: bounds are multiples of 8 here.
        assert!(i == 0 || computed_class(i * 8 - 7) == c);
        t[i] = (c * ROW_WORDS) as u16;
        i += 1;
    }
    t
};

/// 8-byte words in a shard's counter row for one class (a row is one 64-byte cache line).
pub(crate) const ROW_WORDS: usize = 8;

/// A size class, held as its index times [`ROW_WORDS`]: the word offset of its counter row in a
/// shard, so the allocation path addresses the row straight from the table load.
///
/// Invariant: the index is below [`NUM_CLASSES`], so that it addresses a shard's class rows without
/// a bounds check; every constructor below upholds it (the table by the assertion in its constant
/// initialiser, the computation by its final `min`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Class(u16);

impl Class {
    /// The class that holds a request of `size` bytes. Total: every `usize` has one.
    #[inline(always)]
    pub(crate) fn of(size: usize) -> Self {
        if size <= TABLE_MAX {
            // SAFETY: just checked.
            unsafe { Self::of_small(size) }
        } else {
            Self((computed_class(size) * ROW_WORDS) as u16)
        }
    }

    /// [`Class::of`] for a request of at most [`TABLE_MAX`] bytes: one table load.
    ///
    /// # Safety
    ///
    /// `size <= TABLE_MAX`.
    #[inline(always)]
    pub(crate) unsafe fn of_small(size: usize) -> Self {
        debug_assert!(size <= TABLE_MAX);
        // SAFETY: `size <= TABLE_MAX` (the caller's promise), so the index is at most
        // `TABLE_MAX / 8`, the table's last entry.
        Self(unsafe { *SMALL_CLASSES.get_unchecked(size.wrapping_add(7) >> 3) })
    }

    /// The index, below [`NUM_CLASSES`].
    #[inline(always)]
    pub(crate) fn index(self) -> usize {
        usize::from(self.0) / ROW_WORDS
    }

    /// The word offset of the class's row: `index() * ROW_WORDS`.
    #[inline(always)]
    pub(crate) fn row_words(self) -> usize {
        usize::from(self.0)
    }
}

/// Index of the class that holds a request of `size` bytes (below [`NUM_CLASSES`]).
#[inline(always)]
pub(crate) fn class_of(size: usize) -> usize {
    Class::of(size).index()
}

const fn computed_class(size: usize) -> usize {
    if size <= 8 {
        return 0;
    }
    if size <= 32 {
        return (size - 1) / 8;
    }
    let n = size - 1;
    // n >= 32, so k >= 5 and the shift below is at least 3.
    let k = (usize::BITS - 1 - n.leading_zeros()) as usize;
    let sub = (n >> (k - 2)) & 3;
    let idx = 4 + (k - 5) * 4 + sub;
    if idx < NUM_CLASSES - 1 { idx } else { NUM_CLASSES - 1 }
}

/// Largest request size in class `idx`, or `None` for the open-ended last class.
pub(crate) fn upper_bound(idx: usize) -> Option<usize> {
    match idx {
        i if i >= NUM_CLASSES - 1 => None,
        i if i < 4 => Some(8 * (i + 1)),
        i => {
            let k = (i - 4) / 4 + 5;
            let sub = (i - 4) % 4;
            Some((1usize << k) + (sub + 1) * (1usize << (k - 2)))
        }
    }
}

/// Smallest request size in class `idx`.
pub(crate) fn lower_bound(idx: usize) -> usize {
    match idx {
        0 => 0,
        i if i >= NUM_CLASSES - 1 => LAST_BOUNDED + 1,
        i => upper_bound(i - 1).map_or(0, |b| b + 1),
    }
}

/// The sampling weights of class `idx`'s largest and smallest requests at a mean of `mean` bytes:
/// what the count intervals of a class with few samples rest on (`estimate::ClassSum`).
pub(crate) fn weights(idx: usize, mean: u64) -> crate::estimate::ClassWeights {
    let largest = upper_bound(idx).map_or(u64::MAX, |b| b as u64);
    (crate::estimate::weight_of(largest, mean), crate::estimate::weight_of(lower_bound(idx) as u64, mean))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The class of every size agrees with the bounds, checked against a brute-force walk of the bounds.
    #[test]
    fn bounds_partition_sizes() {
        assert_eq!(upper_bound(NUM_CLASSES - 2), Some(LAST_BOUNDED));
        let mut expected = 0;
        for size in 0..=70_000usize {
            while upper_bound(expected).is_some_and(|b| size > b) {
                expected += 1;
            }
            assert_eq!(class_of(size), expected, "size {size}");
            assert!(lower_bound(expected) <= size);
        }
    }

    #[test]
    fn jemalloc_like_steps() {
        let bounds: Vec<usize> = (0..14).filter_map(upper_bound).collect();
        assert_eq!(bounds, [8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192]);
        assert_eq!(class_of(160), class_of(129));
        assert_ne!(class_of(161), class_of(160));
    }

    #[test]
    fn table_matches_the_computation() {
        for size in 0..=TABLE_MAX + 1 {
            assert_eq!(class_of(size), computed_class(size), "size {size}");
        }
    }

    /// The documented rule, written out independently: 8-byte steps to 32 B, then four equal steps
    /// per power of two, the last bounded class ending at 64 MiB.
    #[test]
    fn the_documented_rule() {
        let mut bounds = vec![8usize, 16, 24, 32];
        let mut k = 32usize;
        while k < LAST_BOUNDED {
            bounds.extend((1..=4).map(|i| k + i * k / 4));
            k *= 2;
        }
        assert_eq!(bounds.len(), NUM_CLASSES - 1);
        for (i, b) in bounds.iter().enumerate() {
            assert_eq!(upper_bound(i), Some(*b), "class {i}");
            assert_eq!(class_of(*b), i);
            assert_eq!(class_of(b + 1), i + 1);
        }
    }

    #[test]
    fn extremes() {
        assert_eq!(class_of(LAST_BOUNDED), NUM_CLASSES - 2);
        assert_eq!(class_of(LAST_BOUNDED + 1), NUM_CLASSES - 1);
        assert_eq!(class_of(usize::MAX), NUM_CLASSES - 1);
        assert_eq!(lower_bound(NUM_CLASSES - 1), LAST_BOUNDED + 1);
        assert_eq!(upper_bound(NUM_CLASSES - 1), None);
    }
}
