//! mimalloc tuning: options read back through mimalloc's own `mi_option_get`, `mi_collect` against
//! `/proc`.
#![cfg(feature = "mimalloc")]

mod common;

use std::time::Duration;

use frag::tune::mimalloc::{self, EagerCommit, MimallocOption};
use frag::tune::{Decay, TuneError};

#[global_allocator]
static A: frag::Tracked<::mimalloc::MiMalloc> = frag::Tracked::new(::mimalloc::MiMalloc);

/// mimalloc's own value for option number `n` of the linked (v3) numbering.
fn raw_option(n: libmimalloc_sys::mi_option_t) -> std::ffi::c_long {
    // SAFETY: mi_option_get has no preconditions.
    unsafe { libmimalloc_sys::mi_option_get(n) }
}

#[test]
fn options_land_under_the_linked_versions_numbers() {
    // SAFETY: mi_version has no preconditions.
    assert!(unsafe { libmimalloc_sys::mi_version() } >= 30000, "these numbers are mimalloc v3's");
    mimalloc::set(MimallocOption::PurgeDelay(Decay::After(Duration::from_millis(250)))).unwrap();
    assert_eq!(raw_option(15), 250);
    mimalloc::set(MimallocOption::AllowThp(false)).unwrap();
    assert_eq!(raw_option(43), 0, "allow_thp is 43 in v3 (37 in v2)");
    mimalloc::set(MimallocOption::GenericCollect(5000)).unwrap();
    assert_eq!(raw_option(34), 5000);
    mimalloc::set(MimallocOption::ArenaEagerCommit(EagerCommit::OnOvercommit)).unwrap();
    assert_eq!(raw_option(4), 2);
    mimalloc::set(MimallocOption::MinimalPurgeSize(64 << 10)).unwrap();
    assert_eq!(raw_option(44), 64, "kept in KiB");
    let current = mimalloc::current().unwrap();
    assert!(current.contains(&MimallocOption::PurgeDelay(Decay::After(Duration::from_millis(250)))));
    assert!(current.contains(&MimallocOption::GenericCollect(5000)));
}

#[test]
fn bad_and_misbehaving_values_are_refused() {
    let e = mimalloc::set(MimallocOption::PurgeDelay(Decay::Immediate)).unwrap_err();
    assert!(
        matches!(e, TuneError::Refused { knob: "purge_delay", reason } if reason.contains("MIMALLOC_PURGE_DELAY=0"))
    );
    let e = mimalloc::set(MimallocOption::EagerCommitDelay(1)).unwrap_err();
    assert!(matches!(e, TuneError::Unsupported { knob: "eager_commit_delay", .. }), "{e}");
    let e = mimalloc::set(MimallocOption::ArenaReserve(1000)).unwrap_err();
    assert!(matches!(e, TuneError::InvalidValue { expected: "whole KiB", .. }), "{e}");
    let e = mimalloc::set(MimallocOption::PurgeDelay(Decay::After(Duration::from_micros(10)))).unwrap_err();
    assert!(matches!(e, TuneError::InvalidValue { .. }), "{e}");
    #[cfg(feature = "jemalloc")]
    assert_eq!(
        frag::tune::jemalloc::purge_all().unwrap_err(),
        TuneError::WrongBackend {
            wanted: frag::Backend::Jemalloc,
            installed: frag::WrappedBackend::Known(frag::Backend::Mimalloc)
        }
    );
}

#[test]
fn collect_returns_freed_memory() {
    // A long delay keeps freed pages resident until forced.
    mimalloc::set(MimallocOption::PurgeDelay(Decay::After(Duration::from_secs(600)))).unwrap();
    let blocks: Vec<Vec<u8>> = (0..3000).map(|i| vec![i as u8; 64 << 10]).collect();
    drop(blocks);
    let held = common::rss_bytes();
    let released = mimalloc::collect(true).unwrap();
    let after = common::rss_bytes();
    assert!(held - after > 100 << 20, "rss {held} -> {after}");
    assert!(released.released() > 100 << 20, "{released:?}");
}
