//! The OpenTelemetry memory probes read by a real tracer: Debian's `bpftrace`, attached to the
//! `otel_memory:alloc` and `free` probes of a child process (this test binary again) that allocates
//! at two sites with a known split of bytes, reallocates some blocks and frees half.
//!
//! The window: the child fires a start marker (an allocation of `START` bytes, sampled for certain
//! at the test's mean) and an end marker (`END`); the tracer counts only what lies between, in maps
//! written synchronously by each probe, so the window is exact whatever order its output arrives in.
//! Before the window, a beacon thread allocates and frees `BEACON` bytes until the parent sees the
//! tracer report both probes: both are attached. The child reports frag's own figures for the same
//! window (`report().origin`'s sample counts, its scope's live bytes) and the addresses it holds, and
//! stays alive until the tracer has symbolized the stacks.
//!
//! The tracer attaches while the beacon thread samples and detaches while two threads do: the
//! probes are safe whenever a tracer comes or goes.
//!
//! The start marker opens the window before the first report: its figures are taken after the
//! marker, and the copy of it that the program receives (allocated as the program's, sampled like
//! any other allocation) falls inside both. The end marker closes the window before the second report, whose copy then falls
//! outside both.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const START: usize = (4 << 20) + 1;
const END: usize = (4 << 20) + 2;
const BEACON: usize = (4 << 20) + 3;
/// Site A's blocks, and how many; what a grown block of A becomes.
const SMALL: usize = 1000;
const SMALL_N: usize = 16_000;
const GROWN: usize = 3000;
const GROWN_N: usize = 2_000;
/// Site B's blocks, and how many.
const LARGE: usize = 24_000;
const LARGE_N: usize = 2_000;
/// What the child prints its figures behind.
const TAG: &str = "frag-otel:";

/// Site A: `n` blocks of `SMALL` bytes.
#[inline(never)]
pub fn small_site(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| std::hint::black_box(vec![i as u8; SMALL])).collect()
}

/// Site B: `n` blocks of `LARGE` bytes.
#[inline(never)]
pub fn large_site(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| std::hint::black_box(vec![i as u8; LARGE])).collect()
}

/// The child's part, run in the child process (`super::child_only` first): waits for `go` on stdin,
/// runs the window in a scope of its own, prints frag's figures, and waits for `exit`.
pub fn child() {
    static STOP: AtomicBool = AtomicBool::new(false);
    let scope = frag::Scope::new("otel-window").unwrap();
    let beacon = std::thread::spawn(|| {
        while !STOP.load(Ordering::Relaxed) {
            drop(std::hint::black_box(vec![1u8; BEACON]));
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    let mut stdin = std::io::stdin().lock();
    let mut line = String::new();
    stdin.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "go");
    STOP.store(true, Ordering::Relaxed);
    beacon.join().unwrap();

    let start = std::hint::black_box(vec![0u8; START]);
    // Only the counts are kept: the report's copy is freed inside the window, where its samples
    // were taken (a report kept alive would hold samples outside the scope).
    let before = frag::report().origin.map(|o| (o.sampled_blocks, o.sampled_frees)).expect("sampling is on");
    let (mut small, mut large) = {
        let _in = scope.enter();
        let (mut small, mut large) = (small_site(SMALL_N), large_site(LARGE_N));
        // Half of each site freed, then some of A's survivors grown: reallocations.
        small = small.into_iter().step_by(2).collect();
        large = large.into_iter().step_by(2).collect();
        for v in small.iter_mut().take(GROWN_N) {
            v.reserve_exact(GROWN - v.len());
            v.resize(GROWN, 7);
        }
        (small, large)
    };
    let live = scope.live_bytes();
    // The end marker before frag's figures: a report hands the program a copy of itself, allocated
    // after its figures were taken, so the copy must fall outside the tracer's window. The marker is
    // a sample of frag's figures, not of the tracer's window: one alloc less.
    let end = std::hint::black_box(vec![0u8; END]);
    let after = frag::report().origin.map(|o| (o.sampled_blocks, o.sampled_frees)).expect("sampling is on");
    drop((start, end));
    // The blocks, and the two vectors that hold them (allocated in the window too).
    let blocks = small.iter().chain(&large).map(|v| v.as_ptr() as usize);
    let outer = [small.as_ptr() as usize, large.as_ptr() as usize];
    let held: Vec<String> = blocks.chain(outer).map(|a| format!("{a:x}")).collect();
    println!(
        "{TAG} allocs={} frees={} live_estimate={} live_samples={} held={}",
        after.0 - before.0 - 1,
        after.1 - before.1,
        live.estimate,
        live.samples,
        held.join(",")
    );
    std::io::stdout().flush().unwrap();
    // The tracer detaches while two threads take samples (the parent stops it after this line).
    STOP.store(false, Ordering::Relaxed);
    let busy: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(|| {
                while !STOP.load(Ordering::Relaxed) {
                    drop(std::hint::black_box(vec![1u8; 64 << 10]));
                    std::thread::sleep(Duration::from_micros(100));
                }
            })
        })
        .collect();
    line.clear();
    stdin.read_line(&mut line).unwrap();
    STOP.store(true, Ordering::Relaxed);
    busy.into_iter().for_each(|t| t.join().unwrap());
    small.clear();
    large.clear();
}

/// What bpftrace counted in the window.
#[derive(Debug, Default)]
struct Traced {
    allocs: u64,
    frees: u64,
    /// Blocks sampled in the window and not freed: address → `weighted_bytes`.
    live: BTreeMap<usize, u64>,
    /// `weighted_bytes` summed by `size`, over every `alloc` in the window.
    by_size: BTreeMap<u64, u64>,
    /// `weighted_bytes` summed by the allocating stack (`ustack`, symbolized).
    by_stack: Vec<(String, u64)>,
    /// `weighted_bytes` whose stack bpftrace lost: its `ustack` (the kernel's `bpf_get_stackid`)
    /// fails on a hash collision in its stack map (`-EEXIST`) or when the kernel's callchain
    /// buffer is busy (`-EFAULT`), and bpftrace prints an empty key (`@by_stack[]: N`).
    lost_stacks: u64,
    /// What `-k` printed among the maps: the helpers that failed.
    warnings: Vec<String>,
}

/// frag's figures for the window, as the child printed them.
#[derive(Debug)]
struct Frags {
    allocs: u64,
    frees: u64,
    live_estimate: u64,
    live_samples: u64,
    held: BTreeSet<usize>,
}

fn script(exe: &str) -> String {
    let probe = |name: &str| format!("usdt:{exe}:otel_memory:{name}");
    let (alloc, free) = (probe("alloc"), probe("free"));
    format!(
        r#"
{alloc} /arg1 == {BEACON}/ {{ @beacon[arg0] = 1; printf("beacon alloc\n"); }}
{free} /@beacon[arg0] == 1/ {{ delete(@beacon[arg0]); printf("beacon free\n"); }}
{alloc} /arg1 == {START}/ {{ @on = 1; }}
{alloc} /arg1 == {END}/ {{ @on = 0; }}
{alloc} /@on == 1 && arg1 != {START} && arg1 != {END}/ {{
    @allocs = count(); @live[arg0] = arg2; @by_size[arg1] = sum(arg2); @by_stack[ustack] = sum(arg2);
}}
{free} /@on == 1/ {{ @frees = count(); delete(@live[arg0]); }}
"#
    )
}

/// Parses bpftrace's maps as printed at exit.
fn parse(out: &str) -> Traced {
    let mut t = Traced::default();
    let mut lines = out.lines();
    let num = |s: &str| s.trim().parse::<u64>().unwrap_or_else(|_| panic!("a number in {s:?}"));
    while let Some(line) = lines.next() {
        if let Some(v) = line.strip_prefix("@allocs: ") {
            t.allocs = num(v);
        } else if let Some(v) = line.strip_prefix("@frees: ") {
            t.frees = num(v);
        } else if let Some(rest) = line.strip_prefix("@live[") {
            let (k, v) = rest.split_once("]: ").expect("@live[address]: weight");
            t.live.insert(num(k) as usize, num(v));
        } else if let Some(rest) = line.strip_prefix("@by_size[") {
            let (k, v) = rest.split_once("]: ").expect("@by_size[size]: weight");
            t.by_size.insert(num(k), num(v));
        } else if line.contains("WARNING") {
            t.warnings.push(line.to_owned());
        } else if let Some(v) = line.strip_prefix("@by_stack[]: ") {
            t.lost_stacks += num(v);
        } else if line == "@by_stack[" {
            let mut stack = String::new();
            for frame in lines.by_ref() {
                if let Some(v) = frame.strip_prefix("]: ") {
                    t.by_stack.push((std::mem::take(&mut stack), num(v)));
                    break;
                }
                stack.push_str(frame.trim());
                stack.push('\n');
            }
        }
    }
    t
}

fn parse_frags(line: &str) -> Frags {
    let fields: BTreeMap<&str, &str> =
        line.trim_start_matches(TAG).split_whitespace().filter_map(|f| f.split_once('=')).collect();
    let num = |k: &str| fields[k].parse::<u64>().unwrap();
    Frags {
        allocs: num("allocs"),
        frees: num("frees"),
        live_estimate: num("live_estimate"),
        live_samples: num("live_samples"),
        held: fields["held"].split(',').map(|a| usize::from_str_radix(a, 16).unwrap()).collect(),
    }
}

/// Why the tracer cannot run here, if it cannot: not installed, or refused by the kernel.
fn unavailable(why: &str) {
    let required = std::env::var_os("FRAG_REQUIRE_TRACER").is_some();
    assert!(!required, "FRAG_REQUIRE_TRACER is set, and bpftrace cannot run here: {why}");
    eprintln!("skipped: bpftrace cannot run here: {why}");
}

/// Lines of a child's stdout, on a channel (reads never block the test's own thread).
fn lines_of(out: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    rx
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the child test `child_test` under bpftrace and checks what the tracer saw against frag's
/// own figures and the program's blocks; the child samples once per `mean` bytes (64 KiB: about
/// 1,000 samples in the window). `stacks`: whether bpftrace's `ustack` (a frame-pointer walk) must
/// name both sites, which only a build with frame pointers gives it.
pub fn check(child_test: &str, mean: u64, stacks: bool) {
    if Command::new("bpftrace").arg("--version").output().is_err() {
        return unavailable("`bpftrace` is not on PATH (Debian: apt-get install bpftrace)");
    }
    // A stack bpftrace lost is its own failure, not the walk's (a walk that breaks gives a short
    // stack, which it prints): once, the window is traced again.
    for attempt in 1..=2 {
        let Some((frags, traced, tracer_err)) = trace(child_test) else { return };
        if stacks && traced.lost_stacks > 0 && attempt == 1 && !names_both_sites(&traced) {
            eprintln!(
                "bpftrace lost the stacks of {} weighted bytes ({:?}; {tracer_err:?}): tracing again",
                traced.lost_stacks, traced.warnings
            );
            continue;
        }
        return check_traced(&frags, &traced, &tracer_err, mean, stacks);
    }
}

const SITES: [&str; 2] = ["small_site", "large_site"];

fn site_weight(traced: &Traced, site: &str) -> u64 {
    traced.by_stack.iter().filter(|(s, _)| s.contains(site)).map(|(_, w)| w).sum()
}

fn names_both_sites(traced: &Traced) -> bool {
    SITES.iter().all(|site| site_weight(traced, site) > 0)
}

/// One traced window: frag's figures, the tracer's, and what the tracer printed on stderr; `None`
/// if the tracer cannot run here (said).
fn trace(child_test: &str) -> Option<(Frags, Traced, Vec<String>)> {
    let exe = std::env::current_exe().unwrap();
    let exe = exe.to_str().unwrap();
    let child = Command::new(exe)
        .args(["--exact", child_test, "--include-ignored", "--nocapture", "--test-threads=1"])
        .env("FRAG_TEST_CHILD", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    let mut to_child = child.0.stdin.take().unwrap();
    let from_child = lines_of(child.0.stdout.take().unwrap());
    let tracer = Command::new("bpftrace")
        // `-k`: a helper that fails (a lost stack among them) is said.
        .args(["-k", "-p", &child.0.id().to_string(), "-e", &script(exe)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut tracer = Killed(tracer);
    let from_tracer = lines_of(tracer.0.stdout.take().unwrap());
    let tracer_err = lines_of(tracer.0.stderr.take().unwrap());
    let (mut seen_alloc, mut seen_free) = (false, false);
    let mut before = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !(seen_alloc && seen_free) {
        match from_tracer.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                seen_alloc |= line == "beacon alloc";
                seen_free |= line == "beacon free";
                before.push(line);
            }
            Err(_) => {
                let err: Vec<String> = tracer_err.try_iter().collect();
                unavailable(&format!("it never reported both probes (stdout: {before:?}; stderr: {})", err.join("\n")));
                return None;
            }
        }
    }
    writeln!(to_child, "go").unwrap();
    let frags = loop {
        let line = from_child.recv_timeout(Duration::from_secs(300)).expect("the child's figures");
        match line.find(TAG) {
            Some(at) => break parse_frags(&line[at..]),
            None => eprintln!("child: {line}"),
        }
    };
    // SAFETY: `kill` with a live child's pid and SIGINT: bpftrace prints its maps and exits.
    assert_eq!(unsafe { libc::kill(tracer.0.id() as i32, libc::SIGINT) }, 0);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut out = Vec::new();
    loop {
        match from_tracer.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => out.push(line),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                "bpftrace did not exit within 2 minutes of SIGINT (stderr: {:?})",
                tracer_err.try_iter().collect::<Vec<_>>()
            ),
        }
    }
    let _ = tracer.0.wait();
    writeln!(to_child, "exit").unwrap();
    assert!(child.0.wait().unwrap().success(), "the child failed");
    Some((frags, parse(&out.join("\n")), tracer_err.try_iter().collect()))
}

/// The checks on one traced window.
fn check_traced(frags: &Frags, traced: &Traced, tracer_err: &[String], mean: u64, stacks: bool) {
    eprintln!(
        "frag: {} allocs, {} frees, {} live samples, {} B live (estimate)",
        frags.allocs, frags.frees, frags.live_samples, frags.live_estimate
    );
    eprintln!(
        "bpftrace: {} allocs, {} frees, {} live, by size {:?}",
        traced.allocs,
        traced.frees,
        traced.live.len(),
        traced.by_size
    );

    // Every sample, and only those: the tracer's counts are frag's.
    assert!(frags.allocs > 500, "the window sampled too little to check: {frags:?}");
    assert_eq!(traced.allocs, frags.allocs, "alloc events against frag's sampled blocks");
    assert_eq!(traced.frees, frags.frees, "free events against frag's sampled frees");
    // What is still live: the same samples, standing for the same bytes, at blocks the program holds.
    assert_eq!(traced.live.len() as u64, frags.live_samples, "live samples");
    let traced_live: u64 = traced.live.values().sum();
    let off = (traced_live as f64 - frags.live_estimate as f64).abs() / frags.live_estimate as f64;
    assert!(
        off < 0.01,
        "sum of weighted_bytes over live blocks {traced_live} against frag's live bytes {}",
        frags.live_estimate
    );
    let strangers: Vec<&usize> = traced.live.keys().filter(|a| !frags.held.contains(a)).collect();
    assert!(strangers.is_empty(), "live samples at addresses the program does not hold: {strangers:x?}");
    // The known split: each size's bytes, allocated in the window, within 5 standard errors.
    let truth = [(SMALL, SMALL_N), (LARGE, LARGE_N), (GROWN, GROWN_N)];
    for (size, n) in truth {
        let p = -(-(size as f64) / mean as f64).exp_m1();
        let w = size as f64 / p;
        let sd = (n as f64 * p * (1.0 - p)).sqrt() * w;
        let got = traced.by_size.get(&(size as u64)).copied().unwrap_or(0) as f64;
        let want = (size * n) as f64;
        assert!(
            (got - want).abs() < 5.0 * sd,
            "{size} B blocks: {got} weighted bytes against {want} allocated (sd {sd})"
        );
    }
    if stacks {
        for site in SITES {
            assert!(
                site_weight(traced, site) > 0,
                "no ustack names {site} ({} weighted bytes of lost stacks; bpftrace's warnings {:?}, stderr {tracer_err:?}):\n{:#?}",
                traced.lost_stacks,
                traced.warnings,
                traced.by_stack
            );
        }
    }
}
