//! Frozen copies of the on-disk types as older formats wrote them. A record type that changes
//! shape is a format change (see migrations/): the copies here keep describing the bytes an
//! older store holds, and the tests pin the current types to them.
//!
//! - Format 1 (migrations/0001): document records are bincode 2 (standard configuration) of
//!   [`StoredDocV1`]; collection settings are JSON of [`CollectionSettingsV1`].
//! - Formats 2 and 3 added optional settings fields only (a generation, a model directory, the
//!   intent dimension, the precision); document records are still [`StoredDocV1`].

use serde::{Deserialize, Serialize};

use crate::types::Token;

/// A document record of format 1 (unchanged through format 3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredDocV1 {
    /// External id.
    pub id: String,
    /// Internal id.
    pub internal: u64,
    /// The text.
    pub text: String,
    /// Metadata as JSON text.
    pub metadata_json: String,
    /// Content wordpieces with char offsets.
    pub tokens: Vec<TokenV1>,
    /// Truncated at the model's maximum length.
    pub truncated: bool,
    /// Int8 token codes.
    pub token_codes: Vec<i8>,
    /// One scale per token vector.
    pub token_scales: Vec<f32>,
    /// Sentence vector.
    pub sentence: Vec<f32>,
    /// Intent mean.
    pub mu: Vec<f32>,
    /// Intent standard deviation.
    pub sigma: Vec<f32>,
}

/// A wordpiece as format 1 stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenV1 {
    /// The wordpiece.
    pub text: String,
    /// Vocabulary id.
    pub id: u32,
    /// Start offset in chars.
    pub start: usize,
    /// End offset in chars.
    pub end: usize,
}

impl From<&Token> for TokenV1 {
    fn from(t: &Token) -> Self {
        TokenV1 {
            text: t.text.clone(),
            id: t.id,
            start: t.start,
            end: t.end,
        }
    }
}

/// Collection settings as format 1 wrote them (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectionSettingsV1 {
    /// The model.
    pub model: ModelIdentityV1,
    /// Token-vector codec (`int8`).
    pub codec: String,
    /// HNSW parameters.
    pub hnsw: HnswParamsV1,
}

/// A model identity as format 1 wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelIdentityV1 {
    /// Model id.
    pub id: String,
    /// `sha256:` fingerprint of the weights.
    pub fingerprint: String,
    /// Vector dimension.
    pub dim: usize,
    /// Maximum sequence length in wordpieces.
    pub max_len: usize,
}

/// HNSW parameters as format 1 wrote them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HnswParamsV1 {
    /// Links per node.
    pub m: usize,
    /// Build-time candidate list.
    pub ef_construction: usize,
    /// Search-time candidate list.
    pub ef_search: usize,
}

/// bincode 2, standard configuration: how records are written.
pub fn encode_record<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, bincode::config::standard()).expect("in-memory encode")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{CollectionSettings, StoredDoc};

    fn sample() -> StoredDoc {
        StoredDoc {
            id: "q1".into(),
            internal: 7,
            text: "How do I reset my password?".into(),
            metadata_json: r#"{"source":"faq"}"#.into(),
            tokens: vec![Token {
                text: "reset".into(),
                id: 25_195,
                start: 9,
                end: 14,
            }],
            truncated: false,
            token_codes: vec![1, -2, 3],
            token_scales: vec![0.5],
            sentence: vec![0.6, 0.8, 0.0],
            mu: vec![0.1, 0.2, 0.3],
            sigma: vec![0.01, 0.02, 0.03],
        }
    }

    fn as_v1(d: &StoredDoc) -> StoredDocV1 {
        StoredDocV1 {
            id: d.id.clone(),
            internal: d.internal,
            text: d.text.clone(),
            metadata_json: d.metadata_json.clone(),
            tokens: d.tokens.iter().map(TokenV1::from).collect(),
            truncated: d.truncated,
            token_codes: d.token_codes.clone(),
            token_scales: d.token_scales.clone(),
            sentence: d.sentence.clone(),
            mu: d.mu.clone(),
            sigma: d.sigma.clone(),
        }
    }

    /// Changing `StoredDoc`'s fields changes the bytes on disk: this fails until the change
    /// comes with a format version, a migration, and a new frozen type here.
    #[test]
    fn current_records_are_the_format_1_bytes() {
        let doc = sample();
        assert_eq!(doc.to_bytes(), encode_record(&as_v1(&doc)));
        assert_eq!(
            StoredDoc::from_bytes(&encode_record(&as_v1(&doc))).unwrap(),
            doc
        );
    }

    /// Format-1 settings JSON (no generation, no model directory, no intent dimension, no
    /// precision) still reads, as fp32 vectors of the model dimension.
    #[test]
    fn format_1_settings_read_with_the_later_defaults() {
        let v1 = CollectionSettingsV1 {
            model: ModelIdentityV1 {
                id: "all-MiniLM-L6-v2".into(),
                fingerprint: "sha256:abc".into(),
                dim: 384,
                max_len: 256,
            },
            codec: "int8".into(),
            hnsw: HnswParamsV1 {
                m: 16,
                ef_construction: 200,
                ef_search: 64,
            },
        };
        let now: CollectionSettings =
            serde_json::from_slice(&serde_json::to_vec(&v1).unwrap()).unwrap();
        assert_eq!(now.generation, None);
        assert_eq!(now.model_path, None);
        assert_eq!(now.model.intent_dim(), 384);
        assert_eq!(now.model.precision, crate::types::Precision::Fp32);
        assert_eq!(now.hnsw.m, 16);
    }
}
