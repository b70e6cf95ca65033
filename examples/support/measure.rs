//! Measuring helpers shared by the examples: a deterministic random sequence and the process's page
//! faults, both allocation-free.
#![allow(dead_code)]

/// xorshift64: deterministic, allocation-free.
pub fn next(rng: &mut u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng
}

/// Minor page faults of the whole process so far (`getrusage`).
pub fn minor_faults() -> u64 {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_minflt as u64
}

/// Peak resident set of the process so far, in bytes (`getrusage`).
pub fn peak_rss() -> u64 {
    // SAFETY: as in `minor_faults`.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_maxrss as u64 * 1024
}

pub const MIB: f64 = (1 << 20) as f64;
