//! Configuration traps: settings that look applied but are not (an environment variable the wrapped
//! allocator never reads, a misspelt one, a jemalloc option it rejected or silently adjusted) and
//! system settings known to hurt fragmented heaps. What a trap is, and which allocator reads which
//! variable, is the backends' vocabulary (`backend::knob::trap`); the wrapped backend checks its own
//! variables (`KnownAllocator::env_traps`); how the environment is read is `env`; the once-per-text
//! log warning is `warned`.

mod env;
mod warned;

pub use crate::backend::knob::{EnvReader, Trap};
use crate::backend::registry::registered;

/// Finds configuration traps for the wrapped allocator: allocator environment variables it ignores
/// or that are misspelt, jemalloc options it rejected or adjusted, and transparent huge pages set
/// to `always`.
///
/// `frag::report()` checks once, the first time it runs, includes what it found in its
/// warnings and findings from then on, and emits each as a `tracing` warning; this function looks
/// again every time it is called.
///
/// # Example
///
/// ```no_run
/// # #[global_allocator]
/// # static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
/// for trap in frag::tune::check() {
///     eprintln!("allocator configuration: {trap}");
/// }
/// ```
#[must_use]
pub fn check() -> Vec<Trap> {
    let vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())))
        .collect();
    let mut traps = env::env_traps(registered(), &vars);
    if env::read_thp_mode().as_deref() == Some("always") {
        traps.push(Trap::ThpAlways);
    }
    traps
}

/// The process's traps, checked once (by the first `report()`, outside the allocator and under its
/// reentrancy guard) and kept: the allocators read their environment and the kernel's THP mode at
/// start-up, and later reports stay pure reads (no environment lock, no `/sys` read, no log event).
/// [`check`] looks again.
pub(crate) fn checked() -> &'static [Trap] {
    static CHECKED: std::sync::OnceLock<Vec<Trap>> = std::sync::OnceLock::new();
    CHECKED.get_or_init(check_and_warn)
}

/// [`check`], emitting each trap not seen before as a `tracing` warning.
fn check_and_warn() -> Vec<Trap> {
    let traps = check();
    for trap in &traps {
        let text = trap.to_string();
        if warned::first_time(&text) {
            tracing::warn!(target: "frag", trap = ?trap, "allocator configuration: {text}");
        }
    }
    traps
}
