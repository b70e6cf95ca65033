//! A backend that returns null, in the sampled tier at a 64 KiB mean: the refused blocks (5 MB) are
//! always sampled, so every refusal is met on the sampled path (the cases:
//! `tests/common/refused_cases.rs`).

mod common;

#[global_allocator]
static A: frag::Tracked<Refusing> = frag::Tracked::with_sampling(common::Refusing, frag::Sampling::MeanBytes(64 << 10));

include!("common/refused_cases.rs");
