//! Following the limit while the reclaimer runs: where it was set (`FRAG_MEMORY_LIMIT`, the builder,
//! the handle), a cgroup share read again every [`MemoryLimit::CGROUP_REREAD`], and a bad read that
//! keeps the last good limit.

use std::time::Instant;

use super::setting::{LimitError, MemoryLimit};
use crate::reclaim::error::ReclaimError;

/// The limit asked for and where it came from.
#[derive(Clone, Debug)]
pub(crate) struct Setting {
    limit: Result<Option<MemoryLimit>, LimitError>,
    from_env: bool,
}

impl Setting {
    /// What `FRAG_MEMORY_LIMIT` asks for (a refusal is kept, for the first round to report).
    pub(crate) fn from_env() -> Self {
        Self { limit: MemoryLimit::from_env(), from_env: true }
    }

    /// A limit given in code (`None`: no limit).
    pub(crate) fn given(limit: Option<MemoryLimit>) -> Self {
        Self { limit: Ok(limit), from_env: false }
    }

    /// The limit in bytes now (`None`: no limit).
    pub(crate) fn resolve(&self) -> Result<Option<u64>, ReclaimError> {
        let error = |error| ReclaimError::Limit { from_env: self.from_env, error };
        match &self.limit {
            Ok(Some(l)) => l.resolve().map(Some).map_err(error),
            Ok(None) => Ok(None),
            Err(e) => Err(error(e.clone())),
        }
    }
}

/// The limit asked for, and when and how well it was last read.
#[derive(Debug)]
pub(crate) struct Follow {
    setting: Setting,
    /// When it was last read (`None`: at the next round).
    read_at: Option<Instant>,
    /// Whether the last reads were bad, and warned of ([`after_reread`]).
    unreadable: bool,
}

impl Follow {
    pub(crate) fn new(setting: Setting) -> Self {
        Self { setting, read_at: None, unreadable: false }
    }

    /// The limit asked for now.
    pub(crate) fn setting(&self) -> &Setting {
        &self.setting
    }

    /// Asks for `setting` from now, read at the next round, or already read at `read_at`.
    pub(crate) fn replace(&mut self, setting: Setting, read_at: Option<Instant>) {
        self.setting = setting;
        self.read_at = read_at;
    }

    /// The limit of the first round, at `now`: a limit that cannot be resolved stops the reclaimer.
    pub(crate) fn first(&mut self, now: Instant) -> Result<Option<u64>, ReclaimError> {
        let bytes = self.setting.resolve()?;
        self.read_at = Some(now);
        Ok(bytes)
    }

    /// The limit to enforce from `now`, with `in_force` enforced so far: read again where it is a
    /// cgroup share and [`MemoryLimit::CGROUP_REREAD`] has passed, or where it was just asked for;
    /// otherwise `in_force`. A bad read keeps `in_force`, warned once per run of bad reads.
    pub(crate) fn follow(&mut self, now: Instant, in_force: Option<u64>) -> Option<u64> {
        let due = match (&self.setting.limit, self.read_at) {
            (_, None) => true,
            (Ok(Some(MemoryLimit::Cgroup { .. })), Some(t)) => {
                now.saturating_duration_since(t) >= MemoryLimit::CGROUP_REREAD
            }
            _ => false,
        };
        if !due {
            return in_force;
        }
        self.read_at = Some(now);
        let read = self.setting.resolve();
        let as_read = match &read {
            Ok(bytes) => Ok(*bytes),
            Err(ReclaimError::Limit { error, .. }) => Err(error.clone()),
            Err(_) => Ok(None),
        };
        let (bytes, warn) = after_reread(in_force, &as_read, &mut self.unreadable);
        match (&read, bytes) {
            (Err(e), Some(kept)) => {
                if warn {
                    tracing::warn!(target: "frag", error = %e, limit = kept, "frag reclaimer: the memory limit could not be read again; the last one read stays in force");
                }
            }
            (Err(e), None) => {
                if in_force.is_some() {
                    tracing::warn!(target: "frag", error = %e, "frag reclaimer: the memory limit is gone; the reclaimer goes on without one");
                }
            }
            (Ok(_), _) => {
                if in_force != bytes {
                    tracing::info!(target: "frag", limit = ?bytes, "frag reclaimer: memory limit in force");
                }
            }
        }
        bytes
    }
}

/// What a running reclaimer enforces after reading its limit again (`read`), with `current` in
/// force: the limit read, when it could be read; the one in force when a cgroup file could not be
/// read as a limit ([`LimitError::Unreadable`]: a bad read keeps the last good limit, since a file
/// gone for a moment or half-written must not lift the limit that keeps the service alive). Returns
/// the limit and whether to warn now: once for a run of bad reads (`warned` carries it from read to
/// read, cleared by a good one).
pub(crate) fn after_reread(
    current: Option<u64>,
    read: &Result<Option<u64>, LimitError>,
    warned: &mut bool,
) -> (Option<u64>, bool) {
    match read {
        Err(LimitError::Unreadable { .. }) if current.is_some() => (current, !core::mem::replace(warned, true)),
        Ok(bytes) => {
            *warned = false;
            (*bytes, false)
        }
        Err(_) => {
            *warned = false;
            (None, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reclaim::limit::layout::{GIB, Root, v2_app};

    /// What a cgroup's `memory.max` of `text` must give, read independently of the code: the limit
    /// in force kept (`kept`) for anything that is neither a number of bytes nor the kernel's `max`.
    fn expected(text: &[u8], kept: u64) -> Option<u64> {
        let Ok(t) = std::str::from_utf8(text) else { return Some(kept) };
        let t = t.trim();
        if t == "max" {
            return None;
        }
        match t.parse::<u64>() {
            Ok(0) => None,
            Ok(v) if v >= (i64::MAX as u64 & !0xfff) && v <= i64::MAX as u64 => None,
            Ok(v) if v >= (i64::MAX as u64 & !0xfff) => Some(kept),
            Ok(v) if v > 16_384_000 * 1024 => None,
            Ok(v) => Some(v),
            Err(_) => Some(kept),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

        /// Good, arbitrary bytes, good: the limit is never lifted by a bad read (the last good one
        /// stays, warned once), a real change in the file is followed, nothing panics.
        #[test]
        fn a_bad_read_between_good_ones_keeps_the_limit(
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
            digits in proptest::option::of(1u64..(8u64 << 30)),
        ) {
            let r = Root::new("prop");
            let mut warned = false;
            v2_app(&r, format!("{}\n", 4 * GIB).as_bytes());
            let (limit, warn) = after_reread(None, &MemoryLimit::cgroup().resolve_under(r.path()).map(Some), &mut warned);
            proptest::prop_assert_eq!((limit, warn), (Some(4 * GIB), false));
            // Arbitrary bytes, or now and then a plain number.
            let text = digits.map_or(junk, |d| format!("{d}\n").into_bytes());
            v2_app(&r, &text);
            let read = MemoryLimit::cgroup().resolve_under(r.path()).map(Some);
            let (after, warn) = after_reread(limit, &read, &mut warned);
            proptest::prop_assert_eq!(after, expected(&text, 4 * GIB), "{:?} read as {:?}", String::from_utf8_lossy(&text), read);
            proptest::prop_assert_eq!(warn, matches!(read, Err(LimitError::Unreadable { .. })));
            // Read again while still bad: no second warning.
            let (again, warn_again) = after_reread(after, &read, &mut warned);
            proptest::prop_assert_eq!((again, warn_again), (after, false));
            v2_app(&r, format!("{}\n", 2 * GIB).as_bytes());
            let (limit, warn) = after_reread(again, &MemoryLimit::cgroup().resolve_under(r.path()).map(Some), &mut warned);
            proptest::prop_assert_eq!((limit, warn, warned), (Some(2 * GIB), false, false));
        }
    }
}
