//! The frames a walk records: return addresses, leaf first, up to [`MAX_FRAMES`].

/// The deepest stack recorded, leaf first: as many as jemalloc's profiler keeps by default (Go's keeps
/// 32). Frames nearer the root are cut.
pub(crate) const MAX_FRAMES: usize = 64;

/// Return addresses, leaf first; unused entries are 0.
pub(crate) type Frames = [usize; MAX_FRAMES];
