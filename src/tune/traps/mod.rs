//! Configuration traps: settings that look applied but are not (an environment variable the wrapped
//! allocator never reads, a misspelt one, a jemalloc option it rejected or silently adjusted) and
//! system settings known to hurt fragmented heaps. What a trap is, and which allocator reads which
//! variable, is the backends' vocabulary (`backend::tuning::trap`); the wrapped backend checks its own
//! variables (`KnownIntrospect::env_traps`); how the environment is read is `env`; the once-per-text
//! log warning is `warned`.

mod env;
mod warned;

use crate::backend::registry::registered;
pub use crate::backend::tuning::{EnvReader, Trap};

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

static CHECKED: std::sync::OnceLock<Vec<Trap>> = std::sync::OnceLock::new();
/// Whether a thread has started the check.
static STARTED: crate::sync::AtomicBool = crate::sync::AtomicBool::new(false);

/// The process's traps, checked once (by the first `report()`, outside the allocator and under its
/// reentrancy guard) and kept: the allocators read their environment and the kernel's THP mode at
/// start-up, and later reports stay pure reads (no environment lock, no `/sys` read, no log event).
/// [`check`] looks again.
///
/// Never waits: while another thread checks, a report goes without the traps. Waiting would hang a
/// child forked while its parent was checking (the checking thread does not exist in the child, so a
/// `OnceLock` would stay "running" forever there); such a child reports no traps.
pub(crate) fn checked() -> &'static [Trap] {
    once_without_waiting(&CHECKED, &STARTED, check_and_warn)
}

/// `cell`'s value, computed by `f` on the first call; empty while another thread computes it.
fn once_without_waiting<'a>(
    cell: &'a std::sync::OnceLock<Vec<Trap>>,
    started: &crate::sync::AtomicBool,
    f: impl FnOnce() -> Vec<Trap>,
) -> &'a [Trap] {
    if let Some(traps) = cell.get() {
        return traps;
    }
    if started.swap(true, crate::sync::Ordering::AcqRel) {
        return &[];
    }
    // Only the thread that started it sets the cell, so `set` cannot find it set.
    let _ = cell.set(f());
    cell.get().map_or(&[], Vec::as_slice)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A check under way elsewhere (or in the parent of a forked child) is not waited for.
    #[test]
    fn a_check_under_way_is_not_waited_for() {
        static CELL: std::sync::OnceLock<Vec<Trap>> = std::sync::OnceLock::new();
        static STARTED: crate::sync::AtomicBool = crate::sync::AtomicBool::new(false);
        // Another thread took the check and never finishes it (a forked child's view of its parent).
        STARTED.store(true, crate::sync::Ordering::Relaxed);
        assert!(once_without_waiting(&CELL, &STARTED, || vec![Trap::ThpAlways]).is_empty());
        // A first caller computes once; later callers read it.
        static CELL2: std::sync::OnceLock<Vec<Trap>> = std::sync::OnceLock::new();
        static STARTED2: crate::sync::AtomicBool = crate::sync::AtomicBool::new(false);
        assert_eq!(once_without_waiting(&CELL2, &STARTED2, || vec![Trap::ThpAlways]), [Trap::ThpAlways]);
        assert_eq!(once_without_waiting(&CELL2, &STARTED2, || panic!("computed twice")), [Trap::ThpAlways]);
    }
}
