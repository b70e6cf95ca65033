//! Bad input everywhere gets a typed error, never a panic: generated `malloc_conf` strings (valid
//! ones round-trip), every sampling mean, tuning values out of range, and knobs of an allocator that
//! is not the wrapped one.

use proptest::prelude::*;

#[global_allocator]
static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Any `MeanBytes(n)` from 64 KiB up is accepted as it is (the sampled tier's least); below 4096
    /// (and `u64::MAX`) it is `TooSmall`, from 4096 to 64 KiB `NeedsExactTier`, and the setting in
    /// force does not change.
    #[test]
    fn every_sampling_mean_is_accepted_or_a_typed_error(n in prop_oneof![any::<u64>(), 0u64..=8192, 60_000u64..=70_000, Just(u64::MAX)]) {
        let before = frag::sampling();
        match frag::set_sampling(frag::Sampling::MeanBytes(n)) {
            // Every refusal names the range this tier accepts.
            Err(e) if !e.to_string().contains("65536..=18446744073709551614") => {
                prop_assert!(false, "{e} does not name the sampled tier's range");
            }
            Err(frag::SamplingError::TooSmall { mean }) => {
                prop_assert!(n < 4096 || n == u64::MAX, "{n} refused");
                prop_assert_eq!(mean, n);
                prop_assert_eq!(frag::sampling(), before);
            }
            // This file's `Tracked` is the sampled tier, whose frees test the mark alone: means that
            // would not mark are refused.
            Err(frag::SamplingError::NeedsExactTier { mean }) => {
                prop_assert!((4096..64 << 10).contains(&n), "{n} refused");
                prop_assert_eq!(mean, n);
                prop_assert_eq!(frag::sampling(), before);
            }
            Err(e) => prop_assert!(false, "unexpected error {e:?}"),
            Ok(effective) => {
                prop_assert!((64 << 10..u64::MAX).contains(&n), "{n} accepted");
                prop_assert_eq!(effective, frag::Sampling::MeanBytes(n));
                prop_assert_eq!(frag::sampling(), effective);
            }
        }
    }
}

/// `EveryBlock` needs the exact tier; the refusal says so and names what this tier accepts.
#[test]
fn every_block_in_the_sampled_tier_names_the_accepted_means() {
    let before = frag::sampling();
    let e = frag::set_sampling(frag::Sampling::EveryBlock).unwrap_err();
    assert_eq!(e, frag::SamplingError::NeedsExactTier { mean: 0 });
    let text = e.to_string();
    assert!(text.contains("frag::Exact") && text.contains("MeanBytes(65536..=18446744073709551614)"), "{text}");
    assert_eq!(frag::sampling(), before);
}

#[cfg(feature = "jemalloc")]
mod conf {
    use frag::tune::jemalloc::{ConfError, JemallocConfig};
    use proptest::prelude::*;

    /// Strings shaped like `malloc_conf`: known and unknown keys, numbers in every base jemalloc
    /// reads, signs, booleans, words, stray separators.
    fn conf_like() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            prop::sample::select(vec![
                "background_thread",
                "max_background_threads",
                "dirty_decay_ms",
                "muzzy_decay_ms",
                "tcache",
                "tcache_max",
                "narenas",
                "retain",
                "oversize_threshold",
                "percpu_arena",
                "thp",
                "metadata_thp",
                "abort_conf",
                "prof",
                "junk",
                "lg_extent_max_active_fit",
            ])
            .prop_map(str::to_owned),
            "[a-z_]{0,14}",
        ];
        let value = prop_oneof![
            prop::sample::select(vec![
                "true", "false", "default", "percpu", "phycpu", "disabled", "always", "never", "auto", "-1", "0",
            ])
            .prop_map(str::to_owned),
            "-?[0-9]{1,22}",
            "0[xX][0-9a-fA-F]{0,18}",
            "0[0-7]{0,24}",
            "[ -~]{0,8}",
        ];
        let pair = prop_oneof![
            8 => (key, value).prop_map(|(k, v)| format!("{k}:{v}")),
            1 => "[ -~]{0,12}",
        ];
        prop::collection::vec(pair, 0..8).prop_map(|pairs| pairs.join(","))
    }

    fn check(s: &str) -> Result<(), TestCaseError> {
        let (lenient, errors) = JemallocConfig::parse_lenient(s);
        let strict = s.parse::<JemallocConfig>();
        match (&strict, errors.first()) {
            (Ok(c), None) => prop_assert_eq!(c, &lenient),
            (Err(e), Some(first)) => prop_assert_eq!(e, first),
            (Ok(_), Some(e)) => prop_assert!(false, "strict parse accepted what lenient rejected: {e}"),
            (Err(e), None) => prop_assert!(false, "strict parse failed with no lenient error: {e}"),
        }
        for e in &errors {
            prop_assert!(!e.to_string().is_empty());
            if let ConfError::UnknownKey { key, did_you_mean: Some(k) } = e {
                prop_assert_ne!(key.as_str(), *k, "a suggestion differs from what was written");
            }
        }
        // What was accepted renders to a string that parses back to the same options.
        if let Ok(rendered) = lenient.render() {
            let again = rendered.as_str().parse::<JemallocConfig>();
            prop_assert_eq!(again, Ok(lenient), "{} rendered as {}", s, rendered.as_str());
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

        #[test]
        fn conf_like_strings_parse_or_fail_typed(s in conf_like()) {
            check(&s)?;
        }

        #[test]
        fn arbitrary_strings_parse_or_fail_typed(s in any::<String>()) {
            check(&s)?;
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod glibc {
    use frag::tune::TuneError;
    use frag::tune::glibc::{self, Mallopt};
    use proptest::prelude::*;

    const I32_MAX: u64 = i32::MAX as u64;

    proptest! {
        /// Values outside the documented ranges never reach `mallopt`: each is an `InvalidValue`
        /// naming the knob and the accepted range.
        #[test]
        fn out_of_range_mallopt_values_are_typed_errors(v in (I32_MAX + 1)..=u64::from(u32::MAX), big in (32u64 << 20) + 1..=I32_MAX) {
            let options = [
                Mallopt::TrimThreshold(v as usize),
                Mallopt::TopPad(v as usize),
                Mallopt::MmapThreshold(big as usize),
                Mallopt::MmapMax(v as u32),
                Mallopt::ArenaMax(v as u32),
                Mallopt::ArenaMax(0),
            ];
            for option in options {
                match glibc::set(option) {
                    Err(TuneError::InvalidValue { expected, .. }) => prop_assert!(!expected.is_empty()),
                    other => prop_assert!(false, "{option:?} gave {other:?}"),
                }
            }
        }
    }
}

/// Knobs of allocators other than the wrapped one (`System`) are refused, typed, without side effects.
#[test]
fn knobs_of_other_allocators_are_wrong_backend() {
    #[cfg(feature = "jemalloc")]
    {
        use frag::tune::jemalloc;
        let wrong = |r: Result<(), frag::tune::TuneError>| matches!(r, Err(frag::tune::TuneError::WrongBackend { .. }));
        assert!(wrong(jemalloc::set_thread_tcache_max(4096).map(drop)));
        assert!(wrong(jemalloc::purge_all().map(drop)));
        assert!(wrong(jemalloc::set_background_threads(true).map(drop)));
    }
    #[cfg(feature = "mimalloc")]
    {
        use frag::tune::mimalloc::{self, MimallocOption};
        let r = mimalloc::set(MimallocOption::ArenaEagerCommit(mimalloc::EagerCommit::Never));
        assert!(matches!(r, Err(frag::tune::TuneError::WrongBackend { .. })), "{r:?}");
    }
    // Backend-neutral calls work for glibc.
    assert!(frag::tune::release_free_memory().is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every reclaimer setting out of its range is a typed error naming it, NaN and infinities
    /// included; in range, the settings pass (the backend, glibc here, can reclaim).
    #[test]
    fn reclaimer_settings_are_checked(
        share in prop_oneof![any::<f64>(), -1.0f64..2.0, Just(f64::NAN), Just(f64::INFINITY), Just(0.0), Just(1.0)],
        poll_ms in prop_oneof![0u64..100, 59_000u64..61_000, any::<u64>()],
    ) {
        drop(vec![0u8; 10]);
        let poll = std::time::Duration::from_millis(poll_ms);
        let valid_share = share > 0.0 && share <= 1.0;
        let valid_poll = (10..=60_000).contains(&poll_ms);
        let r = frag::reclaim::Reclaimer::new().cpu_share(share).poll(poll).check();
        match r {
            Ok(()) => prop_assert!(valid_share && valid_poll && cfg!(target_env = "gnu")),
            Err(frag::reclaim::ReclaimError::InvalidSetting { setting, .. }) => {
                prop_assert!(!(valid_share && valid_poll));
                prop_assert!(setting == if valid_poll { "cpu_share" } else { "poll" }, "{setting}");
            }
            Err(e) => prop_assert!(false, "{e}"),
        }
        let threshold = frag::reclaim::Reclaimer::new().threshold(0, share).check();
        prop_assert_eq!(threshold.is_ok(), (0.0..=1.0).contains(&share));
    }
}
