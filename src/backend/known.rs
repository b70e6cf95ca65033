//! The allocators this crate knows by type, and their names.

use core::fmt;

/// An allocator this crate knows by type (those compiled in): what [`Select`](crate::Select) can
/// dispatch to, and what reports and tuning recognise behind a `Tracked`.
///
/// # Example
///
/// ```no_run
/// // Which allocators this build can compare, by the names `FRAG_ALLOCATOR` takes.
/// for backend in frag::Backend::ALL {
///     println!("FRAG_ALLOCATOR={backend}");
/// }
/// assert!(frag::Backend::ALL.contains(&frag::Backend::DEFAULT));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
pub enum Backend {
    /// `std::alloc::System` (glibc malloc on Linux). `FRAG_ALLOCATOR=system` (or `glibc`).
    System = 1,
    /// `tikv_jemallocator::Jemalloc`. `FRAG_ALLOCATOR=jemalloc`.
    #[cfg(feature = "jemalloc")]
    Jemalloc = 2,
    /// `mimalloc::MiMalloc`. `FRAG_ALLOCATOR=mimalloc`.
    #[cfg(feature = "mimalloc")]
    Mimalloc = 3,
    /// `snmalloc_rs::SnMalloc`. `FRAG_ALLOCATOR=snmalloc`.
    #[cfg(feature = "snmalloc")]
    Snmalloc = 4,
}

impl Backend {
    /// Every backend compiled in, in a stable order.
    pub const ALL: &'static [Backend] = &[
        Backend::System,
        #[cfg(feature = "jemalloc")]
        Backend::Jemalloc,
        #[cfg(feature = "mimalloc")]
        Backend::Mimalloc,
        #[cfg(feature = "snmalloc")]
        Backend::Snmalloc,
    ];

    /// jemalloc when compiled in (the crate's headline backend), else `System`.
    pub const DEFAULT: Backend = {
        #[cfg(feature = "jemalloc")]
        let b = Backend::Jemalloc;
        #[cfg(not(feature = "jemalloc"))]
        let b = Backend::System;
        b
    };

    /// The name `FRAG_ALLOCATOR` takes and reports show.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::System => "system",
            #[cfg(feature = "jemalloc")]
            Self::Jemalloc => "jemalloc",
            #[cfg(feature = "mimalloc")]
            Self::Mimalloc => "mimalloc",
            #[cfg(feature = "snmalloc")]
            Self::Snmalloc => "snmalloc",
        }
    }

    /// A non-zero code for an atomic, so that 0 can mean "not chosen yet".
    #[inline(always)]
    pub(crate) const fn code(self) -> u8 {
        self as u8
    }

    /// The inverse of [`Self::code`]: a range check on the allocation path, not a table lookup.
    #[inline(always)]
    pub(crate) const fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::System),
            #[cfg(feature = "jemalloc")]
            2 => Some(Self::Jemalloc),
            #[cfg(feature = "mimalloc")]
            3 => Some(Self::Mimalloc),
            #[cfg(feature = "snmalloc")]
            4 => Some(Self::Snmalloc),
            _ => None,
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
