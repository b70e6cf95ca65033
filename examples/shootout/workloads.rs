//! The workloads, run in a child process on the backend `FRAG_ALLOCATOR` chose. Each returns rows of
//! named figures; every row carries the process RSS and the fragmentation ratio from `frag::report()`
//! at the moment it describes.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::measure::{MIB, minor_faults, next, peak_rss};

/// One measured case: a label and its figures, in the order they were taken.
pub struct Row {
    pub case: String,
    pub figures: Vec<(&'static str, f64)>,
}

/// What a child sends back.
pub struct Outcome {
    pub rows: Vec<Row>,
    /// (seconds, process RSS MiB, tracked allocated MiB) samples, for the timeline picture.
    pub timeline: Vec<(f64, f64, f64)>,
}

/// Sizes of the run: the default or `--quick`.
#[derive(Clone, Copy)]
pub struct Scale {
    pub quick: bool,
}

impl Scale {
    fn pick<T>(self, full: T, quick: T) -> T {
        if self.quick { quick } else { full }
    }
}

/// Below this much live data the fragmentation ratio mostly measures the allocator's fixed overhead
/// (the report warns); the tables leave it out there and the RSS column tells the story.
const MEANINGFUL_LIVE: u64 = 8 << 20;

/// RSS and fragmentation ratio (allocator's figures where it has them, else the process's) now.
fn observed(case: impl Into<String>, mut figures: Vec<(&'static str, f64)>) -> Row {
    let r = frag::report();
    let ratio = if r.tracked.allocated_bytes >= MEANINGFUL_LIVE { r.fragmentation.ratio } else { None };
    figures.push(("rss_mib", r.process.rss_bytes.unwrap_or(0) as f64 / MIB));
    figures.push(("frag_ratio", ratio.unwrap_or(f64::NAN)));
    Row { case: case.into(), figures }
}

/// The allocator's resident bytes where it reports them (jemalloc), else its committed (mimalloc) or
/// mapped (snmalloc) bytes, in MiB.
fn allocator_mib(r: &frag::Report) -> f64 {
    r.allocator.as_ref().and_then(|a| a.resident.or(a.committed).or(a.mapped)).map_or(f64::NAN, |b| b as f64 / MIB)
}

fn tracked_mib() -> f64 {
    frag::report::totals().allocated_bytes as f64 / MIB
}

fn touch(mut v: Vec<u8>) -> Vec<u8> {
    for b in v.iter_mut().step_by(4096) {
        *b = 1;
    }
    v
}

/// Light allocator activity for `wait` (a thousand small blocks every 10 ms): allocators that purge
/// lazily (jemalloc without background threads advances decay on its allocation ticks) purge as they
/// run, the way a quiet service still allocates.
fn idle(wait: Duration) {
    let end = Instant::now() + wait;
    while Instant::now() < end {
        for _ in 0..1000 {
            std::hint::black_box(vec![0u8; 256]);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// 1. 10,000 blocks alternating 64 B and 4 KiB; the small ones freed; then all.
pub fn alternating(_: Scale) -> Outcome {
    let mut blocks: Vec<Option<Vec<u8>>> =
        (0..10_000).map(|i| Some(touch(vec![7u8; if i % 2 == 0 { 64 } else { 4096 }]))).collect();
    let mut rows = vec![observed("allocated", vec![("live_mib", tracked_mib())])];
    for b in blocks.iter_mut().step_by(2) {
        *b = None;
    }
    rows.push(observed("small ones freed", vec![("live_mib", tracked_mib())]));
    drop(blocks);
    rows.push(observed("all freed", vec![("live_mib", tracked_mib())]));
    Outcome { rows, timeline: Vec::new() }
}

/// 2. The async-server pattern: per iteration 2–5 buffers of 128 B–16 KiB; 70% die at the end of the
///    iteration, 30% live on in a window of long-lived buffers replaced at random.
pub fn server(scale: Scale) -> Outcome {
    let iterations = scale.pick(500_000, 100_000);
    let window = 20_000;
    let mut rng = 0x5eed_u64;
    let mut long: Vec<Vec<u8>> = Vec::with_capacity(window);
    let start = Instant::now();
    let mut timeline = Vec::new();
    let sample_every = iterations / 100;
    for i in 0..iterations {
        let n = 2 + (next(&mut rng) % 4) as usize;
        let mut short = Vec::with_capacity(n);
        for _ in 0..n {
            let size = 128 + (next(&mut rng) % (16 * 1024 - 128)) as usize;
            let buf = touch(vec![1u8; size]);
            if next(&mut rng) % 10 < 3 {
                if long.len() < window {
                    long.push(buf);
                } else {
                    let k = (next(&mut rng) % window as u64) as usize;
                    long[k] = buf;
                }
            } else {
                short.push(buf);
            }
        }
        drop(short);
        if i % sample_every == 0 {
            let rss = frag::report().process.rss_bytes.unwrap_or(0) as f64 / MIB;
            timeline.push((start.elapsed().as_secs_f64(), rss, tracked_mib()));
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let report = frag::report();
    let resident = allocator_mib(&report);
    let mut rows = vec![observed(
        "under load",
        vec![
            ("live_blocks", report.tracked.live_blocks as f64),
            ("allocated_mib", report.tracked.allocated_bytes as f64 / MIB),
            ("allocator_mib", resident),
            ("seconds", elapsed),
        ],
    )];
    drop(long);
    rows.push(observed(
        "after drop",
        vec![("allocated_mib", tracked_mib()), ("allocator_mib", allocator_mib(&frag::report()))],
    ));
    let t = start.elapsed().as_secs_f64();
    timeline.push((t, frag::report().process.rss_bytes.unwrap_or(0) as f64 / MIB, tracked_mib()));
    let wait = scale.pick(Duration::from_secs(11), Duration::from_secs(1));
    idle(wait);
    rows.push(observed(
        format!("after {} s idle", wait.as_secs()),
        vec![("allocated_mib", tracked_mib()), ("allocator_mib", allocator_mib(&frag::report()))],
    ));
    timeline.push((
        start.elapsed().as_secs_f64(),
        frag::report().process.rss_bytes.unwrap_or(0) as f64 / MIB,
        tracked_mib(),
    ));
    Outcome { rows, timeline }
}

/// 3. Four threads, each keeping 5,000 live blocks of 128 B–8 KiB and replacing them at random.
pub fn threads(scale: Scale) -> Outcome {
    const THREADS: u64 = 4;
    let rounds = scale.pick(400_000, 60_000);
    let before = frag::report().process.rss_bytes.unwrap_or(0) as f64 / MIB;
    let start = Instant::now();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                let mut rng = 0x1234_5678 ^ (t + 1);
                let size = |rng: &mut u64| 128 + (next(rng) % (8 * 1024 - 128)) as usize;
                let mut live: Vec<Vec<u8>> = (0..5_000).map(|_| touch(vec![0u8; size(&mut rng)])).collect();
                for _ in 0..rounds {
                    let k = (next(&mut rng) % 5_000) as usize;
                    live[k] = touch(vec![0u8; size(&mut rng)]);
                }
                live
            })
        })
        .collect();
    let kept: Vec<_> = handles.into_iter().map(|h| h.join().unwrap_or_default()).collect();
    let seconds = start.elapsed().as_secs_f64();
    let peak = peak_rss() as f64 / MIB;
    let allocs_per_s = (THREADS * (rounds + 5_000)) as f64 / seconds;
    let under_load = observed("under load", vec![("peak_rss_mib", peak), ("allocs_per_s", allocs_per_s)]);
    drop(kept);
    let after = frag::report().process.rss_bytes.unwrap_or(0) as f64 / MIB;
    let returned = if peak > before { 100.0 * (peak - after) / (peak - before) } else { f64::NAN };
    let after_drop = observed("after drop", vec![("returned_pct", returned.clamp(0.0, 100.0))]);
    Outcome { rows: vec![under_load, after_drop], timeline: Vec::new() }
}

/// 4. Thread-per-core (every block freed by the thread that allocated it) against work-stealing
///    (every block freed by the next thread), same work: peak and final RSS, and the cross-thread share
///    origin tracking sees.
pub fn cross(scale: Scale, variant: &str) -> Outcome {
    const THREADS: usize = 4;
    let batches = scale.pick(400, 80);
    let handoff = variant == "work-stealing";
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..THREADS).map(|_| mpsc::sync_channel::<Vec<Vec<u8>>>(4)).unzip();
    let start = Instant::now();
    let handles: Vec<_> = receivers
        .into_iter()
        .enumerate()
        .map(|(t, rx)| {
            let tx = senders[(t + 1) % THREADS].clone();
            std::thread::spawn(move || {
                let mut rng = 0xc0ffee ^ t as u64;
                // Both variants keep the same number of batches alive (the channel's 4 plus the one
                // being filled), so only who frees them differs.
                let mut own: std::collections::VecDeque<Vec<Vec<u8>>> = std::collections::VecDeque::new();
                for _ in 0..batches {
                    let batch: Vec<Vec<u8>> = (0..256).map(|_| touch(vec![0u8; 64 << (next(&mut rng) % 10)])).collect();
                    if handoff {
                        if tx.send(batch).is_err() {
                            break;
                        }
                        // Free what the previous thread handed over.
                        while let Ok(b) = rx.try_recv() {
                            drop(b);
                        }
                    } else {
                        own.push_back(batch);
                        if own.len() > 4 {
                            drop(own.pop_front());
                        }
                    }
                }
                drop(own);
                drop(tx);
                rx.iter().for_each(drop);
            })
        })
        .collect();
    drop(senders);
    for h in handles {
        h.join().ok();
    }
    let seconds = start.elapsed().as_secs_f64();
    let report = frag::report();
    let cross_ratio = report.origin.as_ref().and_then(|o| o.cross_thread_free_ratio).unwrap_or(f64::NAN);
    let row = observed(
        variant,
        vec![("peak_rss_mib", peak_rss() as f64 / MIB), ("cross_thread_ratio", cross_ratio), ("seconds", seconds)],
    );
    Outcome { rows: vec![row], timeline: Vec::new() }
}

/// 5. Messages of one size through a bounded channel between two threads: µs and minor page faults
///    per 1,000 messages. `variant` may set jemalloc's `thread.tcache.max` on both threads.
pub fn channel(scale: Scale, variant: &str) -> Outcome {
    let tcache: Option<usize> = variant.strip_prefix("tcache_max=").and_then(|v| v.parse().ok());
    let set_tcache = move || {
        #[cfg(feature = "jemalloc")]
        if let Some(bytes) = tcache {
            if let Err(e) = frag::tune::jemalloc::set_thread_tcache_max(bytes) {
                eprintln!("shootout: tcache_max={bytes}: {e}");
            }
        }
        #[cfg(not(feature = "jemalloc"))]
        let _ = tcache;
    };
    let messages = scale.pick(100_000, 20_000);
    let mut rows = Vec::new();
    for size in [8usize, 64, 512, 4096, 16 << 10, 32 << 10] {
        let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(64);
        let consumer = std::thread::spawn(move || {
            set_tcache();
            rx.iter().map(|m| m.len()).sum::<usize>()
        });
        set_tcache();
        let faults = minor_faults();
        let start = Instant::now();
        for i in 0..messages {
            let mut m = vec![0u8; size];
            m[0] = i as u8;
            if tx.send(m).is_err() {
                break;
            }
        }
        drop(tx);
        let received = consumer.join().unwrap_or(0);
        let us_per_1000 = start.elapsed().as_secs_f64() * 1e6 / messages as f64 * 1000.0;
        let faults_per_1000 = (minor_faults() - faults) as f64 / messages as f64 * 1000.0;
        debug_assert_eq!(received, size * messages);
        rows.push(observed(
            format!("{size} B"),
            vec![("us_per_1000", us_per_1000), ("minor_faults_per_1000", faults_per_1000)],
        ));
    }
    Outcome { rows, timeline: Vec::new() }
}

/// 6. jemalloc's dirty decay (`variant` = milliseconds) on a burst of the server pattern: resident
///    memory under load, after the drop, and 2.5 s later (light activity, then the decay applied to
///    every arena).
pub fn decay(scale: Scale, variant: &str) -> Outcome {
    #[cfg(feature = "jemalloc")]
    {
        use frag::tune::Decay;
        use frag::tune::jemalloc::{self, DecayKind};
        let ms: u64 = variant.parse().unwrap_or(10_000);
        let setting = if ms == 0 { Decay::Immediate } else { Decay::After(Duration::from_millis(ms)) };
        if let Err(e) = jemalloc::set_decay(DecayKind::Dirty, setting) {
            eprintln!("shootout: dirty_decay_ms={ms}: {e}");
        }
        let resident = || frag::report().allocator.and_then(|a| a.resident).map_or(f64::NAN, |r| r as f64 / MIB);
        let mut rng = 0xdeca_u64;
        let iterations = scale.pick(200_000, 50_000);
        let mut live: Vec<Vec<u8>> = Vec::with_capacity(8192);
        for _ in 0..iterations {
            let buf = touch(vec![1u8; 128 + (next(&mut rng) % (16 << 10)) as usize]);
            if live.len() < 8192 {
                live.push(buf);
            } else {
                let k = (next(&mut rng) % 8192) as usize;
                live[k] = buf;
            }
        }
        let mut rows = vec![observed("under load", vec![("allocator_resident_mib", resident())])];
        drop(live);
        rows.push(observed("after drop", vec![("allocator_resident_mib", resident())]));
        // The same wait for every setting, well clear of 1000 ms and well short of 10000 ms (waiting
        // about as long as the decay time makes the result depend on a tick landing in time).
        let wait = Duration::from_millis(scale.pick(2_500, 1_500));
        idle(wait);
        // Without background threads jemalloc applies decay only when an arena is ticked; apply it
        // now, as a background thread would have.
        if let Err(e) = jemalloc::decay_all() {
            eprintln!("shootout: decay: {e}");
        }
        let label = format!("{:.1} s later, decay applied", wait.as_secs_f64());
        rows.push(observed(label, vec![("allocator_resident_mib", resident())]));
        Outcome { rows, timeline: Vec::new() }
    }
    #[cfg(not(feature = "jemalloc"))]
    {
        let _ = (scale, variant);
        Outcome { rows: Vec::new(), timeline: Vec::new() }
    }
}

/// 7. glibc's heap pinned by its top block: many small blocks, one more allocated last, all freed but
///    that one; RSS stays until `malloc_trim` returns the pages below it.
pub fn brk(scale: Scale) -> Outcome {
    let n = scale.pick(200_000, 50_000);
    let blocks: Vec<Vec<u8>> = (0..n).map(|_| touch(vec![3u8; 1000])).collect();
    let pin = touch(vec![4u8; 1000]);
    let mut rows = vec![observed("allocated", vec![("live_mib", tracked_mib())])];
    drop(blocks);
    rows.push(observed("freed below a live top block", vec![("live_mib", tracked_mib())]));
    let released = frag::tune::release_free_memory();
    let trimmed = released.map_or(f64::NAN, |r| {
        r.rss_before.zip(r.rss_after).map_or(f64::NAN, |(b, a)| b.saturating_sub(a) as f64 / MIB)
    });
    rows.push(observed("after release_free_memory", vec![("live_mib", tracked_mib()), ("released_mib", trimmed)]));
    drop(pin);
    Outcome { rows, timeline: Vec::new() }
}

/// Process RSS from `/proc/self/statm`, in MiB (allocates a line: negligible next to a burst).
fn statm_rss_mib() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(f64::NAN);
    pages * 4096.0 / MIB
}

/// The calling thread's CPU time (user + system, seconds) and minor faults (`RUSAGE_THREAD`).
fn thread_usage() -> (f64, f64) {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(u.ru_utime) + secs(u.ru_stime), u.ru_minflt as f64)
}

/// Allocator metadata where the backend measures it (jemalloc's `stats.metadata`, glibc's chunk
/// headers), from the diagnosis, in MiB; 0 where it does not.
fn metadata_mib() -> f64 {
    let r = frag::report();
    r.diagnosis
        .filter(|d| d.breakdown.sources.metadata != frag::report::diagnosis::Source::NotSplit)
        .map_or(0.0, |d| d.breakdown.metadata_bytes as f64 / MIB)
}

/// One burst of the server pattern: `iterations` iterations, then everything dropped. Returns the
/// iterations per second, the RSS at the burst's end (before the drop), and the thread's CPU
/// milliseconds and minor faults per 1,000 iterations.
fn burst(iterations: usize, rng: &mut u64) -> (f64, f64, f64, f64) {
    let (cpu, faults) = thread_usage();
    let window = 20_000;
    let mut long: Vec<Vec<u8>> = Vec::with_capacity(window);
    let start = Instant::now();
    for _ in 0..iterations {
        let n = 2 + (next(rng) % 4) as usize;
        let mut short = Vec::with_capacity(n);
        for _ in 0..n {
            let buf = touch(vec![1u8; 128 + (next(rng) % (16 * 1024 - 128)) as usize]);
            if next(rng) % 10 < 3 {
                if long.len() < window {
                    long.push(buf);
                } else {
                    let k = (next(rng) % window as u64) as usize;
                    long[k] = buf;
                }
            } else {
                short.push(buf);
            }
        }
        drop(short);
    }
    let rate = iterations as f64 / start.elapsed().as_secs_f64();
    let (cpu_after, faults_after) = thread_usage();
    let peak = statm_rss_mib();
    drop(long);
    let per_1000 = 1000.0 / iterations as f64;
    (rate, peak, (cpu_after - cpu) * 1e3 * per_1000, (faults_after - faults) * per_1000)
}

/// 8. The server pattern in bursts with idle gaps (light activity), `variant` "without" or "with
///    reclaimer": per burst its rate, RSS at its end, RSS 2 s after it, and the floor the reclaimer
///    aims at 2 s after it (live + allocator metadata + outside-heap bytes, from the diagnosis); the
///    reclaimer's actions and CPU share. The timeline samples RSS every 50 ms from a thread of its own.
pub fn bursts(scale: Scale, variant: &str) -> Outcome {
    let with = variant == "with reclaimer";
    let origin = Instant::now();
    let reclaimer = with.then(|| frag::reclaim::Reclaimer::new().spawn());
    let mut rows = Vec::new();
    let reclaimer = match reclaimer {
        Some(Err(e)) => {
            rows.push(Row { case: format!("no reclaimer: {e}"), figures: Vec::new() });
            None
        }
        Some(Ok(h)) => Some(h),
        None => None,
    };
    let (bursts, iterations, gap) = scale.pick((4, 400_000, 5_000), (2, 30_000, 2_500));
    let start = Instant::now();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut points = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                points.push((start.elapsed().as_secs_f64(), statm_rss_mib(), tracked_mib()));
                std::thread::sleep(Duration::from_millis(50));
            }
            points
        })
    };
    // Another thread's allocation latency: one 1 KiB block every 200 µs (5 MiB/s, far below the
    // bursts' rate, so the heap still counts as quiet in the gaps), timed one by one.
    // Its buffer is allocated and touched before the baseline, so that filling it does not raise RSS.
    let mut samples: Vec<(f64, f64)> = vec![(1.0, 1.0); 160_000];
    samples.clear();
    let prober = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && samples.len() < samples.capacity() {
                let t = Instant::now();
                let block = std::hint::black_box(vec![0u8; 1024]);
                let ns = t.elapsed().as_nanos() as f64;
                drop(block);
                samples.push((t.duration_since(origin).as_secs_f64(), ns));
                std::thread::sleep(Duration::from_micros(200));
            }
            samples
        })
    };
    let mut rng = 0xb0b5_u64;
    let (baseline, live_before, metadata_before) = (statm_rss_mib(), tracked_mib(), metadata_mib());
    for k in 1..=bursts {
        let (rate, peak, cpu_ms, faults) = burst(iterations, &mut rng);
        let ended = Instant::now();
        idle(Duration::from_secs(2).saturating_sub(ended.elapsed()));
        let rss_2s = statm_rss_mib();
        let grown = (tracked_mib() - live_before).max(0.0) + (metadata_mib() - metadata_before).max(0.0);
        let floor = baseline + grown;
        rows.push(Row {
            case: format!("burst {k}"),
            figures: vec![
                ("iterations_per_s", rate),
                ("cpu_ms_per_1000", cpu_ms),
                ("minor_faults_per_1000", faults),
                ("rss_end_mib", peak),
                ("rss_2s_mib", rss_2s),
                ("floor_mib", floor),
                ("rss_over_floor", rss_2s / floor),
            ],
        });
        idle(Duration::from_millis(gap).saturating_sub(ended.elapsed()));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let timeline = sampler.join().unwrap_or_default();
    let latencies = prober.join().unwrap_or_default();
    if let Some(h) = reclaimer {
        // Allocation latency of the other thread while an action ran (its start and wall time,
        // widened by 1 ms for the clocks' offset), and otherwise.
        let actions = h.actions();
        let during = |t: f64| {
            actions.iter().any(|a| {
                let from = a.at.as_secs_f64() - 0.001;
                t >= from && t <= from + a.wall.as_secs_f64() + 0.002
            })
        };
        let (mut inside, mut outside): (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
        for &(t, ns) in &latencies {
            if during(t) { inside.push(ns) } else { outside.push(ns) }
        }
        let pct = |v: &mut Vec<f64>, p: f64| {
            v.sort_by(f64::total_cmp);
            v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1))).map_or(f64::NAN, |x| x / 1000.0)
        };
        rows.push(Row {
            case: "allocation latency, another thread".to_owned(),
            figures: vec![
                ("samples_during_actions", inside.len() as f64),
                ("p99_us_during_actions", pct(&mut inside, 0.99)),
                ("max_us_during_actions", pct(&mut inside, 1.0)),
                ("p99_us_otherwise", pct(&mut outside, 0.99)),
                ("p50_us_otherwise", pct(&mut outside, 0.5)),
            ],
        });
        let totals = h.totals();
        let ratios: Vec<String> =
            h.actions().iter().filter_map(|a| a.release_ratio()).map(|r| format!("{r:.2}")).collect();
        eprintln!("  reclaimer: {totals}; released/predicted per action: {}", ratios.join(" "));
        for a in h.actions() {
            eprintln!("    {a}");
        }
        rows.push(Row {
            case: "reclaimer".to_owned(),
            figures: vec![
                ("actions", totals.actions as f64),
                ("released_mib", totals.released_bytes as f64 / MIB),
                ("predicted_mib", totals.predicted_bytes as f64 / MIB),
                ("cpu_pct_of_core", totals.cpu_share() * 100.0),
                ("refault_mib", totals.refault_bytes as f64 / MIB),
            ],
        });
    }
    Outcome { rows, timeline }
}

/// One worker of [`handoff`]: what it is told.
enum Work {
    /// Allocate this many blocks, free half itself, keep 1% for good, hand the rest on.
    Burst(usize),
    /// Free blocks another worker allocated.
    Free(Vec<Vec<u8>>),
}

/// 10. Memory that only its owning thread can release: four workers, bursts of the hand-off pattern
///     (20,000 blocks of 64 B–4 KiB per worker, about 160 MiB in all, half freed by their own worker,
///     the rest by the next one, 1% kept for good) with gaps of light activity, in which the workers wait for work as a pool's do. Variants:
///     "without" a reclaimer, "with reclaimer", and "with reclaimer and idle hook" (the workers call
///     `frag::reclaim::idle` each time they are about to wait). Per burst: RSS at its end and 4 s
///     after it, live bytes, and what idle threads released. Quick: one burst and its gap.
pub fn handoff(scale: Scale, variant: &str) -> Outcome {
    const WORKERS: usize = 4;
    let reclaimer = (variant != "without").then(|| frag::reclaim::Reclaimer::new().spawn());
    let hook = variant == "with reclaimer and idle hook";
    let mut rows = Vec::new();
    if let Some(Err(e)) = &reclaimer {
        rows.push(Row { case: format!("no reclaimer: {e}"), figures: Vec::new() });
    }
    let (bursts, blocks, gap) = scale.pick((4, 20_000, 7_000), (1, 20_000, 5_000));
    let (done_tx, done) = std::sync::mpsc::channel::<Vec<Vec<u8>>>();
    let mut orders = Vec::new();
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let (tx, rx) = std::sync::mpsc::channel::<Work>();
        orders.push(tx);
        let done_tx = done_tx.clone();
        workers.push(std::thread::spawn(move || {
            let mut rng = 0x51ab_u64 + w as u64;
            let mut kept: Vec<Vec<u8>> = Vec::new();
            loop {
                if hook {
                    frag::reclaim::idle();
                }
                // Wait for work, with a light trickle every 10 ms meanwhile.
                let work = match rx.recv_timeout(Duration::from_millis(10)) {
                    Ok(work) => work,
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        for _ in 0..20 {
                            std::hint::black_box(vec![0u8; 64 + (next(&mut rng) % 512) as usize]);
                        }
                        continue;
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                };
                match work {
                    Work::Burst(n) => {
                        let mut handed = Vec::with_capacity(n / 2);
                        let mut own = Vec::with_capacity(n / 2);
                        for i in 0..n {
                            let block = vec![i as u8 | 1; 64 + (next(&mut rng) % 4032) as usize];
                            match next(&mut rng) % 100 {
                                0 => kept.push(block),
                                1..50 => own.push(block),
                                _ => handed.push(block),
                            }
                        }
                        drop(own);
                        done_tx.send(handed).unwrap();
                    }
                    Work::Free(blocks) => {
                        drop(blocks);
                        done_tx.send(Vec::new()).unwrap();
                    }
                }
            }
            drop(kept);
        }));
    }
    let live = tracked_mib();
    for k in 1..=bursts {
        let started = Instant::now();
        orders.iter().for_each(|o| o.send(Work::Burst(blocks)).unwrap());
        let mut handed: Vec<Vec<Vec<u8>>> = (0..WORKERS).map(|_| done.recv().unwrap()).collect();
        let rss_end = statm_rss_mib();
        for (i, o) in orders.iter().enumerate() {
            o.send(Work::Free(core::mem::take(&mut handed[(i + 1) % WORKERS]))).unwrap();
        }
        (0..WORKERS).for_each(|_| drop(done.recv().unwrap()));
        let ended = Instant::now();
        std::thread::sleep(Duration::from_secs(4).saturating_sub(ended.elapsed()));
        let threads = frag::reclaim::thread_releases();
        rows.push(Row {
            case: format!("burst {k}"),
            figures: vec![
                ("seconds", ended.duration_since(started).as_secs_f64()),
                ("rss_end_mib", rss_end),
                ("rss_4s_mib", statm_rss_mib()),
                ("live_mib", tracked_mib() - live),
                ("thread_releases", threads.total() as f64),
                ("thread_released_mib", threads.released_bytes as f64 / MIB),
            ],
        });
        std::thread::sleep(Duration::from_millis(gap).saturating_sub(started.elapsed()));
    }
    drop(orders);
    workers.into_iter().for_each(|w| drop(w.join()));
    if let Some(Ok(h)) = reclaimer {
        let t = h.totals();
        eprintln!("  reclaimer: {t}");
        rows.push(Row {
            case: "reclaimer".to_owned(),
            figures: vec![
                ("actions", t.actions as f64),
                ("released_mib", t.released_bytes as f64 / MIB),
                ("cpu_pct_of_core", t.cpu_share() * 100.0),
                ("thread_cpu_ms", t.threads.cpu.as_secs_f64() * 1e3),
            ],
        });
    }
    Outcome { rows, timeline: Vec::new() }
}

/// 9. What a released page costs when it is used again: 190 MiB (what one burst holds) mapped and
///    touched, returned with `MADV_DONTNEED` as the allocators do, then touched again, page by page,
///    timed; five rounds. This is the floor under what any reclaimer that returns a burst's memory
///    between bursts adds to the next burst.
pub fn refault(_: Scale) -> Outcome {
    const BYTES: usize = 190 << 20;
    // SAFETY: a fresh private anonymous mapping, checked below; unmapped at the end.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Outcome { rows: Vec::new(), timeline: Vec::new() };
    }
    let bytes = p.cast::<u8>();
    let touch_all = |value: u8| {
        for page in (0..BYTES).step_by(4096) {
            // SAFETY: `page` is inside the mapping.
            unsafe { bytes.add(page).write_volatile(value) };
        }
    };
    touch_all(1);
    let mut rows = Vec::new();
    for round in 1..=5 {
        let t = Instant::now();
        // SAFETY: the whole mapping, which nothing else uses.
        unsafe { libc::madvise(p, BYTES, libc::MADV_DONTNEED) };
        let release_ms = t.elapsed().as_secs_f64() * 1e3;
        let (t, faults) = (Instant::now(), minor_faults());
        touch_all(2);
        let refault = t.elapsed().as_secs_f64();
        let pages = (minor_faults() - faults) as f64;
        let t = Instant::now();
        touch_all(3);
        let resident = t.elapsed().as_secs_f64();
        rows.push(Row {
            case: format!("round {round}"),
            figures: vec![
                ("release_ms", release_ms),
                ("refault_ms", refault * 1e3),
                ("faults", pages),
                ("us_per_refault", refault * 1e6 / pages.max(1.0)),
                ("us_per_resident_write", resident * 1e6 / (BYTES / 4096) as f64),
            ],
        });
    }
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(p, BYTES) };
    Outcome { rows, timeline: Vec::new() }
}

/// Runs workload `name` (with `variant`).
pub fn run(name: &str, variant: &str, scale: Scale) -> Option<Outcome> {
    Some(match name {
        "alternating" => alternating(scale),
        "server" => server(scale),
        "threads" => threads(scale),
        "cross" => cross(scale, variant),
        "channel" => channel(scale, variant),
        "decay" => decay(scale, variant),
        "brk" => brk(scale),
        "bursts" => bursts(scale, variant),
        "handoff" => handoff(scale, variant),
        "refault" => refault(scale),
        "limit" => limit(scale, variant),
        _ => return None,
    })
}

/// CPU time (user and system) of the whole process so far, in seconds.
fn process_cpu() -> f64 {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

/// One worker of [`limit`]: replaces random blocks of its own without pause, keeping its live bytes
/// at `target`, handing every other replaced block to the next worker (`to_next`) and freeing what
/// it is handed (`inbox`); counts replacements in `ops`. Beside them it keeps [`LONG_LIVED`] bytes of
/// small blocks (32–511 B) made among the first replacements, one of which it replaces every 64th
/// replacement: long-lived blocks scattered over the pages the churn uses.
fn limit_worker(
    w: u64,
    target: &std::sync::atomic::AtomicU64,
    stop: &std::sync::atomic::AtomicBool,
    ops: &std::sync::atomic::AtomicU64,
    inbox: &mpsc::Receiver<Vec<Vec<u8>>>,
    to_next: &mpsc::Sender<Vec<Vec<u8>>>,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let mut rng = 0x9e37_79b9_u64 ^ (w + 1) << 32;
    let size = |rng: &mut u64| {
        let r = next(rng);
        let base = 32usize << (r % 11);
        (base + (r >> 8) as usize % base).min(48 << 10)
    };
    let (mut blocks, mut have): (Vec<Vec<u8>>, u64) = (Vec::new(), 0);
    let (mut long_lived, mut long_bytes): (Vec<Vec<u8>>, u64) = (Vec::new(), 0);
    while !stop.load(Relaxed) {
        while let Ok(handed) = inbox.try_recv() {
            drop(handed);
        }
        let t = target.load(Relaxed);
        while have < t {
            let n = size(&mut rng);
            blocks.push(vec![1u8; n]);
            have += n as u64;
        }
        while have > t && !blocks.is_empty() {
            let at = next(&mut rng) as usize % blocks.len();
            have -= blocks.swap_remove(at).len() as u64;
        }
        let mut handed = Vec::new();
        for _ in 0..256 {
            let n = size(&mut rng);
            let at = next(&mut rng) as usize % blocks.len().max(1);
            let Some(slot) = blocks.get_mut(at) else { break };
            let old = std::mem::replace(slot, vec![1u8; n]);
            have = have + n as u64 - old.len() as u64;
            let small = 32 + (next(&mut rng) % 480) as usize;
            if long_bytes < LONG_LIVED / LIMIT_WORKERS {
                long_lived.push(vec![2u8; small]);
                long_bytes += small as u64;
            } else if next(&mut rng) % 64 == 0 {
                let at = next(&mut rng) as usize % long_lived.len();
                let old = std::mem::replace(&mut long_lived[at], vec![2u8; small]);
                long_bytes = long_bytes + small as u64 - old.len() as u64;
            }
            if rng & 1 == 0 {
                handed.push(old);
            }
        }
        ops.fetch_add(256, Relaxed);
        let _ = to_next.send(handed);
    }
}

/// The long-lived small blocks of [`limit`]'s workers, all four together.
const LONG_LIVED: u64 = 48 << 20;

/// [`limit`]'s workers.
const LIMIT_WORKERS: u64 = 4;

/// 11. The soft memory limit under steady load: four workers replace random blocks of 32 B – 48 KiB
///     without pause, each handing every other replaced block to the next worker to free, and keep
///     long-lived small blocks ([`LONG_LIVED`]); their live set drops from about 770 to 150 MiB
///     after 4 s (the churn's 720 to 100) and they go on for 8 s more (quick: 2 + 6 s: the figures
///     from 2 s after the drop need a few seconds of samples, and 2 of them put glibc's median over
///     the limit in one quick run of three).
///     `variant` "without" (the reclaimer, no limit) or "with limit" (320 MiB). Per phase:
///     replacements per second; after the drop, RSS from 2 s on (median and highest), and the CPU
///     the reclaimer's thread and the workers' assists took.
pub fn limit(scale: Scale, variant: &str) -> Outcome {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    const M: u64 = 1 << 20;
    // The same bytes when quick: a process's own floor (code, frag's tables) would not fit a quarter.
    let (high, low, limit) = (720 * M, 100 * M, 320 * M);
    let (before, after) = scale.pick((4.0, 8.0), (2.0, 6.0));
    let reclaimer = match variant {
        "with limit" => frag::reclaim::Reclaimer::new().limit(frag::reclaim::MemoryLimit::Bytes(limit)),
        _ => frag::reclaim::Reclaimer::new().no_limit(),
    };
    let mut rows = Vec::new();
    let handle = match reclaimer.spawn() {
        Ok(h) => Some(h),
        Err(e) => {
            rows.push(Row { case: format!("no reclaimer: {e}"), figures: Vec::new() });
            None
        }
    };
    let target = Arc::new(AtomicU64::new(high / LIMIT_WORKERS));
    let (stop, ops) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..LIMIT_WORKERS).map(|_| mpsc::channel::<Vec<Vec<u8>>>()).unzip();
    let workers: Vec<_> = receivers
        .into_iter()
        .enumerate()
        .map(|(w, inbox)| {
            let (target, stop, ops) = (Arc::clone(&target), Arc::clone(&stop), Arc::clone(&ops));
            let to_next = senders[(w + 1) % LIMIT_WORKERS as usize].clone();
            std::thread::spawn(move || limit_worker(w as u64, &target, &stop, &ops, &inbox, &to_next))
        })
        .collect();
    drop(senders);
    let start = Instant::now();
    let (mut timeline, mut after_drop) = (Vec::new(), Vec::new());
    let (mut dropped, mut ops_before, mut cpu_at_drop) = (None, 0, 0.0);
    while start.elapsed().as_secs_f64() < before + after {
        std::thread::sleep(Duration::from_millis(100));
        let t = start.elapsed().as_secs_f64();
        let rss = statm_rss_mib();
        timeline.push((t, rss, tracked_mib()));
        match dropped {
            None if t >= before => {
                ops_before = ops.load(Relaxed);
                cpu_at_drop = process_cpu();
                target.store(low / LIMIT_WORKERS, Relaxed);
                dropped = Some(t);
            }
            Some(d) if t >= d + 2.0 => after_drop.push(rss),
            _ => {}
        }
    }
    stop.store(true, Relaxed);
    let ops_total = ops.load(Relaxed);
    let cpu_after = process_cpu() - cpu_at_drop;
    workers.into_iter().for_each(|w| drop(w.join()));
    let totals = handle.as_ref().map(frag::reclaim::ReclaimerHandle::totals);
    let peak_before = timeline.iter().filter(|p| p.0 < before).map(|p| p.1).fold(0.0, f64::max);
    rows.push(Row {
        case: "before the drop".into(),
        figures: vec![("ops_per_s", ops_before as f64 / before), ("rss_max_mib", peak_before)],
    });
    after_drop.sort_by(f64::total_cmp);
    let median = after_drop.get(after_drop.len() / 2).copied().unwrap_or(f64::NAN);
    let highest = after_drop.last().copied().unwrap_or(f64::NAN);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    rows.push(Row {
        case: "after the drop".into(),
        figures: vec![
            ("ops_per_s", (ops_total - ops_before) as f64 / after),
            ("rss_median_mib", median),
            ("rss_max_mib", highest),
            ("limit_mib", if variant == "with limit" { limit as f64 / MIB } else { f64::NAN }),
            ("process_cpu_s", cpu_after),
            ("reclaimer_cpu_ms", totals.map_or(f64::NAN, |t| ms(t.cpu))),
            ("assist_cpu_ms", totals.map_or(f64::NAN, |t| ms(t.assist_cpu))),
            ("actions", totals.map_or(f64::NAN, |t| t.actions as f64)),
            ("assists", totals.map_or(f64::NAN, |t| t.assists as f64)),
        ],
    });
    drop(handle);
    Outcome { rows, timeline }
}

/// The figures of a row, keyed by name (for JSON).
pub fn figures(row: &Row) -> BTreeMap<&'static str, f64> {
    row.figures.iter().copied().collect()
}
