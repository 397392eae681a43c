//! The sentence transition matrix (papers/sentence-transition-matrix.txt §3; design.md §3):
//! a d×d matrix W, learned on duplicate pairs with the encoder frozen, so that for a batch of
//! pairs (I_i, P_i) the matrix S_ij = cos(W·I_i, W·P_j) has diagonal ≈ 1 and off-diagonal ≈ 0:
//!
//! ```text
//! loss = λ·mean|offdiag(S)| + (1 − λ)·mean|diag(S) − 1|
//! ```
//!
//! W starts at the identity (the untrained model), so the dev cosine AUC it is selected on can
//! only match or beat the encoder's own. Sentence vectors are encoded once; training then runs
//! on those vectors alone — seconds on a CPU.

use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use super::data::SplitMix64;
use super::{encode_texts, TextIndex};
use crate::encoder::host_f32;
use crate::error::{Result, UserError};
use crate::eval::LabelledPair;
use crate::model::heads::{Dense, Transition};
use crate::score::stats as metrics;
use crate::Encoder;

/// Transition-matrix settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransitionOptions {
    /// λ: weight of the off-diagonal term.
    pub lambda: f32,
    /// Duplicate pairs per batch.
    pub batch_size: usize,
    /// Adam learning rate.
    pub learning_rate: f64,
    /// Passes over the duplicate pairs.
    pub epochs: usize,
    /// Seed of the batch order.
    pub seed: u64,
}

impl Default for TransitionOptions {
    fn default() -> Self {
        TransitionOptions {
            lambda: 0.5,
            batch_size: 64,
            learning_rate: 1e-3,
            epochs: 10,
            seed: 42,
        }
    }
}

/// The outcome: the matrix, and dev cosine AUC before and after.
#[derive(Debug, Clone)]
pub struct TransitionReport {
    /// The learned head (the best epoch's by dev AUC; the identity if none beat it).
    pub head: Transition,
    /// Dev cosine AUC of the encoder's own vectors.
    pub dev_auc_before: f64,
    /// Dev cosine AUC through the returned matrix.
    pub dev_auc_after: f64,
    /// The epoch the head comes from (0 = identity).
    pub best_epoch: usize,
    /// Mean training loss per epoch.
    pub losses: Vec<f64>,
    /// Seconds spent training (after encoding).
    pub seconds: f64,
}

#[derive(Module, Debug)]
struct Net {
    w: Linear,
}

/// Learns the transition matrix on `train`'s duplicate pairs, selecting on `dev`'s cosine
/// AUC. `encoder` is the frozen model; its own transition head, if any, is ignored (the new
/// one replaces it). `progress(n)` is called as texts are encoded.
pub fn train_transition(
    encoder: &Encoder,
    train: &[LabelledPair],
    dev: &[LabelledPair],
    options: &TransitionOptions,
    progress: impl FnMut(usize),
) -> Result<TransitionReport> {
    let positives: Vec<&LabelledPair> = train.iter().filter(|p| p.duplicate).collect();
    if positives.len() < options.batch_size.max(2) {
        return Err(UserError::InvalidArgument {
            name: "pairs",
            reason: format!(
                "{} duplicate pairs, fewer than one batch of {}; give more labelled duplicates",
                positives.len(),
                options.batch_size
            ),
        }
        .into());
    }
    let mut texts = TextIndex::default();
    train.iter().chain(dev).for_each(|p| texts.add_pair(p));
    let encoded = encode_texts(encoder, &texts, false, progress)?;
    let raw: Vec<Vec<f32>> = encoded.iter().map(|e| e.sentence.clone()).collect();
    let d = encoder.identity().dim;

    let device = encoder.options().device.device()?.autodiff();
    let mut net = Net {
        w: LinearConfig::new(d, d).with_bias(false).init(&device),
    };
    net.w.weight = Param::from_tensor(Tensor::<2>::eye(d, &device));

    let dev_auc = |head: &Transition| -> f64 {
        let (scores, labels): (Vec<f64>, Vec<bool>) = dev
            .iter()
            .map(|p| {
                let a = head.apply(&raw[texts.id(&p.a)]);
                let b = head.apply(&raw[texts.id(&p.b)]);
                (f64::from(crate::score::dot(&a, &b)), p.duplicate)
            })
            .unzip();
        metrics::auc(&scores, &labels).unwrap_or(0.5)
    };
    let identity = Transition {
        weight: Dense::identity(d),
    };
    let before = dev_auc(&identity);
    let (mut best, mut best_auc, mut best_epoch) = (identity, before, 0);

    let started = std::time::Instant::now();
    let mut optim = AdamConfig::new().init();
    let mut rng = SplitMix64(options.seed);
    let mut losses = Vec::new();
    let b = options.batch_size;
    for epoch in 1..=options.epochs {
        let order = rng.permutation(positives.len());
        let mut total = 0.0;
        let batches = order.len() / b;
        for chunk in order.chunks_exact(b) {
            let stack = |side: fn(&LabelledPair) -> &str| {
                let data: Vec<f32> = chunk
                    .iter()
                    .flat_map(|&i| raw[texts.id(side(positives[i]))].iter().copied())
                    .collect();
                Tensor::<2>::from_data(TensorData::new(data, [b, d]), &device)
            };
            let (i, p) = (stack(|p| &p.a), stack(|p| &p.b));
            let loss = transition_loss(net.w.forward(i), net.w.forward(p), options.lambda, &device);
            total += scalar(&loss)?;
            let grads = GradientsParams::from_grads(loss.backward(), &net);
            net = optim.step(options.learning_rate, net, grads);
        }
        losses.push(total / batches.max(1) as f64);
        let head = Transition {
            weight: dense_of(&net.w)?,
        };
        let auc = dev_auc(&head);
        if auc > best_auc {
            (best, best_auc, best_epoch) = (head, auc, epoch);
        }
    }
    Ok(TransitionReport {
        head: best,
        dev_auc_before: before,
        dev_auc_after: best_auc,
        best_epoch,
        losses,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// λ·mean|offdiag(S)| + (1 − λ)·mean|diag(S) − 1| for S = cos(rows of `i`, rows of `p`).
pub fn transition_loss(i: Tensor<2>, p: Tensor<2>, lambda: f32, device: &Device) -> Tensor<1> {
    let [b, _] = i.dims();
    let unit = |x: Tensor<2>| {
        let norm = x.clone().square().sum_dim(1).sqrt().clamp_min(1e-12);
        x / norm
    };
    let s = unit(i).matmul(unit(p).transpose());
    let eye = Tensor::<2>::eye(b, device);
    let off = (s.clone() * eye.clone().neg().add_scalar(1.0))
        .abs()
        .sum()
        .div_scalar((b * b - b).max(1) as f64);
    let diag = (s * eye)
        .sum_dim(1)
        .reshape([b])
        .sub_scalar(1.0)
        .abs()
        .mean();
    off.mul_scalar(f64::from(lambda)) + diag.mul_scalar(f64::from(1.0 - lambda))
}

/// A burn linear layer ([in, out]) as a row-major [out, in] [`Dense`].
pub(crate) fn dense_of(l: &Linear) -> Result<Dense> {
    let [inputs, outputs] = l.weight.val().dims();
    let w = host_f32(l.weight.val().inner().transpose(), "weights")?;
    let bias = match &l.bias {
        Some(b) => host_f32(b.val().inner(), "bias")?,
        None => vec![0.0; outputs],
    };
    Ok(Dense {
        inputs,
        outputs,
        weight: w,
        bias,
    })
}

/// The value of a one-element tensor.
pub(crate) fn scalar(t: &Tensor<1>) -> Result<f64> {
    let v = host_f32(t.clone().inner(), "the loss")?;
    Ok(f64::from(v[0]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_is_zero_for_orthonormal_paraphrases_and_grows_off_diagonal() {
        let device = Device::flex();
        let eye = Tensor::<2>::eye(3, &device);
        let zero = transition_loss(eye.clone(), eye.clone(), 0.5, &device);
        assert!(scalar(&zero).expect("scalar").abs() < 1e-6);
        let ones = Tensor::<2>::ones([3, 3], &device);
        // Every S entry 1: off-diagonal mean 1, diagonal error 0 → λ.
        let all = transition_loss(ones.clone(), ones, 0.25, &device);
        assert!((scalar(&all).expect("scalar") - 0.25).abs() < 1e-5);
    }
}
