//! The soft memory limit, in one place: what is set and the bytes it comes to on this machine
//! (`setting`: [`MemoryLimit`], [`LimitError`], `FRAG_MEMORY_LIMIT`), how a running reclaimer
//! follows it (`follow`: a cgroup share read again, a limit set at run time, a bad read that keeps
//! the last good one), and the controller's state against it (`pressure`: the target, the CPU share,
//! the purge delay shortened near it, what it warns of). The engine's round applies it, and each
//! round hands the limit in force to the diagnosis, which says when live data alone exceeds it.

pub(crate) mod follow;
#[cfg(test)]
mod layout;
pub(crate) mod pressure;
mod setting;

pub use setting::{ENV_VAR, LimitError, MemoryLimit};
