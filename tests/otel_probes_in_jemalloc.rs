//! The OpenTelemetry memory probes while sampling inside jemalloc (`frag::sample_in_jemalloc`),
//! read by bpftrace (`common::otel`). Needs root and Debian's `bpftrace`; CI runs it with the heap
//! profiles' clients (its build has no frame pointers: `ustack` is not checked here).

#![cfg(all(feature = "usdt", feature = "jemalloc-prof"))]

mod common;

use common::otel;
use frag::tune::jemalloc::JemallocConfig;

#[global_allocator]
static A: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

frag::jemalloc_conf!(JemallocConfig::new().prof(true).prof_active(false));

const MEAN: u64 = 64 << 10;

#[test]
#[ignore = "needs root and bpftrace: CI's step 'heap profiles read by go tool pprof' runs it"]
fn bpftrace_sees_every_sample_taken_inside_jemalloc() {
    otel::check("otel_child", MEAN, false);
}

#[test]
#[ignore = "a child-process helper"]
fn otel_child() {
    common::child_only("bpftrace_sees_every_sample_taken_inside_jemalloc");
    frag::sample_in_jemalloc(frag::Sampling::MeanBytes(MEAN)).unwrap();
    otel::child();
}
