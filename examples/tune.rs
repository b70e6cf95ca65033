//! Two tuning experiments on jemalloc, each setting measured in a fresh process:
//!
//! 1. **Decay sweep**: an async-server allocation pattern on 4 threads with `dirty_decay_ms` at 0,
//!    1000 and 10000. For each: run time, jemalloc's resident bytes under load, right after
//!    everything is dropped, and after the decay time has passed.
//! 2. **Thread-cache limit**: 32 KiB messages sent from one thread to another over a channel, with
//!    `thread.tcache.max` at jemalloc's default, 16 KiB and 4 KiB on both threads: time and minor
//!    page faults per message (the refaults of purged cached blocks), and the same sizes allocated
//!    and freed on a single thread, where a smaller cache costs speed.
//!
//! Every figure comes from `frag::report()` and `getrusage`.
//!
//! `cargo run --release --example tune`

use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use frag::tune::Decay;
use frag::tune::jemalloc::{self, DecayKind};

#[global_allocator]
static A: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);

#[path = "support/measure.rs"]
mod measure;
use measure::{minor_faults, next};

fn resident_mib() -> f64 {
    let report = frag::report();
    report.allocator.and_then(|a| a.resident).unwrap_or(0) as f64 / (1 << 20) as f64
}

/// One handler thread of the server pattern: buffers of 64 B–16 KiB, most short-lived, a window of
/// a few thousand long-lived ones replaced at random.
fn serve(seed: u64, iterations: usize) -> Vec<Vec<u8>> {
    let mut rng = seed | 1;
    let mut live: Vec<Vec<u8>> = Vec::with_capacity(4096);
    for _ in 0..iterations {
        let size = 64 << (next(&mut rng) % 9);
        let buf = vec![1u8; size + (next(&mut rng) % 64) as usize];
        if next(&mut rng) % 10 < 3 {
            if live.len() < 4096 {
                live.push(buf);
            } else {
                let i = (next(&mut rng) % 4096) as usize;
                live[i] = buf;
            }
        }
    }
    live
}

fn decay_child(ms: i64) {
    let decay = Decay::from_millis(ms).expect("decay");
    jemalloc::set_decay(DecayKind::Dirty, decay).expect("set dirty decay");
    let start = Instant::now();
    let threads: Vec<_> =
        (0..4u64).map(|t| std::thread::spawn(move || serve(0x9E37_79B9 * (t + 1), 500_000))).collect();
    let kept: Vec<Vec<Vec<u8>>> = threads.into_iter().map(|t| t.join().expect("handler")).collect();
    let elapsed = start.elapsed();
    let loaded = resident_mib();
    drop(kept);
    let dropped = resident_mib();
    std::thread::sleep(Duration::from_millis(ms.max(0) as u64 + 500));
    jemalloc::decay_all().expect("decay");
    let decayed = resident_mib();
    println!("{ms}\t{:.0}\t{loaded:.1}\t{dropped:.1}\t{decayed:.1}", elapsed.as_secs_f64() * 1e3);
}

const MESSAGES: usize = 100_000;
const MESSAGE: usize = 32 << 10;

fn tcache_child(limit: Option<usize>) {
    let set = move || {
        if let Some(bytes) = limit {
            jemalloc::set_thread_tcache_max(bytes).expect("thread.tcache.max");
        }
    };
    // Single sender, single receiver: the receiver frees what the sender allocated.
    let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(64);
    let receiver = std::thread::spawn(move || {
        set();
        rx.into_iter().map(|m| m[m.len() - 1] as u64).sum::<u64>()
    });
    set();
    let (faults, start) = (minor_faults(), Instant::now());
    for i in 0..MESSAGES {
        let mut m = vec![0u8; MESSAGE];
        m[MESSAGE - 1] = i as u8;
        tx.send(m).expect("send");
    }
    drop(tx);
    receiver.join().expect("receiver");
    let channel_ns = start.elapsed().as_nanos() as f64 / MESSAGES as f64;
    let channel_faults = (minor_faults() - faults) as f64 / MESSAGES as f64;

    // The same size on one thread, a few blocks in flight.
    let start = Instant::now();
    let mut ring: Vec<Vec<u8>> = (0..8).map(|_| vec![0u8; MESSAGE]).collect();
    for i in 0..MESSAGES {
        ring[i % 8] = vec![i as u8; MESSAGE];
    }
    std::hint::black_box(&ring);
    let single_ns = start.elapsed().as_nanos() as f64 / MESSAGES as f64;
    let effective = jemalloc::thread_tcache_max().expect("thread.tcache.max");
    println!("{effective}\t{channel_ns:.0}\t{channel_faults:.2}\t{single_ns:.0}");
}

/// Runs this example again with `args` and returns its output line.
fn child(args: &[&str]) -> String {
    let exe = std::env::current_exe().expect("own path");
    let out = Command::new(exe).args(args).output().expect("run child");
    assert!(out.status.success(), "child {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["--decay-child", ms] => return decay_child(ms.parse().expect("ms")),
        ["--tcache-child", "default"] => return tcache_child(None),
        ["--tcache-child", bytes] => return tcache_child(Some(bytes.parse().expect("bytes"))),
        _ => {}
    }

    let used = jemalloc::effective().expect("jemalloc is wrapped");
    println!("jemalloc {} (options from {}): {}\n", used.version, used.conf_env_var, used.opt);

    println!("1. dirty_decay_ms sweep: 4 threads x 500,000 allocations of 64 B-16 KiB (MiB = jemalloc stats.resident)");
    println!(
        "{:>15} {:>9} {:>12} {:>14} {:>13}",
        "dirty_decay_ms", "time ms", "under load", "after drop", "after decay"
    );
    for ms in ["0", "1000", "10000"] {
        let line = child(&["--decay-child", ms]);
        let f: Vec<&str> = line.split('\t').collect();
        println!("{:>15} {:>9} {:>12} {:>14} {:>13}", f[0], f[1], f[2], f[3], f[4]);
    }

    println!("\n2. thread.tcache.max: {MESSAGES} messages of 32 KiB, one sender thread, one receiver thread");
    println!(
        "{:>10} {:>10} {:>15} {:>15} {:>22}",
        "setting", "effective", "channel ns/msg", "faults/msg", "single-thread ns/op"
    );
    for setting in ["default", "16384", "4096"] {
        let line = child(&["--tcache-child", setting]);
        let f: Vec<&str> = line.split('\t').collect();
        println!("{:>10} {:>10} {:>15} {:>15} {:>22}", setting, f[0], f[1], f[2], f[3]);
    }
    println!(
        "\nFaults per message show whether cached blocks that jemalloc purged are faulted in again on reuse;\n\
         the single-thread column is what a smaller cache costs where no block crosses threads. Measure your\n\
         own pattern before adopting a limit. Apply it per worker with\n\
         frag::tune::jemalloc::tcache_max_on_thread_start, or at start-up with _RJEM_MALLOC_CONF=tcache_max:16384\n\
         (or the frag::jemalloc_conf! macro)."
    );
    for trap in frag::tune::check() {
        println!("warning: {trap}");
    }
}
