//! A stair-step explained: the README's picture (`docs/stair-step.svg`) and the alert's text as a
//! service's log shows it.
//!
//! A publisher is driven round by round. A burst of 7 KiB records leaves one in four alive, one per
//! jemalloc slab (`remember_upload`, long-lived) among three freed (short-lived scratch): the freed
//! space is trapped in slabs that cannot be returned, and RSS steps up with little live data. Later
//! a cache keeps 96 MiB of entries (`cache_entry`): a second step, this time live data. Each alert
//! says what moved and why; the history draws both.
//!
//! `cargo run --release --example stair_step` writes `docs/stair-step.svg` and prints the alerts;
//! `-- --check docs/stair-step.svg` draws the picture again and fails unless the file has the same
//! shape (the same elements, colours and labels, with every number masked: the figures move from
//! run to run, what the picture is made of must not), as CI runs it.

use std::hint::black_box;
use std::time::Duration;

#[global_allocator]
static A: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);

/// A record's size: jemalloc's 7 KiB class, four to a slab.
const RECORD: usize = 7_000;

/// What an upload leaves behind: long-lived.
#[inline(never)]
fn remember_upload() -> Box<[u8; RECORD]> {
    black_box(Box::new([1; RECORD]))
}

/// An upload's scratch: freed at the end of the burst.
#[inline(never)]
fn scratch() -> Box<[u8; RECORD]> {
    black_box(Box::new([2; RECORD]))
}

/// What the cache keeps.
#[inline(never)]
fn cache_entry() -> Box<[u8; 4096]> {
    black_box(Box::new([3; 4096]))
}

/// Turns the calling thread's jemalloc cache on or off: off, allocations take their slab's regions
/// in order, so that one record in four is one a slab (a deterministic picture).
fn thread_cache(on: bool) {
    // SAFETY: `thread.tcache.enabled` is a `bool`, written as one.
    unsafe { tikv_jemalloc_ctl::raw::write(b"thread.tcache.enabled\0", on) }.expect("thread.tcache.enabled");
}

/// The picture with every number masked, line by line, as a set: what it is made of.
fn shape(svg: &str) -> std::collections::BTreeSet<String> {
    svg.lines()
        .map(|line| {
            let mut out = String::with_capacity(line.len());
            let mut in_number = false;
            for c in line.chars() {
                let digit = c.is_ascii_digit() || (in_number && c == '.');
                if digit && !in_number {
                    out.push('0');
                }
                if !digit {
                    out.push(c);
                }
                in_number = digit;
            }
            out
        })
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let check = match args.as_slice() {
        [] => None,
        [flag, path] if flag == "--check" => Some(path.clone()),
        _ => return Err("usage: stair_step [--check docs/stair-step.svg]".into()),
    };
    frag::set_sampling(frag::Sampling::MeanBytes(64 << 10))?;
    let mut publisher = frag::Publisher::new();
    let mut alerts = Vec::new();
    let mut rounds = |n: usize, alerts: &mut Vec<frag::watch::Alert>| {
        for _ in 0..n {
            std::thread::sleep(Duration::from_millis(20));
            alerts.extend(publisher.observe(&frag::report()));
        }
    };
    rounds(10, &mut alerts);
    // The burst: 20,000 uploads, one in four remembered.
    thread_cache(false);
    let mut kept = Vec::with_capacity(5_000);
    let mut scratches = Vec::with_capacity(15_000);
    for i in 0..20_000 {
        if i % 4 == 0 { kept.push(remember_upload()) } else { scratches.push(scratch()) }
    }
    drop(scratches);
    thread_cache(true);
    rounds(12, &mut alerts);
    let cache: Vec<_> = (0..96 << 8).map(|_| cache_entry()).collect();
    rounds(12, &mut alerts);
    for alert in &alerts {
        println!("{alert}\n");
    }
    let svg = frag::history().svg();
    black_box((kept, cache));
    match check {
        None => {
            std::fs::write("docs/stair-step.svg", &svg)?;
            println!("wrote docs/stair-step.svg");
        }
        Some(path) => {
            let current = std::fs::read_to_string(&path)?;
            let (drawn, kept) = (shape(&svg), shape(&current));
            if drawn != kept {
                let new: Vec<_> = drawn.difference(&kept).collect();
                let old: Vec<_> = kept.difference(&drawn).collect();
                return Err(format!(
                    "{path} is not what the example draws now (run `cargo run --release --example stair_step`):\n\
                     drawn, not in the file: {new:#?}\nin the file, not drawn: {old:#?}"
                )
                .into());
            }
            println!("{path} is current");
        }
    }
    Ok(())
}
