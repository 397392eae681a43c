//! Learns the bag-of-words decoder ([`crate::model::decoder`]; INTERSENT's vectors back to
//! words, design.md §3) on a frozen encoder's sentence vectors: for each training text,
//! `softmax(W v + b)` against the uniform distribution over the text's own vocabulary words
//! (cross-entropy, Adam). The vocabulary is the most frequent words of the training texts (as
//! ROUGE counts words, [`crate::text::plain_words`]); each word's usual place is its mean
//! relative position in them. After every epoch the decoder reads the held-out texts' vectors
//! back, the relative cut that gives the best mean ROUGE-1 is chosen, and the epoch kept is the
//! best by that ROUGE-1.

use std::collections::HashMap;

use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Tensor, TensorData};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::operators::hold_out;
use super::transition::{dense_of, scalar};
use super::{encode_texts, TextIndex};
use crate::error::{Result, UserError};
use crate::eval::rouge::{rouge_words, Rouge};
use crate::math::SplitMix64;
use crate::model::decoder::WordDecoder;
use crate::text::plain_words;
use crate::types::Precision;
use crate::Encoder;

/// Relative cuts tried after each epoch.
pub const CUTS: [f32; 9] = [0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7];

/// Decoder training settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecoderOptions {
    /// Words in the vocabulary at most (the most frequent).
    pub vocabulary: usize,
    /// Times a word must occur in the training texts to be in the vocabulary.
    pub min_count: usize,
    /// Texts per batch.
    pub batch_size: usize,
    /// Adam learning rate.
    pub learning_rate: f64,
    /// Passes over the training texts.
    pub epochs: usize,
    /// Share of the texts held out to choose the epoch and the cut on.
    pub dev_share: f64,
    /// Seed of the dev split and the batch order.
    pub seed: u64,
}

impl Default for DecoderOptions {
    fn default() -> Self {
        DecoderOptions {
            vocabulary: 10_000,
            min_count: 2,
            batch_size: 256,
            learning_rate: 0.02,
            epochs: 12,
            dev_share: 0.05,
            seed: 42,
        }
    }
}

/// What training reports as it goes.
#[derive(Debug, Clone, Copy)]
pub enum Progress {
    /// `n` more texts encoded.
    Encoded(usize),
    /// An epoch ended, with its mean loss and the held-out texts read back at the best cut.
    Epoch {
        /// 1-based epoch.
        epoch: usize,
        /// Mean training loss.
        loss: f64,
        /// ROUGE of the held-out texts read back against themselves.
        dev: Rouge,
    },
}

/// The outcome.
#[derive(Debug, Clone)]
pub struct DecoderReport {
    /// The decoder of the epoch kept.
    pub decoder: WordDecoder,
    /// Training and held-out texts.
    pub texts: (usize, usize),
    /// ROUGE of the held-out texts read back, at the epoch and cut kept.
    pub dev: Rouge,
    /// The epoch kept.
    pub best_epoch: usize,
    /// Mean training loss per epoch.
    pub losses: Vec<f64>,
    /// Seconds spent training (after encoding).
    pub seconds: f64,
}

/// The vocabulary of `texts` (each a word list): the `options.vocabulary` most frequent words
/// occurring at least `options.min_count` times, with each one's mean relative position.
fn vocabulary(texts: &[&[String]], options: &DecoderOptions) -> (Vec<String>, Vec<f32>) {
    let mut seen: HashMap<&str, (usize, f64)> = HashMap::new();
    for words in texts {
        let last = words.len().saturating_sub(1).max(1) as f64;
        for (i, w) in words.iter().enumerate() {
            let place = if words.len() == 1 {
                0.5
            } else {
                i as f64 / last
            };
            let e = seen.entry(w.as_str()).or_default();
            e.0 += 1;
            e.1 += place;
        }
    }
    let mut ranked: Vec<(&str, (usize, f64))> = seen
        .into_iter()
        .filter(|(_, (n, _))| *n >= options.min_count.max(1))
        .collect();
    ranked.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
    ranked.truncate(options.vocabulary);
    ranked
        .into_iter()
        .map(|(w, (n, sum))| (w.to_string(), (sum / n as f64) as f32))
        .unzip()
}

/// Learns the decoder on `texts` (any sentences or questions; repeats count once).
pub fn train_decoder(
    encoder: &Encoder,
    texts: &[String],
    options: &DecoderOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<DecoderReport> {
    let mut index = TextIndex::default();
    texts.iter().for_each(|t| {
        index.add(t);
    });
    let words: Vec<Vec<String>> = index.texts.iter().map(|t| plain_words(t)).collect();
    let mut rng = SplitMix64(options.seed);
    let (train, dev) = hold_out(index.len(), options.dev_share, &mut rng);
    let train_words: Vec<&[String]> = train.iter().map(|&i| words[i].as_slice()).collect();
    let (vocabulary, position) = vocabulary(&train_words, options);
    let ids: HashMap<&str, usize> = vocabulary
        .iter()
        .enumerate()
        .map(|(i, w)| (w.as_str(), i))
        .collect();
    // Each text's distinct vocabulary words; a text with none teaches nothing.
    let targets: Vec<Vec<usize>> = words
        .iter()
        .map(|ws| {
            let mut t: Vec<usize> = ws
                .iter()
                .filter_map(|w| ids.get(w.as_str()).copied())
                .collect();
            t.sort_unstable();
            t.dedup();
            t
        })
        .collect();
    let train: Vec<usize> = train
        .into_iter()
        .filter(|&i| !targets[i].is_empty())
        .collect();
    let dev: Vec<usize> = dev.into_iter().filter(|&i| !words[i].is_empty()).collect();
    if train.len() < options.batch_size.max(2) || dev.is_empty() {
        return Err(UserError::InvalidArgument {
            name: "decoder texts",
            reason: format!(
                "{} texts with words to train on and {} held out; give at least a batch ({}) \
                 and some to hold out",
                train.len(),
                dev.len(),
                options.batch_size
            ),
        }
        .into());
    }
    let vectors: Vec<Vec<f32>> =
        encode_texts(encoder, &index, true, |n| progress(Progress::Encoded(n)))?
            .into_iter()
            .map(|e| e.sentence)
            .collect();

    let started = std::time::Instant::now();
    let d = encoder.identity().dim;
    let trained_for = encoder
        .identity()
        .clone()
        .with_precision(Precision::Fp32)
        .fingerprint;
    let device = encoder.options().device.device()?.autodiff();
    let mut net = Head::new(d, &train, &targets, vocabulary.len(), &device);
    let mut optim = AdamConfig::new().init();
    let (mut best, mut best_dev, mut best_epoch, mut losses) = (None, Rouge::default(), 0, vec![]);
    for epoch in 1..=options.epochs {
        let order = rng.permutation(train.len());
        let mut total = 0.0;
        let batches = order.len() / options.batch_size;
        for chunk in order.chunks_exact(options.batch_size) {
            let batch: Vec<usize> = chunk.iter().map(|&i| train[i]).collect();
            let loss = net.loss(&batch, &vectors, &targets, &device);
            total += scalar(&loss)?;
            let grads = GradientsParams::from_grads(loss.backward(), &net);
            net = optim.step(options.learning_rate, net, grads);
        }
        let loss = total / batches.max(1) as f64;
        losses.push(loss);
        let decoder = WordDecoder {
            words: vocabulary.clone(),
            head: dense_of(&net.words)?,
            position: position.clone(),
            cut: 0.0,
            trained_for: trained_for.clone(),
        };
        let (cut, scores) = best_cut(&decoder, &dev, &vectors, &words);
        progress(Progress::Epoch {
            epoch,
            loss,
            dev: scores,
        });
        if best.is_none() || (scores.rouge1, scores.rouge_l) > (best_dev.rouge1, best_dev.rouge_l) {
            best = Some(WordDecoder { cut, ..decoder });
            (best_dev, best_epoch) = (scores, epoch);
        }
    }
    let decoder = best.ok_or_else(|| UserError::InvalidArgument {
        name: "epochs",
        reason: "0; train at least one epoch".into(),
    })?;
    Ok(DecoderReport {
        decoder,
        texts: (train.len(), dev.len()),
        dev: best_dev,
        best_epoch,
        losses,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The relative cut of [`CUTS`] whose read-backs of `dev` score the best mean ROUGE-1
/// against the texts themselves, and that score.
fn best_cut(
    decoder: &WordDecoder,
    dev: &[usize],
    vectors: &[Vec<f32>],
    words: &[Vec<String>],
) -> (f32, Rouge) {
    let per_text: Vec<Vec<Rouge>> = dev
        .par_iter()
        .map(|&i| {
            let p = decoder.probabilities(&vectors[i]);
            CUTS.iter()
                .map(|&cut| {
                    let said: Vec<String> = decoder
                        .decode_with(&p, cut)
                        .into_iter()
                        .map(|w| w.word)
                        .collect();
                    rouge_words(&said, &words[i])
                })
                .collect()
        })
        .collect();
    CUTS.iter()
        .enumerate()
        .map(|(c, &cut)| {
            let scores: Vec<Rouge> = per_text.iter().map(|r| r[c]).collect();
            (cut, Rouge::mean(&scores))
        })
        .max_by(|a, b| a.1.rouge1.total_cmp(&b.1.rouge1))
        .expect("CUTS is not empty")
}

#[derive(Module, Debug)]
struct Head {
    words: Linear,
}

impl Head {
    /// A head whose bias starts at each word's log share of the training texts it occurs in
    /// (so an untrained head says the common words), its weights small and random.
    fn new(d: usize, train: &[usize], targets: &[Vec<usize>], v: usize, device: &Device) -> Head {
        let mut df = vec![1.0f32; v];
        for &i in train {
            targets[i].iter().for_each(|&w| df[w] += 1.0);
        }
        let total: f32 = df.iter().sum();
        let bias: Vec<f32> = df.iter().map(|c| (c / total).ln()).collect();
        let mut words = LinearConfig::new(d, v).init(device);
        words.bias = Some(Param::from_tensor(Tensor::<1>::from_data(
            TensorData::new(bias, [v]),
            device,
        )));
        Head { words }
    }

    /// Cross-entropy of the head's distribution for each text of `batch` against the uniform
    /// distribution over its words.
    fn loss(
        &self,
        batch: &[usize],
        vectors: &[Vec<f32>],
        targets: &[Vec<usize>],
        device: &Device,
    ) -> Tensor<1> {
        let (b, d) = (batch.len(), vectors[batch[0]].len());
        let v = self.words.weight.val().dims()[1];
        let x: Vec<f32> = batch
            .iter()
            .flat_map(|&i| vectors[i].iter().copied())
            .collect();
        let mut target = vec![0.0f32; b * v];
        for (row, &i) in batch.iter().enumerate() {
            let share = 1.0 / targets[i].len() as f32;
            targets[i].iter().for_each(|&w| target[row * v + w] = share);
        }
        let x = Tensor::<2>::from_data(TensorData::new(x, [b, d]), device);
        let target = Tensor::<2>::from_data(TensorData::new(target, [b, v]), device);
        let logp = log_softmax(self.words.forward(x), 1);
        (logp * target).sum_dim(1).reshape([b]).mean().neg()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vocabulary_keeps_frequent_words_with_their_usual_place() {
        let texts: Vec<Vec<String>> = ["how do i reset", "how do i pay", "reset how"]
            .iter()
            .map(|t| plain_words(t))
            .collect();
        let refs: Vec<&[String]> = texts.iter().map(Vec::as_slice).collect();
        let options = DecoderOptions {
            vocabulary: 3,
            ..DecoderOptions::default()
        };
        let (words, position) = vocabulary(&refs, &options);
        // how ×3, do ×2, i ×2, reset ×2; "pay" once is out; ties by word.
        assert_eq!(words, ["how", "do", "i"]);
        // "how": first twice (0) and last once (1) → 1/3.
        assert!((position[0] - 1.0 / 3.0).abs() < 1e-6, "{position:?}");
        assert!((position[1] - 1.0 / 3.0).abs() < 1e-6, "{position:?}");
    }

    #[test]
    fn the_loss_falls_when_the_head_points_at_the_words() {
        let device = Device::flex();
        let vectors = vec![vec![1.0, 0.0], vec![0.0, 1.0]];
        let targets = vec![vec![0], vec![1, 2]];
        let mut head = Head::new(2, &[0, 1], &targets, 3, &device);
        let before = scalar(&head.loss(&[0, 1], &vectors, &targets, &device)).unwrap();
        // Burn's weight is [inputs, outputs]: e0 → word 0, e1 → words 1 and 2.
        head.words.weight = Param::from_tensor(Tensor::<2>::from_data(
            TensorData::new(vec![8.0f32, -8.0, -8.0, -8.0, 8.0, 8.0], [2, 3]),
            &device,
        ));
        let after = scalar(&head.loss(&[0, 1], &vectors, &targets, &device)).unwrap();
        assert!(after < before, "{after} !< {before}");
    }
}
