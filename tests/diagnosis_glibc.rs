//! The diagnosis on glibc: the `reclaimable` prediction against what `malloc_trim(0)` really
//! releases (RSS from `/proc` before and after a direct call), for free space merged into a heap's
//! top and for free space trapped below a live block.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;

use std::sync::Mutex;

use frag::report::diagnosis::{FindingKind, Severity};

#[global_allocator]
static A: frag::Tracked<std::alloc::System, frag::Exact> = frag::Tracked::new(std::alloc::System);

/// Scenarios measure RSS: one at a time when the harness runs them in one process.
static SERIAL: Mutex<()> = Mutex::new(());

const MIB: f64 = (1 << 20) as f64;

/// 96 MiB of 1,000 B blocks, touched, freed oldest first (`fifo`) or newest first, then the
/// prediction checked against a real `malloc_trim(0)`. Runs on a thread of its own, so its blocks
/// live in a thread arena.
fn scenario(fifo: bool) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // glibc would trim a heap's top on free above 128 KiB; keep everything until the trim below.
    frag::tune::glibc::set(frag::tune::glibc::Mallopt::TrimThreshold(1 << 30)).unwrap();
    // SAFETY: malloc_trim has no preconditions; start from a trimmed heap.
    unsafe { libc::malloc_trim(0) };
    std::thread::spawn(move || {
        let mut blocks: Vec<Vec<u8>> = (0..96 * 1024).map(|i| vec![i as u8 | 1; 1000]).collect();
        if fifo {
            drop(blocks);
        } else {
            while let Some(b) = blocks.pop() {
                drop(b);
            }
        }
        let r = frag::report();
        eprintln!("{r}");
        let f = r.diagnosis.as_ref().unwrap().findings.iter().find(|f| f.kind == FindingKind::Reclaimable).cloned();
        let f = f.expect("a reclaimable finding");
        assert_eq!(f.severity, Severity::Warn);
        assert!(f.estimated);
        assert!(f.remedy.contains("trim"), "{}", f.remedy);

        let before = common::rss_bytes();
        // SAFETY: as above.
        unsafe { libc::malloc_trim(0) };
        let released = before.saturating_sub(common::rss_bytes());
        let (p, got) = (f.bytes as f64, released as f64);
        eprintln!("fifo {fifo}: predicted {:.1} MiB, released {:.1} MiB", p / MIB, got / MIB);
        assert!(got > 32.0 * MIB, "released {got}");
        assert!((got - p).abs() <= 0.10 * got, "predicted {p}, released {got}");

        // Trimmed: the same free chunks are still there, but nothing is left to release.
        let again = frag::report();
        let left = again.diagnosis.as_ref().unwrap().breakdown.reclaimable_bytes as f64;
        assert!(left < 0.1 * got, "after the trim still {left} reclaimable");
    })
    .join()
    .unwrap();
}

#[test]
fn freed_oldest_first() {
    scenario(true);
}

#[test]
fn freed_newest_first() {
    scenario(false);
}
