//! The one list of the allocators this crate knows by type. Everything that enumerates backends is
//! generated from it: the [`Backend`] enum and its names and codes, the type match behind
//! `backend::backend_of`, the backend modules' declarations, the names `FRAG_ALLOCATOR` knows, and
//! `with_backend!`, the static dispatch that `Select`, the allocation path, the report and tuning use to
//! reach a backend's [`KnownAllocator`](super::known::KnownAllocator) implementation.
//!
//! Adding a backend: a file implementing `KnownAllocator` for its allocator type, one line here (which
//! also declares the file's module), and a cargo feature. Every backend is named here even when its
//! feature is off, so that `FRAG_ALLOCATOR=mimalloc` in a build without mimalloc is "not compiled in"
//! rather than unknown.

use core::fmt;

/// Calls `$callback!` with the list: `[args]` first, then one entry per backend: doc lines, variant
/// and code (non-zero, for an atomic where 0 means "not chosen"), the `FRAG_ALLOCATOR` name, the
/// allocator type, the module under `backend/` that implements it, and the `cfg` under which it is
/// compiled in.
macro_rules! backend_list {
    ($callback:ident!($($args:tt)*)) => {
        $crate::backend::list::$callback! {
            [$($args)*]
            /// `std::alloc::System` (glibc malloc on Linux). `FRAG_ALLOCATOR=system` (or `glibc`).
            System = 1, "system", std::alloc::System, system, [all()];
            /// `tikv_jemallocator::Jemalloc`. `FRAG_ALLOCATOR=jemalloc`.
            Jemalloc = 2, "jemalloc", tikv_jemallocator::Jemalloc, jemalloc, [feature = "jemalloc"];
            /// `mimalloc::MiMalloc`. `FRAG_ALLOCATOR=mimalloc`.
            Mimalloc = 3, "mimalloc", ::mimalloc::MiMalloc, mimalloc, [feature = "mimalloc"];
            /// `snmalloc_rs::SnMalloc`. `FRAG_ALLOCATOR=snmalloc`.
            Snmalloc = 4, "snmalloc", snmalloc_rs::SnMalloc, snmalloc, [feature = "snmalloc"];
        }
    };
}

/// Generates [`Backend`] from the list.
macro_rules! define_backend {
    ([] $($(#[doc = $doc:literal])* $variant:ident = $code:literal, $name:literal, $ty:path, $module:ident, [$($cfg:tt)*];)*) => {
        /// An allocator this crate knows by type (those compiled in): what [`Select`](crate::Select) can
        /// dispatch to, and what reports and tuning recognise behind a `Tracked`.
        ///
        /// # Example
        ///
        /// ```no_run
        /// // Which allocators this build can compare, by the names `FRAG_ALLOCATOR` takes.
        /// for backend in frag::backend::Backend::ALL {
        ///     println!("FRAG_ALLOCATOR={backend}");
        /// }
        /// assert!(frag::backend::Backend::ALL.contains(&frag::backend::Backend::DEFAULT));
        /// ```
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        #[repr(u8)]
        pub enum Backend {
            $($(#[doc = $doc])* #[cfg($($cfg)*)] $variant = $code,)*
        }

        impl Backend {
            /// Every backend compiled in, in a stable order.
            pub const ALL: &'static [Backend] = &[$(#[cfg($($cfg)*)] Backend::$variant,)*];

            /// The name `FRAG_ALLOCATOR` takes and reports show.
            #[must_use]
            pub const fn name(self) -> &'static str {
                match self {
                    $(#[cfg($($cfg)*)] Self::$variant => $name,)*
                }
            }

            /// The inverse of [`Self::code`]: a range check on the allocation path, not a table lookup.
            #[inline(always)]
            pub(crate) const fn from_code(code: u8) -> Option<Self> {
                match code {
                    $(#[cfg($($cfg)*)] $code => Some(Self::$variant),)*
                    _ => None,
                }
            }

            /// The backend whose allocator type is `A`, if any. Every comparison is between two
            /// compile-time constants, so after monomorphisation this folds to a single value.
            #[inline(always)]
            pub(crate) fn of_type<A: 'static>() -> Option<Self> {
                let id = core::any::TypeId::of::<A>();
                $(
                    #[cfg($($cfg)*)]
                    if id == core::any::TypeId::of::<$ty>() {
                        return Some(Self::$variant);
                    }
                )*
                None
            }
        }

        /// Every backend's name, compiled in or not.
        pub(crate) const EVERY_NAME: &[&str] = &[$($name),*];
    };
}

backend_list!(define_backend!());

/// Declares each backend's module (in `backend/mod.rs`, where it is invoked).
macro_rules! declare_modules {
    ([] $($(#[doc = $doc:literal])* $variant:ident = $code:literal, $name:literal, $ty:path, $module:ident, [$($cfg:tt)*];)*) => {
        $(
            #[cfg($($cfg)*)]
            pub(crate) mod $module;
        )*
    };
}

/// Generates the `match` behind [`with_backend!`].
macro_rules! dispatch_arms {
    ([($backend:expr) $alias:ident ($body:expr)]
     $($(#[doc = $doc:literal])* $variant:ident = $code:literal, $name:literal, $ty:path, $module:ident, [$($cfg:tt)*];)*) => {
        match $backend {
            $(
                #[cfg($($cfg)*)]
                $crate::backend::list::Backend::$variant => {
                    #[allow(dead_code)]
                    type $alias = $ty;
                    $body
                }
            )*
        }
    };
}

/// `with_backend!(b, A => expr)` evaluates `expr` with the type alias `A` naming backend `b`'s
/// allocator type: static dispatch to its `KnownAllocator` implementation, a jump on `b` (or nothing
/// at all where `b` is a constant).
macro_rules! with_backend {
    ($backend:expr, $alias:ident => $body:expr) => {
        $crate::backend::list::backend_list!(dispatch_arms!(($backend) $alias ($body)))
    };
}

pub(crate) use {backend_list, declare_modules, define_backend, dispatch_arms, with_backend};

impl Backend {
    /// jemalloc when compiled in (the crate's headline backend), else `System`.
    pub const DEFAULT: Backend = {
        #[cfg(feature = "jemalloc")]
        let b = Backend::Jemalloc;
        #[cfg(not(feature = "jemalloc"))]
        let b = Backend::System;
        b
    };

    /// A non-zero code for an atomic, so that 0 can mean "not chosen yet".
    #[inline(always)]
    pub(crate) const fn code(self) -> u8 {
        self as u8
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
