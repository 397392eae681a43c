//! The dot-product kernels: [`dot`] (portable, eight independent accumulators; the one every
//! score is built on), [`dot_simd`] (the same bits, compiled for AVX2 when the CPU has it),
//! [`dot4`] (four products sharing one side, the same bits each) and [`dot_fused`] (fused
//! multiply-adds, the encoder's). The graph's distance kernels are in
//! [`crate::math::distance`].

/// Dot product with eight independent accumulators, so the compiler can vectorise it without
/// reassociating floating-point sums on its own.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0f32; 8];
    let (ca, ra) = (a.chunks_exact(8), a.chunks_exact(8).remainder());
    let rb = b.chunks_exact(8).remainder();
    for (x, y) in ca.zip(b.chunks_exact(8)) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// [`dot`] compiled with AVX2 where the CPU has it, chosen at run time (the same partial sums on
/// every path, so the same bits): for callers not built with AVX2 enabled whose vectors are long
/// (a neural chunker's unit is ~100,000 multiply-adds).
pub fn dot_simd(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked above).
        return unsafe { dot_avx2(a, b) };
    }
    dot(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    dot(a, b)
}

/// `w · x` for four `x` at once, each with exactly [`dot`]'s partial sums (the same
/// bits), so the four accumulator chains overlap and `w` is read once.
#[inline(always)]
fn dot4_body(w: &[f32], x: [&[f32]; 4]) -> [f32; 4] {
    let (mut a0, mut a1, mut a2, mut a3) = ([0f32; 8], [0f32; 8], [0f32; 8], [0f32; 8]);
    let rows = w
        .chunks_exact(8)
        .zip(x[0].chunks_exact(8))
        .zip(x[1].chunks_exact(8))
        .zip(x[2].chunks_exact(8))
        .zip(x[3].chunks_exact(8));
    for ((((w, x0), x1), x2), x3) in rows {
        for k in 0..8 {
            a0[k] += w[k] * x0[k];
            a1[k] += w[k] * x1[k];
            a2[k] += w[k] * x2[k];
            a3[k] += w[k] * x3[k];
        }
    }
    let acc = [a0, a1, a2, a3];
    std::array::from_fn(|r| finish_dot(&acc[r], w, x[r]))
}

/// One row's dot product from its eight lane accumulators: the lanes summed in order, plus
/// the products past the last whole group of eight (as [`dot`] ends).
#[inline(always)]
fn finish_dot(lanes: &[f32; 8], w: &[f32], x: &[f32]) -> f32 {
    let whole = w.len() - w.len() % 8;
    let tail: f32 = w[whole..].iter().zip(&x[whole..]).map(|(a, b)| a * b).sum();
    lanes.iter().sum::<f32>() + tail
}

/// [`dot4_body`]'s four dot products: in AVX2 intrinsics ([`dot4_avx2`]) where the CPU has
/// AVX2, else the plain body.
pub fn dot4(w: &[f32], x: [&[f32]; 4]) -> [f32; 4] {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked above).
        return unsafe { dot4_avx2(w, x) };
    }
    dot4_body(w, x)
}

/// [`dot4_body`] in AVX2 intrinsics (the compiler's own vectorisation of it shuffles lanes):
/// per row, the eight lanes are eight accumulators, each a separate multiply then add as in
/// [`dot`], summed in lane order at the end.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot4_avx2(w: &[f32], x: [&[f32]; 4]) -> [f32; 4] {
    use std::arch::x86_64::*;
    let n = w.len();
    assert!(x.iter().all(|x| x.len() == n), "dot4 lengths");
    let whole = n - n % 8;
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i < whole {
        // SAFETY: i + 8 <= whole <= n, the length of w and of every x (asserted).
        let wv = unsafe { _mm256_loadu_ps(w.as_ptr().add(i)) };
        for (acc, x) in acc.iter_mut().zip(&x) {
            let xv = unsafe { _mm256_loadu_ps(x.as_ptr().add(i)) };
            *acc = _mm256_add_ps(*acc, _mm256_mul_ps(wv, xv));
        }
        i += 8;
    }
    std::array::from_fn(|r| {
        let mut lanes = [0f32; 8];
        // SAFETY: lanes holds 8 values.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc[r]) };
        finish_dot(&lanes, w, x[r])
    })
}

/// Lanes of [`dot_fused`].
const FUSED_LANES: usize = 16;

/// `a · b` in 16 lanes of fused multiply-adds (`mul_add`), then the lanes in order: the
/// encoder's layer norm, whose bits the golden tests pin.
#[inline(always)]
pub fn dot_fused(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; FUSED_LANES];
    let (ac, bc) = (a.chunks_exact(FUSED_LANES), b.chunks_exact(FUSED_LANES));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..FUSED_LANES {
            acc[l] = x[l].mul_add(y[l], acc[l]);
        }
    }
    let tail: f32 = ar.iter().zip(br).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::math::SplitMix64;

    #[test]
    fn four_dots_at_once_are_the_same_bits_as_one_at_a_time() {
        let mut rng = SplitMix64(3);
        for len in [1, 7, 8, 17, 1154] {
            let v = |rng: &mut SplitMix64| -> Vec<f32> {
                (0..len)
                    .map(|_| rng.next_f64() as f32 * 2.0 - 1.0)
                    .collect()
            };
            let w = v(&mut rng);
            let xs: Vec<Vec<f32>> = (0..4).map(|_| v(&mut rng)).collect();
            let four = dot4(&w, std::array::from_fn(|r| xs[r].as_slice()));
            for (x, got) in xs.iter().zip(four) {
                assert_eq!(got.to_bits(), dot_simd(&w, x).to_bits(), "length {len}");
                assert_eq!(got.to_bits(), dot(&w, x).to_bits(), "length {len}");
            }
            let fused = dot_fused(&w, &xs[0]);
            assert!(
                (fused - dot(&w, &xs[0])).abs() < 1e-4 * len as f32,
                "length {len}"
            );
        }
    }
}
