//! The allocator a report describes, by name: one of the known backends, or a user's.

use core::fmt;

use super::list::Backend;

/// The allocator a report describes: one of the crate's known backends, or another allocator by the
/// name its [`Introspect`](crate::Introspect) gives (else its type name).
///
/// Serialises (feature `serde`) and prints as the plain name: `"jemalloc"`, `"system"`, `"rounding"`.
///
/// # Example
///
/// ```no_run
/// #[global_allocator]
/// static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
///
/// match frag::report().backend {
///     Some(frag::backend::WrappedBackend::Known(frag::backend::Backend::System)) => println!("glibc malloc"),
///     Some(other) => println!("wrapping {other}"),
///     None => println!("no Tracked allocator is installed"),
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WrappedBackend {
    /// A backend this crate knows by type.
    Known(Backend),
    /// Any other allocator: its `Introspect`'s name, or its Rust type name without an `Introspect`.
    Other(&'static str),
}

impl WrappedBackend {
    /// The name reports show.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Known(b) => b.name(),
            Self::Other(name) => name,
        }
    }

    /// The known backend, if it is one.
    #[must_use]
    pub const fn known(self) -> Option<Backend> {
        match self {
            Self::Known(b) => Some(b),
            Self::Other(_) => None,
        }
    }
}

impl fmt::Display for WrappedBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl PartialEq<&str> for WrappedBackend {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for WrappedBackend {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}
