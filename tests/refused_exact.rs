//! A backend that returns null, in the exact tier with every block sampled: every refusal is met on
//! the sampled path (the cases: `tests/common/refused_cases.rs`).

mod common;

#[global_allocator]
static A: frag::Tracked<Refusing, frag::Exact> =
    frag::Tracked::with_sampling(common::Refusing, frag::Sampling::EveryBlock);

include!("common/refused_cases.rs");
