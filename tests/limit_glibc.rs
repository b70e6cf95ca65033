//! The soft memory limit on glibc (`common::limit`): under a never-quiet load whose live set drops,
//! `malloc_trim` at every round over the target holds RSS under it, where unmanaged glibc keeps the
//! peak.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;

use common::limit::{BELOW_LIMIT, check, live_below_the_limit, live_set_drops};

#[global_allocator]
static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);

#[test]
fn a_busy_heap_is_held_under_the_limit_after_its_live_set_drops() {
    let d = live_set_drops(|| {});
    check(&d, 16 << 20);
    drop(d.rounds);
}

/// `FRAG_MEMORY_LIMIT` as a default reclaimer reads it, in a child process per value: garbage, zero
/// and a limit above the machine's memory are refused before any round, naming the variable and the
/// accepted forms; a valid value is the limit in force; `off` is none.
#[test]
fn the_environment_variable_is_read_and_bad_values_are_refused() {
    let physical_gib = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:")?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        .unwrap()
        >> 20;
    let huge = format!("{}GiB", physical_gib + 2);
    for (value, expected) in [
        ("garbage", "refused"),
        ("0", "refused"),
        ("512M", "refused"),
        (huge.as_str(), "refused: above"),
        ("256MiB", "limit 268435456"),
        ("off", "no limit"),
    ] {
        let out = common::run_child("env_child", &[("FRAG_MEMORY_LIMIT", value), ("FRAG_EXPECT", expected)]);
        assert!(out.contains("child checked"), "{value}: {out}");
    }
}

#[test]
#[ignore = "a child process of the_environment_variable_is_read_and_bad_values_are_refused"]
fn env_child() {
    common::child_only("the_environment_variable_is_read_and_bad_values_are_refused");
    let expected = std::env::var("FRAG_EXPECT").unwrap();
    let reclaimer = frag::reclaim::Reclaimer::new();
    match (reclaimer.check(), expected.as_str()) {
        (Err(e @ frag::reclaim::ReclaimError::Limit { from_env: true, .. }), "refused") => {
            let text = e.to_string();
            assert!(text.starts_with("FRAG_MEMORY_LIMIT: ") && text.contains("\"512MiB\""), "{text}");
        }
        (Err(frag::reclaim::ReclaimError::Limit { from_env: true, error }), "refused: above") => {
            assert!(matches!(error, frag::reclaim::LimitError::AbovePhysical { .. }), "{error}");
        }
        (Ok(()), _) => {
            let mut r = frag::reclaim::Reclaimer::new();
            r.round().unwrap();
            let t = r.totals();
            let seen = t.limit_bytes.map_or("no limit".to_owned(), |b| format!("limit {b}"));
            assert_eq!(seen, expected);
            // And the spawned reclaimer starts with it.
            assert!(frag::reclaim::Reclaimer::new().spawn().is_ok());
        }
        (other, _) => panic!("expected {expected}, got {other:?}"),
    }
    println!("child checked");
}

/// Live data below the limit at all times: the kernel's peak RSS stays at or under the limit, where
/// the same run without one goes past it.
#[test]
fn live_data_below_the_limit_never_takes_rss_over_it() {
    let [limited, unmanaged] = live_below_the_limit();
    assert!(unmanaged > BELOW_LIMIT, "without a limit the run must pass it: {} MiB", unmanaged >> 20);
    assert!(limited <= BELOW_LIMIT, "VmHWM {} MiB over the limit", limited >> 20);
}
