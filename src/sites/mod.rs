//! Allocation sites: which code allocates the blocks that stay resident, cross threads or live long.
//!
//! A byte-based Poisson sampler (`sampler`, default mean 512 KiB) picks allocations on origin
//! tracking's cold path; a picked allocation walks its stack through the frame-pointer chain
//! (`unwind`), interns it in a fixed table of sites (`table`), and goes into the origin side table like
//! any sampled block, with its site and weight: its free (on which thread, after how long) is then
//! credited to its site. Nothing here allocates or locks on the allocation path.
//!
//! Read the sites through [`Report::sites`](crate::Report::sites) (the top sites by bytes in use,
//! with their leaf frames) or as a pprof heap profile ([`crate::profile::heap_pprof`]).

pub(crate) mod read;
pub(crate) mod sampler;
pub(crate) mod table;
pub(crate) mod unwind;

use core::fmt;

use crate::origin::gate;
use crate::origin::sampler::Countdown;
use crate::stats::shard::Shard;
use table::{NO_SITE, Table};
use unwind::{Entry, Frames, MAX_FRAMES};

pub(crate) static SITES: Table = Table::new();

/// How many allocations capture their site (their stack).
///
/// The sample is byte-based: on average one sample per `MeanBytes` allocated, each block with
/// probability about `1 - exp(-size / mean)`, so large blocks nearly always and small ones rarely;
/// estimates are weighted by the inverse probability, as in jemalloc's, tcmalloc's and Go's heap
/// profilers. A site's in-use bytes estimated from `B` bytes in use carry a relative standard error
/// of about `sqrt(mean / B)`: 8.8% for 64 MiB at the default, 2.2% for 1 GiB.
///
/// **Bias.** Small blocks (up to 32 KiB) are only sampled at the addresses origin tracking may sample
/// (see [`Sampling`](crate::Sampling)'s bias): a loop that reuses a few addresses over and over is
/// sampled through those addresses only, so its site's figures vary more from process to process
/// than the sample count suggests (and rarely, with an unlucky key, have no samples). Sites whose
/// blocks are spread over many addresses, or larger than 32 KiB, are not affected.
///
/// **Cost.** The decision runs only on origin tracking's cold path (eligible blocks, see
/// [`Sampling`](crate::Sampling)), so the fast path is the same with sites on or off. A sampled
/// allocation walks its stack (about 35 ns for 8 frames, 90 ns for 64; see README) and takes a slot
/// in the origin side table until it is freed.
///
/// **Build.** Stacks need frame pointers: build with `RUSTFLAGS="-C force-frame-pointers=yes"`.
/// Without them sampled blocks are still followed but have no stack; [`frame_pointers`] tells which
/// build this is, and the report says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SiteSampling {
    /// No site sampling.
    Off,
    /// Every allocation: exact figures, for tests and debugging. Every operation takes the cold path
    /// for the rest of the process (as with [`Sampling::EveryBlock`](crate::Sampling::EveryBlock)),
    /// and blocks beyond the origin side table's capacity (16,384 live) are dropped from the figures.
    EveryBlock,
    /// One sample per this many allocated bytes on average (at least 4096). Below 64 KiB the share of
    /// addresses that take the cold path grows (one in 32 at 32 KiB, one in 4 at 4 KiB), and with it
    /// the cost of every operation, for the rest of the process (the share never shrinks, see
    /// [`Sampling`](crate::Sampling)).
    MeanBytes(u64),
}

impl SiteSampling {
    /// The default: one sample per 512 KiB allocated.
    pub const DEFAULT: Self = Self::MeanBytes(sampler::DEFAULT_MEAN);

    fn mean(self) -> Result<u64, SiteSamplingError> {
        match self {
            Self::Off => Ok(sampler::OFF),
            Self::EveryBlock => Ok(0),
            Self::MeanBytes(m) if m < MIN_MEAN => Err(SiteSamplingError::TooSmall { mean: m }),
            Self::MeanBytes(m) if m == sampler::OFF => Err(SiteSamplingError::TooSmall { mean: m }),
            Self::MeanBytes(m) => Ok(m),
        }
    }

    fn from_mean(m: u64) -> Self {
        match m {
            sampler::OFF => Self::Off,
            0 => Self::EveryBlock,
            m => Self::MeanBytes(m),
        }
    }
}

impl Default for SiteSampling {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The smallest mean that is not `EveryBlock` in disguise: 4 KiB.
const MIN_MEAN: u64 = 4 << 10;

/// A [`SiteSampling`] that cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SiteSamplingError {
    /// `MeanBytes` below 4096 (or `u64::MAX`): use `EveryBlock` for exact figures.
    TooSmall {
        /// The mean asked for.
        mean: u64,
    },
}

impl fmt::Display for SiteSamplingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooSmall { mean } => write!(
                f,
                "SiteSampling::MeanBytes({mean}) is outside 4096..u64::MAX: use SiteSampling::EveryBlock for exact figures"
            ),
        }
    }
}

impl std::error::Error for SiteSamplingError {}

/// Sets allocation-site sampling for the whole process, from now on; blocks sampled before keep
/// their weight. Returns the setting in effect.
///
/// # Errors
///
/// [`SiteSamplingError::TooSmall`] for a mean below 4096 bytes.
///
/// # Example
///
/// ```no_run
/// #[global_allocator]
/// static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
///
/// // One sample per 128 KiB allocated: finer profiles, more samples in the side table.
/// frag::set_site_sampling(frag::SiteSampling::MeanBytes(128 << 10)).unwrap();
/// ```
pub fn set_site_sampling(s: SiteSampling) -> Result<SiteSampling, SiteSamplingError> {
    let mean = s.mean()?;
    if mean != sampler::OFF {
        // Small blocks must stay individually unlikely among eligible ones: the eligible share of
        // addresses is at least 2^10 times a 1-byte block's sampling probability.
        let log2 = 63 - mean.max(1).leading_zeros();
        gate::adapt(Some(log2.saturating_sub(6)));
    }
    sampler::set_mean(mean);
    Ok(SiteSampling::from_mean(mean))
}

/// The current allocation-site sampling.
#[must_use]
pub fn site_sampling() -> SiteSampling {
    SiteSampling::from_mean(sampler::mean())
}

/// Whether this build captures stacks: built with `-C force-frame-pointers=yes`, on Linux with glibc,
/// x86-64 or AArch64.
#[must_use]
pub const fn frame_pointers() -> bool {
    unwind::AVAILABLE
}

/// A sampled block's site and weight, as the origin side table keeps them: the site id in the high
/// half, the weight as an `f32` in the low half; 0 for a block not sampled for its site.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Mark {
    pub(crate) site: u32,
    pub(crate) weight: f32,
}

impl Mark {
    pub(crate) fn pack(m: Option<Self>) -> u64 {
        m.map_or(0, |m| (u64::from(m.site) << 32) | u64::from(m.weight.max(1.0).to_bits()))
    }

    pub(crate) fn unpack(word: u64) -> Option<Self> {
        (word != 0).then(|| Self { site: (word >> 32) as u32, weight: f32::from_bits(word as u32) })
    }
}

/// Whether the eligible block of `size` bytes just allocated is sampled for its site; if so its
/// stack is captured from `entry` and interned. The caller credits the site with [`taken`] once the
/// block is in the side table.
#[cold]
pub(crate) fn pick<W: Countdown>(shard: &Shard, size: usize, entry: Entry) -> Option<Mark> {
    let weight = sampler::consume::<W>(shard, size)?;
    let mut frames: Frames = [0; MAX_FRAMES];
    let depth = unwind::capture(entry, &mut frames);
    let site = if depth == 0 { NO_SITE } else { SITES.intern(&frames, depth) };
    Some(Mark { site, weight: weight as f32 })
}

/// A block marked by [`pick`] is in the side table: its site counts it.
pub(crate) fn taken(mark: Mark, size: usize) {
    SITES.tallies(mark.site).sampled(f64::from(mark.weight), size as u64);
}

/// A sampled block was freed.
pub(crate) fn freed(mark: Mark, size: u64, cross: bool, lifetime_ns: u64) {
    SITES.tallies(mark.site).freed(f64::from(mark.weight), size, cross, lifetime_ns);
}

/// A sampled block left the side table without a free (a reallocation let it go).
pub(crate) fn let_go(mark: Mark, size: u64) {
    SITES.tallies(mark.site).gone(f64::from(mark.weight), size);
}

/// A sampled block was reallocated and kept: it now weighs `to.weight` at `size` bytes.
pub(crate) fn moved(from: Mark, old_size: u64, to: Mark, size: u64) {
    SITES.tallies(from.site).moved(f64::from(from.weight), old_size, f64::from(to.weight), size);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_round_trip() {
        assert_eq!(Mark::pack(None), 0);
        assert_eq!(Mark::unpack(0), None);
        for m in [Mark { site: 0, weight: 1.0 }, Mark { site: 4096, weight: 8191.5 }] {
            assert_eq!(Mark::unpack(Mark::pack(Some(m))), Some(m));
        }
    }

    #[test]
    fn invalid_means_are_refused() {
        assert_eq!(SiteSampling::MeanBytes(4095).mean(), Err(SiteSamplingError::TooSmall { mean: 4095 }));
        assert_eq!(SiteSampling::MeanBytes(4096).mean(), Ok(4096));
        assert_eq!(SiteSampling::from_mean(SiteSampling::DEFAULT.mean().unwrap()), SiteSampling::DEFAULT);
    }
}
