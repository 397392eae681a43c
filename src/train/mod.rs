//! Training in burn (design.md §3): CLRCMD fine-tuning of the encoder ([`clrcmd`]), the
//! sentence transition matrix ([`transition`]), and the learned intent head with the
//! variational-siamese classifier ([`intent`]); blending a tuned encoder back toward its base
//! ([`blend`]); the phrase aligner's small models, fitted on iSTS gold alignments
//! ([`aligner`]); adapting to a collection without labels, from its documents' context
//! ([`context`]; the whole run, from the documents to the record, in [`adapt`]), and choosing
//! its search defaults the same way ([`tune`]); the compositional operators ([`operators`]) and
//! the bag-of-words decoder that reads vectors back as words ([`decoder`]). Owns training
//! data handling ([`data`]), the
//! sparse RCMD InfoNCE objective ([`loss`], pure) and writing trained model directories.
//!
//! The supervised trainers read labelled pairs in the QQP layout (`label⇥q1⇥q2[⇥id]`) — the data
//! files, or the verdicts the admin UI's duplicate review exports — and write a model
//! directory like any other: `config.json`, `tokenizer.json`, `model.safetensors`, the heads
//! it carries in `kindred-heads.safetensors`, and `kindred-model.json` saying what it is and
//! how it was trained. Its fingerprint covers weights and heads, so a store refuses vectors
//! from a different training run.

pub mod adapt;
pub mod aligner;
pub mod blend;
pub mod chunker;
pub mod clrcmd;
pub mod context;
pub mod data;
pub mod decoder;
pub mod intent;
pub mod loss;
pub mod operators;
pub mod record;
pub mod transition;
pub mod tune;

use std::collections::HashMap;
use std::path::Path;

use serde::Serialize;

use crate::encoder::{weights, Bert};
use crate::error::{io_err, Result, UserError};
use crate::eval::{score_pairs, LabelledPair, ScoredPair};
use crate::model::decoder::DECODER_FILE;
use crate::model::heads::Heads;
use crate::model::operators::OPERATORS_FILE;
use crate::model::{ModelDir, IDENTITY_FILE};
use crate::score::stats as metrics;
use crate::{Encoded, Encoder};

/// How a model directory was made, recorded in its `kindred-model.json`.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "objective", rename_all = "snake_case")]
pub enum TrainedBy {
    /// CLRCMD fine-tuning of the encoder.
    Clrcmd {
        /// Steps trained.
        steps: usize,
        /// Dev AUC of s_RCMD of the saved weights.
        dev_auc: Option<f64>,
        /// The settings.
        options: clrcmd::ClrcmdOptions,
    },
    /// A weight-space blend of a base and the mean of tuned encoders ([`blend`]).
    Blend {
        /// Weight of the tuned models' mean (0: the base, 1: their mean).
        alpha: f32,
        /// The tuned models (more than one: a model soup).
        tuned: Vec<crate::model::ModelIdentity>,
    },
    /// A head trained on a frozen encoder.
    Head {
        /// Which head.
        head: &'static str,
        /// Dev metric name and value of the saved head.
        dev: Option<(String, f64)>,
        /// The settings, as JSON.
        options: serde_json::Value,
    },
}

/// AUC of s_RCMD over labelled pairs (None-safe: 0.5 when one class is missing).
pub fn pair_auc(encoder: &Encoder, pairs: &[LabelledPair]) -> Result<f64> {
    let features = score_pairs(encoder, pairs, None, |_| {})?;
    let scores: Vec<f64> = features
        .iter()
        .map(|f| 0.5 * f64::from(f.rcmd_forward + f.rcmd_backward))
        .collect();
    let labels: Vec<bool> = pairs.iter().map(|p| p.duplicate).collect();
    Ok(metrics::auc(&scores, &labels).unwrap_or(0.5))
}

/// Refuses `path` (given by `flag`) when its name says it is a test split: kindred never
/// trains on test data by accident.
fn refuse_test_split(path: &std::path::Path, flag: &'static str) -> Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().to_lowercase());
    if name
        .as_deref()
        .is_some_and(|n| n.starts_with("test") || n.contains("_test") || n.contains("-test"))
    {
        return Err(UserError::InvalidArgument {
            name: flag,
            reason: format!(
                "{} looks like a test split; training on test data would make every \
                 evaluation meaningless. Train on dev/train files (or rename the file if it \
                 is not a test split)",
                path.display()
            ),
        }
        .into());
    }
    Ok(())
}

/// Reads and concatenates pair files, refusing any whose path names a test split. STS-B and
/// SICK files are read too, their graded pairs labelled by
/// [`crate::eval::read_graded_as_labelled`].
pub fn read_training_pairs(paths: &[std::path::PathBuf]) -> Result<Vec<LabelledPair>> {
    let mut pairs = Vec::new();
    for path in paths {
        refuse_test_split(path, "--pairs")?;
        if crate::eval::is_graded_file(path)? {
            pairs.extend(crate::eval::read_graded_as_labelled(path)?);
        } else {
            pairs.extend(crate::eval::read_pairs(path)?);
        }
    }
    Ok(pairs)
}

/// Reads and concatenates graded files (STS-B, SICK) with their gold scores, for CLRCMD's
/// CoSENT term; refuses test splits and files that are not graded.
pub fn read_graded_training(paths: &[std::path::PathBuf]) -> Result<Vec<ScoredPair>> {
    let mut pairs = Vec::new();
    for path in paths {
        refuse_test_split(path, "--graded")?;
        if !crate::eval::is_graded_file(path)? {
            return Err(UserError::InvalidArgument {
                name: "--graded",
                reason: format!(
                    "{} is not an STS-B or SICK file (score in column 5 and sentences in 6 and 7, \
                     or a SICK header); labelled 0/1 pairs go to --pairs",
                    path.display()
                ),
            }
            .into());
        }
        pairs.extend(crate::eval::read_scored_pairs(path)?);
    }
    Ok(pairs)
}

/// Writes a model directory at `out`: `base`'s config and tokenizer files, `bert`'s weights
/// (or `base`'s, copied, when `bert` is None), `heads`, and `kindred-model.json`. Weights and
/// heads are written before the identity file, so a reader never sees a new identity over old
/// tensors.
pub fn write_model_dir(
    base: &ModelDir,
    out: &Path,
    bert: Option<&Bert>,
    heads: Option<&Heads>,
    by: &TrainedBy,
) -> Result<()> {
    std::fs::create_dir_all(out).map_err(io_err(format!("creating {}", out.display())))?;
    let same_dir = base.path.canonicalize().ok() == out.canonicalize().ok();
    if !same_dir {
        for name in [
            "config.json",
            "tokenizer.json",
            "sentence_bert_config.json",
            "tokenizer_config.json",
            "special_tokens_map.json",
            "vocab.txt",
        ] {
            let from = base.path.join(name);
            if from.is_file() {
                std::fs::copy(&from, out.join(name))
                    .map_err(io_err(format!("copying {}", from.display())))?;
            }
        }
    }
    let weights_path = out.join("model.safetensors");
    match bert {
        Some(bert) => {
            let tmp = out.join("model.safetensors.tmp");
            weights::save(bert, &tmp)?;
            std::fs::rename(&tmp, &weights_path)
                .map_err(io_err(format!("renaming {}", weights_path.display())))?;
        }
        None if !same_dir => {
            std::fs::copy(base.weights_path(), &weights_path)
                .map_err(io_err(format!("copying {}", base.weights_path().display())))?;
        }
        None => {}
    }
    // Unchanged vectors: what reads them (operators, decoder) still fits and comes along; a
    // trainer that writes one of them writes it after this.
    if !same_dir && bert.is_none() && heads.is_none() {
        for name in [OPERATORS_FILE, DECODER_FILE] {
            let from = base.path.join(name);
            if from.is_file() {
                std::fs::copy(&from, out.join(name))
                    .map_err(io_err(format!("copying {}", from.display())))?;
            }
        }
    }
    let base_heads = Heads::load(&base.path, base.config.hidden_size)?;
    let heads = heads.unwrap_or(&base_heads);
    heads.save(out)?;
    let base_identity = base.identity()?;
    let id = out
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "trained".into());
    let identity = serde_json::json!({
        "id": id,
        "source": format!("trained from {}", base_identity.id),
        "base": base_identity,
        "heads": heads.names(),
        "trained_by": by,
    });
    let path = out.join(IDENTITY_FILE);
    let tmp = out.join(format!("{IDENTITY_FILE}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec_pretty(&identity).expect("json"))
        .map_err(io_err(format!("writing {}", tmp.display())))?;
    std::fs::rename(&tmp, &path).map_err(io_err(format!("renaming {}", path.display())))
}

/// The distinct texts of a set of pairs, each with a dense id.
#[derive(Debug, Clone, Default)]
pub(crate) struct TextIndex {
    texts: Vec<String>,
    index: HashMap<String, usize>,
}

impl TextIndex {
    /// Adds both sides of a pair.
    pub(crate) fn add_pair(&mut self, p: &LabelledPair) {
        self.add(&p.a);
        self.add(&p.b);
    }

    /// Adds a text (once); its id.
    pub(crate) fn add(&mut self, t: &str) -> usize {
        if let Some(&id) = self.index.get(t) {
            return id;
        }
        self.index.insert(t.to_string(), self.texts.len());
        self.texts.push(t.to_string());
        self.texts.len() - 1
    }

    /// Texts added.
    pub(crate) fn len(&self) -> usize {
        self.texts.len()
    }

    /// The id of a text added before. Panics otherwise.
    pub(crate) fn id(&self, t: &str) -> usize {
        self.index[t]
    }
}

/// Encodes every text of `texts` (in id order), with or without the model's learned heads.
pub(crate) fn encode_texts(
    encoder: &Encoder,
    texts: &TextIndex,
    with_heads: bool,
    progress: impl FnMut(usize),
) -> Result<Vec<Encoded>> {
    if with_heads {
        encoder.encode_with_progress(&texts.texts, progress)
    } else {
        encoder.encode_without_heads(&texts.texts, progress)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_splits_are_refused_and_graded_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let line = "g\tf\t2012\t1\t4.500\tA plane takes off.\tAn airplane takes off.\n";
        for name in ["sts-test.csv", "SICK_test_annotated.txt", "test.tsv"] {
            let p = dir.path().join(name);
            std::fs::write(&p, line).unwrap();
            let e = read_training_pairs(&[p]).unwrap_err().to_string();
            assert!(e.contains("test split"), "{name}: {e}");
        }
        let sts = dir.path().join("sts-train.csv");
        std::fs::write(&sts, line).unwrap();
        let qqp = dir.path().join("dev.tsv");
        std::fs::write(&qqp, "0\ta\tb\n").unwrap();
        let pairs = read_training_pairs(&[qqp.clone(), sts.clone()]).unwrap();
        assert_eq!(pairs.len(), 2);
        assert!(!pairs[0].duplicate && pairs[1].duplicate);
        assert_eq!(pairs[1].b, "An airplane takes off.");

        // --graded keeps the gold score, and refuses test splits and 0/1-labelled files.
        let graded = read_graded_training(std::slice::from_ref(&sts)).unwrap();
        assert_eq!(graded.len(), 1);
        assert_eq!(graded[0].gold, 4.5);
        let e = read_graded_training(&[qqp]).unwrap_err().to_string();
        assert!(e.contains("--graded") && e.contains("--pairs"), "{e}");
        let test = dir.path().join("sts-test.csv");
        let e = read_graded_training(&[test]).unwrap_err().to_string();
        assert!(e.contains("--graded") && e.contains("test split"), "{e}");
    }
}
