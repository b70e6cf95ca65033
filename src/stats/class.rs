//! Size classes: log-linear buckets of requested sizes, four per power of two.
//!
//! Class 0 holds every request of at most 8 bytes. Above that each power-of-two range `(2^k, 2^(k+1)]`
//! is split into four equal steps, the same spacing jemalloc and mimalloc use for their own classes,
//! so a class row here lines up with what the allocator actually hands out. The last class holds every
//! request above 64 MiB.

/// Number of size classes, including the `≤ 8 B` and the `> 64 MiB` classes.
pub const NUM_CLASSES: usize = 94;

/// The largest bounded class ends at 64 MiB; anything larger lands in the last class.
const LAST_BOUNDED: usize = 64 << 20;

/// Requests up to this size find their class in a table (one byte load) instead of computing it.
const TABLE_MAX: usize = 1024;

/// `class_of` for every size up to `TABLE_MAX`, built at compile time.
static SMALL_CLASSES: [u8; TABLE_MAX + 1] = {
    let mut t = [0u8; TABLE_MAX + 1];
    let mut size = 0;
    while size <= TABLE_MAX {
        t[size] = computed_class(size) as u8;
        size += 1;
    }
    t
};

/// Index of the class that holds a request of `size` bytes.
///
/// Total: every `usize` maps to a valid index. Small sizes (the common case when the size is not a
/// compile-time constant) take one table load; larger ones a short computation.
#[inline(always)]
pub(crate) fn class_of(size: usize) -> usize {
    match SMALL_CLASSES.get(size) {
        Some(&c) => c as usize,
        None => computed_class(size),
    }
}

#[inline(always)]
const fn computed_class(size: usize) -> usize {
    if size <= 8 {
        return 0;
    }
    let n = size - 1;
    // n >= 8, so k >= 3 and the shift below is at least 1.
    let k = (usize::BITS - 1 - n.leading_zeros()) as usize;
    let sub = (n >> (k - 2)) & 3;
    let idx = 1 + (k - 3) * 4 + sub;
    if idx < NUM_CLASSES - 1 { idx } else { NUM_CLASSES - 1 }
}

/// Largest request size in class `idx`, or `None` for the open-ended last class.
pub(crate) fn upper_bound(idx: usize) -> Option<usize> {
    match idx {
        0 => Some(8),
        i if i >= NUM_CLASSES - 1 => None,
        i => {
            let k = (i - 1) / 4 + 3;
            let sub = (i - 1) % 4;
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
        assert_eq!(bounds, [8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80]);
        assert_eq!(class_of(160), class_of(129));
        assert_ne!(class_of(161), class_of(160));
    }

    #[test]
    fn table_matches_the_computation() {
        for size in 0..=TABLE_MAX + 1 {
            assert_eq!(class_of(size), computed_class(size), "size {size}");
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
