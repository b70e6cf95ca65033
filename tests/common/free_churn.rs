//! The steady workload of `churn`, with workers that never park: four threads replace random blocks
//! of 32 B – 48 KiB in their live sets without pause, each handing every other block it replaces to
//! the next worker to free (a bounded queue, [`HANDED`]), and keep long-lived small blocks (32–511
//! B, one replaced every 64th replacement) scattered over the pages the churn uses. The test reads
//! how much they have allocated (`allocated`) and waits for a number of bytes of work between
//! rounds, so that its clock moves with the work, not with the machine's load; the workers go on
//! meanwhile.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use super::churn::WORKERS;
use super::xorshift;

/// How many times the busy rate of the other limit tests (`common::reclaim::BUSY_RATE`) the
/// workers allocate per second of the clock: 4 GiB, about what four such workers do in a second
/// unpaced (1.5 million replacements a second, the rate of the workload the mimalloc test is for).
/// Free space in pages that hold live blocks comes back as the workers replace those blocks, so
/// the clock's second must carry a real second's work: at the busy rate itself (256 MiB), RSS 2 s
/// after the drop was 437–653 MiB on mimalloc, against 266–289 MiB here (2026-12).
pub const SPEED: u64 = 16;

/// How many batches of handed blocks (128 blocks, about 1.1 MiB) a worker's inbox holds; when it
/// is full, the handing worker frees its batch itself and goes on. Unbounded, a worker off the CPU
/// let its inbox grow at the handing worker's rate (about 0.5 GiB/s): one half-second window rose
/// to 364 MiB at 4 s after the drop in CI, the others at 261-282 MiB (2026-12).
const HANDED: usize = 4;

/// What the workers share with the test.
struct Shared {
    /// Each worker's target of churned live bytes.
    target: [AtomicU64; WORKERS],
    /// Each worker's churned live bytes, as of its last batch.
    live: [AtomicU64; WORKERS],
    /// Bytes allocated by all workers since the start.
    allocated: AtomicU64,
    /// How far `allocated` may run ahead of the test (an eighth of a step): past it, workers yield
    /// between batches (they stay runnable, as a busy runtime's workers do), so that no round sees
    /// a burst of work done while the test's thread was off the CPU. A burst sets the busiest rate,
    /// and the rounds after it counted as quiet (half a step ahead: 1 to 6 quiet rounds in 3 runs
    /// of 3; an eighth: none in 5).
    allowed: AtomicU64,
    stop: AtomicBool,
}

/// The four free-running workers.
pub struct FreeChurn {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    long_lived: u64,
    /// `allocated` when the last step ended.
    mark: u64,
}

/// A block size, spread evenly over the powers of two from 32 B to 32 KiB, up to 48 KiB.
fn size(rng: &mut u64) -> usize {
    let r = xorshift(rng);
    let base = 32usize << (r % 11);
    (base + (r >> 8) as usize % base).min(48 << 10)
}

/// A worker: brings its churned live bytes to its target, then replaces blocks in batches of 256
/// until stopped, freeing what the previous worker hands it.
fn work(
    i: usize,
    long_lived: u64,
    shared: &Shared,
    inbox: &mpsc::Receiver<Vec<Vec<u8>>>,
    next: &mpsc::SyncSender<Vec<Vec<u8>>>,
) {
    let mut rng = 0x9e37_79b9_7f4a_7c15 ^ ((i as u64 + 1) * 0x1234_5678);
    let (mut blocks, mut have) = (Vec::<Vec<u8>>::new(), 0u64);
    let (mut kept, mut kept_bytes) = (Vec::<Vec<u8>>::new(), 0u64);
    while !shared.stop.load(Relaxed) {
        while let Ok(handed) = inbox.try_recv() {
            drop(handed);
        }
        if shared.allocated.load(Relaxed) >= shared.allowed.load(Relaxed) {
            std::thread::yield_now();
            continue;
        }
        let mut made = 0u64;
        let target = shared.target[i].load(Relaxed);
        while have < target {
            let n = size(&mut rng);
            blocks.push(vec![rng as u8 | 1; n]);
            (have, made) = (have + n as u64, made + n as u64);
        }
        while have > target && !blocks.is_empty() {
            let at = xorshift(&mut rng) as usize % blocks.len();
            have -= blocks.swap_remove(at).len() as u64;
        }
        let mut handed = Vec::new();
        for _ in 0..256 {
            let Some(at) = (!blocks.is_empty()).then(|| xorshift(&mut rng) as usize % blocks.len()) else { break };
            let n = size(&mut rng);
            let old = std::mem::replace(&mut blocks[at], vec![rng as u8 | 1; n]);
            (have, made) = (have + n as u64 - old.len() as u64, made + n as u64);
            if rng & 1 == 0 {
                handed.push(old);
            }
            let small = 32 + (xorshift(&mut rng) % 480) as usize;
            if kept_bytes < long_lived {
                kept.push(vec![2u8; small]);
                kept_bytes += small as u64;
            } else if xorshift(&mut rng) % 64 == 0 {
                let at = xorshift(&mut rng) as usize % kept.len();
                kept_bytes =
                    kept_bytes + small as u64 - std::mem::replace(&mut kept[at], vec![2u8; small]).len() as u64;
            } else {
                continue;
            }
            made += small as u64;
        }
        shared.live[i].store(have, Relaxed);
        shared.allocated.fetch_add(made, Relaxed);
        // Full (or gone): the error returns the batch, freed here.
        let _ = next.try_send(handed);
    }
}

impl FreeChurn {
    /// About `live` churned bytes and `long_lived` bytes of long-lived small blocks, a quarter of
    /// each on each worker's thread; returns once the churned bytes are made.
    pub fn new(live: u64, long_lived: u64) -> Self {
        let shared = Arc::new(Shared {
            target: std::array::from_fn(|_| AtomicU64::new(live / WORKERS as u64)),
            live: std::array::from_fn(|_| AtomicU64::new(0)),
            allocated: AtomicU64::new(0),
            allowed: AtomicU64::new(u64::MAX),
            stop: AtomicBool::new(false),
        });
        let (senders, inboxes): (Vec<_>, Vec<_>) = (0..WORKERS).map(|_| mpsc::sync_channel(HANDED)).unzip();
        let threads = inboxes
            .into_iter()
            .enumerate()
            .map(|(i, inbox)| {
                let (shared, next) = (Arc::clone(&shared), senders[(i + 1) % WORKERS].clone());
                let kept = long_lived / WORKERS as u64;
                std::thread::Builder::new()
                    .name(format!("free-churn-{i}"))
                    .spawn(move || work(i, kept, &shared, &inbox, &next))
                    .expect("spawn a worker")
            })
            .collect();
        let mut churn = Self { shared, threads, long_lived, mark: 0 };
        churn.settle();
        churn.mark = churn.shared.allocated.load(Relaxed);
        churn.shared.allowed.store(churn.mark, Relaxed);
        churn
    }

    /// Waits until every worker's churned live bytes are within a batch of its target.
    fn settle(&self) {
        let near = |i: usize| {
            let (live, target) = (self.shared.live[i].load(Relaxed), self.shared.target[i].load(Relaxed));
            live.abs_diff(target) <= 256 * (48 << 10)
        };
        while !(0..WORKERS).all(near) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Returns once the workers have allocated `bytes` times [`SPEED`] more since the last step
    /// (they go on).
    pub fn step(&mut self, bytes: u64) {
        let until = self.mark + bytes * SPEED;
        self.shared.allowed.store(until + bytes * SPEED / 8, Relaxed);
        while self.shared.allocated.load(Relaxed) < until {
            std::thread::sleep(Duration::from_micros(200));
        }
        self.mark = until;
    }

    /// Sets the churned live bytes to about `live` in all, and returns once the workers hold it.
    pub fn shrink_to(&mut self, live: u64) {
        for t in &self.shared.target {
            t.store(live / WORKERS as u64, Relaxed);
        }
        // A worker frees its surplus at its next batch: let every one run one.
        self.shared.allowed.store(u64::MAX, Relaxed);
        self.settle();
        self.mark = self.mark.max(self.shared.allocated.load(Relaxed));
        self.shared.allowed.store(self.mark, Relaxed);
    }

    /// The live bytes the workers hold: the churned ones as of their last batch, and the long-lived.
    pub fn live(&self) -> u64 {
        self.shared.live.iter().map(|l| l.load(Relaxed)).sum::<u64>() + self.long_lived
    }
}

impl Drop for FreeChurn {
    fn drop(&mut self) {
        self.shared.stop.store(true, Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
