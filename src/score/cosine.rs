//! Cosine similarity and the dot-product kernel every other score is built on.

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

/// L2-normalises `v` in place; a zero vector stays zero (sentence-transformers clamps the norm
/// at 1e-12 the same way).
pub fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
}

/// Cosine similarity cos(a, b) = a·b / (‖a‖‖b‖), clamped to [-1, 1]; 0 when either is zero.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let na = dot(a, a).sqrt();
    let nb = dot(b, b).sqrt();
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    (dot(a, b) / (na * nb)).clamp(-1.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_values() {
        assert!((cosine(&[1.0, 0.0], &[0.0, 1.0])).abs() < 1e-7);
        assert!((cosine(&[1.0, 2.0], &[2.0, 4.0]) - 1.0).abs() < 1e-6);
        assert!((cosine(&[1.0, 2.0], &[-1.0, -2.0]) + 1.0).abs() < 1e-6);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 1.0]), 0.0);
        let a: Vec<f32> = (0..19).map(|i| i as f32).collect();
        let want: f32 = a.iter().map(|x| x * x).sum();
        assert!((dot(&a, &a) - want).abs() < 1e-3);
    }

    proptest! {
        #[test]
        fn cosine_bounded_and_symmetric(
            v in prop::collection::vec((-10.0f32..10.0, -10.0f32..10.0), 1..64)
        ) {
            let (a, b): (Vec<f32>, Vec<f32>) = v.into_iter().unzip();
            let c = cosine(&a, &b);
            prop_assert!((-1.0..=1.0).contains(&c));
            prop_assert!((c - cosine(&b, &a)).abs() < 1e-6);
        }
    }
}
