//! RCMD: relaxed optimal transport between the token vectors of two sentences
//! (papers/clrcmd-rcmd-optimal-transport-sts.txt §3.2–3.3; design.md §3).
//!
//! With unit token vectors x_1..x_L1 (sentence a) and y_1..y_L2 (sentence b), cost
//! M_ij = 1 − cos(x_i, y_j) and token weights w¹ (Σ = 1) and w² (Σ = 1) — uniform 1/L, or
//! normalised IDF weights as in BERTScore:
//!
//! - a→b plan: T1_ij = w¹_i if j = argmin_j' M_ij' else 0;  RCMD_1 = Σ_i w¹_i max_j cos(x_i, y_j)
//! - b→a plan: T2_ij = w²_j if i = argmin_i' M_i'j else 0;  RCMD_2 = Σ_j w²_j max_i cos(x_i, y_j)
//! - s_RCMD = (RCMD_1 + RCMD_2) / 2, distance 1 − s_RCMD
//! - contribution_ij = ½(T1 + T2)_ij ⊙ (1 − M)_ij, which sums to s_RCMD.
//!
//! Computed sparse (the paper's RCMD_sparse): one pass over all (i, j) keeps only each row's and
//! each column's best partner — O(L1·L2·d) time, O(L1 + L2) extra memory; the plans are lists of
//! partners, never L1×L2 matrices. Ties go to the lowest index. Cosines are dot products of the
//! given rows, which the caller normalises, clamped to [-1, 1].

use serde::{Deserialize, Serialize};

use super::cosine::dot;

/// One sentence's token vectors: `len × dim`, row-major, rows L2-normalised.
#[derive(Debug, Clone, Copy)]
pub struct Tokens<'a> {
    data: &'a [f32],
    dim: usize,
}

impl<'a> Tokens<'a> {
    /// Wraps `len × dim` row-major vectors. Panics if `data.len()` is not a multiple of `dim`.
    pub fn new(data: &'a [f32], dim: usize) -> Self {
        assert!(
            dim > 0 && data.len().is_multiple_of(dim),
            "token data is not len × dim"
        );
        Tokens { data, dim }
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.data.len() / self.dim
    }

    /// True when there are no tokens.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Token `i`'s vector.
    pub fn row(&self, i: usize) -> &'a [f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
}

/// How tokens are weighted in each direction.
#[derive(Debug, Clone, Copy, Default)]
pub enum Weights<'a> {
    /// w = 1/L on both sides.
    #[default]
    Uniform,
    /// Non-negative per-token weights (e.g. IDF) for a and for b, normalised to sum 1 here; a
    /// side whose weights are all zero falls back to uniform.
    Given(&'a [f32], &'a [f32]),
}

/// One token's partner in a transport plan.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// Index of the partner token on the other side.
    pub partner: usize,
    /// cos(token, partner) = 1 − M.
    pub cosine: f32,
    /// The token's (normalised) weight: the mass it sends.
    pub weight: f32,
}

/// RCMD of a pair, with both transport plans.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rcmd {
    /// RCMD_1, a→b.
    pub forward: f32,
    /// RCMD_2, b→a.
    pub backward: f32,
    /// s_RCMD = (forward + backward) / 2.
    pub score: f32,
    /// For each token of a: its best partner in b (the a→b plan).
    pub a_to_b: Vec<Link>,
    /// For each token of b: its best partner in a (the b→a plan).
    pub b_to_a: Vec<Link>,
}

/// One non-zero entry of the contribution matrix ½(T1 + T2) ⊙ (1 − M).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Contribution {
    /// Token of a.
    pub a: usize,
    /// Token of b.
    pub b: usize,
    /// Its share of s_RCMD.
    pub value: f32,
}

impl Rcmd {
    /// The RCMD distance 1 − s_RCMD.
    pub fn distance(&self) -> f32 {
        1.0 - self.score
    }

    /// The non-zero contributions (at most L1 + L2 entries; a pair chosen in both directions
    /// appears once), sorted by (a, b). They sum to `score`.
    pub fn contributions(&self) -> Vec<Contribution> {
        let mut out: Vec<Contribution> = self
            .a_to_b
            .iter()
            .enumerate()
            .map(|(i, l)| Contribution {
                a: i,
                b: l.partner,
                value: 0.5 * l.weight * l.cosine,
            })
            .chain(self.b_to_a.iter().enumerate().map(|(j, l)| Contribution {
                a: l.partner,
                b: j,
                value: 0.5 * l.weight * l.cosine,
            }))
            .collect();
        out.sort_by_key(|c| (c.a, c.b));
        out.dedup_by(|next, kept| {
            let same = next.a == kept.a && next.b == kept.b;
            if same {
                kept.value += next.value;
            }
            same
        });
        out
    }

    /// The dense L1 × L2 contribution matrix (row-major), for heatmaps.
    pub fn contribution_matrix(&self) -> Vec<f32> {
        let (l1, l2) = (self.a_to_b.len(), self.b_to_a.len());
        let mut m = vec![0f32; l1 * l2];
        for c in self.contributions() {
            m[c.a * l2 + c.b] += c.value;
        }
        m
    }
}

/// Normalised weights: `given` scaled to sum 1, or uniform when absent, all zero or invalid.
pub(crate) fn normalise(given: Option<&[f32]>, len: usize) -> Vec<f32> {
    if let Some(w) = given {
        assert_eq!(w.len(), len, "one weight per token");
        let total: f32 = w.iter().filter(|x| x.is_finite() && **x > 0.0).sum();
        if total > 0.0 {
            return w
                .iter()
                .map(|&x| {
                    if x.is_finite() && x > 0.0 {
                        x / total
                    } else {
                        0.0
                    }
                })
                .collect();
        }
    }
    vec![1.0 / len.max(1) as f32; len]
}

/// Each a-row's and each b-row's best cosine and its index: the sparse core of RCMD.
/// `rows` receives (best cos, argmax j) per token of a, `cols` the same per token of b.
/// `b_scale`, if given, multiplies each b row's dot products (the int8 codec's inverse norms).
pub(crate) fn best_partners(
    a: Tokens<'_>,
    b: Tokens<'_>,
    b_scale: Option<&[f32]>,
    rows: &mut Vec<(f32, usize)>,
    cols: &mut Vec<(f32, usize)>,
) {
    assert_eq!(a.dim(), b.dim(), "token vectors of different dimensions");
    rows.clear();
    rows.resize(a.len(), (f32::NEG_INFINITY, 0));
    cols.clear();
    cols.resize(b.len(), (f32::NEG_INFINITY, 0));
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports AVX2 and FMA (checked just above).
        unsafe { best_partners_avx2(a, b, b_scale, rows, cols) };
        return;
    }
    best_partners_with(a, b, b_scale, rows, cols, |xs, y| xs.map(|x| dot(x, y)));
}

/// [`best_partners_with`] on the AVX2 + FMA four-row kernel.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn best_partners_avx2(
    a: Tokens<'_>,
    b: Tokens<'_>,
    b_scale: Option<&[f32]>,
    rows: &mut [(f32, usize)],
    cols: &mut [(f32, usize)],
) {
    // SAFETY: this function only runs where AVX2 and FMA are available.
    best_partners_with(a, b, b_scale, rows, cols, |xs, y| unsafe {
        simd::dot4_avx2(xs, y)
    });
}

/// b outer, a inner, four a-rows per pass over a b-row (`dot4`), so each b-row is loaded once
/// for four dot products while a (the query) stays in cache.
#[inline(always)]
fn best_partners_with(
    a: Tokens<'_>,
    b: Tokens<'_>,
    b_scale: Option<&[f32]>,
    rows: &mut [(f32, usize)],
    cols: &mut [(f32, usize)],
    dot4: impl Fn([&[f32]; 4], &[f32]) -> [f32; 4],
) {
    let mut update = |i: usize, j: usize, c: f32, cols: &mut [(f32, usize)]| {
        let c = c.clamp(-1.0, 1.0);
        if c > rows[i].0 {
            rows[i] = (c, j);
        }
        if c > cols[j].0 {
            cols[j] = (c, i);
        }
    };
    let quads = a.len() / 4 * 4;
    for j in 0..b.len() {
        let y = b.row(j);
        let scale = b_scale.map_or(1.0, |s| s[j]);
        for i in (0..quads).step_by(4) {
            let d = dot4([a.row(i), a.row(i + 1), a.row(i + 2), a.row(i + 3)], y);
            for (k, dk) in d.into_iter().enumerate() {
                update(i + k, j, dk * scale, cols);
            }
        }
        for i in quads..a.len() {
            update(i, j, dot(a.row(i), y) * scale, cols);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    /// Four dot products against one shared vector: 16 floats per step, two accumulators per
    /// row to cover the FMA latency.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot4_avx2(xs: [&[f32]; 4], y: &[f32]) -> [f32; 4] {
        let n = y.len();
        assert!(xs.iter().all(|x| x.len() == n), "rows of equal length");
        let [x0, x1, x2, x3] = xs.map(<[f32]>::as_ptr);
        let yp = y.as_ptr();
        let mut acc = [_mm256_setzero_ps(); 8];
        let mut i = 0;
        // SAFETY: every pointer offset stays below n, the common length checked above.
        unsafe {
            while i + 16 <= n {
                let y0 = _mm256_loadu_ps(yp.add(i));
                let y1 = _mm256_loadu_ps(yp.add(i + 8));
                for (r, x) in [x0, x1, x2, x3].into_iter().enumerate() {
                    acc[2 * r] = _mm256_fmadd_ps(_mm256_loadu_ps(x.add(i)), y0, acc[2 * r]);
                    acc[2 * r + 1] =
                        _mm256_fmadd_ps(_mm256_loadu_ps(x.add(i + 8)), y1, acc[2 * r + 1]);
                }
                i += 16;
            }
        }
        let mut out = [0f32; 4];
        for (r, o) in out.iter_mut().enumerate() {
            let v = _mm256_add_ps(acc[2 * r], acc[2 * r + 1]);
            let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let s = _mm_hadd_ps(s, s);
            let s = _mm_hadd_ps(s, s);
            *o = _mm_cvtss_f32(s)
                + xs[r][i..]
                    .iter()
                    .zip(&y[i..])
                    .map(|(p, q)| p * q)
                    .sum::<f32>();
        }
        out
    }
}

/// RCMD between a and b with both plans. Either side empty gives all scores 0 and empty plans.
pub fn rcmd(a: Tokens<'_>, b: Tokens<'_>, weights: Weights<'_>) -> Rcmd {
    if a.is_empty() || b.is_empty() {
        return Rcmd {
            forward: 0.0,
            backward: 0.0,
            score: 0.0,
            a_to_b: Vec::new(),
            b_to_a: Vec::new(),
        };
    }
    let (wa, wb) = match weights {
        Weights::Uniform => (None, None),
        Weights::Given(wa, wb) => (Some(wa), Some(wb)),
    };
    let (wa, wb) = (normalise(wa, a.len()), normalise(wb, b.len()));
    let (mut rows, mut cols) = (Vec::new(), Vec::new());
    best_partners(a, b, None, &mut rows, &mut cols);
    let link = |&(cosine, partner): &(f32, usize), weight: f32| Link {
        partner,
        cosine,
        weight,
    };
    let a_to_b: Vec<Link> = rows.iter().zip(&wa).map(|(r, &w)| link(r, w)).collect();
    let b_to_a: Vec<Link> = cols.iter().zip(&wb).map(|(c, &w)| link(c, w)).collect();
    // Clamped: weights that sum to 1 up to rounding could push a perfect match past 1.
    let forward = a_to_b
        .iter()
        .map(|l| l.weight * l.cosine)
        .sum::<f32>()
        .clamp(-1.0, 1.0);
    let backward = b_to_a
        .iter()
        .map(|l| l.weight * l.cosine)
        .sum::<f32>()
        .clamp(-1.0, 1.0);
    Rcmd {
        forward,
        backward,
        score: 0.5 * (forward + backward),
        a_to_b,
        b_to_a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn unit_rows(raw: Vec<Vec<f32>>) -> Vec<f32> {
        raw.into_iter()
            .flat_map(|mut r| {
                let n = r.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
                r.iter_mut().for_each(|x| *x /= n);
                r
            })
            .collect()
    }

    /// Two sentences of unit token vectors in the same dimension.
    fn pair() -> impl Strategy<Value = (Vec<f32>, Vec<f32>, usize)> {
        (1usize..12).prop_flat_map(|d| {
            let row = prop::collection::vec(-1.0f32..1.0, d)
                .prop_filter("non-zero", |r| r.iter().any(|x| x.abs() > 1e-2));
            (
                prop::collection::vec(row.clone(), 1..10).prop_map(unit_rows),
                prop::collection::vec(row, 1..10).prop_map(unit_rows),
                Just(d),
            )
        })
    }

    fn weights_for(n: usize) -> impl Strategy<Value = Vec<f32>> {
        prop::collection::vec(0.0f32..5.0, n)
    }

    #[test]
    fn hand_computed_example() {
        // a = {e1, e2}, b = {e1, (e1+e2)/√2}.
        let s = std::f32::consts::FRAC_1_SQRT_2;
        let a = [1.0, 0.0, 0.0, 1.0];
        let b = [1.0, 0.0, s, s];
        let r = rcmd(Tokens::new(&a, 2), Tokens::new(&b, 2), Weights::Uniform);
        // a→b: e1→e1 (1), e2→(e1+e2)/√2 (s); b→a: e1→e1 (1), (e1+e2)/√2→e1 (s, tie → lowest i).
        assert!((r.forward - (1.0 + s) / 2.0).abs() < 1e-6);
        assert!((r.backward - (1.0 + s) / 2.0).abs() < 1e-6);
        assert_eq!(r.a_to_b[1].partner, 1);
        assert_eq!(r.b_to_a[1].partner, 0);
        let c = r.contributions();
        assert_eq!(
            c.len(),
            3,
            "(0,0) is chosen in both directions and merged: {c:?}"
        );
        assert!((c[0].value - 0.5).abs() < 1e-6);
    }

    #[test]
    fn idf_weights_shift_the_score_to_heavy_tokens() {
        let a = [1.0, 0.0, 0.0, 1.0];
        let b = [1.0, 0.0];
        let uniform = rcmd(Tokens::new(&a, 2), Tokens::new(&b, 2), Weights::Uniform);
        assert!((uniform.forward - 0.5).abs() < 1e-6);
        let heavy_first = rcmd(
            Tokens::new(&a, 2),
            Tokens::new(&b, 2),
            Weights::Given(&[3.0, 1.0], &[1.0]),
        );
        assert!((heavy_first.forward - 0.75).abs() < 1e-6);
        // All-zero weights fall back to uniform.
        let zero = rcmd(
            Tokens::new(&a, 2),
            Tokens::new(&b, 2),
            Weights::Given(&[0.0, 0.0], &[0.0]),
        );
        assert!((zero.forward - 0.5).abs() < 1e-6);
    }

    #[test]
    fn portable_and_simd_kernels_agree() {
        // 7 × 5 tokens of 37 dims: exercises the four-row blocks, the leftover rows and the
        // scalar tail of the 16-float steps.
        let rows = |n: usize, seed: f32| -> Vec<f32> {
            unit_rows(
                (0..n)
                    .map(|i| {
                        (0..37)
                            .map(|k| ((i * 37 + k) as f32 * seed).sin())
                            .collect()
                    })
                    .collect(),
            )
        };
        let (a, b) = (rows(7, 0.37), rows(5, 1.91));
        let (ta, tb) = (Tokens::new(&a, 37), Tokens::new(&b, 37));
        let (mut r1, mut c1) = (
            vec![(f32::NEG_INFINITY, 0); 7],
            vec![(f32::NEG_INFINITY, 0); 5],
        );
        best_partners_with(ta, tb, None, &mut r1, &mut c1, |xs, y| {
            xs.map(|x| dot(x, y))
        });
        let (mut r2, mut c2) = (Vec::new(), Vec::new());
        best_partners(ta, tb, None, &mut r2, &mut c2);
        for (p, q) in r1.iter().zip(&r2).chain(c1.iter().zip(&c2)) {
            assert_eq!(p.1, q.1);
            assert!((p.0 - q.0).abs() < 1e-6);
        }
    }

    #[test]
    fn empty_side_scores_zero() {
        let r = rcmd(
            Tokens::new(&[], 3),
            Tokens::new(&[1.0, 0.0, 0.0], 3),
            Weights::Uniform,
        );
        assert_eq!(r.score, 0.0);
        assert!(r.contributions().is_empty());
    }

    proptest! {
        #[test]
        fn bounded_symmetric_and_explained((a, b, d) in pair()) {
            let (ta, tb) = (Tokens::new(&a, d), Tokens::new(&b, d));
            let ab = rcmd(ta, tb, Weights::Uniform);
            let ba = rcmd(tb, ta, Weights::Uniform);
            prop_assert!((-1.0..=1.0).contains(&ab.score));
            prop_assert!((ab.score - ba.score).abs() < 1e-5);
            prop_assert!((ab.forward - ba.backward).abs() < 1e-5);
            let total: f32 = ab.contributions().iter().map(|c| c.value).sum();
            prop_assert!((total - ab.score).abs() < 1e-5);
            let dense: f32 = ab.contribution_matrix().iter().sum();
            prop_assert!((dense - ab.score).abs() < 1e-5);
        }

        #[test]
        fn weighted_contributions_sum_to_the_score(
            ((a, b, d), wa, wb) in pair().prop_flat_map(|(a, b, d)| {
                let (la, lb) = (a.len() / d, b.len() / d);
                (Just((a, b, d)), weights_for(la), weights_for(lb))
            })
        ) {
            let r = rcmd(Tokens::new(&a, d), Tokens::new(&b, d), Weights::Given(&wa, &wb));
            let total: f32 = r.contributions().iter().map(|c| c.value).sum();
            prop_assert!((total - r.score).abs() < 1e-5);
            prop_assert!((-1.0..=1.0).contains(&r.score));
        }

        #[test]
        fn identical_token_sets_score_one((a, _b, d) in pair()) {
            let r = rcmd(Tokens::new(&a, d), Tokens::new(&a, d), Weights::Uniform);
            prop_assert!((r.score - 1.0).abs() < 1e-5);
        }

        #[test]
        fn invariant_to_token_order((a, b, d) in pair(), seed in any::<u64>()) {
            let rotate = |v: &[f32], by: usize| -> Vec<f32> {
                let n = v.len() / d;
                (0..n).flat_map(|i| v[((i + by) % n) * d..((i + by) % n + 1) * d].to_vec()).collect()
            };
            let a2 = rotate(&a, seed as usize % (a.len() / d));
            let mut b2: Vec<f32> = rotate(&b, (seed >> 8) as usize % (b.len() / d));
            // Also reverse b's rows.
            b2 = b2.chunks(d).rev().flatten().copied().collect();
            let r1 = rcmd(Tokens::new(&a, d), Tokens::new(&b, d), Weights::Uniform);
            let r2 = rcmd(Tokens::new(&a2, d), Tokens::new(&b2, d), Weights::Uniform);
            prop_assert!((r1.score - r2.score).abs() < 1e-5);
            prop_assert!((r1.forward - r2.forward).abs() < 1e-5);
        }
    }
}
