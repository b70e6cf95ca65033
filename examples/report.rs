//! The main demonstration: a multi-threaded server-like workload, then `frag::report()`.
//!
//! Four "connection handler" threads allocate 2–5 buffers of 128 B–16 KiB per iteration; 70% die
//! within a few iterations, 30% live for hundreds (the async-server pattern of the reference
//! write-ups). A quarter of the long-lived buffers are handed to another thread to be freed there, as
//! a work-stealing runtime would. After a few seconds the report is printed under load, then once more
//! after everything was dropped: resident memory that stays behind is the fragmentation. Last, the
//! sites that held the most bytes under load, with their frames named.
//!
//! `cargo run --release --example report` (jemalloc); `--no-default-features` for the system allocator,
//! `--no-default-features --features mimalloc` (or `snmalloc`) for the others.

use std::sync::mpsc;
use std::time::{Duration, Instant};

#[path = "support/global_allocator.rs"]
mod global_allocator;

const HANDLERS: u64 = 4;
const RUN_FOR: Duration = Duration::from_secs(3);
const SIZES: [usize; 8] = [128, 256, 512, 1024, 2048, 4096, 8192, 16_384];

/// xorshift64: deterministic, allocation-free.
fn next(rng: &mut u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng
}

/// One handler: returns the buffers still alive when time ran out (the "open connections").
fn handler(id: u64, deadline: Instant, handoff: mpsc::Sender<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut rng = 0x9e37_79b9_7f4a_7c15 ^ (id + 1);
    let mut live: Vec<(Vec<u8>, u32)> = Vec::new();
    let mut iteration = 0u64;
    while Instant::now() < deadline {
        for _ in 0..2 + next(&mut rng) % 4 {
            let r = next(&mut rng);
            let size = SIZES[(r % SIZES.len() as u64) as usize];
            let lifetime = if r % 10 < 7 { 1 + (r >> 8) % 20 } else { 100 + (r >> 8) % 1900 } as u32;
            let mut buf = vec![0u8; size];
            buf[0] = iteration as u8;
            live.push((buf, lifetime));
        }
        live.retain_mut(|(buf, left)| {
            if *left > 0 {
                *left -= 1;
                return true;
            }
            // A quarter of the long-lived buffers finish on another thread.
            if buf.len() >= 4096 && buf[0] % 4 == 0 {
                let _ = handoff.send(std::mem::take(buf));
            }
            false
        });
        iteration += 1;
    }
    live.into_iter().map(|(b, _)| b).collect()
}

fn main() {
    let deadline = Instant::now() + RUN_FOR;
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let reaper = std::thread::Builder::new()
        .name("reaper".into())
        .spawn(move || rx.iter().map(|b| b.len()).sum::<usize>())
        .expect("spawn reaper");
    let handlers: Vec<_> = (0..HANDLERS)
        .map(|id| {
            let tx = tx.clone();
            std::thread::Builder::new()
                .name(format!("handler-{id}"))
                .spawn(move || handler(id, deadline, tx))
                .expect("spawn handler")
        })
        .collect();
    drop(tx);
    let open: Vec<Vec<Vec<u8>>> = handlers.into_iter().map(|h| h.join().expect("handler")).collect();
    let reaped = reaper.join().expect("reaper");

    let mut report = frag::report();
    println!("{report}");
    println!("(reaper freed {} MiB handed over by the handlers)\n", reaped >> 20);

    drop(open);
    let after = frag::report();
    let mib = |b: Option<u64>| b.map_or("-".to_owned(), |b| format!("{:.1} MiB", b as f64 / 1048576.0));
    println!(
        "after dropping everything: tracked live {}, allocator resident {}, process rss {}",
        mib(Some(after.tracked.allocated_bytes)),
        mib(after.allocator.and_then(|a| a.resident)),
        mib(after.process.rss_bytes),
    );

    // Named last: symbolizing reads the program's debug information (tens of MiB, frag's own memory,
    // released when done), which would have taken time from the figures above.
    if let Some(sites) = report.sites.as_mut() {
        sites.symbolize();
        println!("\nthe sites holding the most bytes under load, named (two frames each):");
        for row in sites.top.iter().take(3) {
            println!("  ≈{} in use", mib(Some(row.inuse_bytes)));
            row.frames.iter().take(2).for_each(|frame| println!("      {frame}"));
        }
        println!(
            "(sites inside one function differ by line: a release build names lines with \
             `debug = \"line-tables-only\"` in its profile)"
        );
    }
}
