//! The CLRCMD objective as a pure function: InfoNCE over s_RCMD (design.md §3,
//! papers/clrcmd-rcmd-optimal-transport-sts.txt §3.3), its value and its exact gradient with
//! respect to every token vector, computed sparse.
//!
//! For anchors a_k, candidates c_j (the batch's positives, then its hard negatives) and
//! temperature τ:
//!
//! ```text
//! L = (1/B) Σ_k [ logsumexp_j s(a_k, c_j)/τ − s(a_k, c_pos(k))/τ ]
//! ```
//!
//! RCMD's transport plans are piecewise constant in the vectors (each token keeps its argmax
//! partner), so where no tie flips, ∂s/∂x_t = w_t·y_partner(t) (a→b) plus, for every token of
//! the other side whose partner is t, that token's weight times its vector (b→a), halved. Only
//! the partner lists are kept — O(B·N·L) memory, never the B·N·L·L cosine tensor — which is the
//! paper's RCMD_sparse. The training loop feeds the token-vector gradients back into the
//! encoder's autodiff graph as a surrogate loss Σ x ⊙ ∂L/∂x, whose gradient is exactly ∂L/∂x.
//!
//! [`cosent`] is the optional graded objective beside it (CoSENT, Su 2022): over pairs with a
//! gold similarity (STS-B, SICK train), the cosine of every pair should rank above the cosine
//! of every pair with a lower gold score,
//!
//! ```text
//! L = log(1 + Σ_{gold_i > gold_j} exp(λ·(cos_j − cos_i)))
//! ```
//!
//! so fine-tuning for duplicates does not erase graded similarity (issue 8's STS-B target).

use rayon::prelude::*;

use crate::score::{rcmd, Tokens, Weights};

/// Which texts of a batch are anchors and candidates, and each anchor's positive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoNce {
    /// Text index of each anchor.
    pub anchors: Vec<usize>,
    /// Text index of each candidate.
    pub candidates: Vec<usize>,
    /// For anchor k, the index into `candidates` of its positive.
    pub positives: Vec<usize>,
    /// (anchor, candidate) index pairs left out of the anchor's softmax: candidates that are
    /// the anchor itself or a known duplicate of it, which must not be pushed away.
    pub excluded: Vec<(usize, usize)>,
}

/// The loss, the score matrix and the gradient for every text.
#[derive(Debug, Clone)]
pub struct LossGrads {
    /// Mean InfoNCE loss over the anchors.
    pub loss: f64,
    /// s_RCMD(anchor k, candidate j), row-major `anchors × candidates`.
    pub scores: Vec<f32>,
    /// ∂loss/∂(token vectors) per text, shaped like the text's token vectors.
    pub grads: Vec<Vec<f32>>,
}

/// Loss and gradients of the RCMD InfoNCE objective over `texts` (each `len × dim`, rows
/// L2-normalised as the encoder gives them). Panics if an index is out of range.
pub fn rcmd_infonce(texts: &[Tokens<'_>], batch: &InfoNce, tau: f32) -> LossGrads {
    assert_eq!(batch.anchors.len(), batch.positives.len());
    let n = batch.candidates.len();
    // Every (anchor, candidate) plan: the anchors in parallel.
    let plans: Vec<Vec<crate::score::Rcmd>> = batch
        .anchors
        .par_iter()
        .map(|&a| {
            batch
                .candidates
                .iter()
                .map(|&c| rcmd(texts[a], texts[c], Weights::Uniform))
                .collect()
        })
        .collect();
    let scores: Vec<f32> = plans.iter().flatten().map(|r| r.score).collect();

    let mut kept = vec![true; batch.anchors.len() * n];
    for &(k, j) in &batch.excluded {
        if j != batch.positives[k] {
            kept[k * n + j] = false;
        }
    }
    let b = batch.anchors.len() as f64;
    let tau = f64::from(tau);
    let mut loss = 0.0;
    let mut grads: Vec<Vec<f32>> = texts.iter().map(|t| vec![0.0; t.len() * t.dim()]).collect();
    for (k, row) in plans.iter().enumerate() {
        let logits: Vec<f64> = row
            .iter()
            .enumerate()
            .map(|(j, r)| {
                if kept[k * n + j] {
                    f64::from(r.score) / tau
                } else {
                    f64::NEG_INFINITY
                }
            })
            .collect();
        let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = logits.iter().map(|l| (l - max).exp()).sum();
        loss += max + z.ln() - logits[batch.positives[k]];
        for (j, plan) in row.iter().enumerate() {
            let softmax = (logits[j] - max).exp() / z;
            let target = if j == batch.positives[k] { 1.0 } else { 0.0 };
            // ∂L/∂s = (softmax − target)/(τ·B); s = ½(forward + backward).
            let g = ((softmax - target) / (tau * b) * 0.5) as f32;
            if g != 0.0 && kept[k * n + j] {
                add_plan_grads(
                    &mut grads,
                    texts,
                    batch.anchors[k],
                    batch.candidates[j],
                    plan,
                    g,
                );
            }
        }
    }
    LossGrads {
        loss: loss / b,
        scores,
        grads,
    }
}

/// Adds g·∂(forward + backward)/∂x for one plan between texts `a` and `c`.
fn add_plan_grads(
    grads: &mut [Vec<f32>],
    texts: &[Tokens<'_>],
    a: usize,
    c: usize,
    plan: &crate::score::Rcmd,
    g: f32,
) {
    let (ta, tc) = (texts[a], texts[c]);
    let d = ta.dim();
    let mut axpy = |text: usize, row: usize, scale: f32, v: &[f32]| {
        let dst = &mut grads[text][row * d..(row + 1) * d];
        dst.iter_mut().zip(v).for_each(|(o, &x)| *o += scale * x);
    };
    for (t, link) in plan.a_to_b.iter().enumerate() {
        let scale = g * link.weight;
        axpy(a, t, scale, tc.row(link.partner));
        axpy(c, link.partner, scale, ta.row(t));
    }
    for (u, link) in plan.b_to_a.iter().enumerate() {
        let scale = g * link.weight;
        axpy(c, u, scale, ta.row(link.partner));
        axpy(a, link.partner, scale, tc.row(u));
    }
}

/// The CoSENT loss over pairs with cosines `cos` and gold similarities `gold`, with scale λ
/// (`scale`; 20 in the paper), and its gradient with respect to each cosine. Pairs with equal
/// gold are not compared; with no ordered pair the loss is 0. Panics if the lengths differ.
pub fn cosent(cos: &[f32], gold: &[f64], scale: f32) -> (f64, Vec<f32>) {
    assert_eq!(cos.len(), gold.len());
    let scale = f64::from(scale);
    let ordered: Vec<(usize, usize, f64)> = (0..gold.len())
        .flat_map(|i| (0..gold.len()).map(move |j| (i, j)))
        .filter(|&(i, j)| gold[i] > gold[j])
        .map(|(i, j)| (i, j, scale * (f64::from(cos[j]) - f64::from(cos[i]))))
        .collect();
    // L = log(e^0 + Σ e^t), shifted by the largest exponent.
    let max = ordered.iter().map(|o| o.2).fold(0.0, f64::max);
    let z = (-max).exp() + ordered.iter().map(|o| (o.2 - max).exp()).sum::<f64>();
    let mut grad = vec![0f64; cos.len()];
    for &(i, j, t) in &ordered {
        let w = scale * (t - max).exp() / z;
        grad[j] += w;
        grad[i] -= w;
    }
    (max + z.ln(), grad.into_iter().map(|g| g as f32).collect())
}

/// CoSENT over s_RCMD: graded pair k is texts `pairs[k]`, with gold `gold[k]`. The loss, the
/// pairs' scores and ∂loss/∂(token vectors) per text, through the same sparse plan gradients
/// as [`rcmd_infonce`].
pub fn rcmd_cosent(
    texts: &[Tokens<'_>],
    pairs: &[(usize, usize)],
    gold: &[f64],
    scale: f32,
) -> LossGrads {
    let plans: Vec<crate::score::Rcmd> = pairs
        .par_iter()
        .map(|&(a, b)| rcmd(texts[a], texts[b], Weights::Uniform))
        .collect();
    let scores: Vec<f32> = plans.iter().map(|p| p.score).collect();
    let (loss, grad) = cosent(&scores, gold, scale);
    let mut grads: Vec<Vec<f32>> = texts.iter().map(|t| vec![0.0; t.len() * t.dim()]).collect();
    for ((&(a, b), plan), &g) in pairs.iter().zip(&plans).zip(&grad) {
        if g != 0.0 {
            // s = ½(forward + backward).
            add_plan_grads(&mut grads, texts, a, b, plan, 0.5 * g);
        }
    }
    LossGrads {
        loss,
        scores,
        grads,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random generator for test data.
    fn values(seed: u64, n: usize) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    fn normalised(mut v: Vec<f32>, d: usize) -> Vec<f32> {
        v.chunks_mut(d).for_each(crate::score::cosine::l2_normalize);
        v
    }

    fn setup() -> (Vec<Vec<f32>>, InfoNce, usize) {
        let d = 6;
        let lens = [3, 4, 2, 5, 3];
        let texts = lens
            .iter()
            .enumerate()
            .map(|(i, &l)| normalised(values(i as u64 + 1, l * d), d))
            .collect();
        let batch = InfoNce {
            anchors: vec![0, 1],
            candidates: vec![2, 3, 4, 1],
            positives: vec![0, 1],
            // Anchor 1 is also candidate 3: the trainer always leaves a text's own pairing out
            // (s = 1 sits on RCMD's clamp, where the derivative is one-sided).
            excluded: vec![(1, 0), (1, 3)],
        };
        (texts, batch, d)
    }

    fn loss_of(texts: &[Vec<f32>], batch: &InfoNce, d: usize) -> f64 {
        let tokens: Vec<Tokens<'_>> = texts.iter().map(|t| Tokens::new(t, d)).collect();
        rcmd_infonce(&tokens, batch, 0.05).loss
    }

    #[test]
    fn gradient_matches_central_differences() {
        let (texts, batch, d) = setup();
        let tokens: Vec<Tokens<'_>> = texts.iter().map(|t| Tokens::new(t, d)).collect();
        let out = rcmd_infonce(&tokens, &batch, 0.05);
        assert!(out.loss.is_finite() && out.loss > 0.0);
        let eps = 1e-3f32;
        let mut checked = 0;
        for (t, text) in texts.iter().enumerate() {
            for i in 0..text.len() {
                let mut plus = texts.clone();
                plus[t][i] += eps;
                let mut minus = texts.clone();
                minus[t][i] -= eps;
                let numeric = (loss_of(&plus, &batch, d) - loss_of(&minus, &batch, d))
                    / (2.0 * f64::from(eps));
                let analytic = f64::from(out.grads[t][i]);
                assert!(
                    (numeric - analytic).abs() <= 2e-2 * analytic.abs().max(1.0),
                    "text {t} value {i}: numeric {numeric}, analytic {analytic}"
                );
                checked += 1;
            }
        }
        assert_eq!(checked, (3 + 4 + 2 + 5 + 3) * d);
    }

    #[test]
    fn loss_is_log_n_when_every_candidate_is_identical() {
        // All candidates equal → uniform softmax → loss = ln N, gradient sums cancel.
        let d = 4;
        let v = normalised(values(7, 2 * d), d);
        let texts = [v.clone(), v.clone(), v.clone(), v];
        let tokens: Vec<Tokens<'_>> = texts.iter().map(|t| Tokens::new(t, d)).collect();
        let batch = InfoNce {
            anchors: vec![0],
            candidates: vec![1, 2, 3],
            positives: vec![0],
            excluded: Vec::new(),
        };
        let out = rcmd_infonce(&tokens, &batch, 0.05);
        assert!((out.loss - 3f64.ln()).abs() < 1e-6, "{}", out.loss);
        assert!(out.grads[0].iter().all(|g| g.abs() < 1e-5));
    }

    #[test]
    fn pulling_towards_the_positive_lowers_the_loss() {
        let (texts, batch, d) = setup();
        let tokens: Vec<Tokens<'_>> = texts.iter().map(|t| Tokens::new(t, d)).collect();
        let out = rcmd_infonce(&tokens, &batch, 0.05);
        let stepped: Vec<Vec<f32>> = texts
            .iter()
            .zip(&out.grads)
            .map(|(t, g)| t.iter().zip(g).map(|(x, g)| x - 1e-3 * g).collect())
            .collect();
        assert!(loss_of(&stepped, &batch, d) < out.loss);
    }

    #[test]
    fn rcmd_cosent_gradient_matches_central_differences() {
        let (texts, _, d) = setup();
        let pairs = [(0, 1), (2, 3), (4, 0)];
        let gold = [4.0, 1.0, 2.5];
        let loss = |texts: &[Vec<f32>]| {
            let tokens: Vec<Tokens<'_>> = texts.iter().map(|t| Tokens::new(t, d)).collect();
            rcmd_cosent(&tokens, &pairs, &gold, 20.0).loss
        };
        let tokens: Vec<Tokens<'_>> = texts.iter().map(|t| Tokens::new(t, d)).collect();
        let out = rcmd_cosent(&tokens, &pairs, &gold, 20.0);
        assert!(out.loss > 0.0 && out.scores.len() == 3);
        let eps = 1e-3f32;
        let mut moved = 0;
        for (t, text) in texts.iter().enumerate() {
            for i in 0..text.len() {
                let (mut plus, mut minus) = (texts.clone(), texts.clone());
                plus[t][i] += eps;
                minus[t][i] -= eps;
                let numeric = (loss(&plus) - loss(&minus)) / (2.0 * f64::from(eps));
                let analytic = f64::from(out.grads[t][i]);
                assert!(
                    (numeric - analytic).abs() <= 2e-2 * analytic.abs().max(1.0),
                    "text {t} value {i}: numeric {numeric}, analytic {analytic}"
                );
                moved += usize::from(analytic != 0.0);
            }
        }
        assert!(moved > 0);
    }

    #[test]
    fn cosent_gradient_matches_finite_differences() {
        let gold = [4.8, 0.4, 2.5, 2.5, 3.9];
        let cos = [0.61f32, 0.72, 0.33, 0.35, 0.80];
        let (loss, grad) = cosent(&cos, &gold, 20.0);
        assert!(loss > 0.0);
        let h = 1e-3f32;
        for i in 0..cos.len() {
            let (mut up, mut down) = (cos, cos);
            up[i] += h;
            down[i] -= h;
            let numeric =
                (cosent(&up, &gold, 20.0).0 - cosent(&down, &gold, 20.0).0) / (2.0 * f64::from(h));
            assert!(
                (numeric - f64::from(grad[i])).abs() < 1e-3 * numeric.abs().max(1.0),
                "cos {i}: analytic {} vs numeric {numeric}",
                grad[i]
            );
        }
        // The gradient pushes the best-graded pair's cosine up and the worst one's down.
        assert!(grad[0] < 0.0 && grad[1] > 0.0);
    }

    #[test]
    fn cosent_is_small_when_cosines_follow_the_gold_order_and_zero_without_order() {
        let gold = [5.0, 3.0, 1.0];
        let (right, _) = cosent(&[0.9, 0.5, 0.1], &gold, 20.0);
        let (wrong, _) = cosent(&[0.1, 0.5, 0.9], &gold, 20.0);
        assert!(right < 1e-3 && wrong > 10.0, "{right} {wrong}");
        let (none, grad) = cosent(&[0.3, 0.7], &[2.0, 2.0], 20.0);
        assert_eq!(none, 0.0);
        assert!(grad.iter().all(|&g| g == 0.0));
    }
}
