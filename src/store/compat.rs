//! Frozen copies of the on-disk types as older formats wrote them. A record type that changes
//! shape is a format change (see migrations/): the copies here keep describing the bytes an
//! older store holds, and the tests pin the current types to them.
//!
//! - Format 1 (migrations/0001): document records are bincode 2 (standard configuration) of
//!   [`StoredDocV1`]; collection settings are JSON of [`CollectionSettingsV1`].
//! - Formats 2 and 3 added optional settings fields only (a generation, a model directory, the
//!   intent dimension, the precision); document records are still [`StoredDocV1`].
//! - Format 4 (migrations/0004) appended the context to document records: [`StoredDocV4`].
//!   A format-3 record upgrades with [`upgrade_record`] (an empty context).

use serde::{Deserialize, Serialize};

use super::record::MAX_RECORD_BYTES;
use super::StoredDoc;
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

/// A document record of format 4: [`StoredDocV1`]'s fields, then the context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredDocV4 {
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
    /// Context texts (empty: none).
    pub context: Vec<String>,
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

impl From<TokenV1> for Token {
    fn from(t: TokenV1) -> Self {
        Token {
            text: t.text,
            id: t.id,
            start: t.start,
            end: t.end,
        }
    }
}

impl From<StoredDocV1> for StoredDoc {
    /// A format-1 record as today's: the same fields, no context.
    fn from(d: StoredDocV1) -> Self {
        StoredDoc {
            id: d.id,
            internal: d.internal,
            text: d.text,
            metadata_json: d.metadata_json,
            tokens: d.tokens.into_iter().map(Token::from).collect(),
            truncated: d.truncated,
            token_codes: d.token_codes,
            token_scales: d.token_scales,
            sentence: d.sentence,
            mu: d.mu,
            sigma: d.sigma,
            context: Vec::new(),
        }
    }
}

/// What [`upgrade_record`] makes of a document record's bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum Upgrade {
    /// Already a format-4 record (a migration that stopped part-way wrote it): leave it.
    Current,
    /// A format 1–3 record: these are its bytes in format 4, with an empty context.
    Rewritten(Vec<u8>),
    /// Neither (damaged): leave it; reading it reports the damage, as before the migration.
    Undecodable(String),
}

/// Upgrades one document record to format 4. Unambiguous: a format 1–3 record never decodes
/// as format 4 (its bytes end where the context's length would start), and a format-4 record
/// is recognised only when it decodes using every byte (as format 1 it would leave the
/// context's bytes over).
pub fn upgrade_record(bytes: &[u8]) -> Upgrade {
    let config = bincode::config::standard().with_limit::<MAX_RECORD_BYTES>();
    if let Ok((_, used)) = bincode::serde::decode_from_slice::<StoredDocV4, _>(bytes, config) {
        if used == bytes.len() {
            return Upgrade::Current;
        }
    }
    match bincode::serde::decode_from_slice::<StoredDocV1, _>(bytes, config) {
        Ok((old, used)) if used == bytes.len() => {
            Upgrade::Rewritten(StoredDoc::from(old).to_bytes())
        }
        Ok((_, used)) => Upgrade::Undecodable(format!(
            "{} bytes left over after a format-3 record of {used}",
            bytes.len() - used
        )),
        Err(e) => Upgrade::Undecodable(e.to_string()),
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
            context: vec!["Use the link on the sign-in page.".into(), "é".repeat(200)],
        }
    }

    fn as_v4(d: &StoredDoc) -> StoredDocV4 {
        StoredDocV4 {
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
            context: d.context.clone(),
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
    fn current_records_are_the_format_4_bytes() {
        for doc in [sample(), sample().with_context(Vec::new())] {
            assert_eq!(doc.to_bytes(), encode_record(&as_v4(&doc)));
            assert_eq!(
                StoredDoc::from_bytes(&encode_record(&as_v4(&doc))).unwrap(),
                doc
            );
        }
    }

    /// A format 1–3 record (the frozen [`StoredDocV1`]) is not a format-4 record, upgrades to
    /// the same document with an empty context, and a record already upgraded (or written by
    /// format 4) is left alone, so a migration run again after stopping part-way is harmless.
    #[test]
    fn format_1_records_upgrade_with_an_empty_context_and_only_once() {
        let doc = sample().with_context(Vec::new());
        let old = encode_record(&as_v1(&doc));
        assert!(StoredDoc::from_bytes(&old).is_err(), "read as format 4");
        let Upgrade::Rewritten(new) = upgrade_record(&old) else {
            panic!("not upgraded: {:?}", upgrade_record(&old));
        };
        assert_eq!(StoredDoc::from_bytes(&new).unwrap(), doc);
        assert_eq!(new, doc.to_bytes());
        assert_eq!(upgrade_record(&new), Upgrade::Current);
        assert_eq!(upgrade_record(&sample().to_bytes()), Upgrade::Current);
        // Damaged bytes are reported, never rewritten: cut, or with bytes left over.
        for bad in [
            &old[..old.len() - 3],
            &[old.as_slice(), &[7, 7]].concat()[..],
            &[],
        ] {
            assert!(
                matches!(upgrade_record(bad), Upgrade::Undecodable(_)),
                "{:?}",
                upgrade_record(bad)
            );
        }
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
