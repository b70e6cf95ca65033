//! The OpenTelemetry memory probes of the sampled tier, read by bpftrace (`common::otel`): every
//! sample fires `alloc` and its free `free`, with the addresses the program holds and weights
//! that add up to frag's own live-bytes estimate. Needs root and Debian's `bpftrace`; CI runs it
//! in a build with frame pointers, where bpftrace's `ustack` names both sites.

#![cfg(feature = "usdt")]

mod common;

use common::otel;

#[global_allocator]
static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);

const MEAN: u64 = 64 << 10;

#[test]
#[ignore = "needs root and bpftrace: CI's step 'sites with the frame-pointer walk' runs it"]
fn bpftrace_sees_every_sample_of_the_sampled_tier() {
    let stacks = std::env::var("FRAG_EXPECT_UNWINDER").is_ok_and(|u| u == "frame pointers");
    otel::check("otel_child", MEAN, stacks);
}

#[test]
#[ignore = "a child-process helper"]
fn otel_child() {
    common::child_only("bpftrace_sees_every_sample_of_the_sampled_tier");
    frag::set_sampling(frag::Sampling::MeanBytes(MEAN)).unwrap();
    otel::child();
}
