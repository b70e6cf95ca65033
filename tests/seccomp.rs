//! Under a seccomp filter. frag's system calls, by component, are the lists below (docs/RELIABILITY.md
//! has the same lists): a child process that allows a plain Rust program's calls and these, and
//! kills on any other (`SIGSYS`), samples, reports, symbolizes, writes a profile and runs a publisher
//! and a reclaimer, and exits cleanly. A filter that refuses frag's one call on the sampled path
//! with an error instead degrades stacks alone, with a warning in the report.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

use common::{BACKEND, Backend};

#[global_allocator]
static A: frag::Tracked<Backend> = frag::Tracked::with_sampling(BACKEND, frag::Sampling::MeanBytes(64 << 10));

/// What a plain Rust program (this test binary's harness and workload, with no frag call) makes:
/// its allocator's calls, threads, output, sleeps.
const PLAIN: &[i64] = &[
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_writev,
    libc::SYS_close,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mprotect,
    libc::SYS_mremap,
    libc::SYS_madvise,
    libc::SYS_brk,
    libc::SYS_futex,
    libc::SYS_sched_yield,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_clock_gettime,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_sigaltstack,
    libc::SYS_clone,
    libc::SYS_clone3,
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
    libc::SYS_prctl,
    libc::SYS_gettid,
    libc::SYS_getrandom,
    libc::SYS_sched_getaffinity,
    libc::SYS_exit,
    libc::SYS_exit_group,
];

/// frag's own calls, by component (docs/RELIABILITY.md, "System calls"), as this child makes them
/// (`strace -f` after the filter is in place). The allocation path itself makes none but the first
/// two; the backend's are the backend's; frag's threads (the publisher's, the reclaimer's) are std
/// threads, whose calls are a plain program's.
const FRAG: &[(&str, &[i64])] = &[
    // A thread's first allocation: its shard records the thread's id.
    ("a thread's first allocation", &[libc::SYS_gettid]),
    // A thread's first sample, and each sample on a stack the program switched to: which stack
    // memory is readable.
    ("stacks", &[libc::SYS_getpid, libc::SYS_process_vm_readv]),
    // The unwind tables' rows, in mappings of their own (built before `main` and on a refresh).
    ("unwind tables", &[libc::SYS_mmap, libc::SYS_munmap]),
    // Reports and the publisher: `/proc/self/{statm,cgroup,maps}`, `/proc/meminfo`, thread names, the
    // memory cgroup's files (`statx` or `newfstatat`, as glibc's `stat` goes).
    (
        "reports",
        &[
            libc::SYS_openat,
            libc::SYS_read,
            libc::SYS_close,
            libc::SYS_lseek,
            libc::SYS_statx,
            libc::SYS_newfstatat,
            libc::SYS_getpid,
            libc::SYS_gettid,
        ],
    ),
    // Symbolizing and profiles: the binary's and libraries' debug information, mapped.
    (
        "symbols",
        &[
            libc::SYS_openat,
            libc::SYS_read,
            libc::SYS_close,
            libc::SYS_fcntl,
            libc::SYS_readlink,
            libc::SYS_statx,
            libc::SYS_mmap,
            libc::SYS_munmap,
        ],
    ),
    // The reclaimer: releases (`madvise`, glibc's `malloc_trim`, jemalloc's purges) and its CPU
    // budget (the thread's CPU clock).
    ("reclaimer", &[libc::SYS_madvise, libc::SYS_clock_gettime]),
];

/// A filter allowing `allowed` and taking `otherwise` on every other call.
fn filter(allowed: impl IntoIterator<Item = i64>, otherwise: SeccompAction) -> BpfProgram {
    let rules: BTreeMap<i64, Vec<seccompiler::SeccompRule>> = allowed.into_iter().map(|n| (n, Vec::new())).collect();
    SeccompFilter::new(rules, otherwise, SeccompAction::Allow, TargetArch::x86_64)
        .expect("a filter")
        .try_into()
        .expect("BPF")
}

/// Samples on a new thread (whose first sample asks which stack memory is readable), a report with
/// its sites symbolized, a heap profile, a publisher and a reclaimer for a few rounds each.
fn frag_at_work() -> frag::Report {
    let kept = std::thread::spawn(|| (0..400).map(|i| vec![1u8; 64 + i * 41]).collect::<Vec<_>>()).join().unwrap();
    let publisher = frag::Publisher::new().interval(Duration::from_millis(5)).spawn().expect("publisher");
    let reclaimer = frag::reclaim::Reclaimer::new()
        .limit(frag::reclaim::MemoryLimit::Bytes(1 << 20))
        .poll(Duration::from_millis(10))
        .spawn()
        .expect("reclaimer");
    std::thread::sleep(Duration::from_millis(60));
    publisher.stop();
    reclaimer.stop();
    let report = common::symbolized_report();
    assert!(!frag::profile::heap_pprof().is_empty());
    drop(kept);
    report
}

#[test]
#[ignore = "child of frag_makes_only_the_calls_it_lists"]
fn allowlist_child() {
    common::child_only("frag_makes_only_the_calls_it_lists");
    if std::env::var_os("FRAG_SECCOMP_UNFILTERED").is_none() {
        let allowed = PLAIN.iter().copied().chain(FRAG.iter().flat_map(|(_, calls)| calls.iter().copied()));
        seccompiler::apply_filter_all_threads(&filter(allowed, SeccompAction::KillProcess)).expect("the filter");
    }
    let report = frag_at_work();
    assert!(report.sites.as_ref().is_some_and(|s| s.unproven_stacks == 0), "{report}");
    println!("frag at work under the filter: {} samples", report.sites.as_ref().map_or(0, |s| s.samples));
}

/// Every call frag makes is in its lists: a call outside them kills the child with `SIGSYS`.
#[test]
fn frag_makes_only_the_calls_it_lists() {
    let out = common::run_child("allowlist_child", &[]);
    assert!(out.contains("frag at work under the filter"), "{out}");
}

#[test]
#[ignore = "child of a_refused_stack_proof_degrades_stacks_alone"]
fn refused_child() {
    common::child_only("a_refused_stack_proof_degrades_stacks_alone");
    // Everything allowed but the question stacks ask, which gets EPERM, as a container runtime's
    // filter without it would answer.
    let everything = (0..450).filter(|&n| n != libc::SYS_process_vm_readv);
    seccompiler::apply_filter_all_threads(&filter(everything, SeccompAction::Errno(libc::EPERM as u32)))
        .expect("the filter");
    let report = frag_at_work();
    let sites = report.sites.as_ref().expect("a sites section");
    assert!(sites.unproven_stacks > 0, "{report}");
    let text = report.to_string();
    assert!(text.contains("process_vm_readv"), "the report names the refused call:\n{text}");
    // Every sample is still counted: the estimates stand, only their stacks are missing.
    assert!(report.tracked.live_blocks > 0 && sites.samples > 0, "{report}");
    println!("refused: {} samples without a stack", sites.unproven_stacks);
}

/// A filter that refuses `process_vm_readv` with an error: no crash, no stacks walked, the report
/// says why.
#[test]
fn a_refused_stack_proof_degrades_stacks_alone() {
    let out = common::run_child("refused_child", &[]);
    assert!(out.contains("refused:"), "{out}");
}
