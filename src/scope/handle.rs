//! The scope handle ([`Scope`]): made from a name, entered, read.

use super::current::{self, Entered};
use super::read;
use super::scope_table::{CAPACITY, MAX_NAME, MAX_PUBLISHED, NO_SCOPE, NONE, OTHER, OTHER_SCOPES, SCOPES};
use crate::tally::Figures;

/// A named scope that sampled allocations are credited to: memory by request kind, tenant,
/// component or task.
///
/// A scope is a name interned once. A thread's *current scope* is set by a guard
/// ([`Scope::enter`]) or, for async code, by wrapping a future
/// ([`ScopeExt::in_scope`](crate::ScopeExt::in_scope): the scope is entered on every poll, on
/// whichever worker polls). Every sampled allocation records the current scope (the unsampled
/// allocation path does not read it), in `Tracked`'s tiers and when sampling inside jemalloc; the
/// sample's free credits that scope, from any thread and under any scope, and counts whether it was
/// freed under another.
///
/// Where the figures go: the report's scopes section ([`Report::scopes`](crate::Report::scopes):
/// per scope, live bytes with a 95% interval, bytes allocated, the share of frees made under another
/// scope, the median lifetime), the cheap read [`Scope::live_bytes`], a `scope` label on every
/// sample of the heap profiles (`go tool pprof -tagfocus=scope=tenant-42`, `-tags`), and the
/// publisher's `frag_scope_live_bytes{scope}` for the scopes published ([`Scope::publish`]). They
/// are estimates from the samples in either tier, as the sites' are (`docs/SAMPLING.md`); with every
/// block sampled they are exact.
///
/// **Bounded.** The table holds 1,022 named scopes; a name beyond them shares the scope `other`, and
/// the report counts how many were refused. Scopes are for sets that stay bounded (tenants,
/// endpoints, components, caches), not for one name per request. A scope's slot is never freed, so
/// a scope "dropped" while its blocks live still names them. A stack sampled in two scopes is two
/// sites of the site table (4,096 of them).
///
/// **Spawned tasks do not inherit a scope**: a task spawned from inside a scope runs in none unless
/// its future is wrapped too. Threads do not inherit one either.
///
/// ```
/// use frag::Scope;
///
/// let cache = Scope::new("cache")?;
/// let data = {
///     let _in = cache.enter();
///     vec![0u8; 1 << 20] // sampled allocations here are credited to `cache`
/// };
/// let live = cache.live_bytes();
/// assert!(live.interval.0 <= live.estimate && live.estimate <= live.interval.1);
/// # drop(data);
/// # Ok::<(), frag::scope::ScopeError>(())
/// ```
///
/// A small `Copy` handle: make it once (per tenant, per component) and keep it, or make it again
/// from the name: the same name gives the same scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Scope {
    id: u16,
}

/// Why a scope could not be made.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScopeError {
    /// The name is empty.
    EmptyName,
    /// The name is longer than 128 bytes (its length is given).
    NameTooLong(usize),
    /// `none` and `other` name the published series of allocations outside every scope and of the
    /// scopes not published: a scope cannot take them.
    ReservedName,
    /// 64 scopes are published already: the label's cardinality stays bounded.
    TooManyPublished,
}

impl core::fmt::Display for ScopeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::EmptyName => f.write_str("a scope needs a name"),
            Self::NameTooLong(n) => write!(f, "a scope's name is at most {MAX_NAME} bytes, not {n}"),
            Self::ReservedName => write!(f, "`{NO_SCOPE}` and `{OTHER_SCOPES}` are reserved scope names"),
            Self::TooManyPublished => write!(f, "at most {MAX_PUBLISHED} scopes are published under their own names"),
        }
    }
}

impl std::error::Error for ScopeError {}

/// A scope's live bytes, estimated from its samples (see [`Scope::live_bytes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct LiveBytes {
    /// The estimate, in bytes requested.
    pub estimate: u64,
    /// Its 95% interval.
    pub interval: (u64, u64),
    /// Live samples behind it.
    pub samples: u64,
}

impl Scope {
    /// The scope named `name`, made on first use (the same name gives the same scope). When the
    /// table is full (1,022 names), the scope `other`, shared by every name that found no room
    /// (counted in the report, and warned about once).
    ///
    /// # Errors
    ///
    /// [`ScopeError::EmptyName`], [`ScopeError::NameTooLong`] (over 128 bytes),
    /// [`ScopeError::ReservedName`] (`none`, `other`).
    pub fn new(name: impl AsRef<str>) -> Result<Self, ScopeError> {
        let name = name.as_ref();
        if name.is_empty() {
            return Err(ScopeError::EmptyName);
        }
        if name.len() > MAX_NAME {
            return Err(ScopeError::NameTooLong(name.len()));
        }
        if name == NO_SCOPE || name == OTHER_SCOPES {
            return Err(ScopeError::ReservedName);
        }
        let id = crate::own::run(|| SCOPES.intern(name));
        if id == OTHER && SCOPES.refused() == 1 {
            tracing::warn!(
                target: "frag",
                name,
                capacity = CAPACITY - 2,
                "frag: the scope table is full; this name and the next ones share the scope `other`"
            );
        }
        Ok(Self { id })
    }

    /// The scope shared by the names that found no room in the table.
    #[must_use]
    pub const fn other() -> Self {
        Self { id: OTHER }
    }

    /// The scope's name (`"other"` for [`Scope::other`]).
    #[must_use]
    pub fn name(&self) -> &'static str {
        SCOPES.name(self.id).unwrap_or(OTHER_SCOPES)
    }

    /// Makes this the calling thread's current scope until the guard drops.
    pub fn enter(&self) -> Entered {
        Entered::enter(self.id)
    }

    /// The calling thread's current scope; `None` outside every scope.
    #[must_use]
    pub fn current() -> Option<Self> {
        let id = current::slot();
        (id != NONE).then_some(Self { id })
    }

    /// The scope's live bytes: an estimate from its live samples with its 95% interval, read from
    /// a few counters (no lock, no allocation): cheap enough for a memory pool to compare with the
    /// budget it declared on every reservation.
    ///
    /// How far to trust it: at the default sampling mean (512 KiB) and blocks well below it, the
    /// interval's half-width is about 1.96 × √(512 KiB × live bytes): ±14 MiB for a scope holding
    /// 100 MiB (14%), ±45 MiB for 1 GiB (4.4%). A scope of 1 MiB has about two live samples: its
    /// interval comes from the Poisson limits of that count, about 0.1 to 3.6 MiB. A smaller mean
    /// narrows it ([`set_sampling`](crate::set_sampling)); with every block sampled it is exact.
    #[must_use]
    pub fn live_bytes(&self) -> LiveBytes {
        let mut f = Figures::default();
        f.add(SCOPES.tallies(self.id));
        let (estimate, interval, samples) = read::live_bytes(&f);
        LiveBytes { estimate, interval, samples }
    }

    /// Publishes this scope's series under its own name (`frag_scope_live_bytes{scope="…"}`)
    /// from the publisher's next round; the scopes not published are summed into `scope="other"`
    /// (and allocations outside every scope are `scope="none"`). At most 64 scopes are published.
    ///
    /// # Errors
    ///
    /// [`ScopeError::TooManyPublished`] when 64 are published already.
    pub fn publish(&self) -> Result<(), ScopeError> {
        if SCOPES.set_published(self.id, true) { Ok(()) } else { Err(ScopeError::TooManyPublished) }
    }

    /// Stops publishing this scope under its own name: its bytes join `scope="other"`.
    pub fn unpublish(&self) {
        let _ = SCOPES.set_published(self.id, false);
    }
}
