//! The calling thread's state as the shard pool sees it: its slot word, the shard its fast path
//! writes to, and its sampling clock's countdown. The thread-locals follow the rules of `reentry`.
//!
//! **The countdown lives here**, not in the shard: the allocation's fast path takes its size off a
//! thread-local cell with one read-modify-write relative to the thread pointer, with no load of the
//! shard's address before it (`count_down`). The cell is a [`Countdown`]'s: frag's own
//! ([`FragCountdown`]) or one the program declared in its crate (`declare_countdown!`), whichever
//! `Tracked` took the cold path last ([`rehome`]). It holds the owned shard's `Clock` countdown while
//! the thread owns one, and 0 otherwise, which sends every allocation to the cold path (requests are
//! never of 0 bytes). The shard's clock holds a copy, handed over:
//! - into the cell when the thread takes the shard as its own ([`set_slot`]), and out when it leaves
//!   it (frag's own work, thread exit): nothing else writes that clock meanwhile;
//! - around every operation of the owner's cold path on its clock ([`on_clock`]), so the clock's
//!   logic (`stats::clock`) sees the true countdown and other threads see it as of the last event;
//! - before the thread reads the shards (`pool::used_slots`, [`fold_countdown`]).
//!
//! So other threads read a live thread's allocated bytes as of its last sampling event (up to one
//! interval, 512 KiB on average, behind), and the thread itself, or anyone once it exited, exactly.

use core::cell::Cell;

use super::clock::{Clock, counted_down};
use super::countdown::{Countdown, FragCountdown};
use super::shard::Shard;

/// The shard the fast path sees on a thread without one of its own: nothing ever writes to it (the
/// thread's countdown is 0, so every allocation takes the cold path: [`count_down`]), and every
/// free that would count in it takes the cold path too (`is_parked`).
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
    /// Where the countdown lives on this thread: the cell of the [`Countdown`] whose `Tracked` took
    /// the cold path last ([`rehome`]); null for [`FragCountdown`]'s.
    static AT: Cell<*const Cell<i64>> = const { Cell::new(core::ptr::null()) };
    /// What the fast path reads: the thread's own shard once claimed, else the parked shard (whose
    /// clock sends every allocation to the cold path, which reads `SLOT`).
    static HOT: Cell<*const Shard> = const { Cell::new(&PARKED) };
}

/// Calls `f` with the cell the countdown lives in now ([`rehome`]).
#[inline]
fn with_left<R>(f: impl FnOnce(&Cell<i64>) -> R) -> Option<R> {
    let at = AT.try_with(Cell::get).ok()?;
    if at.is_null() {
        return FragCountdown::with(f);
    }
    // SAFETY: `rehome` stored the address of the calling thread's cell of a `Countdown`, which its
    // contract keeps valid until the thread has exited.
    Some(f(unsafe { &*at }))
}

/// Moves the calling thread's countdown into `C`'s cell, if it lives elsewhere: a `Tracked`'s cold
/// path calls it first, so that its fast path, which takes sizes off `C`'s cell, sees the countdown
/// from then on. A fast path of another `Tracked` meets 0 in its own cell and takes its cold path,
/// which moves it back (two allocators with different homes in one process each get the countdown
/// in turn; one `#[global_allocator]` keeps it where it is).
#[inline]
pub(crate) fn rehome<C: Countdown>() {
    let Some(home) = C::with(|c| c as *const Cell<i64>) else { return };
    let Some(now) = with_left(|c| c as *const Cell<i64>) else { return };
    if home == now {
        return;
    }
    // SAFETY: both are cells `Countdown::with` gave on the calling thread, valid until it exits.
    let (home_cell, now_cell) = unsafe { (&*home, &*now) };
    home_cell.set(now_cell.replace(0));
    let own = FragCountdown::with(|l| l as *const Cell<i64>);
    let _ = AT.try_with(|a| a.set(if own == Some(home) { core::ptr::null() } else { home }));
}

/// The calling thread's slot word; `EXITED` if thread-local storage is unavailable.
#[inline(always)]
pub(crate) fn slot() -> usize {
    SLOT.try_with(Cell::get).unwrap_or(EXITED)
}

/// The shard at slot word `v`, if it is a shard's address.
#[inline(always)]
fn shard_at(v: usize) -> Option<&'static Shard> {
    // SAFETY: words at or above FIRST_ADDRESS are only ever stored by `pool::slow`, and are the
    // address of an element of the `'static` shard pool.
    (v >= FIRST_ADDRESS).then(|| unsafe { &*(v as *const Shard) })
}

/// Sets the slot word, and the fast path's shard and countdown with it: the countdown goes back
/// into the clock of the shard the thread leaves, and comes out of the one it takes (`v`, when it
/// is a shard's address; else the parked shard and a countdown of 0).
#[inline]
pub(crate) fn set_slot(v: usize) {
    let _ = with_left(|l| {
        if let Some(leaving) = shard_at(slot()) {
            leaving.hot.clock.take_countdown(l.replace(0));
        }
        if let Some(entering) = shard_at(v) {
            l.set(entering.hot.clock.countdown());
        }
    });
    let _ = SLOT.try_with(|s| s.set(v));
    let hot = shard_at(v).map_or(&PARKED as *const Shard, |s| s as *const Shard);
    let _ = HOT.try_with(|h| h.set(hot));
}

/// The fast path of the sampling clock (`stats::clock`), for callers whose cold path undoes an event
/// itself ([`give_back`]): takes `size` bytes off the calling thread's countdown. `false` when that
/// takes it below zero (an event), with `size` still taken off: the caller's cold path owes it back
/// before anything reads the countdown. The sampled tier's allocation uses it, so that each call
/// site holds one cold call, not two.
///
/// The subtraction is stored whatever its outcome, so that the common path is a subtraction from
/// memory and a branch on its sign. The countdown is taken from `C`'s cell: where it lives unless
/// another `Countdown`'s cold path ran last ([`rehome`]); else that cell holds 0, and the cold path
/// moves it. (Thread-local storage gone, `false` with nothing taken off, and giving back does
/// nothing; the countdown's cells are const-initialised without `Drop`, so that never happens.)
#[inline(always)]
pub(crate) fn count_down_owing<C: Countdown>(size: usize) -> bool {
    C::with(|l| {
        let before = l.get();
        l.set(before.wrapping_sub(size as i64));
        counted_down(before, size).is_some()
    })
    .unwrap_or(false)
}

/// [`count_down_owing`], with an event's subtraction given back at once (out of line): `false`
/// leaves the countdown as it was, and the caller takes the cold path.
#[inline(always)]
pub(crate) fn count_down<C: Countdown>(size: usize) -> bool {
    if count_down_owing::<C>(size) {
        return true;
    }
    give_back::<C>(size);
    false
}

/// Undoes [`count_down_owing`]'s subtraction of `size` bytes: on an event, and for a fast-path
/// allocation the inner allocator refused (the clock counts bytes handed out).
#[cold]
#[inline(never)]
pub(crate) fn give_back<C: Countdown>(size: usize) {
    let _ = C::with(|l| l.set(l.get().wrapping_add(size as i64)));
}

/// Runs `op` on `clock`, written as `shared` says: by anyone with atomic read-modify-writes (the
/// overflow and frag's own shards), directly; by its owner (the calling thread's own shard), with
/// the countdown handed over from the thread-local and back.
#[inline(always)]
pub(crate) fn on_clock<R>(clock: &Clock, shared: bool, op: impl FnOnce(&Clock) -> R) -> R {
    if shared {
        return op(clock);
    }
    // Thread-local storage gone (never, for a const-initialised one without `Drop`): the clock alone.
    let Some(left) = with_left(Cell::get) else { return op(clock) };
    clock.take_countdown(left);
    let r = op(clock);
    let _ = with_left(|l| l.set(clock.countdown()));
    r
}

/// Hands the calling thread's countdown to its own shard's clock (if it has one), so that readers
/// see the thread's allocated bytes exactly (`Clock::allocated`).
pub(crate) fn fold_countdown() {
    if let Some(own) = shard_at(slot()) {
        let _ = with_left(|l| own.hot.clock.take_countdown(l.get()));
    }
}

/// The fast path's shard: the calling thread's own, or the parked one ([`PARKED`]).
#[inline(always)]
pub(crate) fn hot() -> &'static Shard {
    let p = HOT.try_with(Cell::get).unwrap_or(&PARKED);
    // SAFETY: `HOT` only ever holds the address of `PARKED` or of an element of the `'static` shard
    // pool (`set_slot`), both valid for the life of the process.
    unsafe { &*p }
}
