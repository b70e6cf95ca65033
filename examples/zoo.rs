//! A zoo of callers: seven allocation-heavy loops written the ways programs write them, each compiled
//! with the global allocator's inlined fast path in it. `scripts/instructions.py` counts each one's
//! instructions per step with the bare backend and with `Tracked`, in a user's release build (16
//! codegen units) and with fat LTO, to check that the allocator's inlined code does not change how
//! the callers around it are compiled.
//!
//! The global allocator is the README's line, `frag::Tracked<Jemalloc>` (or `Tracked<System>`
//! without the `jemalloc` feature). Built with `--cfg 'frag_zoo="bare"'` (`cargo rustc --example zoo
//! -- --cfg ...`) it is the bare backend instead; with `--cfg 'frag_zoo="count"'`, the bare backend
//! behind a counter of calls, which prints the run's allocations, frees and reallocations.
//!
//! `cargo run --release --example zoo -- <caller> <steps>`, a caller one of [`CALLERS`].

use std::alloc::Layout;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::hint::black_box;

#[cfg(feature = "jemalloc")]
type Backend = tikv_jemallocator::Jemalloc;
#[cfg(feature = "jemalloc")]
const BACKEND: Backend = tikv_jemallocator::Jemalloc;
#[cfg(not(feature = "jemalloc"))]
type Backend = std::alloc::System;
#[cfg(not(feature = "jemalloc"))]
const BACKEND: Backend = std::alloc::System;

#[cfg(not(any(frag_zoo = "bare", frag_zoo = "count")))]
#[global_allocator]
static A: frag::Tracked<Backend> = frag::Tracked::new(BACKEND);

#[cfg(frag_zoo = "bare")]
#[global_allocator]
static A: Backend = BACKEND;

#[cfg(frag_zoo = "count")]
#[global_allocator]
static A: counting::Counting = counting::Counting;

/// The bare backend behind three counters: how many allocations, frees and reallocations a step
/// makes, the unit the instruction counts are compared in.
#[cfg(frag_zoo = "count")]
mod counting {
    use super::BACKEND;
    use std::alloc::{GlobalAlloc, Layout};
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    pub static CALLS: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

    pub struct Counting;

    // SAFETY: every method forwards to the backend with the caller's arguments, and returns its
    // result; the counters are atomics and touch no block.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            CALLS[0].fetch_add(1, Relaxed);
            // SAFETY: the caller's guarantees, passed on.
            unsafe { BACKEND.alloc(layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            CALLS[0].fetch_add(1, Relaxed);
            // SAFETY: the caller's guarantees, passed on.
            unsafe { BACKEND.alloc_zeroed(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            CALLS[1].fetch_add(1, Relaxed);
            // SAFETY: the caller's guarantees, passed on.
            unsafe { BACKEND.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            CALLS[2].fetch_add(1, Relaxed);
            // SAFETY: the caller's guarantees, passed on.
            unsafe { BACKEND.realloc(ptr, layout, new_size) }
        }
    }

    pub fn read() -> [u64; 3] {
        [CALLS[0].load(Relaxed), CALLS[1].load(Relaxed), CALLS[2].load(Relaxed)]
    }
}

/// The callers, by the name the command line gives.
pub const CALLERS: [&str; 7] = ["closure", "boxes", "hashmap", "btree", "strings", "json", "collect"];

/// A xorshift step: the loops' random numbers, cheap and the same in every build.
#[inline]
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

const SEED: u64 = 0x9E37_79B9_7F4A_7C15;

/// The step a closure over `std::alloc::{alloc, dealloc}`, called from the loop: 65,536 live
/// blocks of 16 B–1 KiB, one freed and one allocated per step.
#[inline(never)]
fn closure(steps: u64) -> u64 {
    const LIVE: usize = 1 << 16;
    let mut rng = SEED;
    let layout = |rng: &mut u64| Layout::from_size_align(16 + (next(rng) % 1009) as usize, 8).unwrap();
    let mut live: Vec<(*mut u8, Layout)> = (0..LIVE)
        .map(|_| {
            let l = layout(&mut rng);
            // SAFETY: the layout is not zero-sized.
            (unsafe { std::alloc::alloc(l) }, l)
        })
        .collect();
    let mut sum = 0u64;
    let mut step = |rng: &mut u64, live: &mut [(*mut u8, Layout)]| {
        let i = next(rng) as usize % LIVE;
        let (p, l) = live[i];
        // SAFETY: `p` came from `alloc` with `l` and is freed once (its slot is overwritten below).
        unsafe { std::alloc::dealloc(p, l) };
        let l = layout(rng);
        // SAFETY: the layout is not zero-sized.
        let p = unsafe { std::alloc::alloc(l) };
        if p.is_null() {
            std::alloc::handle_alloc_error(l);
        }
        // SAFETY: `p` is a fresh block of at least 16 bytes.
        unsafe { p.write(i as u8) };
        sum = sum.wrapping_add(i as u64);
        live[i] = (p, l);
    };
    for _ in 0..steps {
        step(&mut rng, &mut live);
    }
    for (p, l) in live {
        // SAFETY: each block came from `alloc` with its layout and is freed once.
        unsafe { std::alloc::dealloc(p, l) };
    }
    sum
}

/// `Vec<Box<[u8]>>` churn: a random box of the 65,536 replaced by a new one of 16 B–1 KiB.
#[inline(never)]
fn boxes(steps: u64) -> u64 {
    const LIVE: usize = 1 << 16;
    let mut rng = SEED;
    let mut live: Vec<Box<[u8]>> = (0..LIVE).map(|i| vec![i as u8; 16 + i % 1009].into_boxed_slice()).collect();
    let mut sum = 0u64;
    for step in 0..steps {
        let i = next(&mut rng) as usize % LIVE;
        let len = 16 + (next(&mut rng) % 1009) as usize;
        sum = sum.wrapping_add(u64::from(live[i][0]));
        let mut b = Vec::with_capacity(len);
        b.resize(len, step as u8);
        live[i] = b.into_boxed_slice();
    }
    sum
}

/// A `HashMap<String, Vec<u8>>` of 16,384 entries: each step removes a random key and inserts
/// another with a value of 8 B–512 B.
#[inline(never)]
fn hashmap(steps: u64) -> u64 {
    const KEYS: u64 = 1 << 15;
    let mut rng = SEED;
    let mut map: HashMap<String, Vec<u8>> = HashMap::new();
    let mut key = String::new();
    let mut sum = 0u64;
    for step in 0..steps {
        let k = next(&mut rng) % KEYS;
        key.clear();
        write!(key, "session-{k:08x}").unwrap();
        if let Some(v) = map.remove(key.as_str()) {
            sum = sum.wrapping_add(v.len() as u64);
        } else {
            let len = 8 + (next(&mut rng) % 505) as usize;
            map.insert(key.clone(), vec![step as u8; len]);
        }
    }
    sum.wrapping_add(map.len() as u64)
}

/// A `BTreeMap<u64, [u64; 4]>` grown to 4,096 random keys and shrunk back to empty, over and over:
/// a step is one insert or one removal.
#[inline(never)]
fn btree(steps: u64) -> u64 {
    const ROUND: u64 = 4096;
    let mut rng = SEED;
    let mut map = BTreeMap::new();
    let mut keys = Vec::with_capacity(ROUND as usize);
    let mut sum = 0u64;
    let mut step = 0;
    while step < steps {
        keys.clear();
        while step < steps && (keys.len() as u64) < ROUND {
            let k = next(&mut rng);
            map.insert(k, [k; 4]);
            keys.push(k);
            step += 1;
        }
        for &k in &keys {
            if step == steps {
                break;
            }
            sum = sum.wrapping_add(map.remove(&k).map_or(0, |v| v[3]));
            step += 1;
        }
        map.clear();
    }
    sum
}

/// A log line a step: `format!` of a header, then fields pushed onto it with `push_str` and
/// `write!` (the string grows by reallocation), kept in a ring of 1,024 lines.
#[inline(never)]
fn strings(steps: u64) -> u64 {
    const RING: usize = 1024;
    const WORDS: [&str; 6] = ["GET", "/api/v1/items", "status=200", "user-agent=curl/8.5", "bytes", "ok"];
    let mut rng = SEED;
    let mut ring: Vec<String> = vec![String::new(); RING];
    let mut sum = 0u64;
    for step in 0..steps {
        let r = next(&mut rng);
        let mut line = format!("{} {:>6} ", step, r % 100_000);
        for w in 0..(r >> 32) % 12 {
            line.push_str(WORDS[(w as usize + step as usize) % WORDS.len()]);
            line.push(' ');
            if w % 3 == 0 {
                write!(line, "t={}us ", r % 977).unwrap();
            }
        }
        sum = sum.wrapping_add(line.len() as u64);
        ring[step as usize % RING] = line;
    }
    sum
}

/// `serde_json::from_slice` of a request body into a `Value`, read, and dropped.
#[inline(never)]
fn json(steps: u64) -> u64 {
    let bodies: Vec<Vec<u8>> = (0..16u64)
        .map(|i| {
            let items: Vec<String> = (0..i % 5 + 1)
                .map(|j| format!(r#"{{"id":{j},"name":"item-{i}-{j}","tags":["a","bc"],"price":{}.5}}"#, i * j))
                .collect();
            format!(r#"{{"user":"u{i}","session":"{:016x}","items":[{}],"ok":true}}"#, i * 7919, items.join(","))
                .into_bytes()
        })
        .collect();
    let mut rng = SEED;
    let mut sum = 0u64;
    for _ in 0..steps {
        let body = &bodies[(next(&mut rng) % 16) as usize];
        let v: serde_json::Value = serde_json::from_slice(black_box(body)).unwrap();
        sum = sum.wrapping_add(v["items"].as_array().map_or(0, Vec::len) as u64);
    }
    sum
}

/// An iterator chain that collects: a random line split into words, filtered, mapped to owned
/// strings, collected into a `Vec<String>`, then its lengths summed.
#[inline(never)]
fn collect(steps: u64) -> u64 {
    const TEXT: &str = "the quick brown fox jumps over the lazy dog while seven wizards quietly hex \
                        jolly zebras and a big sphinx of quartz judges my vow";
    let words: Vec<&str> = TEXT.split(' ').collect();
    let mut rng = SEED;
    let mut sum = 0u64;
    for _ in 0..steps {
        let r = next(&mut rng);
        let start = (r % words.len() as u64) as usize;
        let kept: Vec<String> =
            words[start..].iter().filter(|w| w.len() > (r >> 40) as usize % 4).map(|w| w.to_uppercase()).collect();
        sum = sum.wrapping_add(kept.iter().map(String::len).sum::<usize>() as u64);
    }
    sum
}

fn main() {
    let mut args = std::env::args().skip(1);
    let caller = args.next().unwrap_or_else(|| "closure".to_owned());
    let steps = args.next().map_or(1_000_000, |s| s.parse().expect("steps: a number"));
    let sum = match caller.as_str() {
        "closure" => closure(steps),
        "boxes" => boxes(steps),
        "hashmap" => hashmap(steps),
        "btree" => btree(steps),
        "strings" => strings(steps),
        "json" => json(steps),
        "collect" => collect(steps),
        other => {
            eprintln!("zoo: unknown caller {other:?}; one of {CALLERS:?}");
            std::process::exit(2);
        }
    };
    // The whole run's calls, set-up included: the difference of two run lengths gives a step's.
    #[cfg(frag_zoo = "count")]
    {
        let [allocations, frees, reallocations] = counting::read();
        println!("calls {allocations} {frees} {reallocations}");
    }
    println!("{sum}");
}
