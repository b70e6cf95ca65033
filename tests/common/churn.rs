//! The steady workload a memory limit is for: four workers that never pause, replacing random
//! blocks of 32 B – 48 KiB in their live sets, each handing half the blocks it replaces to the next
//! worker to free (cross-thread frees, as a work-stealing runtime makes). The workers are threads
//! that live as long as the workload (as a runtime's workers do, and never call
//! `frag::reclaim::idle`); each step hands them their share of the bytes and waits for all four, so
//! that a test drives the workload round by round on its clock.

use std::sync::mpsc;
use std::thread::JoinHandle;

use super::xorshift;

/// Workers, each a thread of its own.
pub const WORKERS: usize = 4;

/// What a worker is asked to do.
enum Ask {
    /// Free the blocks handed to it, then allocate about this many bytes in replacements.
    Step(u64, Vec<Vec<u8>>),
    /// Free random blocks until about this many bytes are left.
    Shrink(u64),
    /// Allocate new blocks of the workload's sizes until about this many bytes are live.
    Grow(u64),
}

/// A worker's answer: the blocks it hands to the next worker, and its live bytes.
type Answer = (usize, Vec<Vec<u8>>, u64);

/// The four workers.
pub struct Churn {
    asks: Vec<mpsc::Sender<Ask>>,
    answers: mpsc::Receiver<Answer>,
    threads: Vec<JoinHandle<()>>,
    inboxes: Vec<Vec<Vec<u8>>>,
    live: Vec<u64>,
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

/// A worker's loop: about `live` bytes of blocks made first, then what it is asked.
fn work(i: usize, live: u64, asks: mpsc::Receiver<Ask>, answers: mpsc::Sender<Answer>) {
    let mut rng = 0x9e37_79b9_7f4a_7c15 ^ ((i as u64 + 1) * 0x1234_5678);
    let mut blocks = Vec::new();
    let mut have = 0u64;
    while have < live {
        let n = size(&mut rng);
        blocks.push(block(n, rng));
        have += n as u64;
    }
    let _ = answers.send((i, Vec::new(), have));
    while let Ok(ask) = asks.recv() {
        let mut handed = Vec::new();
        match ask {
            Ask::Step(bytes, inbox) => {
                drop(inbox);
                let mut made = 0u64;
                while made < bytes && !blocks.is_empty() {
                    let n = size(&mut rng);
                    let at = xorshift(&mut rng) as usize % blocks.len();
                    let old = std::mem::replace(&mut blocks[at], block(n, rng));
                    have = have + n as u64 - old.len() as u64;
                    if rng & 1 == 0 {
                        handed.push(old);
                    }
                    made += n as u64;
                }
            }
            Ask::Grow(to) => {
                while have < to {
                    let n = size(&mut rng);
                    blocks.push(block(n, rng));
                    have += n as u64;
                }
            }
            Ask::Shrink(to) => {
                while have > to && !blocks.is_empty() {
                    let at = xorshift(&mut rng) as usize % blocks.len();
                    have -= blocks.swap_remove(at).len() as u64;
                }
            }
        }
        if answers.send((i, handed, have)).is_err() {
            break;
        }
    }
}

impl Churn {
    /// About `live` bytes of blocks, a quarter made on each worker's thread.
    pub fn new(live: u64) -> Self {
        let (tell, answers) = mpsc::channel();
        let (asks, threads) = (0..WORKERS)
            .map(|i| {
                let (ask, asked) = mpsc::channel();
                let tell = tell.clone();
                let t = std::thread::Builder::new()
                    .name(format!("churn-{i}"))
                    .spawn(move || work(i, live / WORKERS as u64, asked, tell))
                    .expect("spawn a worker");
                (ask, t)
            })
            .unzip();
        let mut churn = Self { asks, answers, threads, inboxes: vec![Vec::new(); WORKERS], live: vec![0; WORKERS] };
        churn.collect();
        churn
    }

    /// Waits for every worker's answer; each one's handed blocks go to the next worker's inbox.
    fn collect(&mut self) {
        for _ in 0..WORKERS {
            let (i, handed, have) = self.answers.recv().expect("a worker answers");
            self.inboxes[(i + 1) % WORKERS] = handed;
            self.live[i] = have;
        }
    }

    /// Each worker frees what it was handed, then allocates about `bytes / 4` in blocks that replace
    /// random ones of its own, handing every other replaced block to the next worker.
    pub fn step(&mut self, bytes: u64) {
        for (ask, inbox) in self.asks.iter().zip(&mut self.inboxes) {
            ask.send(Ask::Step(bytes / WORKERS as u64, std::mem::take(inbox))).expect("a worker runs");
        }
        self.collect();
    }

    /// Frees random blocks on their workers' threads until about `live` bytes are left.
    pub fn shrink_to(&mut self, live: u64) {
        for ask in &self.asks {
            ask.send(Ask::Shrink(live / WORKERS as u64)).expect("a worker runs");
        }
        self.collect();
    }

    /// Brings each worker's live bytes to about its share in `live`: it allocates new blocks or frees
    /// random ones of its own (each arena, magazine or heap of the worker's then grows or has room).
    pub fn set_live(&mut self, live: [u64; WORKERS]) {
        for (i, ask) in self.asks.iter().enumerate() {
            let to = live[i];
            let ask_one = if to >= self.live[i] { Ask::Grow(to) } else { Ask::Shrink(to) };
            ask.send(ask_one).expect("a worker runs");
        }
        self.collect();
    }

    /// The live bytes the workers hold.
    pub fn live(&self) -> u64 {
        self.live.iter().sum()
    }
}

impl Drop for Churn {
    fn drop(&mut self) {
        self.asks.clear();
        self.inboxes.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
