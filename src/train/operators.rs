//! Learns the compositional operators (papers/intersent-compositional-sentence-operations.txt
//! §2; design.md §3; the math in [`crate::model::operators`]) on a frozen encoder's sentence
//! vectors: fusion on WikiSplit (part 1 ⊕ part 2 → the complex sentence), difference on the same
//! rows (complex ⊖ part 2 → part 1, and ⊖ part 1 → part 2) and compression on compression pairs
//! (original → compression).
//!
//! Each operator's correction network is trained with InfoNCE (τ = 0.05) of its output against
//! the target's vector, the other targets of the batch *and every input of the batch* as
//! negatives — so that an operator that answers with one of its own inputs (what arithmetic
//! and identity do) is penalised, as it is a miss in `kindred eval operators`. The correction
//! starts at zero (the operator starts as arithmetic) and the epoch kept is the best by R@1 on
//! rows held out from training, in a pool of every sentence seen; epoch 0, plain arithmetic,
//! competes too, so an operator that does not beat arithmetic is left out.

use std::collections::HashMap;

use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::activation::{log_softmax, relu};
use burn::tensor::{Device, Tensor, TensorData};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::transition::{dense_of, scalar};
use super::{encode_texts, TextIndex};
use crate::error::{Result, UserError};
use crate::eval::operators::{rank_of, scores_of, Compression, RankScores, Split};
use crate::math::SplitMix64;
use crate::model::operators::{apply, Mlp, Operation, Operators};
use crate::types::Precision;
use crate::Encoder;

/// Operator training settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorOptions {
    /// Hidden units of the fusion and difference networks.
    pub hidden: usize,
    /// Hidden units of the compression network (small, to keep only what matters).
    pub compression_hidden: usize,
    /// Examples per batch (in-batch negatives: the batch's other targets and every input).
    pub batch_size: usize,
    /// Adam learning rate.
    pub learning_rate: f64,
    /// Passes over the training rows.
    pub epochs: usize,
    /// Softmax temperature τ of InfoNCE.
    pub temperature: f64,
    /// Share of each file's rows held out to choose the epoch on.
    pub dev_share: f64,
    /// Seed of the dev split and the batch order.
    pub seed: u64,
}

impl Default for OperatorOptions {
    fn default() -> Self {
        OperatorOptions {
            hidden: 256,
            compression_hidden: 384,
            batch_size: 128,
            learning_rate: 3e-4,
            epochs: 10,
            temperature: 0.05,
            dev_share: 0.1,
            seed: 42,
        }
    }
}

/// What training reports as it goes.
#[derive(Debug, Clone, Copy)]
pub enum Progress {
    /// `n` more texts encoded.
    Encoded(usize),
    /// An epoch of `operation` ended, with its mean loss and the dev scores.
    Epoch {
        /// The operation.
        operation: Operation,
        /// 1-based epoch.
        epoch: usize,
        /// Mean training loss.
        loss: f64,
        /// Dev scores after it.
        dev: RankScores,
    },
}

/// One operation's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct OperationReport {
    /// The operation.
    pub operation: Operation,
    /// Training and dev examples.
    pub examples: (usize, usize),
    /// Dev scores of plain arithmetic (identity for compression).
    pub dev_arithmetic: RankScores,
    /// Dev scores of the operator kept (= arithmetic when none beat it).
    pub dev_kept: RankScores,
    /// Epoch of the kept network; 0: none beat arithmetic, the operator is left out.
    pub best_epoch: usize,
    /// Mean training loss per epoch.
    pub losses: Vec<f64>,
}

/// The outcome: the operators and a report per operation.
#[derive(Debug, Clone)]
pub struct OperatorsReport {
    /// The operators learned (those that beat arithmetic on dev).
    pub operators: Operators,
    /// Per operation trained.
    pub operations: Vec<OperationReport>,
    /// Distinct sentences encoded (the dev pool).
    pub pool: usize,
    /// Seconds spent training (after encoding).
    pub seconds: f64,
}

/// One example: input vectors `u` (and `v`), and the target, as ids into the encoded texts.
#[derive(Debug, Clone, Copy)]
struct Example {
    u: usize,
    v: Option<usize>,
    target: usize,
}

#[derive(Module, Debug)]
struct Net {
    hidden: Linear,
    out: Linear,
}

impl Net {
    /// A network whose output is zero (its last layer zeroed): the operator starts as arithmetic.
    fn new(inputs: usize, hidden: usize, d: usize, device: &Device) -> Net {
        let mut out = LinearConfig::new(hidden, d).init(device);
        out.weight = Param::from_tensor(Tensor::<2>::zeros([hidden, d], device));
        out.bias = Some(Param::from_tensor(Tensor::<1>::zeros([d], device)));
        Net {
            hidden: LinearConfig::new(inputs, hidden).init(device),
            out,
        }
    }

    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.out.forward(relu(self.hidden.forward(x)))
    }

    fn mlp(&self) -> Result<Mlp> {
        Ok(Mlp {
            hidden: dense_of(&self.hidden)?,
            out: dense_of(&self.out)?,
        })
    }
}

/// Learns the operators `splits` and `compressions` teach (fusion and difference from splits,
/// compression from compressions; an empty set trains none) on `encoder`'s vectors.
pub fn train_operators(
    encoder: &Encoder,
    splits: &[Split],
    compressions: &[Compression],
    options: &OperatorOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<OperatorsReport> {
    let mut texts = TextIndex::default();
    let sets = example_sets(splits, compressions, options, &mut texts)?;
    let vectors: Vec<Vec<f32>> =
        encode_texts(encoder, &texts, true, |n| progress(Progress::Encoded(n)))?
            .into_iter()
            .map(|e| e.sentence)
            .collect();

    let started = std::time::Instant::now();
    let d = encoder.identity().dim;
    let mut nets = HashMap::new();
    let mut operations = Vec::new();
    for (op, train, dev) in &sets {
        let hidden = match op {
            Operation::Compression => options.compression_hidden,
            _ => options.hidden,
        };
        let (net, report) = train_one(
            encoder, *op, hidden, train, dev, &vectors, d, options, progress,
        )?;
        if let Some(net) = net {
            nets.insert(*op, net);
        }
        operations.push(report);
    }
    let trained_for = encoder
        .identity()
        .clone()
        .with_precision(Precision::Fp32)
        .fingerprint;
    Ok(OperatorsReport {
        operators: Operators { nets, trained_for },
        operations,
        pool: texts.len(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Per operation: its training and dev examples.
type ExampleSets = Vec<(Operation, Vec<Example>, Vec<Example>)>;

/// Training and dev examples of each operation the data teaches, their texts added to
/// `texts`; refused when one has less than a batch to train on.
fn example_sets(
    splits: &[Split],
    compressions: &[Compression],
    options: &OperatorOptions,
    texts: &mut TextIndex,
) -> Result<ExampleSets> {
    let mut rng = SplitMix64(options.seed);
    let (split_train, split_dev) = hold_out(splits.len(), options.dev_share, &mut rng);
    let (comp_train, comp_dev) = hold_out(compressions.len(), options.dev_share, &mut rng);
    let mut sets: ExampleSets = Vec::new();
    if !splits.is_empty() {
        let mut fusion = |rows: &[usize]| -> Vec<Example> {
            rows.iter()
                .map(|&i| Example {
                    u: texts.add(&splits[i].part1),
                    v: Some(texts.add(&splits[i].part2)),
                    target: texts.add(&splits[i].complex),
                })
                .collect()
        };
        let (train, dev) = (fusion(&split_train), fusion(&split_dev));
        let (diff_train, diff_dev) = (differences(&train, true), differences(&dev, false));
        sets.push((Operation::Fusion, train, dev));
        sets.push((Operation::Difference, diff_train, diff_dev));
    }
    if !compressions.is_empty() {
        let mut compression = |rows: &[usize]| -> Vec<Example> {
            rows.iter()
                .map(|&i| Example {
                    u: texts.add(&compressions[i].original),
                    v: None,
                    target: texts.add(&compressions[i].compressed),
                })
                .collect()
        };
        let (train, dev) = (compression(&comp_train), compression(&comp_dev));
        sets.push((Operation::Compression, train, dev));
    }
    // An example whose target is one of its inputs teaches nothing.
    for (_, train, dev) in &mut sets {
        for set in [train, dev] {
            set.retain(|e| e.target != e.u && Some(e.target) != e.v);
        }
    }
    for (op, train, _) in &sets {
        if train.len() < options.batch_size.max(2) {
            return Err(UserError::InvalidArgument {
                name: "operator data",
                reason: format!(
                    "{} {} examples to train on, fewer than one batch of {}; give more rows",
                    train.len(),
                    op.name(),
                    options.batch_size
                ),
            }
            .into());
        }
    }
    Ok(sets)
}

/// The difference examples of fusion examples: complex ⊖ part 2 → part 1 (what is measured)
/// and, with `both`, complex ⊖ part 1 → part 2.
fn differences(fusion: &[Example], both: bool) -> Vec<Example> {
    fusion
        .iter()
        .flat_map(|e| {
            let (p1, p2) = (e.u, e.v.unwrap_or(e.u));
            let first = Example {
                u: e.target,
                v: Some(p2),
                target: p1,
            };
            let second = Example {
                u: e.target,
                v: Some(p1),
                target: p2,
            };
            std::iter::once(first).chain(both.then_some(second))
        })
        .collect()
}

/// Shuffled `0..n` split into training rows and the last `share` of them for dev.
pub(crate) fn hold_out(n: usize, share: f64, rng: &mut SplitMix64) -> (Vec<usize>, Vec<usize>) {
    let mut order = rng.permutation(n);
    let dev = ((n as f64 * share).round() as usize).min(n);
    let dev_rows = order.split_off(n - dev);
    (order, dev_rows)
}

/// Dev scores of `net` (None: arithmetic) on `dev`, ranked among every vector.
fn dev_scores(
    net: Option<&Mlp>,
    op: Operation,
    dev: &[Example],
    vectors: &[Vec<f32>],
) -> RankScores {
    let ranks: Vec<usize> = dev
        .par_iter()
        .map(|e| {
            let q = apply(net, op, &vectors[e.u], e.v.map(|v| vectors[v].as_slice()));
            rank_of(vectors, &q, e.target)
        })
        .collect();
    scores_of(&ranks)
}

fn better(a: &RankScores, b: &RankScores) -> bool {
    (a.r1, a.mrr10) > (b.r1, b.mrr10)
}

/// Trains one operator's network; None when no epoch beat arithmetic on dev.
#[allow(clippy::too_many_arguments)]
fn train_one(
    encoder: &Encoder,
    op: Operation,
    hidden: usize,
    train: &[Example],
    dev: &[Example],
    vectors: &[Vec<f32>],
    d: usize,
    options: &OperatorOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<(Option<Mlp>, OperationReport)> {
    let device = encoder.options().device.device()?.autodiff();
    let mut net = Net::new(op.input_dim(d), hidden, d, &device);
    let arithmetic = dev_scores(None, op, dev, vectors);
    let (mut best, mut best_scores, mut best_epoch) = (None, arithmetic, 0);
    let mut optim = AdamConfig::new().init();
    let mut rng = SplitMix64(options.seed ^ op as u64);
    let mut losses = Vec::new();
    let b = options.batch_size;
    for epoch in 1..=options.epochs {
        let order = rng.permutation(train.len());
        let mut total = 0.0;
        let batches = order.len() / b;
        for chunk in order.chunks_exact(b) {
            let batch: Vec<Example> = chunk.iter().map(|&i| train[i]).collect();
            let loss = batch_loss(&net, op, &batch, vectors, d, options.temperature, &device);
            total += scalar(&loss)?;
            let grads = GradientsParams::from_grads(loss.backward(), &net);
            net = optim.step(options.learning_rate, net, grads);
        }
        let loss = total / batches.max(1) as f64;
        losses.push(loss);
        let mlp = net.mlp()?;
        let scores = dev_scores(Some(&mlp), op, dev, vectors);
        progress(Progress::Epoch {
            operation: op,
            epoch,
            loss,
            dev: scores,
        });
        if better(&scores, &best_scores) {
            (best, best_scores, best_epoch) = (Some(mlp), scores, epoch);
        }
    }
    let report = OperationReport {
        operation: op,
        examples: (train.len(), dev.len()),
        dev_arithmetic: arithmetic,
        dev_kept: best_scores,
        best_epoch,
        losses,
    };
    Ok((best, report))
}

/// InfoNCE of one batch: each output against its target, with the batch's other targets and
/// all its inputs as negatives.
fn batch_loss(
    net: &Net,
    op: Operation,
    batch: &[Example],
    vectors: &[Vec<f32>],
    d: usize,
    temperature: f64,
    device: &Device,
) -> Tensor<1> {
    let b = batch.len();
    let rows = |data: Vec<f32>, width: usize| {
        let n = data.len() / width;
        Tensor::<2>::from_data(TensorData::new(data, [n, width]), device)
    };
    let input = |e: &Example| (vectors[e.u].as_slice(), e.v.map(|v| vectors[v].as_slice()));
    let features: Vec<f32> = batch
        .iter()
        .flat_map(|e| {
            let (u, v) = input(e);
            op.features(u, v)
        })
        .collect();
    let base: Vec<f32> = batch
        .iter()
        .flat_map(|e| {
            let (u, v) = input(e);
            op.arithmetic(u, v)
        })
        .collect();
    let mut candidates: Vec<f32> = batch
        .iter()
        .flat_map(|e| vectors[e.target].iter().copied())
        .collect();
    candidates.extend(batch.iter().flat_map(|e| vectors[e.u].iter().copied()));
    if op.arity() == 2 {
        candidates.extend(
            batch
                .iter()
                .flat_map(|e| vectors[e.v.unwrap_or(e.u)].iter().copied()),
        );
    }
    let out = rows(base, d) + net.forward(rows(features, op.input_dim(d)));
    let norm = out.clone().square().sum_dim(1).sqrt().clamp_min(1e-12);
    let out = out / norm;
    let candidates = rows(candidates, d);
    let k = candidates.dims()[0];
    let logits = out.matmul(candidates.transpose()).div_scalar(temperature);
    let mut mask = vec![0.0f32; b * k];
    (0..b).for_each(|i| mask[i * k + i] = 1.0);
    let picked = (log_softmax(logits, 1) * rows(mask, k)).sum_dim(1);
    picked.reshape([b]).mean().neg()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_out_keeps_every_row_once() {
        let mut rng = SplitMix64(7);
        let (train, dev) = hold_out(10, 0.2, &mut rng);
        assert_eq!((train.len(), dev.len()), (8, 2));
        let mut all: Vec<usize> = train.into_iter().chain(dev).collect();
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn the_loss_prefers_the_target_over_an_input() {
        let device = Device::flex();
        let d = 2;
        // u = e0, target = e1: a zero correction answers u (an input: a high loss); a network
        // whose bias points at the target lowers it.
        let vectors = vec![vec![1.0, 0.0], vec![0.0, 1.0], vec![0.0, 1.0]];
        let batch = [
            Example {
                u: 0,
                v: None,
                target: 1,
            },
            Example {
                u: 0,
                v: None,
                target: 2,
            },
        ];
        let mut net = Net::new(d, 2, d, &device);
        let loss = |net: &Net| {
            let l = batch_loss(
                net,
                Operation::Compression,
                &batch,
                &vectors,
                d,
                0.05,
                &device,
            );
            scalar(&l).unwrap()
        };
        let zero = loss(&net);
        net.out.bias = Some(Param::from_tensor(Tensor::<1>::from_data(
            TensorData::new(vec![-1.0f32, 3.0], [2]),
            &device,
        )));
        let moved = loss(&net);
        assert!(moved < zero, "{moved} !< {zero}");
    }
}
