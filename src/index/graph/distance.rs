//! Distances for the graph: the kernels of [`crate::math::distance`], and prefetching.

#[cfg(test)]
pub(super) use crate::math::distance::{cos_portable, l2sq_portable};
pub(super) use crate::math::distance::{kernels, DistFn};

// ---------------------------------------------------------------- storage

#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn prefetch(p: *const f32) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: prefetching is a hint and never faults; SSE is part of the x86_64 baseline.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(p as *const i8) };
}

/// Prefetches the first cache lines of a vector (the hardware prefetcher streams the rest).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn prefetch_vec(v: &[f32]) {
    for i in (0..v.len().min(PREFETCH_FLOATS)).step_by(16) {
        prefetch(v[i..].as_ptr());
    }
}

/// Floats of a vector prefetched ahead of its distance (4 cache lines).
#[cfg(target_arch = "x86_64")]
pub(super) const PREFETCH_FLOATS: usize = 64;
