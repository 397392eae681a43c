//! Reads a sentence vector back as words (INTERSENT's "vectors back to words", design.md §3):
//! a bag-of-words head over a word vocabulary,
//!
//! ```text
//! p(w | v) = softmax(W v + b)_w        W: [V, d], v a unit sentence vector
//! ```
//!
//! trained (`kindred train decoder`) so that a sentence's vector puts its mass on the
//! sentence's own words. Decoding keeps the words whose probability reaches `cut` times the
//! most probable word's (at most [`MAX_WORDS`]) and says them in the order such words usually
//! take in a sentence (each word's mean relative position in the training sentences), so any
//! vector — a query's, a fusion, a difference — reads as a short string of words.
//!
//! Owns its file (`kindred-decoder.safetensors` in a model directory) and its math, which is
//! pure. Like the operators it reads vectors without making them, so it changes no stored
//! vector and no fingerprint; it records the fingerprint of the vectors it was trained on
//! (`trained_for`) and a model whose vectors differ loads without it, with a warning.
//!
//! | tensor | shape |
//! |---|---|
//! | `words.weight` / `.bias` | `[V, d]` / `[V]` |
//! | `words.position` | `[V]` |
//!
//! Metadata: `trained_for`, `cut`, and `vocabulary` (the V words, a JSON array).

use std::collections::HashMap;
use std::path::Path;

use safetensors::SafeTensors;
use serde::{Deserialize, Serialize};

use super::heads::{dense_tensors, le_f32s, read_dense, serialize_f32, write_atomically, Dense};
use crate::error::{io_err, Result, UserError};

/// File name of the decoder inside a model directory.
pub const DECODER_FILE: &str = "kindred-decoder.safetensors";

/// Words a decoding says at most.
pub const MAX_WORDS: usize = 24;

/// One decoded word.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecodedWord {
    /// The word (lower case, as ROUGE counts words).
    pub word: String,
    /// Its probability under the head.
    pub probability: f32,
}

/// The bag-of-words head and its vocabulary.
#[derive(Debug, Clone, PartialEq)]
pub struct WordDecoder {
    /// The vocabulary, in row order of `head`.
    pub words: Vec<String>,
    /// `d → V` logits.
    pub head: Dense,
    /// Each word's mean relative position (0 first … 1 last) in the training sentences.
    pub position: Vec<f32>,
    /// Words kept: those with probability at least `cut` × the most probable one's.
    pub cut: f32,
    /// Fingerprint (fp32) of the model whose vectors it was trained on.
    pub trained_for: String,
}

impl WordDecoder {
    /// p(w | v) over the vocabulary.
    pub fn probabilities(&self, v: &[f32]) -> Vec<f32> {
        let mut logits = self.head.forward(v);
        softmax(&mut logits);
        logits
    }

    /// The words `v` means, said in their usual order.
    pub fn decode(&self, v: &[f32]) -> Vec<DecodedWord> {
        self.decode_with(&self.probabilities(v), self.cut)
    }

    /// The words `v` means, in their usual order, without their probabilities.
    pub fn words(&self, v: &[f32]) -> Vec<String> {
        self.decode(v).into_iter().map(|w| w.word).collect()
    }

    /// The words kept from `probabilities` at relative cut `cut`, in their usual order.
    pub fn decode_with(&self, probabilities: &[f32], cut: f32) -> Vec<DecodedWord> {
        let mut order: Vec<usize> = (0..probabilities.len()).collect();
        order.sort_by(|&a, &b| probabilities[b].total_cmp(&probabilities[a]));
        let top = order.first().map_or(0.0, |&i| probabilities[i]);
        order.truncate(MAX_WORDS);
        order.retain(|&i| probabilities[i] >= cut * top);
        order.sort_by(|&a, &b| self.position[a].total_cmp(&self.position[b]));
        order
            .into_iter()
            .map(|i| DecodedWord {
                word: self.words[i].clone(),
                probability: probabilities[i],
            })
            .collect()
    }

    /// Checks the shapes against dimension `d`.
    pub fn validate(&self, d: usize) -> std::result::Result<(), String> {
        self.head.check("words")?;
        let v = self.words.len();
        if self.head.inputs != d || self.head.outputs != v || self.position.len() != v {
            return Err(format!(
                "the head takes {} inputs for {} words ({} positions); the model's vectors have \
                 {d} dimensions and the vocabulary {v} words",
                self.head.inputs,
                self.head.outputs,
                self.position.len()
            ));
        }
        if !(0.0..=1.0).contains(&self.cut) {
            return Err(format!("cut {} is not between 0 and 1", self.cut));
        }
        Ok(())
    }

    /// Loads `dir`'s decoder file; no file means no decoder. `d` is the model dimension.
    pub fn load(dir: &Path, d: usize) -> Result<Option<WordDecoder>> {
        let path = dir.join(DECODER_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(format!("reading {}", path.display()))(e)),
        };
        let parsed = parse(&bytes, d).map_err(|reason| UserError::InvalidModelDir {
            path: dir.to_path_buf(),
            reason: format!(
                "{DECODER_FILE}: {reason}; train it again with `kindred train decoder`"
            ),
        })?;
        Ok(Some(parsed))
    }

    /// [`WordDecoder::load`], keeping it only when trained for vectors of `fingerprint` (the
    /// model's fp32 identity); one trained for other vectors is left out with a warning.
    pub fn load_for(dir: &Path, d: usize, fingerprint: &str) -> Result<Option<WordDecoder>> {
        let Some(decoder) = WordDecoder::load(dir, d)? else {
            return Ok(None);
        };
        if decoder.trained_for != fingerprint {
            tracing::warn!(trained_for = %decoder.trained_for, model = %fingerprint,
                "the model's decoder was trained for other vectors (its weights or heads \
                 changed since); it is off — train it again with `kindred train decoder`");
            return Ok(None);
        }
        Ok(Some(decoder))
    }

    /// Writes the decoder file into `dir` (atomically).
    pub fn save(&self, dir: &Path) -> Result<()> {
        let mut tensors = dense_tensors("words", &self.head).to_vec();
        tensors.push((
            "words.position".into(),
            vec![self.position.len()],
            self.position.iter().flat_map(|p| p.to_le_bytes()).collect(),
        ));
        let vocabulary = serde_json::to_string(&self.words).expect("strings serialise");
        let meta = HashMap::from([
            ("trained_for".to_string(), self.trained_for.clone()),
            ("cut".to_string(), self.cut.to_string()),
            ("vocabulary".to_string(), vocabulary),
        ]);
        write_atomically(dir, DECODER_FILE, &serialize_f32(&tensors, Some(meta))?)
    }
}

fn parse(bytes: &[u8], d: usize) -> std::result::Result<WordDecoder, String> {
    let (_, meta) = SafeTensors::read_metadata(bytes).map_err(|e| e.to_string())?;
    let meta = meta.metadata().clone().unwrap_or_default();
    let field = |name: &str| {
        meta.get(name)
            .cloned()
            .ok_or_else(|| format!("no {name} in its metadata"))
    };
    let trained_for = field("trained_for")?;
    let cut: f32 = field("cut")?
        .parse()
        .map_err(|e| format!("cut is not a number: {e}"))?;
    let words: Vec<String> = serde_json::from_str(&field("vocabulary")?)
        .map_err(|e| format!("the vocabulary is not a JSON array of words: {e}"))?;
    let st = SafeTensors::deserialize(bytes).map_err(|e| e.to_string())?;
    let head = read_dense(&st, "words")?.ok_or("no words.weight tensor")?;
    let position = st
        .tensor("words.position")
        .map_err(|_| "no words.position tensor".to_string())?;
    let decoder = WordDecoder {
        words,
        head,
        position: le_f32s(position.data()),
        cut,
        trained_for,
    };
    decoder.validate(d)?;
    Ok(decoder)
}

/// Softmax in place (max-shifted).
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    x.iter_mut().for_each(|v| *v /= sum);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoder() -> WordDecoder {
        // Three words over 2-d vectors: "reset" along e0, "password" along e1, "how" on both.
        WordDecoder {
            words: vec!["password".into(), "reset".into(), "how".into()],
            head: Dense {
                inputs: 2,
                outputs: 3,
                weight: vec![0.0, 4.0, 4.0, 0.0, 2.0, 2.0],
                bias: vec![0.0; 3],
            },
            position: vec![0.9, 0.5, 0.0],
            cut: 0.5,
            trained_for: "fp".into(),
        }
    }

    #[test]
    fn decoding_keeps_the_probable_words_in_their_usual_order() {
        let d = decoder();
        let s = std::f32::consts::FRAC_1_SQRT_2;
        let both: Vec<String> = d.decode(&[s, s]).into_iter().map(|w| w.word).collect();
        assert_eq!(both, ["how", "reset", "password"]);
        let reset: Vec<String> = d.decode(&[1.0, 0.0]).into_iter().map(|w| w.word).collect();
        assert_eq!(reset, ["reset"]);
        let p = d.probabilities(&[1.0, 0.0]);
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn the_file_round_trips_and_a_misfit_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = decoder();
        d.save(dir.path()).unwrap();
        assert_eq!(WordDecoder::load(dir.path(), 2).unwrap(), Some(d.clone()));
        assert!(WordDecoder::load_for(dir.path(), 2, "other")
            .unwrap()
            .is_none());
        let e = WordDecoder::load(dir.path(), 3).unwrap_err().to_string();
        assert!(
            e.contains("3 dimensions") && e.contains("train decoder"),
            "{e}"
        );
        let empty = tempfile::tempdir().unwrap();
        assert!(WordDecoder::load(empty.path(), 2).unwrap().is_none());
    }
}
