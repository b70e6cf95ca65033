//! The claim / vacate / recycle protocol of the shard pool, on its own and generic over what a slot
//! holds, so that `tests/loom` can model-check it on two tiny slots.
//!
//! A slot is never used (state 0), `SETTING_UP` (one thread is setting it up), `LIVE` (owned by a running
//! thread) or `RELEASED` (its thread exited; its counters stay for the reports). A thread takes a
//! released slot first (keeps resident memory compact), else raises the high-water mark; both go
//! through a compare-and-swap, so no two threads ever hold one slot. Release and acquire pair up so
//! that the next owner of a slot sees every counter its previous owner wrote.

use crate::sync::{AtomicU8, AtomicUsize, Ordering, atomics_ctor};

/// Slot states; a never-used slot is in state 0.
pub(crate) const LIVE: u8 = 1;
pub(crate) const RELEASED: u8 = 2;
pub(crate) const SETTING_UP: u8 = 3;

/// What the registry needs of a slot: its state word.
pub(crate) trait Claimable {
    fn state(&self) -> &AtomicU8;
}

/// `N` slots and their claim bookkeeping.
pub(crate) struct Registry<T, const N: usize> {
    slots: [T; N],
    /// Slots `0..high_water` have been used at least once; the rest are untouched.
    high_water: AtomicUsize,
    /// Released slots waiting for a new owner; lets a claim skip the scan when there are none.
    released: AtomicUsize,
}

impl<T: Claimable, const N: usize> Registry<T, N> {
    atomics_ctor! {
        pub(crate) fn new(slots: [T; N]) -> Self {
            Self { slots, high_water: AtomicUsize::new(0), released: AtomicUsize::new(0) }
        }
    }

    /// Finds a slot and marks it `SETTING_UP`: a released one first, else a never-used one. `None` when
    /// every slot is held. The caller sets the slot up and then calls [`Self::expose`].
    pub(crate) fn claim(&self) -> Option<&T> {
        if let Some(s) = self.reuse_vacated() {
            return Some(s);
        }
        let mut hw = self.high_water.load(Ordering::Relaxed);
        while hw < N {
            match self.high_water.compare_exchange_weak(hw, hw + 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => {
                    let slot = self.slots.get(hw)?;
                    slot.state().store(SETTING_UP, Ordering::Relaxed);
                    return Some(slot);
                }
                Err(now) => hw = now,
            }
        }
        // Every slot has been used; one may have been released while we looked.
        self.reuse_vacated()
    }

    fn reuse_vacated(&self) -> Option<&T> {
        if self.released.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.used().iter().find(|s| {
            // Acquire pairs with the Release in `release`: the previous owner's last counter stores
            // are visible before the new owner reads them as its base.
            let won = s.state().compare_exchange(RELEASED, SETTING_UP, Ordering::Acquire, Ordering::Relaxed).is_ok();
            if won {
                self.released.fetch_sub(1, Ordering::Relaxed);
            }
            won
        })
    }

    /// Marks a slot taken with [`Self::claim`] as live; readers that acquire its state see how it was
    /// set up.
    pub(crate) fn expose(&self, slot: &T) {
        slot.state().store(LIVE, Ordering::Release);
    }

    /// Gives a live (or `SETTING_UP`) slot back. The caller must not write to it afterwards.
    pub(crate) fn vacate(&self, slot: &T) {
        slot.state().store(RELEASED, Ordering::Release);
        self.released.fetch_add(1, Ordering::Relaxed);
    }

    /// The slots used so far (some may be free again).
    pub(crate) fn used(&self) -> &[T] {
        let hw = self.high_water.load(Ordering::Acquire).min(N);
        self.slots.get(..hw).unwrap_or(&[])
    }

    /// Slot `index`, used or not.
    pub(crate) fn get(&self, index: usize) -> Option<&T> {
        self.slots.get(index)
    }

    /// The index of `slot` if it is one of ours.
    pub(crate) fn index_of(&self, slot: &T) -> Option<usize> {
        let size = core::mem::size_of::<T>().max(1);
        let offset = (slot as *const T as usize).checked_sub(self.slots.as_ptr() as usize)?;
        Some(offset / size).filter(|&i| i < N)
    }
}
