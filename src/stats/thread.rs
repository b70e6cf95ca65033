//! The calling thread's state as the shard pool sees it: its slot word, and the shard its fast path
//! writes to. Both thread-locals follow the rules of `reentry`.

use core::cell::Cell;

use super::shard::Shard;

/// The shard the fast path sees on a thread without one of its own: its clock is never started and
/// nothing ever writes to it, so every allocation there takes the cold path (see
/// `stats::clock::Clock::count_down`), and so does every free that would count in it (`is_parked`).
pub(crate) static PARKED: Shard = Shard::new();

/// `SLOT` values below this are states; anything else is the address of the thread's own shard.
pub(crate) const UNCLAIMED: usize = 0;
/// The thread is claiming a shard right now; anything it allocates meanwhile goes to the overflow shard.
pub(crate) const CLAIMING: usize = 1;
/// The thread's shard was released at thread exit; later allocations go to the overflow shard.
pub(crate) const EXITED: usize = 2;
/// The pool was full when the thread asked; it writes to the overflow shard for the rest of its life.
pub(crate) const NO_SLOT: usize = 3;
/// The thread is doing frag's own work (`own`): what it allocates meanwhile goes to frag's own shard.
pub(crate) const FRAG_WORK: usize = 4;
/// Smallest value that is a shard address (shards are far larger than this and aligned).
pub(crate) const FIRST_ADDRESS: usize = 5;

std::thread_local! {
    static SLOT: Cell<usize> = const { Cell::new(UNCLAIMED) };
    /// What the fast path reads: the thread's own shard once claimed, else the parked shard (whose
    /// clock sends every allocation to the cold path, which reads `SLOT`).
    static HOT: Cell<*const Shard> = const { Cell::new(&PARKED) };
}

/// The calling thread's slot word; `EXITED` if thread-local storage is unavailable.
#[inline(always)]
pub(crate) fn slot() -> usize {
    SLOT.try_with(Cell::get).unwrap_or(EXITED)
}

/// Sets the slot word, and the fast path's shard with it: `v` when it is a shard's address, else
/// the parked shard.
#[inline]
pub(crate) fn set_slot(v: usize) {
    let _ = SLOT.try_with(|s| s.set(v));
    let hot = if v >= FIRST_ADDRESS { v as *const Shard } else { &PARKED as *const Shard };
    let _ = HOT.try_with(|h| h.set(hot));
}

/// The fast path's shard: the calling thread's own, or the parked one ([`PARKED`]).
#[inline(always)]
pub(crate) fn hot() -> &'static Shard {
    let p = HOT.try_with(Cell::get).unwrap_or(&PARKED);
    // SAFETY: `HOT` only ever holds the address of `PARKED` or of an element of the `'static` shard
    // pool (`set_slot`), both valid for the life of the process.
    unsafe { &*p }
}
