//! Whole workloads, `Tracked<X>` against bare `X`, for every backend compiled in: does the instrument
//! change which allocator wins? Cases: messages of several sizes through a channel, tokio task spawn
//! churn, `Vec` churn inside `block_on`, and random-size churn.
//!
//! The global allocator is chosen per process, so `cargo bench --bench workloads` re-runs this binary
//! once per (backend, mode) with `FRAG_ALLOCATOR` and `FRAG_BENCH_MODE` set, in `FRAG_BENCH_ROUNDS`
//! (default 3) alternating rounds, lets criterion measure each in its own process, and prints a table
//! of medians, ratios, round-to-round spreads and rankings (`≈` where two backends are closer than
//! their spread) from criterion's saved estimates. Under `cargo test --benches` it runs each case
//! once, in-process.

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use criterion::Criterion;
use frag::backend::Backend;
use frag::{Select, Tracked};

/// The environment variable that picks bare (`bare`) or tracked (anything else) for a child.
const MODE_ENV: &str = "FRAG_BENCH_MODE";

/// Bare or tracked `Select`, fixed at the process's first allocation (like `Select` itself).
struct Switch;

static TRACKED: Tracked<Select> = Tracked::new(Select::new());
static BARE: Select = Select::new();
/// 0 = undecided, 1 = bare, 2 = tracked.
static MODE: AtomicU8 = AtomicU8::new(0);

impl Switch {
    #[inline]
    fn tracked() -> bool {
        match MODE.load(Ordering::Relaxed) {
            0 => Self::decide(),
            m => m == 2,
        }
    }

    #[cold]
    fn decide() -> bool {
        // SAFETY: a valid C string; `getenv` does not allocate and nothing modifies the environment
        // this early.
        let bare = unsafe {
            let v = libc::getenv(c"FRAG_BENCH_MODE".as_ptr());
            !v.is_null() && std::ffi::CStr::from_ptr(v).to_bytes() == b"bare"
        };
        let mode = if bare { 1 } else { 2 };
        let _ = MODE.compare_exchange(0, mode, Ordering::AcqRel, Ordering::Acquire);
        MODE.load(Ordering::Acquire) == 2
    }
}

// SAFETY: forwards every call to one of two allocators, chosen once before the first block exists, so
// each block goes back to the allocator that handed it out.
unsafe impl GlobalAlloc for Switch {
    #[inline]
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees, forwarded.
        unsafe { if Self::tracked() { TRACKED.alloc(l) } else { BARE.alloc(l) } }
    }
    #[inline]
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: as above.
        unsafe { if Self::tracked() { TRACKED.alloc_zeroed(l) } else { BARE.alloc_zeroed(l) } }
    }
    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as above; `p` came from the same allocator.
        unsafe { if Self::tracked() { TRACKED.dealloc(p, l) } else { BARE.dealloc(p, l) } }
    }
    #[inline]
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        // SAFETY: as above.
        unsafe { if Self::tracked() { TRACKED.realloc(p, l, n) } else { BARE.realloc(p, l, n) } }
    }
}

#[global_allocator]
static A: Switch = Switch;

const MESSAGE_SIZES: [usize; 3] = [64, 4096, 32 << 10];

/// `n` messages of `size` bytes from one thread to another through a bounded channel.
fn channel(size: usize, n: usize) {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(64);
    let consumer = std::thread::spawn(move || rx.iter().map(|m| m.len()).sum::<usize>());
    for _ in 0..n {
        if tx.send(vec![1u8; size]).is_err() {
            break;
        }
    }
    drop(tx);
    black_box(consumer.join().unwrap_or(0));
}

/// `n` tasks spawned on a 2-worker runtime, each allocating a buffer and returning its length.
fn spawn_churn(rt: &tokio::runtime::Runtime, n: usize) {
    rt.block_on(async {
        let handles: Vec<_> = (0..n).map(|i| tokio::spawn(async move { vec![0u8; 64 + i % 1024].len() })).collect();
        for h in handles {
            black_box(h.await.unwrap_or(0));
        }
    });
}

/// Vectors grown, cloned and dropped inside `block_on` (realloc-heavy).
fn vec_churn(rt: &tokio::runtime::Runtime, n: usize) {
    rt.block_on(async {
        for i in 0..n {
            let mut v: Vec<u64> = Vec::new();
            for k in 0..(16 + i % 240) {
                v.push(k as u64);
            }
            black_box(v.clone());
        }
    });
}

/// Random sizes from 8 B to 64 KiB with a window of 1,024 live blocks.
fn random_churn(n: usize) {
    let mut rng = 0x9e37_79b9_u64;
    let mut live: Vec<Vec<u8>> = Vec::with_capacity(1024);
    for _ in 0..n {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let size = 8usize << (rng % 14);
        let block = vec![0u8; size - (rng as usize >> 20) % (size / 2).max(1)];
        if live.len() < 1024 {
            live.push(block);
        } else {
            live[(rng >> 40) as usize % 1024] = block;
        }
    }
    black_box(live);
}

fn mode_name() -> &'static str {
    if Switch::tracked() { "tracked" } else { "bare" }
}

fn cases(c: &mut Criterion) {
    let backend = Select::new().backend().name();
    let mode = mode_name();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().expect("runtime");
    for size in MESSAGE_SIZES {
        c.bench_function(&format!("channel_{size}B/{backend}/{mode}"), |b| b.iter(|| channel(size, 1000)));
    }
    c.bench_function(&format!("spawn_churn/{backend}/{mode}"), |b| b.iter(|| spawn_churn(&rt, 1000)));
    c.bench_function(&format!("vec_churn/{backend}/{mode}"), |b| b.iter(|| vec_churn(&rt, 1000)));
    c.bench_function(&format!("random_churn/{backend}/{mode}"), |b| b.iter(|| random_churn(10_000)));
}

fn case_names() -> Vec<String> {
    let mut v: Vec<String> = MESSAGE_SIZES.iter().map(|s| format!("channel_{s}B")).collect();
    v.extend(["spawn_churn", "vec_churn", "random_churn"].map(String::from));
    v
}

/// Criterion's saved median (ns) for one benchmark of this run.
fn median_ns(id: &str) -> Option<f64> {
    let dir = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let path = format!("{dir}/criterion/{}/new/estimates.json", id.replace('/', "_"));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    v["median"]["point_estimate"].as_f64()
}

/// Ranks `backends` by `time` (fastest first) as "a < b ≈ c": `≈` where two neighbours are closer
/// than the larger of their round-to-round spreads (max / min over rounds), i.e. within the noise.
fn ranking(backends: &[Backend], time: impl Fn(Backend) -> Option<(f64, f64)>) -> String {
    let mut v: Vec<(f64, f64, &str)> =
        backends.iter().filter_map(|b| time(*b).map(|(t, spread)| (t, spread, b.name()))).collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out = String::new();
    for (i, (t, spread, name)) in v.iter().enumerate() {
        if let Some((prev_t, prev_spread, _)) = i.checked_sub(1).and_then(|j| v.get(j)) {
            out.push_str(if t / prev_t > spread.max(*prev_spread) { " < " } else { " ≈ " });
        }
        out.push_str(name);
    }
    out
}

/// Criterion medians per (case, backend, mode), one per round.
type Medians = std::collections::BTreeMap<(String, &'static str, &'static str), Vec<f64>>;

/// The median of the rounds and their spread (slowest / fastest round).
fn median(v: &[f64]) -> Option<(f64, f64)> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let (first, last) = (v.first()?, v.last()?);
    Some((*v.get(v.len() / 2)?, last / first))
}

fn summary(medians: &Medians, rounds: usize) {
    println!(
        "\nworkloads: Tracked<X> vs bare X, each in its own process; median over {rounds} alternating rounds of criterion's medians\n"
    );
    println!("| case | backend | bare µs | tracked µs | ratio | spread bare | spread tracked |");
    println!("|---|---|---|---|---|---|---|");
    let mut rankings = Vec::new();
    for case in case_names() {
        let time =
            |b: Backend, mode: &'static str| medians.get(&(case.clone(), b.name(), mode)).and_then(|v| median(v));
        for &b in Backend::ALL {
            if let (Some((bare, sb)), Some((tracked, st))) = (time(b, "bare"), time(b, "tracked")) {
                println!(
                    "| {case} | {b} | {:.1} | {:.1} | {:.3} | {sb:.2} | {st:.2} |",
                    bare / 1e3,
                    tracked / 1e3,
                    tracked / bare
                );
            }
        }
        rankings.push(format!(
            "| {case} | {} | {} |",
            ranking(Backend::ALL, |b| time(b, "bare")),
            ranking(Backend::ALL, |b| time(b, "tracked"))
        ));
    }
    println!("\nspread = slowest / fastest round; in rankings `≈` joins neighbours closer than their spread\n");
    println!("| case | fastest first, bare | fastest first, tracked |\n|---|---|---|");
    println!("{}", rankings.join("\n"));
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let is_child = std::env::var_os(MODE_ENV).is_some();
    let benchmarking = args.iter().any(|a| a == "--bench");
    if is_child || !benchmarking {
        // A child measures its one (backend, mode); `cargo test --benches` runs every case once.
        let mut c = Criterion::default()
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(2))
            .sample_size(20)
            .configure_from_args();
        cases(&mut c);
        c.final_summary();
        return;
    }
    // Threads handing messages over on a shared 2-core machine vary by up to 2x between processes
    // minutes apart, so bare and tracked alternate and each figure is a median over rounds.
    let rounds: usize = std::env::var("FRAG_BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(3);
    let exe = std::env::current_exe().expect("own path");
    let mut medians = Medians::new();
    for round in 0..rounds {
        for &backend in Backend::ALL {
            for mode in ["bare", "tracked"] {
                eprintln!("== round {} of {rounds}: {backend} {mode}", round + 1);
                let status = Command::new(&exe)
                    .args(&args)
                    .env(Select::ENV, backend.name())
                    .env(MODE_ENV, mode)
                    .status()
                    .expect("run a child");
                assert!(status.success(), "{backend} {mode}: {status}");
                for case in case_names() {
                    if let Some(m) = median_ns(&format!("{case}/{}/{mode}", backend.name())) {
                        medians.entry((case, backend.name(), mode)).or_default().push(m);
                    }
                }
            }
        }
    }
    summary(&medians, rounds);
}
