//! `frag::publish` and `Publisher` through a debugging recorder: every series equals the report it
//! came from; alerts and the start-up event through a captured `tracing` subscriber.

mod common;

use std::collections::HashMap;

use metrics::Unit;
use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

#[global_allocator]
static A: frag::Tracked<std::alloc::System, frag::Exact> = frag::Tracked::new(std::alloc::System);

/// (name, sorted labels) -> (kind, unit, value)
type Series = HashMap<(String, Vec<(String, String)>), (MetricKind, Option<Unit>, f64)>;

fn record(f: impl FnOnce()) -> Series {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, f);
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, unit, _, value)| {
            let (kind, key) = key.into_parts();
            let mut labels: Vec<(String, String)> =
                key.labels().map(|l| (l.key().to_owned(), l.value().to_owned())).collect();
            labels.sort();
            let value = match value {
                DebugValue::Counter(c) => c as f64,
                DebugValue::Gauge(g) => g.0,
                DebugValue::Histogram(_) => f64::NAN,
            };
            ((key.name().to_owned(), labels), (kind, unit, value))
        })
        .collect()
}

fn get(series: &Series, name: &str, labels: &[(&str, &str)]) -> (MetricKind, Option<Unit>, f64) {
    let mut labels: Vec<(String, String)> = labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    labels.sort();
    *series.get(&(name.to_owned(), labels)).unwrap_or_else(|| panic!("no series {name}"))
}

#[test]
fn published_series_equal_the_report() {
    let keep: Vec<Vec<u8>> = (0..1000).map(|_| vec![0u8; 60]).collect();
    let report = frag::report();
    let series = record(|| frag::publish::once(&report));

    let t = &report.tracked;
    assert_eq!(
        get(&series, "frag_allocations_total", &[]),
        (MetricKind::Counter, Some(Unit::Count), t.allocations as f64)
    );
    assert_eq!(get(&series, "frag_deallocations_total", &[]).2, t.deallocations as f64);
    assert_eq!(
        get(&series, "frag_tracked_allocated_bytes", &[]),
        (MetricKind::Gauge, Some(Unit::Bytes), t.allocated_bytes as f64)
    );
    assert_eq!(get(&series, "frag_tracked_live_blocks", &[]).2, t.live_blocks as f64);
    assert_eq!(get(&series, "frag_process_rss_bytes", &[]).2, report.process.rss_bytes.unwrap() as f64);
    // Under valgrind, which replaces glibc's malloc, the report has no glibc figures to publish.
    match report.allocator {
        Some(glibc) => {
            assert_eq!(get(&series, "frag_allocator_allocated_bytes", &[]).2, glibc.allocated.unwrap() as f64);
        }
        None => assert!(common::under_memcheck(), "glibc's statistics are missing: {:?}", report.warnings),
    }
    assert_eq!(get(&series, "frag_internal_fragmentation_bytes", &[]).2, report.fragmentation.internal_bytes as f64);
    if let Some(r) = report.fragmentation.ratio {
        assert_eq!(get(&series, "frag_fragmentation_ratio", &[]).2, r);
    }
    let origin = report.origin.as_ref().unwrap();
    assert_eq!(get(&series, "frag_cross_thread_frees_total", &[]).2, origin.cross_thread_frees as f64);
    // Where resident memory goes: the published parts add up to the published RSS, and every kind of
    // finding with bytes has a series (0 when not raised), so a dashboard sees one disappear.
    let parts: f64 = series.iter().filter(|((n, _), _)| n == "frag_resident_bytes").map(|(_, v)| v.2).sum();
    assert_eq!(parts, get(&series, "frag_process_rss_bytes", &[]).2);
    assert_eq!(get(&series, "frag_resident_bytes", &[("part", "live")]).2, t.allocated_bytes as f64);
    let with_bytes = frag::report::diagnosis::FindingKind::ALL
        .iter()
        .filter(|k| **k != frag::report::diagnosis::FindingKind::ConfigTrap);
    assert_eq!(series.keys().filter(|(n, _)| n == "frag_finding_bytes").count(), with_bytes.count());

    // The 1000 blocks of 60 B are in the class whose upper bound is 64.
    let row = report.size_classes.iter().find(|c| c.max_size == Some(64)).unwrap();
    assert!(row.live_blocks >= 1000);
    let (kind, unit, live) = get(&series, "frag_size_class_live_bytes", &[("class", "64")]);
    assert_eq!((kind, unit, live), (MetricKind::Gauge, Some(Unit::Bytes), row.live_bytes as f64));
    assert_eq!(get(&series, "frag_size_class_allocations_total", &[("class", "64")]).2, row.allocations as f64);
    assert_eq!(
        series.keys().filter(|(n, _)| n == "frag_size_class_live_bytes").count(),
        report.size_classes.len(),
        "one series per class in the report"
    );
    // No per-thread series unless asked for.
    assert!(series.keys().all(|(n, _)| !n.starts_with("frag_thread_")));
    // Every name follows the conventions.
    for (name, _) in series.keys() {
        let (kind, unit, _) = series.iter().find(|((n, _), _)| n == name).map(|(_, v)| *v).unwrap();
        assert_eq!(kind == MetricKind::Counter, name.ends_with("_total"), "{name}");
        if unit == Some(Unit::Bytes) {
            assert!(name.contains("_bytes"), "{name}");
        }
    }
    drop(keep);
}

/// A series appears with its first value: nothing is NaN in a first round, and no figure that this
/// process cannot have (another backend's, PSS while it is off) is published. A series that had a
/// value and has none in a later round is NaN, so that its gauge does not keep a stale value.
#[test]
fn series_appear_with_their_first_value_and_are_nan_when_it_goes() {
    let keep: Vec<Vec<u8>> = (0..2000).map(|_| vec![0u8; 200]).collect();
    let report = frag::report();
    let series = record(|| frag::publish::once(&report));
    for ((name, labels), (_, _, value)) in &series {
        assert!(!value.is_nan(), "{name} {labels:?} is NaN in its first round");
    }
    let names: Vec<&str> = series.keys().map(|(n, _)| n.as_str()).collect();
    // This file wraps the system allocator (glibc): jemalloc's, mimalloc's and snmalloc's figures
    // cannot apply, nor PSS, which is read only after `set_pss(true)`.
    for absent in [
        "frag_allocator_active_bytes",
        "frag_allocator_metadata_bytes",
        "frag_allocator_resident_bytes",
        "frag_allocator_mapped_bytes",
        "frag_allocator_retained_bytes",
        "frag_allocator_committed_bytes",
        "frag_process_pss_bytes",
    ] {
        assert!(!names.contains(&absent), "{absent} published: {names:?}");
    }
    assert_eq!(report.process.pss_bytes, None);
    // glibc's own figures, where glibc is the allocator (valgrind replaces it).
    if report.allocator.is_some() {
        assert!(names.contains(&"frag_allocator_free_bytes") && names.contains(&"frag_allocator_allocated_bytes"));
    } else {
        assert!(common::under_memcheck(), "{:?}", report.warnings);
    }

    // A ratio with a value, then a round without one: NaN. A publisher that never saw a value does
    // not publish it at all.
    let mut with = report.clone();
    with.fragmentation.ratio = Some(0.25);
    let mut without = report.clone();
    without.fragmentation.ratio = None;
    let mut publisher = frag::Publisher::new();
    let first = record(|| drop(publisher.observe(&with)));
    assert_eq!(get(&first, "frag_fragmentation_ratio", &[]).2, 0.25);
    let second = record(|| drop(publisher.observe(&without)));
    assert!(get(&second, "frag_fragmentation_ratio", &[]).2.is_nan());
    let mut fresh = frag::Publisher::new();
    let never = record(|| drop(fresh.observe(&without)));
    assert!(!never.keys().any(|(n, _)| n == "frag_fragmentation_ratio"));
    drop(keep);
}

#[test]
fn publisher_prefix_labels_and_capped_thread_series() {
    let names = ["worker-a", "worker-b", "worker-c", "worker-d"];
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let done_rx = std::sync::Arc::new(std::sync::Mutex::new(done_rx));
    let threads: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let (ready, done) = (ready_tx.clone(), done_rx.clone());
            std::thread::Builder::new()
                .name((*n).to_owned())
                .spawn(move || {
                    let v: Vec<Vec<u8>> = (0..(i + 1) * 100).map(|_| vec![0u8; 32]).collect();
                    ready.send(()).unwrap();
                    let _ = done.lock().unwrap().recv();
                    drop(v);
                })
                .unwrap()
        })
        .collect();
    names.iter().for_each(|_| ready_rx.recv().unwrap());

    let mut publisher =
        frag::Publisher::new().prefix("svc_heap_").label("service", "test").per_thread(true).thread_cap(3);
    let report = frag::report();
    let series = record(|| drop(publisher.observe(&report)));
    drop(done_tx);
    threads.into_iter().for_each(|t| t.join().unwrap());

    let allocations = get(&series, "svc_heap_allocations_total", &[("service", "test")]);
    assert_eq!(allocations.2, report.tracked.allocations as f64);
    assert!(
        series
            .keys()
            .all(|(n, labels)| n.starts_with("svc_heap_") && labels.contains(&("service".into(), "test".into())))
    );
    let thread_names: Vec<String> = series
        .keys()
        .filter(|(n, _)| n == "svc_heap_thread_allocations")
        .map(|(_, l)| l.iter().find(|(k, _)| k == "thread").unwrap().1.clone())
        .collect();
    assert_eq!(thread_names.len(), 3, "{thread_names:?}");
    assert!(thread_names.contains(&"other".to_owned()));
    // Totals across the capped series equal the report's rows.
    let sum: f64 = series.iter().filter(|((n, _), _)| n == "svc_heap_thread_allocations").map(|(_, v)| v.2).sum();
    let rows: u64 = report.threads.iter().map(|r| r.allocations).sum();
    assert_eq!(sum, rows as f64);
}

#[test]
fn a_stair_step_is_warned_with_its_figures() {
    let base = frag::report();
    let mut publisher = frag::Publisher::new();
    let ((), log) = common::capture_tracing(|| {
        for rss in [100u64, 100, 160, 160, 160, 160] {
            let mut r = base.clone();
            r.allocator = None;
            r.process.rss_bytes = Some(rss << 20);
            r.tracked.allocated_bytes = 40 << 20;
            let _ = record(|| drop(publisher.observe(&r)));
        }
    });
    assert_eq!(log.matches("frag publishing heap metrics").count(), 1, "{log}");
    assert!(log.contains("backend=system"), "{log}");
    assert!(log.contains(&format!("unwinder={}", frag::sites::unwinder())), "{log}");
    assert_eq!(log.matches("stepped up").count(), 1, "{log}");
    assert!(log.contains("rss_from=104857600 rss_to=167772160"), "{log}");
}

#[test]
fn growth_with_live_data_is_warned_as_growth_not_a_stair_step() {
    let base = frag::report();
    let mut publisher = frag::Publisher::new();
    let ((), log) = common::capture_tracing(|| {
        for (rss, live) in [(100u64, 60u64), (100, 60), (160, 115), (160, 116), (160, 115), (160, 116)] {
            let mut r = base.clone();
            r.allocator = None;
            r.process.rss_bytes = Some(rss << 20);
            r.tracked.allocated_bytes = live << 20;
            let _ = record(|| drop(publisher.observe(&r)));
        }
    });
    assert_eq!(log.matches("stepped up").count(), 0, "{log}");
    assert_eq!(log.matches("with live data").count(), 1, "{log}");
    assert!(log.contains("rss_from=104857600 rss_to=167772160"), "{log}");
}

#[test]
fn the_grafana_dashboard_queries_only_published_metrics() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/dashboards/grafana.json");
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let keep: Vec<Vec<u8>> = (0..10).map(|_| vec![0u8; 100]).collect();
    let report = frag::report();
    let mut publisher = frag::Publisher::new().per_thread(true);
    let names = publisher.metric_names();
    // What this backend publishes is a subset of the catalogue.
    let emitted: Vec<String> = record(|| drop(publisher.observe(&report))).into_keys().map(|(n, _)| n).collect();
    assert!(emitted.iter().all(|n| names.contains(n)), "{emitted:?}");
    assert!(emitted.iter().any(|n| n == "frag_thread_allocated_bytes"));
    let mut published = names;
    published.extend(frag::reclaim::Reclaimer::new().metric_names());
    let mut queried = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for name in
                expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|t| t.starts_with("frag_"))
            {
                assert!(published.iter().any(|p| p == name), "{name} is not published");
                queried += 1;
            }
        }
    }
    assert!(queried >= 15, "{queried}");
    drop(keep);
}

/// The reclaimer's series against `/proc`: what its counter says was released is what RSS lost
/// around the rounds, one action labelled with its method, the first round skipped as the first.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn the_reclaimer_publishes_what_it_released() {
    frag::tune::glibc::set(frag::tune::glibc::Mallopt::TrimThreshold(1 << 30)).unwrap();
    let blocks: Vec<Vec<u8>> = (0..64 * 1024).map(|i| vec![i as u8 | 1; 1000]).collect();
    let pin = vec![1u8; 1000];
    drop(blocks);
    // No quiet window and no threshold: the second round acts.
    let mut reclaimer = frag::reclaim::Reclaimer::new().quiet(std::time::Duration::ZERO).threshold(0, 0.0);
    let names = reclaimer.metric_names();
    let before = common::rss_bytes();
    let series = record(|| {
        assert!(matches!(reclaimer.round(), Ok(frag::reclaim::Round::Skipped(frag::reclaim::Skip::FirstRound))));
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(matches!(reclaimer.round(), Ok(frag::reclaim::Round::Acted(_))));
    });
    let released = before.saturating_sub(common::rss_bytes()) as f64;
    assert!(released > 32.0 * (1 << 20) as f64, "{released}");
    let (kind, unit, counted) = get(&series, "frag_reclaimed_bytes_total", &[]);
    assert_eq!((kind, unit), (MetricKind::Counter, Some(Unit::Bytes)));
    assert!((counted - released).abs() <= 0.1 * released, "counted {counted}, /proc {released}");
    assert_eq!(get(&series, "frag_reclaim_actions_total", &[("method", "trim")]).2, 1.0);
    assert_eq!(get(&series, "frag_reclaim_skipped_total", &[("reason", "first_round")]).2, 1.0);
    let (kind, _, seconds) = get(&series, "frag_reclaim_seconds_total", &[]);
    assert_eq!(kind, MetricKind::Gauge);
    assert!(seconds > 0.0);
    assert!(series.contains_key(&("frag_reclaim_release_ratio".to_owned(), Vec::new())));
    for (name, _) in series.keys() {
        assert!(names.contains(name), "{name} is not in metric_names()");
    }
    assert_eq!(pin[0], 1);
}

/// Scopes: the published ones under their names, the others summed as `other`, allocations outside
/// every scope as `none`; with every block sampled, each equals the bytes the test holds in it.
#[test]
fn scope_series_are_the_published_scopes_and_the_rest() {
    frag::set_sampling(frag::Sampling::EveryBlock).unwrap();
    let scopes = ["metrics-a", "metrics-b", "metrics-c", "metrics-d"].map(|n| frag::Scope::new(n).unwrap());
    scopes[0].publish().unwrap();
    scopes[1].publish().unwrap();
    let mut held: Vec<Vec<u8>> = Vec::with_capacity(64);
    for (i, scope) in scopes.iter().enumerate() {
        let _in = scope.enter();
        for _ in 0..4 {
            held.push(vec![1u8; 1000 * (i + 1)]);
        }
    }
    let report = frag::report();
    let series = record(|| frag::publish::once(&report));
    let live = |scope: &str| get(&series, "frag_scope_live_bytes", &[("scope", scope)]).2;
    assert_eq!(live("metrics-a"), 4000.0);
    assert_eq!(live("metrics-b"), 8000.0);
    assert_eq!(live("other"), 12_000.0 + 16_000.0, "c and d, not published");
    let none = report.scopes.as_ref().unwrap().rows.iter().find(|r| r.name.is_none()).unwrap();
    assert_eq!(live("none"), none.inuse_bytes as f64);
    let (kind, unit, allocated) = get(&series, "frag_scope_allocated_bytes_total", &[("scope", "metrics-a")]);
    assert_eq!((kind, unit, allocated), (MetricKind::Counter, Some(Unit::Bytes), 4000.0));
    assert!(!series.keys().any(|(_, l)| l.iter().any(|(_, v)| v == "metrics-c")), "c is not published");
    drop(held);
}
