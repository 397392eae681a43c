//! The record an adapted model carries ([`RECORD_FILE`]): what a `train context` or `adapt`
//! run learned from and how ([`ContextRecord`]), or what a soup averaged ([`BlendRecord`]);
//! typed and versioned, so that what `tune` reads back (the grader) is checked when it is
//! read. Pure data and its file; no training here.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::context::{GeneralOptions, HarvestOptions};
use crate::error::{io_err, Result};
use crate::model::ModelIdentity;

/// The file an adapted model directory has beside `kindred-model.json`: what makes it a
/// finished adapted model.
pub const RECORD_FILE: &str = "kindred-context.json";

/// The record format this build writes; records without a version (0) read the same.
pub const RECORD_VERSION: u32 = 1;

/// What a `train context` run learned from and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextRecord {
    /// The format ([`RECORD_VERSION`]; 0: written before records had one).
    #[serde(default)]
    pub version: u32,
    /// The collection whose documents and context it learned from.
    pub collection: String,
    /// Metadata keys read as context beside each document's context texts.
    pub context_fields: Vec<String>,
    /// The model it started from.
    pub base: ModelIdentity,
    /// The general pairs whose order it kept (`--general`), if any.
    pub general: Option<GeneralRecord>,
    /// Where the model was written.
    pub out: PathBuf,
    /// What was trained, and on what.
    #[serde(flatten)]
    pub trained: Trained,
}

/// The general text of `--general`: its file, how it was paired, and its weight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GeneralRecord {
    /// The file of general questions.
    pub file: PathBuf,
    /// How its questions were paired.
    pub options: GeneralOptions,
    /// Pairs made of it.
    pub pairs: usize,
    /// CoSENT weight on them.
    pub weight: f32,
    /// Pairs per step.
    pub batch: usize,
}

/// What was trained (`method` in the file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method")]
pub enum Trained {
    /// The contextual model alone, on the collection's own threads, as the model.
    #[serde(rename = "thread")]
    Thread {
        /// Context texts per question it learned to match.
        texts_per_question: usize,
        /// How the model was selected, and what it trained on.
        selection: ThreadSelection,
        /// Seconds the training took.
        train_seconds: f64,
    },
    /// The encoder, on a graded harvest.
    #[serde(rename = "encoder")]
    Encoder {
        /// The model that graded the harvest.
        grader: GraderRecord,
        /// What the harvest found.
        harvest: HarvestRecord,
        /// How the trained model was selected.
        selection: ClrcmdSelection,
        /// Seconds the training took (the harvest not included).
        train_seconds: f64,
    },
    /// Several encoder runs (other batch orders) averaged.
    #[serde(rename = "encoder soup")]
    Soup {
        /// The model that graded the harvest.
        grader: GraderRecord,
        /// What the harvest found.
        harvest: HarvestRecord,
        /// How each run was selected.
        selection: SoupSelection,
        /// Seconds all runs took (the harvest not included).
        train_seconds: f64,
    },
    /// The sentence transition matrix (encoder frozen), on a graded harvest.
    #[serde(rename = "transition")]
    Transition {
        /// The model that graded the harvest.
        grader: GraderRecord,
        /// What the harvest found.
        harvest: HarvestRecord,
        /// How the matrix was selected.
        selection: TransitionSelection,
        /// Seconds the training took (the harvest not included).
        train_seconds: f64,
    },
}

impl Trained {
    /// The method's name, as the file writes it.
    pub fn method(&self) -> &'static str {
        match self {
            Trained::Thread { .. } => "thread",
            Trained::Encoder { .. } => "encoder",
            Trained::Soup { .. } => "encoder soup",
            Trained::Transition { .. } => "transition",
        }
    }

    /// The model that graded the harvest (None: `thread` harvests nothing).
    pub fn grader(&self) -> Option<&GraderRecord> {
        match self {
            Trained::Thread { .. } => None,
            Trained::Encoder { grader, .. }
            | Trained::Soup { grader, .. }
            | Trained::Transition { grader, .. } => Some(grader),
        }
    }
}

/// Which model graded a harvest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GraderKind {
    /// The collection's own model (the one trained).
    Base,
    /// A contextual model trained first on the collection's own threads.
    Thread,
    /// A model directory given by hand.
    Dir,
}

/// The model that graded a harvest: where it was and who it is (its fingerprint decides
/// whether a model found later is it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraderRecord {
    /// Which model it was.
    pub model: GraderKind,
    /// Its directory when it graded.
    pub dir: PathBuf,
    /// Who it is.
    pub identity: ModelIdentity,
    /// A `thread` grader's context texts per question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub texts_per_question: Option<usize>,
    /// A `thread` grader's own training.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<ThreadSelection>,
}

/// What the harvest found and how it was split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarvestRecord {
    /// The harvest's settings.
    pub options: HarvestOptions,
    /// Documents read.
    pub documents: usize,
    /// Documents with at least one context text.
    pub with_context: usize,
    /// Context texts read.
    pub context_texts: usize,
    /// Pairs mined and graded.
    pub pairs: usize,
    /// Training pairs taken as duplicates.
    pub positives: usize,
    /// Training pairs taken as hard negatives.
    pub hard_negatives: usize,
    /// Pairs trained on with their grade (CoSENT).
    pub graded: usize,
    /// Pairs of the held-out questions, which select the model.
    pub held_out_pairs: usize,
    /// Spearman of the grades against the base model's question cosine.
    pub grade_vs_question_spearman: f64,
    /// Seconds the harvest took.
    pub seconds: f64,
}

/// How one CLRCMD run was selected on its held-out pairs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClrcmdSelection {
    /// s_RCMD AUC before any step (None without held-out pairs or when resumed).
    pub held_out_rcmd_auc_before: Option<f64>,
    /// The best step and its AUC (None without held-out pairs).
    pub best: Option<(usize, f64)>,
    /// Steps done.
    pub steps: usize,
}

/// The contextual model's training: its selection and the pairs it trained on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadSelection {
    /// The run's selection.
    #[serde(flatten)]
    pub training: ClrcmdSelection,
    /// (question, context text) pairs trained on.
    pub pairs: usize,
    /// General pairs whose order it kept.
    pub general_pairs: usize,
    /// Held-out (question, context text) pairs, which select the model.
    pub held_out_pairs: usize,
}

/// Each run of a soup: its seed and selection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SoupSelection {
    /// The runs, in the order trained.
    pub runs: Vec<SoupRun>,
}

/// One run of a soup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SoupRun {
    /// Its batch-order seed.
    pub seed: u64,
    /// How it was selected.
    pub selection: ClrcmdSelection,
}

/// How the transition matrix was selected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransitionSelection {
    /// Cosine AUC on the held-out pairs before training.
    pub held_out_cosine_auc_before: f64,
    /// Cosine AUC on the held-out pairs with the selected matrix.
    pub held_out_cosine_auc_after: f64,
    /// The epoch selected.
    pub best_epoch: usize,
}

/// What `train blend` records of a soup whose models were all graded by one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlendRecord {
    /// The format ([`RECORD_VERSION`]; 0: written before records had one).
    #[serde(default)]
    pub version: u32,
    /// Always "blend".
    pub method: String,
    /// The models averaged.
    pub blend_of: Vec<PathBuf>,
    /// Their shared grader.
    pub grader: GraderRecord,
}

/// Writes `record` as `dir`'s [`RECORD_FILE`] (pretty JSON).
pub fn write(dir: &Path, record: &impl Serialize) -> Result<()> {
    let path = dir.join(RECORD_FILE);
    // Plain structs of strings and numbers: serialising cannot fail.
    let text = serde_json::to_string_pretty(record).expect("the record serialises");
    std::fs::write(&path, text + "\n").map_err(io_err(format!("writing {}", path.display())))
}

/// The grader recorded in `model`'s [`RECORD_FILE`] (an adapted model's or a soup's), when it
/// has one with a directory and an identity: models adapted before the directory was
/// recorded, and models that are not adapted, have none.
pub fn recorded_grader(model: &Path) -> Option<GraderRecord> {
    #[derive(Deserialize)]
    struct WithGrader {
        grader: Option<GraderRecord>,
    }
    let raw = std::fs::read(model.join(RECORD_FILE)).ok()?;
    serde_json::from_slice::<WithGrader>(&raw).ok()?.grader
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(fingerprint: &str) -> ModelIdentity {
        serde_json::from_value(serde_json::json!({
            "id": "m", "dim": 384, "max_len": 256, "fingerprint": fingerprint
        }))
        .expect("an identity")
    }

    #[test]
    fn a_thread_record_reads_back_and_writes_method_as_its_tag() {
        let record = ContextRecord {
            version: RECORD_VERSION,
            collection: "forum".into(),
            context_fields: vec!["tags".into()],
            base: identity("abc"),
            general: None,
            out: "/m".into(),
            trained: Trained::Thread {
                texts_per_question: 3,
                selection: ThreadSelection {
                    training: ClrcmdSelection {
                        held_out_rcmd_auc_before: Some(0.7),
                        best: Some((25, 0.8)),
                        steps: 50,
                    },
                    pairs: 30,
                    general_pairs: 0,
                    held_out_pairs: 6,
                },
                train_seconds: 1.5,
            },
        };
        let v = serde_json::to_value(&record).unwrap();
        assert_eq!(v["method"], "thread");
        assert_eq!(v["version"], 1);
        assert_eq!(v["selection"]["best"], serde_json::json!([25, 0.8]));
        assert_eq!(v["selection"]["pairs"], 30);
        assert!(v["general"].is_null());
        let back: ContextRecord = serde_json::from_value(v).unwrap();
        assert_eq!(back, record);
        assert!(back.trained.grader().is_none());
    }

    #[test]
    fn a_record_without_a_version_is_version_0_and_a_grader_without_a_dir_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let old = serde_json::json!({
            "method": "blend",
            "blend_of": ["/a", "/b"],
            "grader": { "model": "base", "identity": identity("f") },
        });
        std::fs::write(dir.path().join(RECORD_FILE), old.to_string()).unwrap();
        assert_eq!(recorded_grader(dir.path()), None);
        let blend = BlendRecord {
            version: RECORD_VERSION,
            method: "blend".into(),
            blend_of: vec!["/a".into()],
            grader: GraderRecord {
                model: GraderKind::Dir,
                dir: "/g".into(),
                identity: identity("f"),
                texts_per_question: None,
                selection: None,
            },
        };
        write(dir.path(), &blend).unwrap();
        let raw: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(RECORD_FILE)).unwrap()).unwrap();
        assert_eq!(raw["grader"]["model"], "dir");
        assert!(raw["grader"].get("selection").is_none());
        assert_eq!(recorded_grader(dir.path()), Some(blend.grader));
        let unversioned: BlendRecord = serde_json::from_value(serde_json::json!({
            "method": "blend", "blend_of": [], "grader": raw["grader"],
        }))
        .unwrap();
        assert_eq!(unversioned.version, 0);
    }
}
