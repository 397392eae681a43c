//! The duplicate model: logistic regression over a pair's [`PairFeatures`], turning scores
//! into a calibrated P(duplicate). Fitted by Newton's method (IRLS) on standardised features
//! with a small L2 penalty; pure and deterministic. kindred ships coefficients fitted on
//! qqp_bimpm/dev.tsv (`default_calibration.json`, written by `kindred calibrate`); a collection
//! can carry its own.

use serde::{Deserialize, Serialize};

use super::features::PairFeatures;
use crate::error::{Result, UserError};
use crate::score::stats as metrics;

/// L2 penalty on the (standardised) weights; keeps the fit finite on separable data.
const L2: f64 = 1e-3;
/// Newton iterations (the loss is convex; it converges in well under this).
const ITERATIONS: usize = 50;

/// Quality of a calibrator on some labelled pairs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CalibrationMetrics {
    /// Labelled pairs.
    pub pairs: usize,
    /// ROC AUC of the probability.
    pub auc: f64,
    /// Accuracy at the calibrator's threshold.
    pub accuracy: f64,
    /// Mean log loss.
    pub log_loss: f64,
}

/// A fitted duplicate model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibrator {
    /// Feature names, in order ([`PairFeatures::NAMES`]).
    pub features: Vec<String>,
    /// Per-feature mean of the fitting data.
    pub mean: Vec<f64>,
    /// Per-feature standard deviation of the fitting data.
    pub scale: Vec<f64>,
    /// Weights on the standardised features.
    pub weights: Vec<f64>,
    /// Intercept.
    pub bias: f64,
    /// P(duplicate) at or above which a pair is called a duplicate (accuracy-maximising on
    /// the fitting data).
    pub threshold: f64,
    /// Model fingerprint of the vectors it was fitted on.
    pub model: String,
    /// What it was fitted on (a file name, a collection).
    pub fitted_on: String,
    /// Its quality on the fitting data.
    pub fit: CalibrationMetrics,
}

/// The shipped default (all-MiniLM-L6-v2 on qqp_bimpm/dev.tsv).
const DEFAULT_JSON: &str = include_str!("default_calibration.json");

impl Calibrator {
    /// kindred's default calibrator.
    pub fn default_for_minilm() -> Self {
        static DEFAULT: std::sync::OnceLock<Calibrator> = std::sync::OnceLock::new();
        DEFAULT
            .get_or_init(|| {
                serde_json::from_str(DEFAULT_JSON).expect("the shipped calibration parses")
            })
            .clone()
    }

    /// Fits a calibrator on labelled pairs.
    pub fn fit(pairs: &[(PairFeatures, bool)], model: &str, fitted_on: &str) -> Result<Calibrator> {
        let positives = pairs.iter().filter(|(_, l)| *l).count();
        if positives == 0 || positives == pairs.len() {
            return Err(UserError::InvalidArgument {
                name: "pairs",
                reason: format!(
                    "{} pairs with {positives} duplicates; calibration needs both duplicates and non-duplicates",
                    pairs.len()
                ),
            }
            .into());
        }
        let n_feat = PairFeatures::NAMES.len();
        let rows: Vec<[f64; 5]> = pairs.iter().map(|(f, _)| f.to_vec()).collect();
        let n = rows.len() as f64;
        let mean: Vec<f64> = (0..n_feat)
            .map(|j| rows.iter().map(|r| r[j]).sum::<f64>() / n)
            .collect();
        let scale: Vec<f64> = (0..n_feat)
            .map(|j| {
                let var = rows.iter().map(|r| (r[j] - mean[j]).powi(2)).sum::<f64>() / n;
                if var > 1e-24 {
                    var.sqrt()
                } else {
                    1.0
                }
            })
            .collect();
        // Design matrix with a leading 1 for the bias.
        let x: Vec<Vec<f64>> = rows
            .iter()
            .map(|r| {
                std::iter::once(1.0)
                    .chain((0..n_feat).map(|j| (r[j] - mean[j]) / scale[j]))
                    .collect()
            })
            .collect();
        let y: Vec<f64> = pairs.iter().map(|(_, l)| f64::from(u8::from(*l))).collect();
        let beta = newton_logistic(&x, &y);
        let mut c = Calibrator {
            features: PairFeatures::NAMES.iter().map(|s| s.to_string()).collect(),
            mean,
            scale,
            weights: beta[1..].to_vec(),
            bias: beta[0],
            threshold: 0.5,
            model: model.into(),
            fitted_on: fitted_on.into(),
            fit: CalibrationMetrics {
                pairs: 0,
                auc: 0.0,
                accuracy: 0.0,
                log_loss: 0.0,
            },
        };
        let probs: Vec<f64> = pairs.iter().map(|(f, _)| c.probability(f) as f64).collect();
        let labels: Vec<bool> = pairs.iter().map(|(_, l)| *l).collect();
        c.threshold = metrics::best_threshold(&probs, &labels).0;
        c.fit = c.evaluate(pairs);
        Ok(c)
    }

    /// P(duplicate) of a pair.
    pub fn probability(&self, f: &PairFeatures) -> f32 {
        let z = self.bias
            + f.to_vec()
                .iter()
                .enumerate()
                .map(|(j, x)| self.weights[j] * (x - self.mean[j]) / self.scale[j])
                .sum::<f64>();
        sigmoid(z) as f32
    }

    /// AUC, accuracy at [`Calibrator::threshold`] and log loss on labelled pairs.
    pub fn evaluate(&self, pairs: &[(PairFeatures, bool)]) -> CalibrationMetrics {
        let probs: Vec<f64> = pairs
            .iter()
            .map(|(f, _)| self.probability(f) as f64)
            .collect();
        let labels: Vec<bool> = pairs.iter().map(|(_, l)| *l).collect();
        let log_loss = probs
            .iter()
            .zip(&labels)
            .map(|(&p, &l)| {
                let p = p.clamp(1e-12, 1.0 - 1e-12);
                if l {
                    -p.ln()
                } else {
                    -(1.0 - p).ln()
                }
            })
            .sum::<f64>()
            / probs.len().max(1) as f64;
        CalibrationMetrics {
            pairs: pairs.len(),
            auc: metrics::auc(&probs, &labels).unwrap_or(f64::NAN),
            accuracy: metrics::accuracy(&probs, &labels, self.threshold),
            log_loss,
        }
    }
}

fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

/// Maximum-likelihood logistic regression with an L2 penalty (not on the bias), by Newton's
/// method: β ← β + (XᵀWX + λI)⁻¹ (Xᵀ(y − p) − λβ).
fn newton_logistic(x: &[Vec<f64>], y: &[f64]) -> Vec<f64> {
    let k = x[0].len();
    let mut beta = vec![0.0; k];
    for _ in 0..ITERATIONS {
        let mut grad = vec![0.0; k];
        let mut hess = vec![vec![0.0; k]; k];
        for (row, &yi) in x.iter().zip(y) {
            let p = sigmoid(row.iter().zip(&beta).map(|(a, b)| a * b).sum());
            let w = (p * (1.0 - p)).max(1e-12);
            for a in 0..k {
                grad[a] += row[a] * (yi - p);
                for b in 0..k {
                    hess[a][b] += w * row[a] * row[b];
                }
            }
        }
        for a in 1..k {
            grad[a] -= L2 * beta[a];
            hess[a][a] += L2;
        }
        let step = solve(hess, grad);
        let size: f64 = step.iter().map(|s| s.abs()).sum();
        beta.iter_mut().zip(&step).for_each(|(b, s)| *b += s);
        if size < 1e-10 {
            break;
        }
    }
    beta
}

/// Solves A·s = b by Gaussian elimination with partial pivoting (A is small and positive
/// definite here).
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Vec<f64> {
    let n = b.len();
    for col in 0..n {
        let pivot = (col..n)
            .max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))
            .expect("non-empty");
        a.swap(col, pivot);
        b.swap(col, pivot);
        let d = a[col][col];
        if d.abs() < 1e-300 {
            continue;
        }
        let (top, rest) = a.split_at_mut(col + 1);
        let pivot_row = &top[col];
        for (i, row) in rest.iter_mut().enumerate() {
            let f = row[col] / d;
            row.iter_mut()
                .zip(pivot_row)
                .skip(col)
                .for_each(|(x, p)| *x -= f * p);
            b[col + 1 + i] -= f * b[col];
        }
    }
    let mut s = vec![0.0; n];
    for row in (0..n).rev() {
        let rest: f64 = (row + 1..n).map(|c| a[row][c] * s[c]).sum();
        s[row] = if a[row][row].abs() < 1e-300 {
            0.0
        } else {
            (b[row] - rest) / a[row][row]
        };
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(cosine: f32, lexical: f32) -> PairFeatures {
        PairFeatures {
            cosine,
            w2: 1.0 - cosine,
            rcmd_forward: cosine,
            rcmd_backward: cosine * 0.9,
            lexical,
            siamese: None,
        }
    }

    #[test]
    fn recovers_a_known_logistic_model() {
        // Labels drawn from P = sigmoid(12 (cosine - 0.7)) with a fixed generator.
        let mut x: u64 = 42;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        let pairs: Vec<(PairFeatures, bool)> = (0..4000)
            .map(|_| {
                let c = 0.4 + 0.6 * next();
                let p = sigmoid(12.0 * (c - 0.7));
                (pair(c as f32, next() as f32), next() < p)
            })
            .collect();
        let cal = Calibrator::fit(&pairs, "m", "synthetic").unwrap();
        // The probability tracks the generating one.
        for c in [0.5, 0.7, 0.9] {
            let want = sigmoid(12.0 * (c - 0.7));
            let got = cal.probability(&pair(c as f32, 0.5)) as f64;
            assert!((got - want).abs() < 0.06, "c={c}: {got} vs {want}");
        }
        assert!(cal.fit.auc > 0.75, "{:?}", cal.fit);
        assert!((cal.threshold - 0.5).abs() < 0.15, "{}", cal.threshold);
        // Monotone in the informative feature.
        assert!(cal.probability(&pair(0.9, 0.5)) > cal.probability(&pair(0.6, 0.5)));
    }

    #[test]
    fn refuses_one_class() {
        let pairs = vec![(pair(0.9, 0.1), true), (pair(0.8, 0.2), true)];
        let e = Calibrator::fit(&pairs, "m", "x").unwrap_err();
        assert!(
            e.to_string().contains("both duplicates and non-duplicates"),
            "{e}"
        );
    }

    #[test]
    fn separable_data_stays_finite() {
        let pairs = vec![(pair(0.9, 0.1), true), (pair(0.2, 0.2), false)];
        let cal = Calibrator::fit(&pairs, "m", "x").unwrap();
        assert!(cal.weights.iter().all(|w| w.is_finite()));
        assert!(cal.probability(&pair(0.9, 0.1)) > 0.9);
    }

    #[test]
    fn the_default_parses() {
        let c = Calibrator::default_for_minilm();
        assert_eq!(c.features, PairFeatures::NAMES);
        assert_eq!(c.weights.len(), 5);
    }
}
