//! `Select`: the backend picked once per process, at its first allocation, from `FRAG_ALLOCATOR`.

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::CStr;

use super::known::KnownAllocator;
use super::list::{Backend, EVERY_NAME, with_backend};
use crate::sync::{AtomicU8, Ordering};

/// The environment variable [`Select`] reads ([`Select::ENV`]).
pub(crate) const SELECT_ENV: &str = "FRAG_ALLOCATOR";
const SELECT_ENV_C: &CStr = c"FRAG_ALLOCATOR";

/// What reading `FRAG_ALLOCATOR` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EnvStatus {
    /// Unset, empty, or a backend that is compiled in.
    Fine,
    /// A name no backend has: the default was used.
    Unknown,
    /// A known backend this build does not include (its feature is off): the default was used.
    NotCompiled,
}

/// The backend chosen for this process: 0 until the first allocation decides it.
static CHOICE: AtomicU8 = AtomicU8::new(0);
static STATUS: AtomicU8 = AtomicU8::new(0);

/// A `GlobalAlloc` that dispatches to the backend named by the `FRAG_ALLOCATOR` environment variable
/// (`system`, `jemalloc`, `mimalloc`, `snmalloc`: those compiled in), read once at the process's first
/// allocation (without allocating) and fixed for the life of the process.
///
/// One binary can then compare allocators without a rebuild, in a benchmark or a production canary.
/// An unset or empty variable means the default backend; an unknown name, or a backend whose feature
/// is not compiled in, also falls back to the default, and `frag::report()` says so in its
/// warnings. Each call costs one relaxed load and a predictable branch over the fixed backend
/// (`benches/overhead.rs`, group `select`).
///
/// # Example
///
/// ```no_run
/// #[global_allocator]
/// static A: frag::Tracked<frag::Select> = frag::Tracked::new(frag::Select::new());
///
/// fn main() {
///     // FRAG_ALLOCATOR=mimalloc ./service
///     println!("allocator: {}", frag::Select::new().backend());
///     println!("{}", frag::report());
/// }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Select {
    default: Backend,
}

impl Select {
    /// The environment variable `Select` reads: a backend name (`system` or `glibc`, `jemalloc`,
    /// `mimalloc`, `snmalloc`), with surrounding whitespace and case ignored.
    pub const ENV: &'static str = SELECT_ENV;

    /// A `Select` whose default (when `FRAG_ALLOCATOR` is unset or invalid) is [`Backend::DEFAULT`].
    #[must_use]
    pub const fn new() -> Self {
        Self { default: Backend::DEFAULT }
    }

    /// A `Select` with another default backend.
    #[must_use]
    pub const fn with_default(default: Backend) -> Self {
        Self { default }
    }

    /// The backend this process uses, deciding it now if nothing was allocated yet.
    #[inline(always)]
    #[must_use]
    pub fn backend(&self) -> Backend {
        match Backend::from_code(CHOICE.load(Ordering::Relaxed)) {
            Some(b) => b,
            None => self.decide(),
        }
    }

    #[cold]
    #[inline(never)]
    fn decide(&self) -> Backend {
        let (wanted, status) = from_env(self.default);
        // Stored before the choice is published, so whoever sees the choice (`env_status` loads it
        // with Acquire) sees the status too. A racing thread stores the same value: every thread reads
        // the same variable.
        STATUS.store(status as u8, Ordering::Relaxed);
        // The first decision wins; they agree anyway.
        match CHOICE.compare_exchange(0, wanted.code(), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => wanted,
            Err(code) => Backend::from_code(code).unwrap_or(wanted),
        }
    }
}

impl Default for Select {
    fn default() -> Self {
        Self::new()
    }
}

/// Reads `FRAG_ALLOCATOR` with `getenv`: no allocation, so it can run inside the first allocation.
fn from_env(default: Backend) -> (Backend, EnvStatus) {
    // SAFETY: the name is a valid C string; `getenv` returns null or a pointer into the environment,
    // which nothing in this process modifies while it starts up.
    let value = unsafe { libc::getenv(SELECT_ENV_C.as_ptr()) };
    if value.is_null() {
        return (default, EnvStatus::Fine);
    }
    // SAFETY: a non-null `getenv` result is a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(value) }.to_bytes();
    parse(bytes).map_or((default, EnvStatus::Unknown), |parsed| match parsed {
        Some(b) => (b, EnvStatus::Fine),
        None if bytes.trim_ascii().is_empty() => (default, EnvStatus::Fine),
        None => (default, EnvStatus::NotCompiled),
    })
}

/// `Ok(Some(b))` for a backend compiled in, `Ok(None)` for a known one that is not (or the empty
/// string), `Err` for an unknown name. One rule: surrounding whitespace is ignored, case too.
fn parse(bytes: &[u8]) -> Result<Option<Backend>, ()> {
    let bytes = bytes.trim_ascii();
    let is = |name: &str| bytes.eq_ignore_ascii_case(name.as_bytes());
    if bytes.is_empty() {
        return Ok(None);
    }
    if is("system") || is("glibc") || is("libc") {
        return Ok(Some(Backend::System));
    }
    if let Some(b) = Backend::ALL.iter().find(|b| is(b.name())) {
        return Ok(Some(*b));
    }
    if EVERY_NAME.iter().any(|name| is(name)) { Ok(None) } else { Err(()) }
}

/// The chosen backend, for `backend::backend_of`: one relaxed load, and no decision. Every path
/// that asks runs after the process's first allocation through `Select` has chosen (a block
/// exists), so the fallback to the default backend is never taken.
#[inline(always)]
pub(crate) fn chosen() -> Backend {
    Backend::from_code(CHOICE.load(Ordering::Relaxed)).unwrap_or(Backend::DEFAULT)
}

/// What reading the variable found, once the backend is chosen; `None` if no `Select` allocated.
pub(crate) fn env_status() -> Option<EnvStatus> {
    if CHOICE.load(Ordering::Acquire) == 0 {
        return None;
    }
    Some(match STATUS.load(Ordering::Relaxed) {
        1 => EnvStatus::Unknown,
        2 => EnvStatus::NotCompiled,
        _ => EnvStatus::Fine,
    })
}

// SAFETY: every method forwards to the one backend chosen for the process, which never changes once
// chosen (before the first block exists), so every block is freed or reallocated by the allocator that
// handed it out; each backend's guarantees carry over unchanged.
unsafe impl GlobalAlloc for Select {
    /// # Safety
    ///
    /// As `GlobalAlloc::alloc`.
    #[inline(always)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        with_backend!(self.backend(), A => unsafe { A::VALUE.alloc(layout) })
    }

    /// # Safety
    ///
    /// As `GlobalAlloc::alloc_zeroed`.
    #[inline(always)]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        with_backend!(self.backend(), A => unsafe { A::VALUE.alloc_zeroed(layout) })
    }

    /// # Safety
    ///
    /// As `GlobalAlloc::dealloc`.
    #[inline(always)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from the same (fixed) backend with `layout`.
        with_backend!(self.backend(), A => unsafe { A::VALUE.dealloc(ptr, layout) })
    }

    /// # Safety
    ///
    /// As `GlobalAlloc::realloc`.
    #[inline(always)]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from the same (fixed) backend with `layout`.
        with_backend!(self.backend(), A => unsafe { A::VALUE.realloc(ptr, layout, new_size) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_trimmed_and_case_insensitively() {
        assert_eq!(parse(b"System"), Ok(Some(Backend::System)));
        assert_eq!(parse(b" SYSTEM\n"), Ok(Some(Backend::System)));
        assert_eq!(parse(b"  "), Ok(None));
        assert_eq!(parse(b"sys tem"), Err(()));
        assert_eq!(parse(b"glibc"), Ok(Some(Backend::System)));
        assert_eq!(parse(b""), Ok(None));
        assert_eq!(parse(b"tcmalloc"), Err(()));
        for b in Backend::ALL {
            assert_eq!(parse(b.name().to_uppercase().as_bytes()), Ok(Some(*b)));
            assert_eq!(Backend::from_code(b.code()), Some(*b));
        }
        #[cfg(not(feature = "mimalloc"))]
        assert_eq!(parse(b"mimalloc"), Ok(None), "known but not compiled in");
    }
}
