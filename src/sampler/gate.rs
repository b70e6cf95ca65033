//! Asking the allocator about live sampled blocks: the blocks a question names stay live until it
//! is answered.
//!
//! A report asks the allocator how full the slabs of sampled blocks are (`report::pins`), blocks that
//! their owners may free at any moment, and jemalloc's answer is not safe for a block freed while it
//! reads (why: `backend::jemalloc::slabs`; a segfault, seen under valgrind in the service example).
//! So each question runs in a **window**, and a sampled block's free **passes the gate** between the removal
//! of its entry and the block's return to the allocator:
//! - the asker opens a window (a count of open windows, raised, then a `SeqCst` fence), keeps the
//!   blocks the side table still holds, asks about those, and closes the window (a release);
//! - the owner removes the block's entry (its `TOMB` store), then a `SeqCst` fence, then waits while
//!   any window is open; only then do the block and its twin go back to the allocator.
//!
//! Between the two fences one comes first: either the asker's check sees the removal and leaves the
//! block out, or the owner sees the window and waits until it closes, after the allocator answered.
//! (The loom model `tests/loom/src/gate_model.rs` checks it.) A free that sees no window pays one
//! fence; a free that meets one spins, then yields, for at most one window: [`CHUNK`] blocks, one
//! allocator lookup each. The asker neither allocates nor frees inside a window (a free of its own
//! sampled block would wait for itself), so the wait never depends on a lock that can allocate.
//!
//! A child forked while a window was open in the parent would wait forever: the fork handler closes
//! them all ([`Gate::after_fork_in_child`]).

use super::side_table::Table;
use crate::sync::{AtomicUsize, Ordering, atomics_ctor, fence, spin_loop, yield_now};

/// Most blocks asked about in one window: bounds a free's wait and the window's stack buffers.
pub(crate) const CHUNK: usize = 64;

/// Spins before a waiting free yields its core.
const SPINS: u32 = 128;

/// A sampled block to ask about: its side-table slot, address and twin as the asker read them
/// (`Table::for_each`), and the address to ask at (the block, its twin, or past its head).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Query {
    pub(crate) slot: usize,
    pub(crate) address: usize,
    pub(crate) twin: usize,
    pub(crate) at: usize,
}

/// The gate between questions about sampled blocks and their frees. One static instance serves the
/// process (`sampler::GATE`); the loom model builds its own.
pub(crate) struct Gate {
    /// Windows open now.
    open: AtomicUsize,
}

/// An open window, closed when dropped.
struct Window<'g>(&'g Gate);

impl Drop for Window<'_> {
    fn drop(&mut self) {
        // Release: the allocator's reads in the window happen before the frees that waited for it.
        self.0.open.fetch_sub(1, Ordering::Release);
    }
}

impl Gate {
    atomics_ctor! {
        pub(crate) fn new() -> Self {
            Self { open: AtomicUsize::new(0) }
        }
    }

    fn open(&self) -> Window<'_> {
        self.open.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        Window(self)
    }

    /// Called by the owner of a sampled block after it removed the block's entry from the side
    /// table and before the block (or its twin) goes back to the allocator: waits for the windows
    /// open now to close.
    #[inline]
    pub(crate) fn pass(&self) {
        fence(Ordering::SeqCst);
        if self.open.load(Ordering::Acquire) != 0 {
            self.wait();
        }
    }

    #[cold]
    #[inline(never)]
    fn wait(&self) {
        let mut spins = 0u32;
        while self.open.load(Ordering::Acquire) != 0 {
            if spins < SPINS {
                spins += 1;
                spin_loop();
            } else {
                yield_now();
            }
        }
    }

    /// Asks `ask` about the blocks of `queries` that `table` still holds, [`CHUNK`] at a time, each
    /// chunk in a window: `ask(at, out)` writes the answer for each address of `at` to `out`, or
    /// returns `false` (the allocator cannot say; no further chunk is asked). `answers[i]` gets the
    /// answer for `queries[i]`, and stays as it was for a block freed before its window opened.
    /// Whether every chunk was answered.
    ///
    /// `ask` runs inside the window: it must not allocate or free.
    pub(crate) fn ask<T: Copy + Default, const N: usize>(
        &self,
        table: &Table<N>,
        queries: &[Query],
        answers: &mut [Option<T>],
        mut ask: impl FnMut(&[usize], &mut [T]) -> bool,
    ) -> bool {
        let mut at = [0usize; CHUNK];
        let mut out = [T::default(); CHUNK];
        let mut which = [0usize; CHUNK];
        for (chunk, answers) in queries.chunks(CHUNK).zip(answers.chunks_mut(CHUNK)) {
            let mut n = 0;
            let answered = {
                let _window = self.open();
                for (i, q) in chunk.iter().enumerate() {
                    if table.holds(q.slot, q.address, q.twin) {
                        at[n] = q.at;
                        which[n] = i;
                        n += 1;
                    }
                }
                n == 0 || ask(&at[..n], &mut out[..n])
            };
            if !answered {
                return false;
            }
            for (&i, &o) in which.iter().zip(&out).take(n) {
                if let Some(a) = answers.get_mut(i) {
                    *a = Some(o);
                }
            }
        }
        true
    }

    /// In a forked child: the parent's askers are not here to close their windows.
    pub(crate) fn after_fork_in_child(&self) {
        self.open.store(0, Ordering::Relaxed);
    }
}
