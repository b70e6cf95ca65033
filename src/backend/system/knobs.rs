//! glibc's allocator (`std::alloc::System` on Linux/glibc): typed `mallopt` and `malloc_trim`.
//!
//! glibc's `mallopt` returns success for many values it then ignores or misreads, so every value is
//! range-checked here first. Setting any of the thresholds, the top pad or the mmap maximum also
//! turns off glibc's dynamic mmap threshold (which otherwise raises the threshold as large blocks
//! are freed): the value you set stays.
//!
//! glibc's heap (the `brk` area of the main arena) only shrinks from the top: one live block near the
//! top keeps every free page below it resident. [`trim`] also returns whole free pages from the
//! middle of every arena.

use crate::backend::Backend;
use crate::backend::tuning::{Method, Released, TuneError, require};

const NAME: &str = "glibc";

/// glibc's largest mmap threshold on 64-bit targets (`DEFAULT_MMAP_THRESHOLD_MAX`: 4 MiB per byte
/// of `long`); it refuses anything above.
pub const MAX_MMAP_THRESHOLD: usize = 4 * 1024 * 1024 * core::mem::size_of::<libc::c_long>();

/// A `mallopt` parameter with its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mallopt {
    /// `M_ARENA_MAX`: at most this many arenas (glibc's default is 8 per core). Fewer arenas, less
    /// memory spread over partly used heaps, more lock contention. At least 1.
    ArenaMax(u32),
    /// `M_TRIM_THRESHOLD`: free space at the top of the heap above this many bytes is returned with
    /// `brk` (default 128 KiB, raised dynamically). At most `i32::MAX`.
    TrimThreshold(usize),
    /// `M_MMAP_THRESHOLD`: requests of at least this many bytes get their own `mmap` and go back to
    /// the OS when freed (default 128 KiB, raised dynamically up to
    /// [`MAX_MMAP_THRESHOLD`]).
    MmapThreshold(usize),
    /// `M_TOP_PAD`: extra bytes obtained with each heap extension. At most `i32::MAX`.
    TopPad(usize),
    /// `M_MMAP_MAX`: at most this many simultaneous `mmap`ed blocks; 0 disables `mmap` for blocks.
    MmapMax(u32),
}

impl Mallopt {
    fn name(self) -> &'static str {
        match self {
            Self::ArenaMax(_) => "M_ARENA_MAX",
            Self::TrimThreshold(_) => "M_TRIM_THRESHOLD",
            Self::MmapThreshold(_) => "M_MMAP_THRESHOLD",
            Self::TopPad(_) => "M_TOP_PAD",
            Self::MmapMax(_) => "M_MMAP_MAX",
        }
    }

    /// The `mallopt` parameter and value, or what the range is.
    fn checked(self) -> Result<(libc::c_int, libc::c_int), &'static str> {
        let int = |v: usize| libc::c_int::try_from(v).ok();
        let (param, value) = match self {
            Self::ArenaMax(n) => (libc::M_ARENA_MAX, int(n as usize).filter(|n| *n >= 1).ok_or("1 to i32::MAX")?),
            Self::TrimThreshold(n) => (libc::M_TRIM_THRESHOLD, int(n).ok_or("0 to i32::MAX bytes")?),
            Self::MmapThreshold(n) => (
                libc::M_MMAP_THRESHOLD,
                int(n).filter(|_| n <= MAX_MMAP_THRESHOLD).ok_or("0 to MAX_MMAP_THRESHOLD (32 MiB) bytes")?,
            ),
            Self::TopPad(n) => (libc::M_TOP_PAD, int(n).ok_or("0 to i32::MAX bytes")?),
            Self::MmapMax(n) => (libc::M_MMAP_MAX, int(n as usize).ok_or("0 to i32::MAX")?),
        };
        Ok((param, value))
    }

    fn value(self) -> usize {
        match self {
            Self::ArenaMax(n) | Self::MmapMax(n) => n as usize,
            Self::TrimThreshold(n) | Self::MmapThreshold(n) | Self::TopPad(n) => n,
        }
    }
}

/// Sets a `mallopt` parameter.
///
/// # Errors
///
/// [`TuneError::WrongBackend`] unless `Tracked<System>` is installed; [`TuneError::InvalidValue`]
/// outside glibc's range; [`TuneError::Refused`] if glibc returns failure.
///
/// # Example
///
/// ```no_run
/// # #[global_allocator]
/// # static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
/// use frag::tune::glibc::{self, Mallopt};
///
/// glibc::set(Mallopt::ArenaMax(2))?;
/// glibc::set(Mallopt::TrimThreshold(1 << 20))?;
/// # Ok::<(), frag::tune::TuneError>(())
/// ```
pub fn set(option: Mallopt) -> Result<(), TuneError> {
    require(Backend::System, NAME)?;
    let (param, value) = option.checked().map_err(|expected| TuneError::InvalidValue {
        knob: option.name(),
        value: option.value().to_string(),
        expected,
    })?;
    // SAFETY: mallopt has no memory-safety preconditions; param and value are in glibc's range.
    if unsafe { libc::mallopt(param, value) } == 1 {
        Ok(())
    } else {
        Err(TuneError::Refused { knob: option.name(), reason: "glibc's mallopt returned failure" })
    }
}

/// `malloc_trim(0)`: returns free memory at the top of the main heap and every whole free page
/// inside any arena; reports the process's RSS around it.
///
/// # Errors
///
/// [`TuneError::WrongBackend`] unless `Tracked<System>` is installed.
pub fn trim() -> Result<Released, TuneError> {
    require(Backend::System, NAME)?;
    // SAFETY: malloc_trim has no preconditions.
    Ok(Released::around(|| unsafe {
        libc::malloc_trim(0);
    }))
}

/// The reclaimer's action: `malloc_trim(pad)`, leaving `pad` free bytes at the top of the main heap
/// (the pages it returns from inside arenas are not affected by the pad).
pub(crate) fn trim_keeping(pad: u64) -> Result<Method, TuneError> {
    require(Backend::System, NAME)?;
    // SAFETY: malloc_trim has no preconditions.
    unsafe { libc::malloc_trim(usize::try_from(pad).unwrap_or(usize::MAX)) };
    Ok(Method::Trim { pad })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert!(Mallopt::ArenaMax(0).checked().is_err());
        assert_eq!(Mallopt::ArenaMax(2).checked(), Ok((libc::M_ARENA_MAX, 2)));
        assert!(Mallopt::MmapThreshold(MAX_MMAP_THRESHOLD + 1).checked().is_err());
        assert!(Mallopt::MmapThreshold(MAX_MMAP_THRESHOLD).checked().is_ok());
        assert!(Mallopt::TrimThreshold(1 << 40).checked().is_err());
        assert!(Mallopt::MmapMax(u32::MAX).checked().is_err());
        assert_eq!(Mallopt::MmapMax(0).checked(), Ok((libc::M_MMAP_MAX, 0)));
    }
}
