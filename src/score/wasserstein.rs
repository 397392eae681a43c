//! The 2-Wasserstein distance between diagonal Gaussians (design.md §3;
//! papers/variational-siamese-wasserstein-quora.txt §4):
//!
//! W2²(N(μ1, diag σ1²), N(μ2, diag σ2²)) = ‖μ1 − μ2‖² + ‖σ1 − σ2‖²
//!
//! which is the squared L2 distance between the concatenations [μ1; σ1] and [μ2; σ2] — why an
//! L2 HNSW over [μ; σ] is an exact W2 index.

use crate::types::Gaussian;

/// W2² between two diagonal Gaussians.
pub fn w2_squared(p: &Gaussian, q: &Gaussian) -> f32 {
    debug_assert_eq!(p.mu.len(), q.mu.len());
    let sq = |a: &[f32], b: &[f32]| -> f64 {
        a.iter()
            .zip(b)
            .map(|(x, y)| {
                let d = f64::from(x - y);
                d * d
            })
            .sum()
    };
    (sq(&p.mu, &q.mu) + sq(&p.sigma, &q.sigma)) as f32
}

/// W2 between two diagonal Gaussians.
pub fn w2(p: &Gaussian, q: &Gaussian) -> f32 {
    w2_squared(p, q).sqrt()
}

/// The point [μ; σ] whose L2 distances are W2 distances.
pub fn embed(p: &Gaussian) -> Vec<f32> {
    p.mu.iter().chain(&p.sigma).copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn gaussian(dim: usize) -> impl Strategy<Value = Gaussian> {
        (
            prop::collection::vec(-2.0f32..2.0, dim),
            prop::collection::vec(0.001f32..2.0, dim),
        )
            .prop_map(|(mu, sigma)| Gaussian { mu, sigma })
    }

    fn three() -> impl Strategy<Value = (Gaussian, Gaussian, Gaussian)> {
        (1usize..24).prop_flat_map(|d| (gaussian(d), gaussian(d), gaussian(d)))
    }

    #[test]
    fn known_value() {
        let p = Gaussian {
            mu: vec![0.0, 0.0],
            sigma: vec![1.0, 1.0],
        };
        let q = Gaussian {
            mu: vec![3.0, 0.0],
            sigma: vec![1.0, 5.0],
        };
        assert!((w2_squared(&p, &q) - 25.0).abs() < 1e-5);
        assert!((w2(&p, &q) - 5.0).abs() < 1e-6);
    }

    proptest! {
        #[test]
        fn w2_is_a_metric_and_an_l2_distance((p, q, r) in three()) {
            prop_assert_eq!(w2(&p, &p), 0.0);
            prop_assert!(w2(&p, &q) >= 0.0);
            prop_assert!((w2(&p, &q) - w2(&q, &p)).abs() < 1e-6);
            prop_assert!(w2(&p, &r) <= w2(&p, &q) + w2(&q, &r) + 1e-4);
            let l2: f32 = embed(&p).iter().zip(embed(&q)).map(|(a, b)| (a - b) * (a - b)).sum();
            prop_assert!((w2_squared(&p, &q) - l2).abs() <= 1e-4 * (1.0 + l2));
        }
    }
}
