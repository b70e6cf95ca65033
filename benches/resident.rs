//! Resident memory `frag` adds, by tier and backend: the same two-thread workload (50 MiB live,
//! blocks of 16 B to 32 KiB, four times turned over) in child processes whose global allocator is
//! the bare backend, the sampled tier or the exact tier, interleaved over several rounds. Prints
//! the RSS each one ends with (median and range), the difference to bare, and at most what the
//! sampler's marks account for (a page for each live sampled block, from the child's own report).
//!
//! ```sh
//! cargo bench --all-features --bench resident            # every backend compiled in, 5 rounds
//! cargo bench --all-features --bench resident -- --rounds 9
//! ```

use std::alloc::{GlobalAlloc, Layout};
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};

use frag::{Exact, Select, Tracked};

/// The child's allocator, from this variable (read once, with `getenv`, at the first allocation).
const TIER_ENV: &str = "FRAG_RESIDENT_TIER";
const TIERS: [&str; 3] = ["bare", "sampled", "exact"];
/// Live bytes the workload holds, split over its two threads.
const LIVE: usize = 50 << 20;

static BARE: Select = Select::new();
static SAMPLED: Tracked<Select> = Tracked::new(Select::new());
static EXACT: Tracked<Select, Exact> = Tracked::new(Select::new());

/// 0 until the first allocation reads `TIER_ENV`; then 1 + the index in `TIERS`.
static CHOICE: AtomicU8 = AtomicU8::new(0);

fn choice() -> u8 {
    match CHOICE.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: a NUL-terminated name; `getenv` neither allocates nor keeps the pointer, and
            // what it returns is read at once (nothing sets the environment in this program).
            let c = unsafe {
                let v = libc::getenv(c"FRAG_RESIDENT_TIER".as_ptr());
                if v.is_null() { 1 } else { std::ffi::CStr::from_ptr(v).to_bytes().first().map_or(1, |b| *b) }
            };
            let c = match c {
                b's' => 2,
                b'e' => 3,
                _ => 1,
            };
            CHOICE.store(c, Ordering::Relaxed);
            c
        }
        c => c,
    }
}

/// Forwards to the allocator `TIER_ENV` names, the same one for the whole process.
struct Chosen;

macro_rules! chosen {
    ($method:ident($($arg:expr),*)) => {
        match choice() {
            2 => SAMPLED.$method($($arg),*),
            3 => EXACT.$method($($arg),*),
            _ => BARE.$method($($arg),*),
        }
    };
}

// SAFETY: every method forwards to one allocator, the same for the whole process (chosen at the first
// call, before any block exists), with the caller's arguments unchanged.
unsafe impl GlobalAlloc for Chosen {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { chosen!(alloc(layout)) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { chosen!(alloc_zeroed(layout)) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees; the block came from the same allocator.
        unsafe { chosen!(dealloc(ptr, layout)) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees; the block came from the same allocator.
        unsafe { chosen!(realloc(ptr, layout, new_size)) }
    }
}

#[global_allocator]
static A: Chosen = Chosen;

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

/// One thread's half: `LIVE / 2` bytes of blocks, 16 B to 32 KiB (mostly small: a size is drawn
/// uniformly in a power-of-two range drawn uniformly), replaced at random until four times that
/// was allocated. Returns the blocks, still live.
fn half(seed: u64) -> Vec<Vec<u8>> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut size = move || {
        let r = next();
        let lg = 4 + (r % 12) as u32; // 16 B .. 32 KiB
        (1usize << lg) + ((r >> 8) as usize % (1usize << lg))
    };
    let mut blocks = Vec::new();
    let mut live = 0;
    while live < LIVE / 2 {
        let s = size();
        live += s;
        blocks.push(vec![1u8; s]);
    }
    let mut allocated = live;
    let mut r = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while allocated < 4 * LIVE / 2 {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        let i = (r % blocks.len() as u64) as usize;
        let s = size();
        allocated += s;
        blocks[i] = vec![1u8; s];
    }
    blocks
}

fn child(tier: &str) {
    let before = rss_bytes();
    let a = std::thread::spawn(|| half(0x2545_F491_4F6C_DD1D));
    let b = std::thread::spawn(|| half(0x9E37_79B9_7F4A_7C15));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    let live: usize = a.iter().chain(&b).map(Vec::len).sum();
    let rss = rss_bytes();
    // The sampled tier's marks: a live sampled block holds at most a page more than it would.
    let marks = match frag::report().origin {
        Some(o) if tier != "bare" => o.sampled_blocks.saturating_sub(o.sampled_frees) * 4096,
        _ => 0,
    };
    println!("RESIDENT {tier} {before} {rss} {live} {marks}");
    drop((a, b));
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(tier) = std::env::var(TIER_ENV).ok().filter(|t| TIERS.contains(&t.as_str())) {
        child(&tier);
        return;
    }
    let rounds = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .map_or(5, |n| n.parse().expect("--rounds takes a number"));
    let exe = std::env::current_exe().expect("this bench's path");
    println!(
        "| backend | tier | RSS at the end (MiB, median, range) | added to bare (MiB) | added / live | the marks' \
         share (MiB, at most) |"
    );
    println!("|---|---|---|---|---|---|");
    for &backend in frag::backend::Backend::ALL {
        let mut rss: Vec<Vec<f64>> = vec![Vec::new(); TIERS.len()];
        let mut live = 0.0;
        let mut marks: Vec<Vec<f64>> = vec![Vec::new(); TIERS.len()];
        for _ in 0..rounds {
            for (t, tier) in TIERS.iter().enumerate() {
                let out = Command::new(&exe)
                    .env(TIER_ENV, tier)
                    .env(Select::ENV, backend.name())
                    .output()
                    .expect("run the child");
                let text = String::from_utf8_lossy(&out.stdout);
                let line = text.lines().find_map(|l| l.strip_prefix("RESIDENT ")).expect("a RESIDENT line");
                let v: Vec<f64> = line.split_whitespace().skip(1).filter_map(|w| w.parse().ok()).collect();
                rss[t].push(v[1] / f64::from(1 << 20));
                live = v[2] / f64::from(1 << 20);
                marks[t].push(v[3] / f64::from(1 << 20));
            }
        }
        let bare = median(&mut rss[0].clone());
        for (t, tier) in TIERS.iter().enumerate() {
            let m = median(&mut rss[t]);
            let (lo, hi) = (rss[t][0], rss[t][rss[t].len() - 1]);
            let share = if t == 0 { "-".to_owned() } else { format!("{:.2}", median(&mut marks[t])) };
            println!(
                "| {} | {tier} | {m:.1} ({lo:.1} to {hi:.1}) | {:+.2} | {:+.2}% | {share} |",
                backend.name(),
                m - bare,
                (m - bare) / live * 100.0
            );
        }
    }
}
