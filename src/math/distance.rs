//! The graph's distance kernels: cosine distance `1 − a·b` of unit vectors and squared L2,
//! between two `f32` vectors ([`kernels`]) and between an `f32` query and an int8-coded vector
//! ([`kernels_sq8`]; codes from [`sq8_encode`]), portable and in AVX-512 / AVX2+FMA
//! intrinsics, the widest this CPU has chosen once at run time.

use std::sync::OnceLock;

/// A distance kernel (unsafe: a SIMD one needs the CPU feature [`kernels`] checked).
pub type DistFn = unsafe fn(&[f32], &[f32]) -> f32;

/// An asymmetric kernel: the distance from an `f32` query to the vector `scale × codes`
/// (unsafe: a SIMD one needs the CPU feature [`kernels_sq8`] checked).
pub type Dist8Fn = unsafe fn(&[f32], &[i8], f32) -> f32;

/// Codes `v` as `scale × codes` with one scale per vector (`max |v_k| / 127`; 1 for a zero
/// vector) and codes rounded into −127..=127; writes `codes` (as long as `v`) and returns
/// the scale. The largest component codes to ±127 exactly, so coding a decoded vector again
/// gives the same codes and scale.
pub fn sq8_encode(v: &[f32], codes: &mut [i8]) -> f32 {
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
    for (c, &x) in codes.iter_mut().zip(v) {
        *c = (x / scale).round().clamp(-127.0, 127.0) as i8;
    }
    scale
}

/// Cosine distance `1 − q·(scale × codes)`, portable.
pub fn cos_sq8_portable(q: &[f32], codes: &[i8], scale: f32) -> f32 {
    let mut acc = [0f32; 8];
    let (cq, cc) = (q.chunks_exact(8), codes.chunks_exact(8));
    let tail: f32 = cq
        .remainder()
        .iter()
        .zip(cc.remainder())
        .map(|(x, &c)| x * c as f32)
        .sum();
    for (x, c) in cq.zip(cc) {
        for ((s, x), &c) in acc.iter_mut().zip(x).zip(c) {
            *s += x * c as f32;
        }
    }
    1.0 - scale * (acc.iter().sum::<f32>() + tail)
}

/// Squared L2 distance `|q − scale × codes|²`, portable.
pub fn l2sq_sq8_portable(q: &[f32], codes: &[i8], scale: f32) -> f32 {
    let mut acc = [0f32; 8];
    let (cq, cc) = (q.chunks_exact(8), codes.chunks_exact(8));
    let tail: f32 = cq
        .remainder()
        .iter()
        .zip(cc.remainder())
        .map(|(x, &c)| (x - scale * c as f32).powi(2))
        .sum();
    for (x, c) in cq.zip(cc) {
        for ((s, x), &c) in acc.iter_mut().zip(x).zip(c) {
            let d = x - scale * c as f32;
            *s += d * d;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Squared L2 distance, portable (eight independent accumulators).
pub fn l2sq_portable(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| (x - y) * (x - y))
        .sum();
    for (x, y) in ca.zip(cb) {
        for ((s, x), y) in acc.iter_mut().zip(x).zip(y) {
            *s += (x - y) * (x - y);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Cosine distance of unit vectors, `1 − a·b`, by the portable kernel [`crate::math::dot`].
#[inline]
pub fn cos_portable(a: &[f32], b: &[f32]) -> f32 {
    1.0 - super::dot(a, b)
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    macro_rules! kernel512 {
        ($name:ident, $step:ident) => {
            /// # Safety
            /// The CPU must support AVX-512F.
            #[target_feature(enable = "avx512f")]
            pub(super) unsafe fn $name(a: &[f32], b: &[f32]) -> f32 {
                let n = a.len().min(b.len());
                let (pa, pb) = (a.as_ptr(), b.as_ptr());
                let (mut s0, mut s1, mut s2, mut s3) = (
                    _mm512_setzero_ps(),
                    _mm512_setzero_ps(),
                    _mm512_setzero_ps(),
                    _mm512_setzero_ps(),
                );
                let mut i = 0;
                // SAFETY: every unmasked load reads 16 floats at offset i with i + 16 <= n, and the
                // masked tail load only touches lanes below n, so all reads are inside both slices.
                unsafe {
                    while i + 64 <= n {
                        s0 = $step(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), s0);
                        s1 = $step(
                            _mm512_loadu_ps(pa.add(i + 16)),
                            _mm512_loadu_ps(pb.add(i + 16)),
                            s1,
                        );
                        s2 = $step(
                            _mm512_loadu_ps(pa.add(i + 32)),
                            _mm512_loadu_ps(pb.add(i + 32)),
                            s2,
                        );
                        s3 = $step(
                            _mm512_loadu_ps(pa.add(i + 48)),
                            _mm512_loadu_ps(pb.add(i + 48)),
                            s3,
                        );
                        i += 64;
                    }
                    while i + 16 <= n {
                        s0 = $step(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), s0);
                        i += 16;
                    }
                    if i < n {
                        let m = ((1u32 << (n - i)) - 1) as __mmask16;
                        s1 = $step(
                            _mm512_maskz_loadu_ps(m, pa.add(i)),
                            _mm512_maskz_loadu_ps(m, pb.add(i)),
                            s1,
                        );
                    }
                }
                _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)))
            }
        };
    }
    macro_rules! kernel256 {
        ($name:ident, $step:ident, $scalar:expr) => {
            /// # Safety
            /// The CPU must support AVX2 and FMA.
            #[target_feature(enable = "avx2,fma")]
            pub(super) unsafe fn $name(a: &[f32], b: &[f32]) -> f32 {
                let n = a.len().min(b.len());
                let (pa, pb) = (a.as_ptr(), b.as_ptr());
                let (mut s0, mut s1, mut s2, mut s3) = (
                    _mm256_setzero_ps(),
                    _mm256_setzero_ps(),
                    _mm256_setzero_ps(),
                    _mm256_setzero_ps(),
                );
                let mut i = 0;
                // SAFETY: every load reads 8 floats at offset i with i + 8 <= n.
                unsafe {
                    while i + 32 <= n {
                        s0 = $step(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s0);
                        s1 = $step(
                            _mm256_loadu_ps(pa.add(i + 8)),
                            _mm256_loadu_ps(pb.add(i + 8)),
                            s1,
                        );
                        s2 = $step(
                            _mm256_loadu_ps(pa.add(i + 16)),
                            _mm256_loadu_ps(pb.add(i + 16)),
                            s2,
                        );
                        s3 = $step(
                            _mm256_loadu_ps(pa.add(i + 24)),
                            _mm256_loadu_ps(pb.add(i + 24)),
                            s3,
                        );
                        i += 32;
                    }
                    while i + 8 <= n {
                        s0 = $step(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s0);
                        i += 8;
                    }
                }
                let s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
                let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
                let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
                let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
                let tail: f32 = a[i..n].iter().zip(&b[i..n]).map($scalar).sum();
                _mm_cvtss_f32(h) + tail
            }
        };
    }
    #[inline(always)]
    fn fma512(a: __m512, b: __m512, s: __m512) -> __m512 {
        // SAFETY: only inlined into the avx512f kernels above.
        unsafe { _mm512_fmadd_ps(a, b, s) }
    }
    #[inline(always)]
    fn sq512(a: __m512, b: __m512, s: __m512) -> __m512 {
        // SAFETY: only inlined into the avx512f kernels above.
        unsafe {
            let d = _mm512_sub_ps(a, b);
            _mm512_fmadd_ps(d, d, s)
        }
    }
    #[inline(always)]
    fn fma256(a: __m256, b: __m256, s: __m256) -> __m256 {
        // SAFETY: only inlined into the avx2+fma kernels above.
        unsafe { _mm256_fmadd_ps(a, b, s) }
    }
    #[inline(always)]
    fn sq256(a: __m256, b: __m256, s: __m256) -> __m256 {
        // SAFETY: only inlined into the avx2+fma kernels above.
        unsafe {
            let d = _mm256_sub_ps(a, b);
            _mm256_fmadd_ps(d, d, s)
        }
    }
    // The asymmetric kernels: `$step(q, codes as floats, scale, acc)` per lane block,
    // `$tail(q, code, scale)` per leftover element, `$finish(sum, scale)` at the end.
    macro_rules! sq8_kernel512 {
        ($name:ident, $step:ident, $tail:expr, $finish:expr) => {
            /// # Safety
            /// The CPU must support AVX-512F.
            #[target_feature(enable = "avx512f")]
            pub(super) unsafe fn $name(q: &[f32], codes: &[i8], scale: f32) -> f32 {
                let n = q.len().min(codes.len());
                let (pq, pc) = (q.as_ptr(), codes.as_ptr());
                let (mut s0, mut s1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
                let k = _mm512_set1_ps(scale);
                let mut i = 0;
                // SAFETY: every load reads 16 floats and 16 codes at offset i with i + 16 <= n.
                unsafe {
                    let at = |i: usize| {
                        let c = _mm_loadu_si128(pc.add(i) as *const __m128i);
                        (
                            _mm512_loadu_ps(pq.add(i)),
                            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c)),
                        )
                    };
                    while i + 32 <= n {
                        let ((q0, c0), (q1, c1)) = (at(i), at(i + 16));
                        s0 = $step(q0, c0, k, s0);
                        s1 = $step(q1, c1, k, s1);
                        i += 32;
                    }
                    while i + 16 <= n {
                        let (q0, c0) = at(i);
                        s0 = $step(q0, c0, k, s0);
                        i += 16;
                    }
                }
                let tail: f32 = q[i..n]
                    .iter()
                    .zip(&codes[i..n])
                    .map(|(&x, &c)| $tail(x, c as f32, scale))
                    .sum();
                $finish(_mm512_reduce_add_ps(_mm512_add_ps(s0, s1)) + tail, scale)
            }
        };
    }
    macro_rules! sq8_kernel256 {
        ($name:ident, $step:ident, $tail:expr, $finish:expr) => {
            /// # Safety
            /// The CPU must support AVX2 and FMA.
            #[target_feature(enable = "avx2,fma")]
            pub(super) unsafe fn $name(q: &[f32], codes: &[i8], scale: f32) -> f32 {
                let n = q.len().min(codes.len());
                let (pq, pc) = (q.as_ptr(), codes.as_ptr());
                let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
                let k = _mm256_set1_ps(scale);
                let mut i = 0;
                // SAFETY: every load reads 8 floats and 8 codes at offset i with i + 8 <= n.
                unsafe {
                    let at = |i: usize| {
                        let c = _mm_loadl_epi64(pc.add(i) as *const __m128i);
                        (
                            _mm256_loadu_ps(pq.add(i)),
                            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c)),
                        )
                    };
                    while i + 16 <= n {
                        let ((q0, c0), (q1, c1)) = (at(i), at(i + 8));
                        s0 = $step(q0, c0, k, s0);
                        s1 = $step(q1, c1, k, s1);
                        i += 16;
                    }
                    while i + 8 <= n {
                        let (q0, c0) = at(i);
                        s0 = $step(q0, c0, k, s0);
                        i += 8;
                    }
                }
                let tail: f32 = q[i..n]
                    .iter()
                    .zip(&codes[i..n])
                    .map(|(&x, &c)| $tail(x, c as f32, scale))
                    .sum();
                $finish(hsum256(_mm256_add_ps(s0, s1)) + tail, scale)
            }
        };
    }
    /// Dot with the raw codes (scaled once at the end).
    #[inline(always)]
    fn dot8_512(q: __m512, c: __m512, _k: __m512, s: __m512) -> __m512 {
        // SAFETY: only inlined into the avx512f kernels.
        unsafe { _mm512_fmadd_ps(q, c, s) }
    }
    /// Squared difference with the decoded vector `k × c`.
    #[inline(always)]
    fn l2_8_512(q: __m512, c: __m512, k: __m512, s: __m512) -> __m512 {
        // SAFETY: only inlined into the avx512f kernels.
        unsafe {
            let d = _mm512_fnmadd_ps(k, c, q);
            _mm512_fmadd_ps(d, d, s)
        }
    }
    #[inline(always)]
    fn dot8_256(q: __m256, c: __m256, _k: __m256, s: __m256) -> __m256 {
        // SAFETY: only inlined into the avx2+fma kernels.
        unsafe { _mm256_fmadd_ps(q, c, s) }
    }
    #[inline(always)]
    fn l2_8_256(q: __m256, c: __m256, k: __m256, s: __m256) -> __m256 {
        // SAFETY: only inlined into the avx2+fma kernels.
        unsafe {
            let d = _mm256_fnmadd_ps(k, c, q);
            _mm256_fmadd_ps(d, d, s)
        }
    }
    // The cosine kernels sum q·codes (the scale applied once, at the end).
    sq8_kernel512!(
        cos_sq8_512,
        dot8_512,
        |x: f32, c: f32, _: f32| x * c,
        |sum: f32, k: f32| 1.0 - k * sum
    );
    sq8_kernel512!(
        l2sq_sq8_512,
        l2_8_512,
        |x: f32, c: f32, k: f32| (x - k * c).powi(2),
        |sum: f32, _: f32| sum
    );
    sq8_kernel256!(
        cos_sq8_256,
        dot8_256,
        |x: f32, c: f32, _: f32| x * c,
        |sum: f32, k: f32| 1.0 - k * sum
    );
    sq8_kernel256!(
        l2sq_sq8_256,
        l2_8_256,
        |x: f32, c: f32, k: f32| (x - k * c).powi(2),
        |sum: f32, _: f32| sum
    );

    #[inline(always)]
    fn hsum256(s: __m256) -> f32 {
        // SAFETY: only inlined into the avx2+fma kernels above.
        unsafe {
            let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
            let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)))
        }
    }

    kernel512!(dot512, fma512);
    kernel512!(l2sq512, sq512);
    kernel256!(dot256, fma256, |(x, y)| x * y);
    kernel256!(l2sq256, sq256, |(x, y)| (x - y) * (x - y));

    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn cos512(a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: same requirement as ours.
        1.0 - unsafe { dot512(a, b) }
    }
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn cos256(a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: same requirement as ours.
        1.0 - unsafe { dot256(a, b) }
    }
}

/// (cosine distance, squared L2) kernels for this CPU, chosen once.
pub fn kernels() -> (DistFn, DistFn) {
    static K: OnceLock<(DistFn, DistFn)> = OnceLock::new();
    *K.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f") {
                return (simd::cos512 as DistFn, simd::l2sq512 as DistFn);
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                return (simd::cos256 as DistFn, simd::l2sq256 as DistFn);
            }
        }
        (cos_portable as DistFn, l2sq_portable as DistFn)
    })
}

/// (cosine distance, squared L2) kernels from an `f32` query to int8 codes, for this CPU,
/// chosen once.
pub fn kernels_sq8() -> (Dist8Fn, Dist8Fn) {
    static K: OnceLock<(Dist8Fn, Dist8Fn)> = OnceLock::new();
    *K.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f") {
                return (simd::cos_sq8_512 as Dist8Fn, simd::l2sq_sq8_512 as Dist8Fn);
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                return (simd::cos_sq8_256 as Dist8Fn, simd::l2sq_sq8_256 as Dist8Fn);
            }
        }
        (cos_sq8_portable as Dist8Fn, l2sq_sq8_portable as Dist8Fn)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = super::super::SplitMix64(seed);
        (0..n).map(|_| rng.next_f64() as f32 * 2.0 - 1.0).collect()
    }

    #[test]
    fn sq8_kernels_agree_with_the_portable_ones_and_with_decoding() {
        let (cos, l2) = kernels_sq8();
        for n in [1, 7, 8, 15, 16, 17, 31, 33, 384, 768, 1000] {
            let (q, v) = (vector(n, 1), vector(n, 2));
            let mut codes = vec![0i8; n];
            let scale = sq8_encode(&v, &mut codes);
            let decoded: Vec<f32> = codes.iter().map(|&c| scale * c as f32).collect();
            // SAFETY: the kernels come from kernels_sq8(), which checked the CPU.
            let (c, d) = unsafe { (cos(&q, &codes, scale), l2(&q, &codes, scale)) };
            let tol = 1e-4 * n as f32;
            assert!((c - cos_sq8_portable(&q, &codes, scale)).abs() < tol, "{n}");
            assert!(
                (d - l2sq_sq8_portable(&q, &codes, scale)).abs() < tol,
                "{n}"
            );
            assert!((c - cos_portable(&q, &decoded)).abs() < tol, "{n}");
            assert!((d - l2sq_portable(&q, &decoded)).abs() < tol, "{n}");
            // The AVX2 pair too, where this CPU would have chosen AVX-512.
            #[cfg(target_arch = "x86_64")]
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                // SAFETY: the CPU features were just checked.
                let (c2, d2) = unsafe {
                    (
                        simd::cos_sq8_256(&q, &codes, scale),
                        simd::l2sq_sq8_256(&q, &codes, scale),
                    )
                };
                assert!((c2 - c).abs() < tol && (d2 - d).abs() < tol, "{n}");
            }
            // Coding the decoded vector again changes nothing.
            let mut again = vec![0i8; n];
            assert_eq!(sq8_encode(&decoded, &mut again), scale);
            assert_eq!(again, codes);
        }
    }

    #[test]
    fn sq8_codes_stay_close_to_the_vector() {
        let v = vector(384, 3);
        let mut codes = vec![0i8; 384];
        let scale = sq8_encode(&v, &mut codes);
        let worst = v
            .iter()
            .zip(&codes)
            .map(|(x, &c)| (x - scale * c as f32).abs())
            .fold(0f32, f32::max);
        assert!(worst <= scale / 2.0 + 1e-6, "{worst} vs step {scale}");
        assert_eq!(sq8_encode(&[0.0; 4], &mut [0i8; 4]), 1.0);
    }
}
