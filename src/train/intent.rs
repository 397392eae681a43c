//! The learned intent head and the variational-siamese duplicate classifier
//! (papers/variational-siamese-wasserstein-quora.txt §4; design.md §3), trained together on
//! labelled pairs with the encoder frozen.
//!
//! Each text's moment-matched intent (μ₀, σ₀ of its content token vectors, d dimensions) goes
//! through the intent head — μ = W_μ·μ₀ + b_μ, log σ² = W_σ·log σ₀² + b_σ, of a chosen dimension
//! k ≤ d. Training starts from the moment-matched intents: at k = d both maps start as the
//! identity; at k < d the μ map as the projection onto the top-k principal directions of the
//! training texts' μ₀ ([`initial_projection`]) and the log σ² map as means over groups of
//! dimensions ([`initial_averaging`]). A pair's intents feed an MLP over
//! [(μ₁−μ₂)² + (σ₁−σ₂)², μ₁⊙μ₂] (the per-dimension squared 2-Wasserstein terms, and the
//! agreement of the means), trained with binary cross-entropy on the labels. The features are
//! symmetric in the two questions. The head and the MLP are selected on dev AUC.

use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor, TensorData};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::data::SplitMix64;
use super::transition::{dense_of, scalar};
use super::{encode_texts, TextIndex};
use crate::error::{Result, UserError};
use crate::eval::LabelledPair;
use crate::model::heads::{Classifier, Dense, IntentHead};
use crate::score::stats as metrics;
use crate::{Encoded, Encoder};

/// Intent-head and classifier settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntentOptions {
    /// Intent dimension k (None: the model dimension d). At most d.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dim: Option<usize>,
    /// Hidden units of the classifier.
    pub hidden: usize,
    /// Pairs per batch.
    pub batch_size: usize,
    /// Adam learning rate.
    pub learning_rate: f64,
    /// Passes over the pairs.
    pub epochs: usize,
    /// Floor on σ.
    pub sigma_floor: f32,
    /// Seed of initialisation order and batches.
    pub seed: u64,
}

impl Default for IntentOptions {
    fn default() -> Self {
        IntentOptions {
            dim: None,
            hidden: 128,
            batch_size: 64,
            learning_rate: 1e-3,
            epochs: 10,
            sigma_floor: crate::encoder::pooling::SIGMA_FLOOR,
            seed: 42,
        }
    }
}

/// The outcome.
#[derive(Debug, Clone)]
pub struct IntentReport {
    /// The learned intent head (best epoch by dev AUC).
    pub intent: IntentHead,
    /// The learned classifier (same epoch).
    pub classifier: Classifier,
    /// Dev AUC of −W2 between moment-matched intents (before).
    pub dev_w2_auc_before: f64,
    /// Dev AUC of −W2 between learned intents.
    pub dev_w2_auc_after: f64,
    /// Dev AUC of the classifier's probability.
    pub dev_auc: f64,
    /// Dev accuracy of the classifier at P ≥ 0.5.
    pub dev_accuracy: f64,
    /// The epoch kept.
    pub best_epoch: usize,
    /// Mean training loss per epoch.
    pub losses: Vec<f64>,
    /// Seconds spent training (after encoding).
    pub seconds: f64,
}

#[derive(Module, Debug)]
struct Siamese {
    mu: Linear,
    logvar: Linear,
    hidden: Linear,
    out: Linear,
    #[module(skip)]
    floor: f32,
}

impl Siamese {
    /// (μ, σ) of a batch of moment-matched (μ₀, log σ₀²).
    fn intents(&self, mu0: Tensor<2>, logvar0: Tensor<2>) -> (Tensor<2>, Tensor<2>) {
        let sigma = self
            .logvar
            .forward(logvar0)
            .mul_scalar(0.5)
            .exp()
            .clamp_min(self.floor);
        (self.mu.forward(mu0), sigma)
    }

    /// Logits `[B]` of pairs of intents.
    fn logits(&self, a: (Tensor<2>, Tensor<2>), b: (Tensor<2>, Tensor<2>)) -> Tensor<1> {
        let [n, _] = a.0.dims();
        let w2 = (a.0.clone() - b.0.clone()).square() + (a.1 - b.1).square();
        let features = Tensor::cat(vec![w2, a.0 * b.0], 1);
        self.out
            .forward(relu(self.hidden.forward(features)))
            .reshape([n])
    }
}

/// Binary cross-entropy with logits, mean over the batch (stable form).
fn bce(logits: Tensor<1>, labels: Tensor<1>) -> Tensor<1> {
    let softplus = logits.clone().clamp_min(0.0) + logits.clone().abs().neg().exp().log1p();
    (softplus - logits * labels).mean()
}

/// Per text (by [`TextIndex`] id), its moment-matched μ and log σ² rows.
struct Tables<'a> {
    texts: &'a TextIndex,
    mu: &'a [Vec<f32>],
    logvar: &'a [Vec<f32>],
    dim: usize,
}

/// A batch's ((μ, log σ²) of a, (μ, log σ²) of b) and its labels.
type Batch = ((Tensor<2>, Tensor<2>), (Tensor<2>, Tensor<2>), Tensor<1>);

impl Tables<'_> {
    /// The tensors of a batch of pairs.
    fn batch(&self, pairs: &[&LabelledPair], device: &Device) -> Batch {
        let n = pairs.len();
        let rows = |side: fn(&LabelledPair) -> &str, table: &[Vec<f32>]| {
            let data: Vec<f32> = pairs
                .iter()
                .flat_map(|p| table[self.texts.id(side(p))].iter().copied())
                .collect();
            Tensor::<2>::from_data(TensorData::new(data, [n, self.dim]), device)
        };
        let a = (rows(|p| &p.a, self.mu), rows(|p| &p.a, self.logvar));
        let b = (rows(|p| &p.b, self.mu), rows(|p| &p.b, self.logvar));
        let labels: Vec<f32> = pairs
            .iter()
            .map(|p| f32::from(u8::from(p.duplicate)))
            .collect();
        (
            a,
            b,
            Tensor::<1>::from_data(TensorData::new(labels, [n]), device),
        )
    }
}

/// The intent dimension the options ask for, after checking the training pairs have both
/// labels and fill a batch, and the dimension fits the model's `d`.
fn check_inputs(train: &[LabelledPair], options: &IntentOptions, d: usize) -> Result<usize> {
    let dups = train.iter().filter(|p| p.duplicate).count();
    if dups == 0 || dups == train.len() || train.len() < options.batch_size {
        return Err(UserError::InvalidArgument {
            name: "pairs",
            reason: format!(
                "{} pairs ({dups} duplicates); the classifier needs both labels and at least one batch of {}",
                train.len(),
                options.batch_size
            ),
        }
        .into());
    }
    let k = options.dim.unwrap_or(d);
    if k == 0 || k > d {
        return Err(UserError::InvalidArgument {
            name: "--dim",
            reason: format!(
                "{k}; the intent dimension must be between 1 and the model dimension {d}"
            ),
        }
        .into());
    }
    Ok(k)
}

/// Trains the intent head and the classifier on `train`, selecting on `dev`. `encoder` is the
/// frozen model (its own intent head and classifier, if any, are replaced).
pub fn train_intent(
    encoder: &Encoder,
    train: &[LabelledPair],
    dev: &[LabelledPair],
    options: &IntentOptions,
    progress: impl FnMut(usize),
) -> Result<IntentReport> {
    let d = encoder.identity().dim;
    let k = check_inputs(train, options, d)?;
    let mut texts = TextIndex::default();
    train.iter().chain(dev).for_each(|p| texts.add_pair(p));
    let encoded = encode_texts(encoder, &texts, false, progress)?;
    let floor = options.sigma_floor;
    let mu0: Vec<Vec<f32>> = encoded.iter().map(|e| e.intent.mu.clone()).collect();
    let logvar0: Vec<Vec<f32>> = encoded
        .iter()
        .map(|e| {
            e.intent
                .sigma
                .iter()
                .map(|s| 2.0 * s.max(floor).ln())
                .collect()
        })
        .collect();

    let device = encoder.options().device.device()?.autodiff();
    // Start from the moment-matched intents of the training texts (dev texts left out).
    let mut seen = std::collections::HashSet::new();
    let train_mu: Vec<&[f32]> = train
        .iter()
        .flat_map(|p| [texts.id(&p.a), texts.id(&p.b)])
        .filter(|&i| seen.insert(i))
        .map(|i| mu0[i].as_slice())
        .collect();
    let mut net = Siamese {
        mu: linear_of(&initial_projection(&train_mu, k), &device),
        logvar: linear_of(&initial_averaging(d, k), &device),
        hidden: LinearConfig::new(2 * k, options.hidden).init(&device),
        out: LinearConfig::new(options.hidden, 1).init(&device),
        floor,
    };
    let tables = Tables {
        texts: &texts,
        mu: &mu0,
        logvar: &logvar0,
        dim: d,
    };
    let dev = DevSet {
        pairs: dev
            .iter()
            .map(|p| (texts.id(&p.a), texts.id(&p.b)))
            .collect(),
        labels: dev.iter().map(|p| p.duplicate).collect(),
    };
    let w2_before = dev.w2_auc(|i| &encoded[i].intent);

    let started = std::time::Instant::now();
    let mut optim = AdamConfig::new().init();
    let mut rng = SplitMix64(options.seed);
    let mut losses = Vec::new();
    let mut best: Option<(Heads, DevMetrics, usize)> = None;
    for epoch in 1..=options.epochs {
        let order = rng.permutation(train.len());
        let mut total = 0.0;
        let batches = order.len() / options.batch_size;
        for chunk in order.chunks_exact(options.batch_size) {
            let pairs: Vec<&LabelledPair> = chunk.iter().map(|&i| &train[i]).collect();
            let (a, b, labels) = tables.batch(&pairs, &device);
            let logits = net.logits(net.intents(a.0, a.1), net.intents(b.0, b.1));
            let loss = bce(logits, labels);
            total += scalar(&loss)?;
            let grads = GradientsParams::from_grads(loss.backward(), &net);
            net = optim.step(options.learning_rate, net, grads);
        }
        losses.push(total / batches.max(1) as f64);
        let heads = net.heads()?;
        let metrics = dev.evaluate(&encoded, &heads, floor);
        if best.as_ref().is_none_or(|b| metrics.auc > b.1.auc) {
            best = Some((heads, metrics, epoch));
        }
    }
    let ((intent, classifier), metrics, best_epoch) = best.expect("at least one epoch");
    Ok(IntentReport {
        intent,
        classifier,
        dev_w2_auc_before: w2_before,
        dev_w2_auc_after: metrics.w2_auc,
        dev_auc: metrics.auc,
        dev_accuracy: metrics.accuracy,
        best_epoch,
        losses,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The two heads as plain functions (what the encoder will run).
type Heads = (IntentHead, Classifier);

impl Siamese {
    /// The heads as they stand, as plain functions.
    fn heads(&self) -> Result<Heads> {
        let intent = IntentHead {
            mu: dense_of(&self.mu)?,
            logvar: dense_of(&self.logvar)?,
        };
        let classifier = Classifier {
            hidden: dense_of(&self.hidden)?,
            out: dense_of(&self.out)?,
        };
        Ok((intent, classifier))
    }
}

/// The dev pairs, as indexes into the encoded text table, and their labels.
struct DevSet {
    pairs: Vec<(usize, usize)>,
    labels: Vec<bool>,
}

/// What selects an epoch: the classifier's dev AUC and accuracy, and the −W2 AUC of the
/// learned intents.
struct DevMetrics {
    auc: f64,
    accuracy: f64,
    w2_auc: f64,
}

impl DevSet {
    /// The AUC of −W2 between the pairs' intents (`intent(i)`: text `i`'s of the text table).
    fn w2_auc<'g>(&self, intent: impl Fn(usize) -> &'g crate::Gaussian) -> f64 {
        let w2: Vec<f64> = self
            .pairs
            .iter()
            .map(|&(a, b)| -f64::from(crate::score::w2(intent(a), intent(b))))
            .collect();
        metrics::auc(&w2, &self.labels).unwrap_or(0.5)
    }

    /// The heads' dev metrics, run as plain functions on the encoded texts.
    fn evaluate(
        &self,
        encoded: &[Encoded],
        (intent, classifier): &Heads,
        floor: f32,
    ) -> DevMetrics {
        let learned: Vec<crate::Gaussian> = encoded
            .iter()
            .map(|e| intent.intent(&e.intent, floor))
            .collect();
        let p: Vec<f64> = self
            .pairs
            .iter()
            .map(|&(a, b)| f64::from(classifier.probability(&learned[a], &learned[b])))
            .collect();
        DevMetrics {
            auc: metrics::auc(&p, &self.labels).unwrap_or(0.5),
            accuracy: metrics::accuracy(&p, &self.labels, 0.5),
            w2_auc: self.w2_auc(|i| &learned[i]),
        }
    }
}

/// A burn linear layer computing `dense` (burn keeps the weight as `[inputs, outputs]`).
fn linear_of(dense: &Dense, device: &Device) -> Linear {
    let (i, o) = (dense.inputs, dense.outputs);
    let mut l = LinearConfig::new(i, o).init(device);
    let transposed: Vec<f32> = (0..i * o)
        .map(|n| dense.weight[(n % o) * i + n / o])
        .collect();
    l.weight = Param::from_tensor(Tensor::<2>::from_data(
        TensorData::new(transposed, [i, o]),
        device,
    ));
    l.bias = Some(Param::from_tensor(Tensor::<1>::from_data(
        TensorData::new(dense.bias.clone(), [o]),
        device,
    )));
    l
}

/// Where the μ map starts, from the d-dimensional means it will see (`rows`): the identity when
/// k = d; else x ↦ P·(x − m) with P the top-k principal directions of `rows` and m their mean —
/// the k-dimensional linear map that keeps the most of their spread (and of the distances
/// between them).
pub fn initial_projection(rows: &[&[f32]], k: usize) -> Dense {
    let d = rows.first().map_or(0, |r| r.len());
    if k == d || rows.is_empty() {
        return Dense::identity(k);
    }
    let n = rows.len() as f64;
    let mut mean = vec![0.0f64; d];
    for r in rows {
        mean.iter_mut()
            .zip(*r)
            .for_each(|(m, &x)| *m += f64::from(x) / n);
    }
    let p = principal_directions(rows, &mean, k);
    let bias = p
        .iter()
        .map(|row| -row.iter().zip(&mean).map(|(w, m)| w * m).sum::<f64>() as f32)
        .collect();
    Dense {
        inputs: d,
        outputs: k,
        weight: p.iter().flatten().map(|&w| w as f32).collect(),
        bias,
    }
}

/// Where the log σ² map starts: the identity when k = d; else output j is the mean log σ₀² of
/// the j-th of k contiguous groups of input dimensions. A log-variance stays a log-variance (a
/// rotation would add up √d deviations in one coordinate, and its exponential overflows).
pub fn initial_averaging(d: usize, k: usize) -> Dense {
    if k == d {
        return Dense::identity(d);
    }
    let mut weight = vec![0.0f32; k * d];
    for j in 0..k {
        let (from, to) = (j * d / k, ((j + 1) * d / k).max(j * d / k + 1));
        for i in from..to.min(d) {
            weight[j * d + i] = 1.0 / (to.min(d) - from) as f32;
        }
    }
    Dense {
        inputs: d,
        outputs: k,
        weight,
        bias: vec![0.0; k],
    }
}

/// The top-k eigenvectors (unit rows, largest eigenvalue first) of the covariance of `rows`
/// about `mean`, by subspace iteration with Gram–Schmidt and a final Rayleigh-quotient sort.
pub fn principal_directions(rows: &[&[f32]], mean: &[f64], k: usize) -> Vec<Vec<f64>> {
    let d = mean.len();
    let cov = rows
        .par_chunks(1024)
        .map(|chunk| {
            let mut c = vec![0.0f64; d * d];
            for r in chunk {
                let x: Vec<f64> = r.iter().zip(mean).map(|(&v, m)| f64::from(v) - m).collect();
                for (i, xi) in x.iter().enumerate() {
                    c[i * d..(i + 1) * d]
                        .iter_mut()
                        .zip(&x)
                        .for_each(|(c, xj)| *c += xi * xj);
                }
            }
            c
        })
        .reduce(
            || vec![0.0; d * d],
            |mut a, b| {
                a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
                a
            },
        );
    let times = |v: &[f64]| -> Vec<f64> {
        cov.chunks_exact(d)
            .map(|row| row.iter().zip(v).map(|(c, x)| c * x).sum())
            .collect()
    };
    let mut rng = SplitMix64(7);
    let mut q: Vec<Vec<f64>> = (0..k)
        .map(|_| (0..d).map(|_| rng.next_f64() - 0.5).collect())
        .collect();
    orthonormalise(&mut q);
    for _ in 0..200 {
        let mut next: Vec<Vec<f64>> = q.par_iter().map(|v| times(v)).collect();
        orthonormalise(&mut next);
        q = next;
    }
    let rayleigh = |v: &Vec<f64>| times(v).iter().zip(v).map(|(a, b)| a * b).sum::<f64>();
    let mut ranked: Vec<(f64, Vec<f64>)> = q.into_iter().map(|v| (rayleigh(&v), v)).collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
    ranked.into_iter().map(|(_, v)| v).collect()
}

/// Modified Gram–Schmidt in place; a column that vanishes is replaced by a unit axis vector
/// orthogonal to the others (data of rank < k).
fn orthonormalise(q: &mut [Vec<f64>]) {
    for i in 0..q.len() {
        let (done, rest) = q.split_at_mut(i);
        let v = &mut rest[0];
        for _pass in 0..2 {
            for u in done.iter() {
                let dot: f64 = u.iter().zip(v.iter()).map(|(a, b)| a * b).sum();
                v.iter_mut().zip(u).for_each(|(x, u)| *x -= dot * u);
            }
        }
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm > 1e-12 {
            v.iter_mut().for_each(|x| *x /= norm);
        } else {
            let axis = (0..v.len())
                .find(|&a| done.iter().all(|u| u[a].abs() < 0.5))
                .unwrap_or(0);
            v.iter_mut()
                .enumerate()
                .for_each(|(j, x)| *x = f64::from(u8::from(j == axis)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principal_directions_find_the_axes_of_largest_spread() {
        // Spread 9 along e2, 4 along e0, 1 along e1, nothing along e3.
        let mut rng = SplitMix64(3);
        let rows: Vec<Vec<f32>> = (0..2000)
            .map(|_| {
                let mut g = || (rng.next_f64() - 0.5) as f32;
                vec![2.0 * g() + 1.0, g(), 3.0 * g() - 2.0, 5.0]
            })
            .collect();
        let refs: Vec<&[f32]> = rows.iter().map(Vec::as_slice).collect();
        let p = initial_projection(&refs, 2);
        assert_eq!((p.inputs, p.outputs), (4, 2));
        let axis = |r: usize| p.weight[r * 4..(r + 1) * 4].to_vec();
        assert!(
            axis(0)[2].abs() > 0.99,
            "first direction is e2: {:?}",
            axis(0)
        );
        assert!(
            axis(1)[0].abs() > 0.99,
            "second direction is e0: {:?}",
            axis(1)
        );
        // Centred: the mean maps to zero.
        let mean_out = p.forward(&[1.0, 0.0, -2.0, 5.0]);
        assert!(mean_out.iter().all(|v| v.abs() < 0.05), "{mean_out:?}");
        // k = d keeps the moment-matched intents.
        assert_eq!(initial_projection(&refs, 4), Dense::identity(4));
    }

    #[test]
    fn the_log_variance_map_starts_as_group_means() {
        let a = initial_averaging(6, 3);
        assert_eq!(
            a.forward(&[-2.0, -4.0, -6.0, -6.0, 1.0, 3.0]),
            vec![-3.0, -6.0, 2.0]
        );
        let a = initial_averaging(5, 2);
        let out = a.forward(&[-1.0, -1.0, -4.0, -4.0, -4.0]);
        assert_eq!(out, vec![-1.0, -4.0]);
        // Every output is a mean: a constant log-variance stays that constant.
        let b = initial_averaging(384, 100);
        assert!(b
            .forward(&[-5.0; 384])
            .iter()
            .all(|v| (v + 5.0).abs() < 1e-4));
        assert_eq!(initial_averaging(4, 4), Dense::identity(4));
    }

    #[test]
    fn linear_of_computes_the_dense_map() {
        let dense = Dense {
            inputs: 3,
            outputs: 2,
            weight: vec![1.0, 2.0, 3.0, -1.0, 0.5, 0.0],
            bias: vec![0.25, -0.5],
        };
        let device = Device::flex();
        let l = linear_of(&dense, &device);
        let x = Tensor::<2>::from_data(TensorData::new(vec![1.0f32, -2.0, 0.5], [1, 3]), &device);
        let y = l.forward(x).into_data().try_to_vec::<f32>().expect("f32");
        let want = dense.forward(&[1.0, -2.0, 0.5]);
        assert!(
            y.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-6),
            "{y:?} vs {want:?}"
        );
        assert_eq!(dense_of(&l).expect("dense"), dense);
    }

    #[test]
    fn bce_matches_the_formula() {
        let device = Device::flex();
        let logits = Tensor::<1>::from_data(TensorData::new(vec![2.0f32, -1.0], [2]), &device);
        let labels = Tensor::<1>::from_data(TensorData::new(vec![1.0f32, 0.0], [2]), &device);
        let expected = ((1.0 + (-2.0f64).exp()).ln() + (1.0 + (-1.0f64).exp()).ln()) / 2.0;
        let got = scalar(&bce(logits, labels)).expect("scalar");
        assert!((got - expected).abs() < 1e-5, "{got} vs {expected}");
    }
}
