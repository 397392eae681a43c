//! The learned intent head and the variational-siamese duplicate classifier
//! (papers/variational-siamese-wasserstein-quora.txt §4; design.md §3), trained together on
//! labelled pairs with the encoder frozen.
//!
//! Each text's moment-matched intent (μ₀, σ₀ of its content token vectors) goes through the
//! intent head — μ = W_μ·μ₀ + b_μ, log σ² = W_σ·log σ₀² + b_σ, both starting at the identity, so
//! training starts from the moment-matched intents — and a pair's intents feed an MLP over
//! [(μ₁−μ₂)² + (σ₁−σ₂)², μ₁⊙μ₂] (the per-dimension squared 2-Wasserstein terms, and the
//! agreement of the means), trained with binary cross-entropy on the labels. The features are
//! symmetric in the two questions. The head and the MLP are selected on dev AUC.

use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use super::data::SplitMix64;
use super::transition::{dense_of, scalar};
use super::{encode_texts, TextIndex};
use crate::error::{Result, UserError};
use crate::eval::{metrics, LabelledPair};
use crate::model::heads::{Classifier, IntentHead};
use crate::Encoder;

/// Intent-head and classifier settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntentOptions {
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
            hidden: 128,
            batch_size: 64,
            learning_rate: 1e-3,
            epochs: 10,
            sigma_floor: crate::encoder::heads::SIGMA_FLOOR,
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

/// Trains the intent head and the classifier on `train`, selecting on `dev`. `encoder` is the
/// frozen model (its own intent head and classifier, if any, are replaced).
pub fn train_intent(
    encoder: &Encoder,
    train: &[LabelledPair],
    dev: &[LabelledPair],
    options: &IntentOptions,
    progress: impl FnMut(usize),
) -> Result<IntentReport> {
    let labels_of = |p: &[LabelledPair]| p.iter().filter(|p| p.duplicate).count();
    let dups = labels_of(train);
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
    let mut texts = TextIndex::default();
    train.iter().chain(dev).for_each(|p| texts.add_pair(p));
    let encoded = encode_texts(encoder, &texts, false, progress)?;
    let d = encoder.identity().dim;
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
    let mut net = Siamese {
        mu: identity_linear(d, &device),
        logvar: identity_linear(d, &device),
        hidden: LinearConfig::new(2 * d, options.hidden).init(&device),
        out: LinearConfig::new(options.hidden, 1).init(&device),
        floor,
    };

    let batch_of = |pairs: &[&LabelledPair], device: &Device| {
        let n = pairs.len();
        let rows = |side: fn(&LabelledPair) -> &str, table: &[Vec<f32>]| {
            let data: Vec<f32> = pairs
                .iter()
                .flat_map(|p| table[texts.id(side(p))].iter().copied())
                .collect();
            Tensor::<2>::from_data(TensorData::new(data, [n, d]), device)
        };
        let a = (rows(|p| &p.a, &mu0), rows(|p| &p.a, &logvar0));
        let b = (rows(|p| &p.b, &mu0), rows(|p| &p.b, &logvar0));
        let labels: Vec<f32> = pairs
            .iter()
            .map(|p| f32::from(u8::from(p.duplicate)))
            .collect();
        (
            a,
            b,
            Tensor::<1>::from_data(TensorData::new(labels, [n]), device),
        )
    };
    let dev_refs: Vec<&LabelledPair> = dev.iter().collect();
    let dev_labels: Vec<bool> = dev.iter().map(|p| p.duplicate).collect();
    // Dev metrics with the heads as plain functions (what the encoder will run).
    let evaluate = |intent: &IntentHead, classifier: &Classifier| -> (f64, f64, f64) {
        let learned: Vec<crate::Gaussian> = encoded
            .iter()
            .map(|e| intent.intent(&e.intent, floor))
            .collect();
        let (mut p, mut w2) = (Vec::new(), Vec::new());
        for pair in &dev_refs {
            let (a, b) = (&learned[texts.id(&pair.a)], &learned[texts.id(&pair.b)]);
            p.push(f64::from(classifier.probability(a, b)));
            w2.push(-f64::from(crate::score::w2(a, b)));
        }
        (
            metrics::auc(&p, &dev_labels).unwrap_or(0.5),
            metrics::accuracy(&p, &dev_labels, 0.5),
            metrics::auc(&w2, &dev_labels).unwrap_or(0.5),
        )
    };
    let w2_before = {
        let w2: Vec<f64> = dev_refs
            .iter()
            .map(|p| {
                let (a, b) = (&encoded[texts.id(&p.a)], &encoded[texts.id(&p.b)]);
                -f64::from(crate::score::w2(&a.intent, &b.intent))
            })
            .collect();
        metrics::auc(&w2, &dev_labels).unwrap_or(0.5)
    };

    let started = std::time::Instant::now();
    let mut optim = AdamConfig::new().init();
    let mut rng = SplitMix64(options.seed);
    let mut losses = Vec::new();
    // (intent head, classifier, (dev AUC, dev accuracy, dev −W2 AUC), epoch)
    type Best = (IntentHead, Classifier, (f64, f64, f64), usize);
    let mut best: Option<Best> = None;
    for epoch in 1..=options.epochs {
        let order = rng.permutation(train.len());
        let mut total = 0.0;
        let batches = order.len() / options.batch_size;
        for chunk in order.chunks_exact(options.batch_size) {
            let pairs: Vec<&LabelledPair> = chunk.iter().map(|&i| &train[i]).collect();
            let (a, b, labels) = batch_of(&pairs, &device);
            let logits = net.logits(net.intents(a.0, a.1), net.intents(b.0, b.1));
            let loss = bce(logits, labels);
            total += scalar(&loss)?;
            let grads = GradientsParams::from_grads(loss.backward(), &net);
            net = optim.step(options.learning_rate, net, grads);
        }
        losses.push(total / batches.max(1) as f64);
        let intent = IntentHead {
            mu: dense_of(&net.mu)?,
            logvar: dense_of(&net.logvar)?,
        };
        let classifier = Classifier {
            hidden: dense_of(&net.hidden)?,
            out: dense_of(&net.out)?,
        };
        let metrics = evaluate(&intent, &classifier);
        if best.as_ref().is_none_or(|b| metrics.0 > b.2 .0) {
            best = Some((intent, classifier, metrics, epoch));
        }
    }
    let (intent, classifier, (auc, accuracy, w2_after), best_epoch) =
        best.expect("at least one epoch");
    Ok(IntentReport {
        intent,
        classifier,
        dev_w2_auc_before: w2_before,
        dev_w2_auc_after: w2_after,
        dev_auc: auc,
        dev_accuracy: accuracy,
        best_epoch,
        losses,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// A d→d linear layer starting as the identity.
fn identity_linear(d: usize, device: &Device) -> Linear {
    let mut l = LinearConfig::new(d, d).init(device);
    l.weight = Param::from_tensor(Tensor::<2>::eye(d, device));
    l.bias = Some(Param::from_tensor(Tensor::<1>::zeros([d], device)));
    l
}

#[cfg(test)]
mod tests {
    use super::*;

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
