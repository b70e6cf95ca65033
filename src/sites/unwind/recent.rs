//! Recent rules: a small direct-mapped cache from a return address to its [`Rule`], one per installed
//! set of tables (so it never outlives the rows it copies).
//!
//! A sampled allocation's stack mostly repeats one seen before, and a look-up in the rows (the
//! module's range, its bucket index, a scan or bisection of the bucket) is most of a frame's cost.
//! One cache entry is one `u64`, read and written with relaxed atomics by any walking thread: an
//! entry is whole or absent, never torn, and a lost race only costs a look-up. A hit is one load
//! and a compare. 4,096 entries, 32 KiB, in a mapping of their own (not the heap frag measures),
//! touched only as entries are filled.
//!
//! **An entry**: bits 29..64 hold the address's bits 12..47 (a user-space address on x86-64 has
//! 47 bits) plus one, bits 0..29 the rule, packed; the slot is the address's low 12 bits mixed
//! with the next 12, so the slot and the stored bits give back the whole address: a hit is exact.
//! 0 is an empty slot, which no address matches (its stored bits would be 0). A rule that does not
//! fit the packing (a CFA offset beyond ±32 KiB, a saved `rbp` more than ±1 KiB from the CFA or
//! not 8-aligned there) is not cached. A hit unpacks with shifts and two small tables: every entry
//! was packed by [`Recent::put`].

use crate::sync::{AtomicU64, Ordering::Relaxed};

use super::rows::{Bp, Cfa, Rule};

/// log2 of the slots.
const SLOT_BITS: u32 = 12;
const SLOTS: usize = 1 << SLOT_BITS;
/// Bits of an entry that hold the rule.
const RULE_BITS: u32 = 29;
/// Addresses at or above this are not cached (their stored bits, plus one, would not fit).
const ADDRESS_LIMIT: usize = (1 << 47) - (1 << SLOT_BITS);

/// The cache: [`SLOTS`] entries in an anonymous mapping, or none if the mapping failed (every
/// look-up then goes to the rows).
pub(crate) struct Recent {
    slots: Option<core::ptr::NonNull<AtomicU64>>,
}

// SAFETY: the slots are atomics, shared by design; the mapping lives until drop.
unsafe impl Send for Recent {}
// SAFETY: as above.
unsafe impl Sync for Recent {}

impl core::fmt::Debug for Recent {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Recent({} slots)", if self.slots.is_some() { SLOTS } else { 0 })
    }
}

impl Default for Recent {
    fn default() -> Self {
        Self::new()
    }
}

impl Recent {
    /// An empty cache. Maps its slots: off the allocation path.
    pub(crate) fn new() -> Self {
        // SAFETY: a private anonymous mapping; no existing memory is touched. Its pages are zero, an
        // empty slot.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                SLOTS * size_of::<AtomicU64>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        let slots = if p == libc::MAP_FAILED { None } else { core::ptr::NonNull::new(p.cast::<AtomicU64>()) };
        Self { slots }
    }

    #[inline(always)]
    fn slot(&self, pc: usize) -> Option<&AtomicU64> {
        let slots = self.slots?;
        let i = (pc ^ (pc >> SLOT_BITS)) & (SLOTS - 1);
        // SAFETY: `i < SLOTS`, inside the mapping, which lives as long as `self`; zeroed memory is a
        // valid `AtomicU64`.
        Some(unsafe { &*slots.as_ptr().add(i) })
    }

    /// A hint that `pc`'s slot will be read soon: its cache line is fetched without waiting for it.
    #[inline(always)]
    pub(crate) fn prefetch(&self, pc: usize) {
        if let Some(slot) = self.slot(pc) {
            prefetch(core::ptr::from_ref(slot) as usize);
        }
    }

    /// The cached rule of `pc`, if any.
    #[inline(always)]
    pub(crate) fn get(&self, pc: usize) -> Option<Rule> {
        let entry = self.slot(pc)?.load(Relaxed);
        // An address of more than 47 bits has a tag no entry holds.
        if entry >> RULE_BITS != tag(pc) {
            return None;
        }
        Some(unpack(entry as u32 & ((1 << RULE_BITS) - 1)))
    }

    /// Remembers `rule` for `pc` (nothing if it does not fit an entry).
    #[inline(always)]
    pub(crate) fn put(&self, pc: usize, rule: Rule) {
        if pc >= ADDRESS_LIMIT {
            return;
        }
        if let (Some(slot), Some(packed)) = (self.slot(pc), pack(rule)) {
            slot.store(tag(pc) << RULE_BITS | u64::from(packed), Relaxed);
        }
    }
}

/// A hint that the cache line at `addr` will be read soon (nothing off x86-64). A hint reads nothing:
/// any address is harmless.
#[inline(always)]
pub(crate) fn prefetch(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of x86-64; a prefetch reads nothing and never faults, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

impl Drop for Recent {
    fn drop(&mut self) {
        if let Some(p) = self.slots {
            // SAFETY: the mapping `new` made, of this size, unmapped once.
            unsafe { libc::munmap(p.as_ptr().cast(), SLOTS * size_of::<AtomicU64>()) };
        }
    }
}

/// The bits an entry stores for `pc`: its bits 12..47, plus one (never 0).
#[inline(always)]
fn tag(pc: usize) -> u64 {
    (pc >> SLOT_BITS) as u64 + 1
}

/// `rule` in 29 bits: CFA kind (3 bits), `rbp` kind (2), the CFA offset (16, signed), the saved
/// `rbp`'s offset in words (8, signed).
fn pack(rule: Rule) -> Option<u32> {
    let cfa = rule.cfa as u32;
    let offset = i16::try_from(rule.cfa_offset).ok()?;
    let bp_words = if rule.bp_offset % 8 == 0 { i8::try_from(rule.bp_offset / 8).ok()? } else { return None };
    Some(cfa | (rule.bp as u32) << 3 | u32::from(offset as u16) << 5 | u32::from(bp_words as u8) << 21)
}

/// The CFA kinds by their packed bits; the bits `pack` never writes read as unknown.
const CFA_KINDS: [Cfa; 8] =
    [Cfa::Sp, Cfa::Bp, Cfa::DerefBp, Cfa::End, Cfa::Unknown, Cfa::Unknown, Cfa::Unknown, Cfa::Unknown];
/// The `rbp` kinds by their packed bits, likewise.
const BP_KINDS: [Bp; 4] = [Bp::Same, Bp::Saved, Bp::Lost, Bp::Lost];

/// The rule `pack` packed into `packed`: shifts and two table reads, no test.
#[inline(always)]
fn unpack(packed: u32) -> Rule {
    let cfa = CFA_KINDS[(packed & 7) as usize];
    let bp = BP_KINDS[((packed >> 3) & 3) as usize];
    let cfa_offset = i32::from((packed >> 5) as u16 as i16);
    let bp_offset = i16::from((packed >> 21) as u8 as i8) * 8;
    Rule { cfa_offset, bp_offset, cfa, bp }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Rules as compilers emit them (CFA offsets of a few words, `rbp` saved a few words below the
    /// CFA), and now and then one outside the packing.
    fn arb_rule() -> impl Strategy<Value = Rule> {
        let cfa_offset = prop_oneof![4 => -40_000i32..40_000, 1 => any::<i32>()];
        let bp_offset = prop_oneof![4 => (-130i16..130).prop_map(|w| w * 8), 1 => any::<i16>()];
        (0u8..5, cfa_offset, 0u8..3, bp_offset).prop_map(|(c, cfa_offset, b, bp_offset)| Rule {
            cfa_offset,
            bp_offset,
            cfa: [Cfa::Sp, Cfa::Bp, Cfa::DerefBp, Cfa::End, Cfa::Unknown][c as usize],
            bp: [Bp::Same, Bp::Saved, Bp::Lost][b as usize],
        })
    }

    proptest! {
        /// A rule that packs comes back unchanged; one that does not is not cached.
        #[test]
        fn packing_round_trips(rule in arb_rule()) {
            match pack(rule) {
                Some(p) => {
                    prop_assert!(p < 1 << RULE_BITS);
                    prop_assert_eq!(unpack(p), rule);
                }
                None => prop_assert!(
                    i16::try_from(rule.cfa_offset).is_err() || rule.bp_offset % 8 != 0
                        || i8::try_from(rule.bp_offset / 8).is_err()
                ),
            }
        }

        /// The cache against a model (a map of the last rule put for each address): a hit is always
        /// the rule last put for that very address; addresses that share a slot evict each other.
        #[test]
        fn a_hit_is_exact(ops in proptest::collection::vec((0usize..64, 0usize..4, arb_rule()), 1..200)) {
            let recent = Recent::new();
            let mut model = std::collections::HashMap::new();
            // Addresses that collide in pairs: the same slot, different stored bits.
            let pc = |k: usize, v: usize| (0x5555_0000_0040 + k * 0x1_0000) ^ (v * 0x1001);
            for (k, v, rule) in ops {
                let pc = pc(k, v);
                if let Some(hit) = recent.get(pc) {
                    prop_assert_eq!(Some(&hit), model.get(&pc));
                }
                recent.put(pc, rule);
                if pack(rule).is_some() {
                    prop_assert_eq!(recent.get(pc), Some(rule));
                    model.insert(pc, rule);
                }
            }
        }
    }

    #[test]
    fn empty_and_out_of_range_addresses_miss() {
        let recent = Recent::new();
        let rule = Rule { cfa_offset: 16, bp_offset: -16, cfa: Cfa::Sp, bp: Bp::Saved };
        assert_eq!(recent.get(0x40_1000), None);
        recent.put(0x40_1000, rule);
        assert_eq!(recent.get(0x40_1000), Some(rule));
        let other = 0x40_1000 ^ 0x1001;
        assert_eq!(recent.slot(other).map(core::ptr::from_ref), recent.slot(0x40_1000).map(core::ptr::from_ref));
        assert_eq!(recent.get(other), None, "same slot, another address");
        recent.put(other, Rule::END);
        assert_eq!((recent.get(other), recent.get(0x40_1000)), (Some(Rule::END), None), "evicted");
        recent.put(1 << 47, rule);
        assert_eq!(recent.get(1 << 47), None);
        recent.put(ADDRESS_LIMIT, rule);
        assert_eq!(recent.get(ADDRESS_LIMIT), None, "its tag would not fit");
        // An empty slot matches no address, 0 and the top of the range included.
        for pc in [0, 8, ADDRESS_LIMIT - 1, usize::MAX] {
            assert_eq!(Recent::new().get(pc), None, "{pc:#x}");
        }
        let top = ADDRESS_LIMIT - 8;
        recent.put(top, rule);
        assert_eq!(recent.get(top), Some(rule));
    }
}
