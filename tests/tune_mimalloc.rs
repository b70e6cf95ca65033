//! mimalloc tuning: options read back through mimalloc's own `mi_option_get`, `mi_collect` against
//! `/proc`.
#![cfg(feature = "mimalloc")]

mod common;

use std::time::Duration;

use frag::tune::mimalloc::{self, EagerCommit, MimallocOption};
use frag::tune::{Decay, TuneError};
use proptest::prelude::*;

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

/// Sets option `n` back to `v` (what it held before a case changed it).
fn restore(n: libmimalloc_sys::mi_option_t, v: std::ffi::c_long) {
    // SAFETY: mi_option_set has no preconditions.
    unsafe { libmimalloc_sys::mi_option_set(n, v) }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every value is what mimalloc holds afterwards (read with its own `mi_option_get`), or refused
    /// with the accepted range named (a purge delay of 0 is refused for what it does, see
    /// `bad_and_misbehaving_values_are_refused`). Each option is set back after each case.
    #[test]
    fn every_option_value_is_held_as_it_is_or_refused_with_its_range(
        ms in prop_oneof![-1i64..=3, 0i64..=100_000, any::<i64>()],
        nanos in prop_oneof![Just(0u32), 1u32..1_000_000],
        bytes in prop_oneof![(0usize..=1 << 20).prop_map(|k| k * 1024), 0usize..=1 << 30, any::<usize>()],
        count in any::<u32>(),
    ) {
        let decay = match ms {
            -1 => Decay::Disabled,
            0 => Decay::Immediate,
            ms => Decay::After(Duration::from_millis(ms.unsigned_abs()) + Duration::from_nanos(u64::from(nanos))),
        };
        let before = raw_option(15);
        match mimalloc::set(MimallocOption::PurgeDelay(decay)) {
            Ok(_) => prop_assert_eq!(Some(raw_option(15)), decay.as_millis()),
            Err(TuneError::InvalidValue { expected, .. }) => {
                prop_assert!(decay.as_millis().is_none(), "{decay:?} refused");
                prop_assert!(expected.contains("1 ms") && expected.contains("18446744072000 ms"), "{expected}");
            }
            Err(TuneError::Refused { .. }) => prop_assert_eq!(decay, Decay::Immediate),
            Err(e) => prop_assert!(false, "{decay:?}: {e}"),
        }
        restore(15, before);

        let before = raw_option(23);
        match mimalloc::set(MimallocOption::ArenaReserve(bytes)) {
            Ok(_) => prop_assert_eq!(raw_option(23) as i128 * 1024, bytes as i128),
            Err(TuneError::InvalidValue { expected, .. }) => {
                prop_assert!(bytes % 1024 != 0 || bytes / 1024 > std::ffi::c_long::MAX as usize, "{bytes} refused");
                prop_assert_eq!(expected, "whole KiB");
            }
            Err(e) => prop_assert!(false, "{bytes}: {e}"),
        }
        restore(23, before);

        let before = raw_option(34);
        mimalloc::set(MimallocOption::GenericCollect(count)).unwrap();
        prop_assert_eq!(raw_option(34), std::ffi::c_long::from(count));
        restore(34, before);
    }
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
            wanted: frag::backend::Backend::Jemalloc,
            installed: frag::backend::WrappedBackend::Known(frag::backend::Backend::Mimalloc)
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
