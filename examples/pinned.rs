//! The worked example of the sites section's `pins` column (docs/SAMPLING.md, "Pins: which code
//! keeps the holes resident"): a service whose resident memory stays at the peak of a burst because
//! one allocation site's long-lived small blocks pin jemalloc's slabs, and the fix that gives the
//! memory back.
//!
//! Each request of a burst parses into 15 small scratch records (40 B, jemalloc's 48 B class) and
//! remembers its session (40 B too) in a cache. When the burst ends the scratch is freed, but the
//! sessions, one in every 16 regions, stay scattered over every slab the burst filled: no slab
//! empties, so nothing can be purged. The report's `holes` finding names the sites section's row of
//! `remember_session`, and its `pins` column holds about all of the 48 B class's free space.
//!
//! `--fix` keeps the sessions apart, in one pool sized up front (what an arena or a slab allocator
//! for a long-lived type does): the burst's slabs empty, and the purge returns them.
//!
//! `cargo run --release --example pinned` then `cargo run --release --example pinned -- --fix`
//! (jemalloc, the default backend: the pins are split on jemalloc only).

#![expect(clippy::vec_box, reason = "a block per record is the allocation pattern this example shows")]

use std::hint::black_box;

#[path = "support/global_allocator.rs"]
mod global_allocator;

const REQUESTS: u64 = 200_000;
const SCRATCH_PER_REQUEST: u64 = 15;

/// A request's parsed fields: short-lived.
#[allow(dead_code)]
struct Scratch([u64; 5]);

/// What the cache keeps of a request: long-lived.
#[allow(dead_code)]
struct Session {
    id: u64,
    user: [u64; 4],
}

/// Where the sessions live: a block of their own each (the leak-free stair-step), or one pool.
enum Cache {
    Boxed(Vec<Box<Session>>),
    Pooled(Vec<Session>),
}

#[inline(never)]
fn parse_request(id: u64, scratch: &mut Vec<Box<Scratch>>) {
    for i in 0..SCRATCH_PER_REQUEST {
        scratch.push(Box::new(Scratch([id, i, 0, 0, 0])));
    }
}

#[inline(never)]
fn remember_session(id: u64, cache: &mut Cache) {
    let session = Session { id, user: [id; 4] };
    match cache {
        Cache::Boxed(sessions) => sessions.push(Box::new(session)),
        Cache::Pooled(sessions) => sessions.push(session),
    }
}

/// The process's resident bytes, from `/proc/self/statm`.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fix = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("--fix") => true,
        Some(other) => return Err(format!("unknown option {other} (only --fix)").into()),
    };
    let before = rss();
    let mut cache = if fix {
        Cache::Pooled(Vec::with_capacity(REQUESTS as usize))
    } else {
        Cache::Boxed(Vec::with_capacity(REQUESTS as usize))
    };
    // The burst: every request in flight at once, its scratch alive until the burst ends.
    let mut scratch = Vec::with_capacity((REQUESTS * SCRATCH_PER_REQUEST) as usize);
    for id in 0..REQUESTS {
        parse_request(id, &mut scratch);
        remember_session(id, &mut cache);
    }
    let peak = rss();
    drop(black_box(scratch));
    // The purge the decay timers would make within seconds, made now.
    let released = frag::tune::release_free_memory()?;
    let after = rss();

    let mut report = frag::report();
    if let Some(sites) = report.sites.as_mut() {
        sites.symbolize();
    }
    println!("{report}");
    println!(
        "{}: resident {:.1} MiB before the burst, {:.1} MiB at its peak, {:.1} MiB after it \
         ({:.1} MiB released by the purge); the cache holds {:.1} MiB",
        if fix { "sessions in one pool (--fix)" } else { "sessions in blocks of their own" },
        mib(before),
        mib(peak),
        mib(after),
        mib(released.released()),
        mib(REQUESTS * std::mem::size_of::<Session>() as u64),
    );
    black_box(cache);
    Ok(())
}
