//! How full the slab of a given block is: jemalloc's `experimental.utilization.batch_query`, which
//! reads, for each pointer, the extent it lies in (`{free regions, regions, extent bytes}`).
//!
//! jemalloc accepts pointers it never returned (its comment in `ctl.c`: an extent it cannot find
//! reads as zeros), but not a block freed while the query runs: `inspect_extent_util_stats_get`
//! reads the extent's slab bit and its size class in two loads without a lock, and a slab emptied
//! and reused as a large extent between them indexes `bin_infos` past its end. Seen as a segfault
//! here once in about 40 runs of the service example under valgrind (which serialises the threads),
//! never in native runs; the report still queries blocks that other threads may free meanwhile. The
//! caller decides which answers to keep (`report::pins`).

use crate::backend::SlabUse;
use crate::backend::introspect::StatsError;

/// Pointers per call: bounds the two buffers jemalloc reads and writes (8 KiB and 24 KiB).
const BATCH: usize = 1024;

/// The use of the slab (or extent) of each of `ptrs`, in order.
pub(super) fn slab_use(ptrs: &[usize]) -> Result<Vec<SlabUse>, StatsError> {
    let name = "experimental.utilization.batch_query";
    let mut out = Vec::with_capacity(ptrs.len());
    let mut answer = vec![0usize; BATCH * 3];
    for chunk in ptrs.chunks(BATCH) {
        let answer = &mut answer[..chunk.len() * 3];
        let mut len = core::mem::size_of_val(answer);
        // SAFETY: the name is NUL-terminated; `newp` points to `chunk.len()` pointer-sized words and
        // `newlen` says so; `oldp` points to `len` writable bytes, three `size_t` per pointer, as the
        // call requires (anything else is refused with EINVAL before it writes).
        let code = unsafe {
            tikv_jemalloc_sys::mallctl(
                c"experimental.utilization.batch_query".as_ptr(),
                answer.as_mut_ptr().cast(),
                &mut len,
                chunk.as_ptr().cast_mut().cast(),
                core::mem::size_of_val(chunk),
            )
        };
        if code != 0 {
            return Err(StatsError::MallctlCode { name, code });
        }
        out.extend(answer.chunks_exact(3).map(|a| SlabUse { free: a[0] as u64, regions: a[1] as u64, bytes: a[2] as u64 }));
    }
    Ok(out)
}
