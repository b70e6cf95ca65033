//! glibc tuning under `Tracked<System>`: `malloc_trim` against `/proc`, range checks, and jemalloc
//! knobs refused without initialising jemalloc.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;

use frag::tune::TuneError;
use frag::tune::glibc::{self, MAX_MMAP_THRESHOLD, Mallopt};
use proptest::prelude::*;

#[global_allocator]
static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);

#[test]
fn trim_returns_pages_freed_below_a_live_block() {
    // 4 KiB blocks stay below the mmap threshold, so they come from the arena's heap; the last one
    // stays live and keeps the heap from shrinking from the top.
    let mut blocks: Vec<Vec<u8>> = (0..50_000).map(|i| vec![i as u8; 4096]).collect();
    let pin = blocks.pop();
    drop(blocks);
    let held = common::rss_bytes();
    let released = glibc::trim().unwrap();
    let after = common::rss_bytes();
    assert!(held - after > 120 << 20, "rss {held} -> {after}");
    assert!(released.released() > 120 << 20, "{released:?}");
    assert!(frag::tune::release_free_memory().unwrap().rss_after.is_some());
    drop(pin);
}

#[test]
fn mallopt_values_are_range_checked_before_glibc_sees_them() {
    glibc::set(Mallopt::ArenaMax(4)).unwrap();
    glibc::set(Mallopt::MmapThreshold(MAX_MMAP_THRESHOLD)).unwrap();
    glibc::set(Mallopt::TrimThreshold(1 << 20)).unwrap();
    glibc::set(Mallopt::TopPad(64 << 10)).unwrap();
    glibc::set(Mallopt::MmapMax(65536)).unwrap();
    for bad in [
        Mallopt::ArenaMax(0),
        Mallopt::MmapThreshold(MAX_MMAP_THRESHOLD + 1),
        Mallopt::TrimThreshold(usize::MAX),
        Mallopt::TopPad(1 << 40),
        Mallopt::MmapMax(u32::MAX),
    ] {
        let e = glibc::set(bad).unwrap_err();
        assert!(matches!(e, TuneError::InvalidValue { .. }), "{bad:?}: {e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Every `mallopt` value is either refused before glibc sees it, with the accepted range named,
    /// or taken by glibc's own `mallopt` (which returns failure, `TuneError::Refused`, for a value it
    /// will not take: that never happens, so no range here is wider than glibc's). A top pad between
    /// 64 MiB and `i32::MAX` is not applied in this process (every `brk` would then reserve that much).
    #[test]
    fn every_mallopt_value_is_taken_or_refused_with_its_range(
        which in 0usize..5,
        n in prop_oneof![0usize..=(64 << 20), (i32::MAX as usize - 2)..=(i32::MAX as usize + 2), any::<usize>()],
    ) {
        let n = if which == 3 && (64 << 20..=i32::MAX as usize).contains(&n) { n % (64 << 20) } else { n };
        let small = u32::try_from(n).unwrap_or(u32::MAX);
        let (option, in_range) = match which {
            0 => (Mallopt::ArenaMax(small), small >= 1 && small <= i32::MAX as u32),
            1 => (Mallopt::TrimThreshold(n), n <= i32::MAX as usize),
            2 => (Mallopt::MmapThreshold(n), n <= MAX_MMAP_THRESHOLD),
            3 => (Mallopt::TopPad(n), n <= i32::MAX as usize),
            _ => (Mallopt::MmapMax(small), small <= i32::MAX as u32),
        };
        match glibc::set(option) {
            Ok(()) => prop_assert!(in_range, "{option:?} taken"),
            Err(TuneError::InvalidValue { expected, .. }) => {
                prop_assert!(!in_range, "{option:?} refused");
                prop_assert!(expected.contains(" to "), "{option:?}: {expected}");
            }
            Err(e) => prop_assert!(false, "{option:?}: {e}"),
        }
    }
}

#[test]
fn a_purge_delay_is_not_a_glibc_knob() {
    let e = frag::tune::set_purge_delay(frag::tune::Decay::Immediate).unwrap_err();
    assert!(
        matches!(
            e,
            TuneError::Unsupported {
                backend: frag::backend::WrappedBackend::Known(frag::backend::Backend::System),
                ..
            }
        ),
        "{e}"
    );
}

#[cfg(feature = "jemalloc")]
#[test]
fn jemalloc_knobs_fail_without_starting_jemalloc() {
    use frag::tune::jemalloc;
    let vm_size = || {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status.lines().find(|l| l.starts_with("VmSize")).unwrap().to_owned()
    };
    let before = vm_size();
    let wrong = TuneError::WrongBackend {
        wanted: frag::backend::Backend::Jemalloc,
        installed: frag::backend::WrappedBackend::Known(frag::backend::Backend::System),
    };
    assert_eq!(jemalloc::purge_all().unwrap_err(), wrong);
    assert_eq!(jemalloc::set_thread_tcache_max(4096).unwrap_err(), wrong);
    assert_eq!(jemalloc::effective().unwrap_err(), wrong);
    assert_eq!(jemalloc::set_background_threads(true).unwrap_err(), wrong);
    assert!(jemalloc::tcache_max_on_thread_start(4096).is_err());
    // jemalloc maps several MiB when it initialises; nothing was mapped.
    assert_eq!(vm_size(), before);
}

/// Variables other allocators read, and a misspelt glibc one, in a child process.
#[test]
fn ignored_and_misspelt_variables_are_reported() {
    common::run_child(
        "ignored_and_misspelt_child",
        &[("_RJEM_MALLOC_CONF", "dirty_decay_ms:0"), ("MALLOC_TRIM_THRESHOLD", "0"), ("MALLOC_ARENA_MAX", "2")],
    );
}

#[test]
#[ignore = "child process helper"]
fn ignored_and_misspelt_child() {
    common::child_only("ignored_and_misspelt_variables_are_reported");
    let (report, log) = common::capture_tracing(frag::report);
    let w = report.warnings.iter().map(|w| w.message.as_str()).collect::<Vec<_>>().join("\n");
    assert!(w.contains("_RJEM_MALLOC_CONF is set but is read by jemalloc, and the Rust heap uses glibc"), "{w}");
    assert!(
        w.contains("MALLOC_TRIM_THRESHOLD is set but nothing reads it: did you mean MALLOC_TRIM_THRESHOLD_?"),
        "{w}"
    );
    assert!(!w.contains("MALLOC_ARENA_MAX"), "glibc reads it: {w}");
    assert!(log.contains("did you mean MALLOC_TRIM_THRESHOLD_"), "{log}");
}
