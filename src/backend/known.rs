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
pub enum Backend {
    /// `std::alloc::System` (glibc malloc on Linux). `FRAG_ALLOCATOR=system` (or `glibc`).
    System,
    /// `tikv_jemallocator::Jemalloc`. `FRAG_ALLOCATOR=jemalloc`.
    #[cfg(feature = "jemalloc")]
    Jemalloc,
    /// `mimalloc::MiMalloc`. `FRAG_ALLOCATOR=mimalloc`.
    #[cfg(feature = "mimalloc")]
    Mimalloc,
    /// `snmalloc_rs::SnMalloc`. `FRAG_ALLOCATOR=snmalloc`.
    #[cfg(feature = "snmalloc")]
    Snmalloc,
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

    /// 1-based index into [`Self::ALL`], so that 0 can mean "not chosen yet".
    pub(crate) fn code(self) -> u8 {
        Self::ALL.iter().position(|b| *b == self).map_or(0, |i| i as u8 + 1)
    }

    /// The inverse of [`Self::code`].
    pub(crate) fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(usize::from(code).checked_sub(1)?).copied()
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
