//! The steady workload a memory limit is for: four workers that never pause, replacing random
//! blocks of 32 B – 48 KiB in their live sets, each handing half the blocks it replaces to the next
//! worker to free (cross-thread frees, as a work-stealing runtime makes). Each step runs the four on
//! threads of their own and joins them, so that a test drives it round by round on its clock.

use super::xorshift;

/// Workers, each on a thread of its own in every step.
pub const WORKERS: usize = 4;

/// One worker's live blocks, and the blocks the previous worker handed it to free.
#[derive(Default)]
struct Worker {
    blocks: Vec<Vec<u8>>,
    inbox: Vec<Vec<u8>>,
    rng: u64,
}

/// The four workers' live sets.
pub struct Churn {
    workers: Vec<Worker>,
}

/// A block size, spread evenly over the powers of two from 32 B to 32 KiB, up to 48 KiB.
fn size(rng: &mut u64) -> usize {
    let r = xorshift(rng);
    let base = 32usize << (r % 11);
    (base + (r >> 8) as usize % base).min(48 << 10)
}

/// A block of `n` bytes, every page written.
fn block(n: usize, tag: u64) -> Vec<u8> {
    vec![tag as u8 | 1; n]
}

impl Churn {
    /// About `live` bytes of blocks, a quarter made on each worker's thread.
    pub fn new(live: u64) -> Self {
        let mut workers: Vec<Worker> = (0..WORKERS)
            .map(|i| Worker { rng: 0x9e37_79b9_7f4a_7c15 ^ ((i as u64 + 1) * 0x1234_5678), ..Worker::default() })
            .collect();
        std::thread::scope(|s| {
            for w in &mut workers {
                s.spawn(move || {
                    let mut made = 0u64;
                    while made < live / WORKERS as u64 {
                        let n = size(&mut w.rng);
                        w.blocks.push(block(n, w.rng));
                        made += n as u64;
                    }
                });
            }
        });
        Self { workers }
    }

    /// Each worker frees what it was handed, then allocates about `bytes / 4` in blocks that replace
    /// random ones of its own, handing every other replaced block to the next worker.
    pub fn step(&mut self, bytes: u64) {
        let handed: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
            let threads: Vec<_> = self
                .workers
                .iter_mut()
                .map(|w| {
                    s.spawn(move || {
                        w.inbox.clear();
                        let mut handed = Vec::new();
                        let mut made = 0u64;
                        while made < bytes / WORKERS as u64 && !w.blocks.is_empty() {
                            let n = size(&mut w.rng);
                            let at = xorshift(&mut w.rng) as usize % w.blocks.len();
                            let old = std::mem::replace(&mut w.blocks[at], block(n, w.rng));
                            if w.rng & 1 == 0 {
                                handed.push(old);
                            }
                            made += n as u64;
                        }
                        handed
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().expect("a worker")).collect()
        });
        for (i, blocks) in handed.into_iter().enumerate() {
            self.workers[(i + 1) % WORKERS].inbox = blocks;
        }
    }

    /// Frees random blocks on their workers' threads until about `live` bytes are left.
    pub fn shrink_to(&mut self, live: u64) {
        std::thread::scope(|s| {
            for w in &mut self.workers {
                s.spawn(move || {
                    let mut have: u64 = w.blocks.iter().map(|b| b.len() as u64).sum();
                    while have > live / WORKERS as u64 && !w.blocks.is_empty() {
                        let at = xorshift(&mut w.rng) as usize % w.blocks.len();
                        have -= w.blocks.swap_remove(at).len() as u64;
                    }
                });
            }
        });
    }

    /// The live bytes the workers hold.
    pub fn live(&self) -> u64 {
        self.workers.iter().flat_map(|w| &w.blocks).map(|b| b.len() as u64).sum()
    }
}
