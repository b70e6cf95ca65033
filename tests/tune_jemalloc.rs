//! jemalloc tuning: every write checked against jemalloc's own mallctl answers, read independently
//! through tikv-jemalloc-ctl.
#![cfg(feature = "jemalloc")]

mod common;

use std::time::Duration;

use frag::tune::jemalloc::{self, DecayKind, JemallocConfig};
use frag::tune::{Decay, TuneError};
use proptest::prelude::*;
use tikv_jemalloc_ctl::raw;

#[global_allocator]
static A: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);

/// jemalloc's own `arena.<i>.<leaf>` (an `isize` key), `None` if the arena is not initialised.
fn arena_decay(i: usize, leaf: &str) -> Option<isize> {
    let init = format!("arena.{i}.initialized\0");
    // SAFETY: `arena.<i>.initialized` is a bool key.
    if !unsafe { raw::read::<bool>(init.as_bytes()) }.unwrap() {
        return None;
    }
    let key = format!("arena.{i}.{leaf}\0");
    // SAFETY: decay keys are `ssize_t`.
    Some(unsafe { raw::read::<isize>(key.as_bytes()) }.unwrap())
}

fn resident() -> u64 {
    tikv_jemalloc_ctl::epoch::advance().unwrap();
    tikv_jemalloc_ctl::stats::resident::read().unwrap() as u64
}

#[test]
fn decay_reaches_every_initialised_arena_and_new_ones() {
    // Put several threads on their own arenas first.
    let threads: Vec<_> = (0..6).map(|_| std::thread::spawn(|| std::hint::black_box(vec![1u8; 100_000]))).collect();
    threads.into_iter().for_each(|t| drop(t.join().unwrap()));
    let narenas = tikv_jemalloc_ctl::arenas::narenas::read().unwrap() as usize;

    for (kind, leaf, decay, ms) in [
        (DecayKind::Dirty, "dirty_decay_ms", Decay::After(Duration::from_millis(1234)), 1234),
        (DecayKind::Muzzy, "muzzy_decay_ms", Decay::Disabled, -1),
        (DecayKind::Dirty, "dirty_decay_ms", Decay::Immediate, 0),
    ] {
        let change = jemalloc::set_decay(kind, decay).unwrap();
        let initialised: Vec<isize> = (0..narenas).filter_map(|i| arena_decay(i, leaf)).collect();
        assert!(initialised.len() >= 2, "only {} arenas initialised", initialised.len());
        assert!(initialised.iter().all(|v| *v == ms), "{leaf}: {initialised:?}");
        assert_eq!(change.arenas_updated, initialised.len());
        assert_eq!(change.arenas_updated + change.arenas_uninitialised, narenas);
        let default = format!("arenas.{leaf}\0");
        // SAFETY: decay keys are `ssize_t`.
        assert_eq!(unsafe { raw::read::<isize>(default.as_bytes()) }.unwrap(), ms);
    }
    let used = jemalloc::effective().unwrap();
    assert!(used.arenas.iter().all(|a| a.dirty == Decay::Immediate && a.muzzy == Decay::Disabled));
    assert_eq!(used.default_dirty_decay, Decay::Immediate);
}

#[test]
fn purge_returns_freed_pages_that_decay_would_keep() {
    jemalloc::set_decay(DecayKind::Dirty, Decay::Disabled).unwrap();
    jemalloc::set_decay(DecayKind::Muzzy, Decay::Disabled).unwrap();
    let blocks: Vec<Vec<u8>> = (0..1024).map(|i| vec![i as u8; 64 << 10]).collect();
    drop(blocks);
    jemalloc::flush_thread_tcache().unwrap();
    let held = resident();
    let purged = jemalloc::purge_all().unwrap();
    let after = resident();
    assert!(held - after > 48 << 20, "resident {held} -> {after}");
    assert!(purged.released() > 48 << 20, "{purged:?}");
}

/// A decay from parts that cover every kind of value: the two special ones, whole milliseconds,
/// fractions of one, zero, and durations beyond what jemalloc's clock holds.
fn any_decay() -> impl Strategy<Value = Decay> {
    let after =
        (prop_oneof![0u64..=20, 0u64..=20_000_000_000, any::<u64>()], prop_oneof![Just(0u32), 0u32..1_000_000_000])
            .prop_map(|(secs, nanos)| Decay::After(Duration::new(secs, nanos / 1_000_000 * 1_000_000 + nanos % 2)));
    prop_oneof![Just(Decay::Disabled), Just(Decay::Immediate), after]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// One policy, at run time and at compile time alike: a value out of range is refused with an
    /// error that names the range; any other value is what jemalloc holds afterwards (read here
    /// through tikv-jemalloc-ctl), except that a thread-cache limit may be rounded up to a size
    /// class, never lowered. `JemallocConfig::render` (what `jemalloc_conf!` runs at compile time)
    /// accepts exactly what the run-time call accepts.
    #[test]
    fn no_knob_takes_a_value_silently(
        decay in any_decay(),
        bytes in prop_oneof![0usize..=40_000, 32_760usize..=32_800, any::<usize>()],
        threads in prop_oneof![0usize..=4, any::<usize>()],
    ) {
        let conf = |c: JemallocConfig| c.render().map(drop);
        // Decays.
        let run_time = jemalloc::set_decay(DecayKind::Dirty, decay);
        match &run_time {
            Ok(change) => {
                prop_assert_eq!(change.decay, decay);
                prop_assert_eq!(arena_decay(0, "dirty_decay_ms").map(|ms| ms as i64), decay.as_millis());
            }
            Err(TuneError::InvalidValue { expected, .. }) => {
                prop_assert!(decay.as_millis().is_none(), "{decay:?} refused");
                prop_assert!(expected.contains("1 ms") && expected.contains("18446744072000 ms"), "{expected}");
            }
            Err(e) => prop_assert!(false, "{decay:?}: {e}"),
        }
        let at_compile_time = conf(JemallocConfig::new().dirty_decay(decay));
        prop_assert_eq!(at_compile_time.is_ok(), run_time.is_ok(), "{:?}", at_compile_time);
        if let Err(why) = at_compile_time {
            prop_assert!(why.contains("18446744072000 ms"), "{why}");
        }
        prop_assert_eq!(conf(JemallocConfig::new().muzzy_decay(decay)).is_ok(), run_time.is_ok());

        // The calling thread's cache limit.
        // SAFETY: `arenas.page` is a size_t key.
        let limit = 8 * unsafe { raw::read::<usize>(b"arenas.page\0") }.unwrap();
        let run_time = jemalloc::set_thread_tcache_max(bytes);
        match &run_time {
            Ok(t) => {
                prop_assert!(bytes <= limit, "{bytes} accepted");
                prop_assert_eq!(t.requested, bytes);
                // SAFETY: `thread.tcache.max` is a size_t key.
                let held = unsafe { raw::read::<usize>(b"thread.tcache.max\0") }.unwrap();
                prop_assert_eq!(held, t.effective);
                prop_assert!(bytes <= held && held <= limit, "{bytes} became {held}");
            }
            Err(e @ TuneError::InvalidValue { .. }) => {
                prop_assert!(bytes > limit, "{bytes} refused");
                prop_assert!(e.to_string().contains(&format!("0 to {limit}")), "{e}");
            }
            Err(e) => prop_assert!(false, "{bytes}: {e}"),
        }
        prop_assert_eq!(jemalloc::tcache_max_on_thread_start(bytes).is_ok(), run_time.is_ok());
        let at_compile_time = conf(JemallocConfig::new().tcache_max(bytes));
        prop_assert_eq!(at_compile_time.is_ok(), run_time.is_ok(), "{:?}", at_compile_time);
        if let Err(why) = at_compile_time {
            prop_assert!(why.contains("32768"), "{why}");
        }

        // The number of background threads (never started here: only the limit changes).
        // SAFETY: `opt.max_background_threads` is a size_t key.
        let ceiling = unsafe { raw::read::<usize>(b"opt.max_background_threads\0") }.unwrap();
        match jemalloc::set_max_background_threads(threads) {
            Ok(before) => {
                prop_assert!((1..=ceiling).contains(&threads), "{threads} accepted");
                prop_assert_eq!(tikv_jemalloc_ctl::max_background_threads::read().unwrap(), threads);
                jemalloc::set_max_background_threads(before).unwrap();
            }
            Err(e @ TuneError::InvalidValue { .. }) => {
                prop_assert!(threads == 0 || threads > ceiling, "{threads} refused");
                prop_assert!(e.to_string().contains(&format!("1 to {ceiling}")), "{e}");
            }
            Err(e) => prop_assert!(false, "{threads}: {e}"),
        }
        prop_assert_eq!(conf(JemallocConfig::new().max_background_threads(threads)).is_ok(), threads >= 1);
    }
}

#[test]
fn thread_tcache_max_is_rounded_refused_above_its_limit_and_per_thread() {
    // SAFETY: `arenas.page` is a size_t key.
    let page = unsafe { raw::read::<usize>(b"arenas.page\0") }.unwrap();
    let limit = page * 8;
    let read = || {
        // SAFETY: `thread.tcache.max` is a size_t key.
        unsafe { raw::read::<usize>(b"thread.tcache.max\0") }.unwrap()
    };
    let other_before = std::thread::spawn(read).join().unwrap();

    let t = jemalloc::set_thread_tcache_max(5000).unwrap();
    assert_eq!((t.requested, t.effective), (5000, 5120));
    assert!(t.rounded_up());
    assert_eq!(read(), 5120);

    // Above the limit jemalloc would clip the value: refused, and the limit in force is unchanged.
    for bytes in [limit + 1, 1 << 20, 1 << 40, usize::MAX] {
        let e = jemalloc::set_thread_tcache_max(bytes).unwrap_err();
        assert!(matches!(e, TuneError::InvalidValue { knob: "thread.tcache.max", .. }), "{e}");
        assert!(e.to_string().contains(&format!("this build allows 0 to {limit}")), "{e}");
        assert_eq!(read(), 5120);
        assert!(jemalloc::tcache_max_on_thread_start(bytes).is_err());
    }
    let t = jemalloc::set_thread_tcache_max(limit).unwrap();
    assert_eq!((t.effective, read()), (limit, limit));

    assert_eq!(std::thread::spawn(read).join().unwrap(), other_before, "another thread's limit changed");

    assert!(jemalloc::set_thread_tcache_enabled(false).unwrap());
    // SAFETY: `thread.tcache.enabled` is a bool key.
    assert!(!unsafe { raw::read::<bool>(b"thread.tcache.enabled\0") }.unwrap());
    assert!(!jemalloc::set_thread_tcache_enabled(true).unwrap());
}

#[test]
fn tcache_max_reaches_every_tokio_worker() {
    let on_start = jemalloc::tcache_max_on_thread_start(4096).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(3).on_thread_start(on_start).build().unwrap();
    let seen: Vec<usize> = rt.block_on(async {
        let tasks: Vec<_> = (0..12)
            .map(|_| {
                tokio::spawn(async {
                    // SAFETY: `thread.tcache.max` is a size_t key.
                    unsafe { raw::read::<usize>(b"thread.tcache.max\0") }.unwrap()
                })
            })
            .collect();
        let mut seen = Vec::new();
        for t in tasks {
            seen.push(t.await.unwrap());
        }
        seen
    });
    assert!(seen.iter().all(|v| *v == 4096), "{seen:?}");
}

#[test]
fn background_threads_switch_on_and_off() {
    let before = jemalloc::set_background_threads(true).unwrap();
    assert!(tikv_jemalloc_ctl::background_thread::read().unwrap());
    let max_before = jemalloc::set_max_background_threads(1).unwrap();
    assert_eq!(tikv_jemalloc_ctl::max_background_threads::read().unwrap(), 1);
    jemalloc::set_max_background_threads(max_before).unwrap();
    assert!(jemalloc::set_background_threads(before).unwrap());
    assert_eq!(tikv_jemalloc_ctl::background_thread::read().unwrap(), before);
}

#[test]
fn bad_input_gets_typed_errors() {
    let e = jemalloc::set_decay(DecayKind::Dirty, Decay::After(Duration::from_micros(1500))).unwrap_err();
    assert!(matches!(e, TuneError::InvalidValue { knob: "dirty_decay_ms", .. }), "{e}");
    let e = jemalloc::set_decay(DecayKind::Dirty, Decay::After(Duration::ZERO)).unwrap_err();
    assert!(matches!(e, TuneError::InvalidValue { .. }), "{e}");
    let e = jemalloc::set_max_background_threads(0).unwrap_err();
    assert!(matches!(e, TuneError::InvalidValue { knob: "max_background_threads", .. }), "{e}");
    // Above the start-up ceiling jemalloc itself refuses (EINVAL); the check says so first, in words.
    let ceiling = tikv_jemalloc_ctl::max_background_threads::read().unwrap().max(1);
    let e = jemalloc::set_max_background_threads(usize::MAX).unwrap_err();
    assert!(matches!(e, TuneError::InvalidValue { knob: "max_background_threads", .. }), "{e}");
    assert!(!e.to_string().contains("newp"), "{e}");
    // SAFETY: `opt.max_background_threads` is a size_t.
    let opt = unsafe { tikv_jemalloc_ctl::raw::read::<usize>(b"opt.max_background_threads\0") }.unwrap();
    assert!(jemalloc::set_max_background_threads(opt + 1).is_err());
    // jemalloc's own refusal of the same value, for the ground truth that the bound is jemalloc's.
    assert!(tikv_jemalloc_ctl::max_background_threads::write(opt + 1).is_err());
    assert!(ceiling <= opt);
    // A mallctl failure is in words too: an unknown key.
    // SAFETY: a read of a key that does not exist writes nothing.
    let raw = unsafe { tikv_jemalloc_ctl::raw::read::<usize>(b"no.such.key\0") }.unwrap_err();
    assert!(raw.to_string().contains("`mib`"), "tikv-jemalloc-ctl's wording changed: {raw}");
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let e = frag::tune::glibc::set(frag::tune::glibc::Mallopt::ArenaMax(2)).unwrap_err();
        assert_eq!(
            e,
            TuneError::WrongBackend {
                wanted: frag::backend::Backend::System,
                installed: frag::backend::WrappedBackend::Known(frag::backend::Backend::Jemalloc)
            }
        );
        assert!(frag::tune::glibc::trim().is_err());
    }
    #[cfg(feature = "mimalloc")]
    {
        let e = frag::tune::mimalloc::collect(true).unwrap_err();
        assert_eq!(
            e,
            TuneError::WrongBackend {
                wanted: frag::backend::Backend::Mimalloc,
                installed: frag::backend::WrappedBackend::Known(frag::backend::Backend::Jemalloc)
            }
        );
    }
}

#[test]
fn effective_matches_jemalloc_defaults() {
    let used = jemalloc::effective().unwrap();
    assert_eq!(used.conf_env_var, "_RJEM_MALLOC_CONF", "tikv-jemallocator is prefixed by default on Linux");
    assert_eq!(used.opt.tcache_max, Some(tikv_jemalloc_ctl::opt::tcache_max::read().unwrap()));
    assert_eq!(used.opt.narenas, Some(tikv_jemalloc_ctl::opt::narenas::read().unwrap()));
    assert_eq!(format!("{}\0", used.version), tikv_jemalloc_ctl::version::read().unwrap());
    assert!(used.arenas.iter().any(|a| a.index == 0));
}

/// `prof:true` in the environment of a jemalloc built without its profiler: jemalloc itself only
/// prints "Invalid conf pair" (the ground truth that it rejected it, in the child's stderr), and the
/// report says why and what to change. With the profiler, neither.
#[test]
fn prof_without_the_profiler_is_warned() {
    let out = common::run_child_in(
        "prof_without_the_profiler_child",
        &[("_RJEM_MALLOC_CONF", "prof:true,prof_active:false")],
        &[],
    );
    // SAFETY: `config.prof` is a `bool`.
    let built_with_profiler = unsafe { tikv_jemalloc_ctl::raw::read::<bool>(b"config.prof\0") }.unwrap();
    assert_eq!(out.contains("Invalid conf pair: prof:true"), !built_with_profiler, "{out}");
    assert_eq!(
        out.contains("frag warns: _RJEM_MALLOC_CONF: prof:true, but this jemalloc was built without its profiler"),
        !built_with_profiler,
        "{out}"
    );
}

#[test]
#[ignore = "child process helper"]
fn prof_without_the_profiler_child() {
    common::child_only("prof_without_the_profiler_is_warned");
    let report = frag::report();
    for w in &report.warnings {
        eprintln!("frag warns: {}", w.message);
    }
    // Where frag warns, its finding says what to change.
    if report.warnings.iter().any(|w| w.message.contains("built without its profiler")) {
        let findings = &report.diagnosis.as_ref().expect("diagnosis").findings;
        let trap =
            findings.iter().find(|f| f.summary.contains("built without its profiler")).expect("a config_trap finding");
        assert!(trap.remedy.contains("jemalloc-prof"), "{}", trap.remedy);
    }
}

/// The environment check, in a child started with allocator variables set before jemalloc reads them.
#[test]
fn conf_traps_are_reported_and_warned_once() {
    common::run_child(
        "conf_traps_child",
        &[("_RJEM_MALLOC_CONF", "narenas:3,tcache_max:65536,dirty_decay:5,prof:false"), ("MALLOC_CONF", "narenas:1")],
    );
}

#[test]
#[ignore = "child process helper"]
fn conf_traps_child() {
    common::child_only("conf_traps_are_reported_and_warned_once");
    // jemalloc read the prefixed variable: 3 arenas.
    assert_eq!(tikv_jemalloc_ctl::opt::narenas::read().unwrap(), 3);
    let (reports, log) = common::capture_tracing(|| (frag::report(), frag::report()));
    let warnings = reports.0.warnings.iter().map(|w| w.message.as_str()).collect::<Vec<_>>().join("\n");
    assert!(warnings.contains("MALLOC_CONF is set but is read by"), "{warnings}");
    assert!(warnings.contains("reads _RJEM_MALLOC_CONF"), "{warnings}");
    assert!(
        warnings.contains("unknown jemalloc option \"dirty_decay\" (did you mean \"dirty_decay_ms\"?)"),
        "{warnings}"
    );
    assert!(warnings.contains("tcache_max: asked for 65536 but jemalloc uses 32768"), "{warnings}");
    assert!(!warnings.contains("prof"), "prof is a valid jemalloc option: {warnings}");
    assert_eq!(reports.0.warnings, reports.1.warnings);
    let traps = frag::tune::check().len();
    assert!(traps >= 3, "{traps}");
    assert_eq!(log.matches("WARN").count(), traps, "each trap warned once:\n{log}");

    // The diagnosis raises each trap as a `config_trap` finding to act on. Ground truth that they are
    // traps: jemalloc's own options show MALLOC_CONF's narenas:1 was not applied (3 is in force, from
    // the prefixed variable) and tcache_max was clipped.
    assert_eq!(tikv_jemalloc_ctl::opt::tcache_max::read().unwrap(), 32768);
    let findings = &reports.0.diagnosis.as_ref().expect("diagnosis").findings;
    let trap_findings: Vec<_> =
        findings.iter().filter(|f| f.kind == frag::report::diagnosis::FindingKind::ConfigTrap).collect();
    assert_eq!(trap_findings.len(), traps, "{findings:#?}");
    assert!(
        trap_findings.iter().all(|f| f.severity == frag::report::diagnosis::Severity::Warn && !f.remedy.is_empty())
    );
    let ignored = trap_findings.iter().find(|f| f.summary.starts_with("MALLOC_CONF is set")).expect("MALLOC_CONF");
    assert!(ignored.remedy.contains("_RJEM_MALLOC_CONF"), "{}", ignored.remedy);
    let misspelt = trap_findings.iter().find(|f| f.summary.contains("\"dirty_decay\"")).expect("dirty_decay");
    assert!(misspelt.remedy.contains("dirty_decay_ms"), "{}", misspelt.remedy);
    // A trap has no bytes: the text report prints none for it.
    let text = reports.0.to_string();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(" config_trap")).collect();
    assert_eq!(lines.len(), traps, "{text}");
    assert!(lines.iter().all(|l| l.contains("config_trap: ")), "{lines:#?}");
    // Each trap once: as its finding, not again as a `warning:` line.
    for trap in &trap_findings {
        assert_eq!(text.matches(trap.summary.as_str()).count(), 1, "{}\n{text}", trap.summary);
    }
}
