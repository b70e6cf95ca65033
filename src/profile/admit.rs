//! Who the endpoints let in: a slot per delta profile waiting (at most
//! [`Serving::delta_waits`](super::serving::Serving::delta_waits) at once, each with its end, for a refused
//! caller's `Retry-After`), and the symbolizer's one turn. Both are atomics: nothing here waits for
//! a lock, and a forked child starts with every slot free and the turn open (the parent's holders
//! are threads it does not have); a guard copied into the child from before the fork releases
//! nothing there.

use std::time::Duration;

use super::serving::MAX_DELTA_WAITS;
use crate::stats::clock::now_ns;
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Delta profiles waiting now.
static WAITING: AtomicUsize = AtomicUsize::new(0);
/// Each waiting delta's end (monotonic nanoseconds), 0 for a free slot.
static ENDS: [AtomicU64; MAX_DELTA_WAITS] = [const { AtomicU64::new(0) }; MAX_DELTA_WAITS];
/// Whether a symbolizer has the turn.
static TURN: AtomicBool = AtomicBool::new(false);
/// Bumped in every forked child: a guard taken before the fork belongs to another process.
static GENERATION: AtomicU64 = AtomicU64::new(0);
static FORK_HOOK: AtomicBool = AtomicBool::new(false);

/// A delta profile's place among the waits: freed when dropped (the answer sent, or the caller
/// gone).
#[derive(Debug)]
pub(super) struct Slot {
    index: usize,
    end: u64,
    generation: u64,
}

impl Slot {
    /// A slot for a wait of `length` from `now` (monotonic nanoseconds), if fewer than `limit` wait:
    /// else how long until the first of them ends (at least a second, whole seconds: a
    /// `Retry-After`).
    pub(super) fn take(now: u64, length: Duration, limit: usize) -> Result<Self, u64> {
        hook_fork();
        let taken = WAITING.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < limit).then_some(n + 1));
        if taken.is_err() {
            return Err(retry_after(now));
        }
        let end = now.saturating_add(length.as_nanos() as u64).max(1);
        let generation = GENERATION.load(Ordering::Acquire);
        // Fewer than `MAX_DELTA_WAITS` hold a slot (`limit` is at most that), so one is free: the
        // loop ends within a pass unless another taker wins each one first.
        loop {
            for (index, slot) in ENDS.iter().enumerate() {
                if slot.compare_exchange(0, end, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                    return Ok(Self { index, end, generation });
                }
            }
            std::thread::yield_now();
        }
    }

    /// When the wait ends (monotonic nanoseconds).
    pub(super) fn end(&self) -> u64 {
        self.end
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if GENERATION.load(Ordering::Acquire) != self.generation {
            return;
        }
        if ENDS[self.index].compare_exchange(self.end, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            WAITING.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Delta profiles waiting now.
#[cfg(all(test, feature = "http"))]
pub(super) fn waiting() -> usize {
    WAITING.load(Ordering::Acquire)
}

/// Whole seconds, at least 1, until the first waiting delta ends (1 if none waits: the refusal
/// came from a limit of 0 or a race with its end).
fn retry_after(now: u64) -> u64 {
    let first = ENDS.iter().map(|e| e.load(Ordering::Acquire)).filter(|&e| e != 0).min();
    first.map_or(1, |end| end.saturating_sub(now).div_ceil(1_000_000_000).max(1))
}

/// The symbolizer's turn, held while one request reads debug information and names addresses.
#[derive(Debug)]
pub(super) struct Turn {
    generation: u64,
}

impl Turn {
    /// The turn if it is free now.
    pub(super) fn try_take() -> Option<Self> {
        hook_fork();
        let generation = GENERATION.load(Ordering::Acquire);
        TURN.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).ok().map(|_| Self { generation })
    }

    /// The turn, waiting at most `wait` for the one holding it (checking every 10 ms): `None` if it
    /// was still held then.
    pub(super) fn take_within(wait: Duration) -> Option<Self> {
        let start = now_ns();
        loop {
            if let Some(turn) = Self::try_take() {
                return Some(turn);
            }
            if now_ns().saturating_sub(start) >= wait.as_nanos() as u64 {
                return None;
            }
            std::thread::sleep(POLL);
        }
    }
}

/// How often a request waiting for the turn checks it.
pub(super) const POLL: Duration = Duration::from_millis(10);

impl Drop for Turn {
    fn drop(&mut self) {
        if GENERATION.load(Ordering::Acquire) == self.generation {
            TURN.store(false, Ordering::Release);
        }
    }
}

fn hook_fork() {
    if !FORK_HOOK.load(Ordering::Relaxed) && !FORK_HOOK.swap(true, Ordering::AcqRel) {
        // SAFETY: the handler has the C ABI, touches only atomics and stays valid for the life of
        // the process. A failure (ENOMEM) leaves a forked child with the parent's slots and turn
        // as they were: refusals (429, 503) there until a restart, never a hang.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    }
}

/// In a forked child: no thread of its holds a slot or the turn.
extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    for end in &ENDS {
        end.store(0, Ordering::Relaxed);
    }
    WAITING.store(0, Ordering::Release);
    TURN.store(false, Ordering::Release);
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The tests that take slots or the turn run one at a time (they share the process's).
    pub(crate) static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    const S: u64 = 1_000_000_000;

    /// Against a model of the waits on a controlled clock: `limit` slots, each refusal's
    /// `Retry-After` the whole seconds to the first end, and a dropped slot taken again.
    #[test]
    fn at_most_limit_wait_and_a_refusal_says_when_one_ends() {
        let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = 1000 * S;
        let a = Slot::take(now, Duration::from_secs(30), 2).unwrap();
        let b = Slot::take(now + 5 * S, Duration::from_secs(10), 2).unwrap();
        assert_eq!(Slot::take(now + 5 * S, Duration::from_secs(1), 2).unwrap_err(), 10);
        // Half a second before `b` ends: one second, never zero.
        assert_eq!(Slot::take(now + 14 * S + S / 2, Duration::from_secs(1), 2).unwrap_err(), 1);
        drop(b);
        assert_eq!(Slot::take(now + 6 * S, Duration::from_secs(1), 1).unwrap_err(), 24);
        let c = Slot::take(now + 6 * S, Duration::from_secs(1), 2).unwrap();
        assert_ne!(c.index, a.index);
        drop((a, c));
        assert_eq!(Slot::take(now, Duration::from_secs(1), 0).unwrap_err(), 1);
        assert_eq!(WAITING.load(Ordering::Relaxed), 0);
    }

    /// One turn at a time; a second taker waits its bound and gets none; a guard from before a
    /// fork (another generation) releases nothing.
    #[test]
    fn one_symbolizer_at_a_time() {
        let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let turn = Turn::try_take().unwrap();
        let start = std::time::Instant::now();
        assert!(Turn::take_within(Duration::from_millis(30)).is_none());
        assert!(start.elapsed() >= Duration::from_millis(30));
        let stale = Turn { generation: turn.generation.wrapping_sub(1) };
        drop(stale);
        assert!(Turn::try_take().is_none(), "a stale guard released the turn");
        drop(turn);
        assert!(Turn::try_take().is_some());
    }
}
