//! What the store keeps per document, and how it is encoded on disk (bincode 2, standard
//! configuration). Format version 4 (migrations/0004_context.md: the context was appended);
//! any change here is a format change (see migrations/ and the frozen types in `compat`).

use serde::{Deserialize, Serialize};

use crate::error::{InternalError, Result};
use crate::score::quant::I8Tokens;
use crate::types::{Encoded, Gaussian, Token};

/// One stored document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredDoc {
    /// External id.
    pub id: String,
    /// Internal numeric id used by the vector indexes; a new one on every upsert.
    pub internal: u64,
    /// The text.
    pub text: String,
    /// Metadata: a JSON object, kept as its JSON text.
    pub metadata_json: String,
    /// Content wordpieces with char offsets.
    pub tokens: Vec<Token>,
    /// The text was truncated at the model's maximum length.
    pub truncated: bool,
    /// Content token vectors, int8 codes (`tokens.len() × dim`).
    pub token_codes: Vec<i8>,
    /// One scale per token vector.
    pub token_scales: Vec<f32>,
    /// Sentence vector (unit length).
    pub sentence: Vec<f32>,
    /// Intent mean.
    pub mu: Vec<f32>,
    /// Intent standard deviation.
    pub sigma: Vec<f32>,
    /// The document's context, stored verbatim: texts that go with the question (answers,
    /// comments, the FAQ entry it was filed under). Never encoded, indexed or searched; read
    /// back with the document (and by trainers). Empty when it has none. Last, so a record
    /// of format 1–3 is a prefix of the same record in format 4.
    pub context: Vec<String>,
}

impl StoredDoc {
    /// Builds the record of an encoded document (without context: see
    /// [`StoredDoc::with_context`]).
    pub fn new(
        id: String,
        internal: u64,
        text: String,
        metadata_json: String,
        enc: &Encoded,
    ) -> Self {
        let codes = I8Tokens::encode(crate::score::Tokens::new(&enc.token_vectors, enc.dim()));
        StoredDoc {
            id,
            internal,
            text,
            metadata_json,
            tokens: enc.tokens.clone(),
            truncated: enc.truncated,
            token_codes: codes.codes().to_vec(),
            token_scales: codes.scales().to_vec(),
            sentence: enc.sentence.clone(),
            mu: enc.intent.mu.clone(),
            sigma: enc.intent.sigma.clone(),
            context: Vec::new(),
        }
    }

    /// The record with `context` as its context.
    pub fn with_context(mut self, context: Vec<String>) -> Self {
        self.context = context;
        self
    }

    /// The token vectors in their compressed form.
    pub fn token_vectors(&self) -> I8Tokens {
        I8Tokens::from_parts(
            self.token_codes.clone(),
            self.token_scales.clone(),
            self.sentence.len(),
        )
        .expect("records are written consistent")
    }

    /// The intent.
    pub fn intent(&self) -> Gaussian {
        Gaussian {
            mu: self.mu.clone(),
            sigma: self.sigma.clone(),
        }
    }

    /// The document as the encoder gave it, token vectors decoded from their int8 codes.
    pub fn encoded(&self) -> Encoded {
        Encoded {
            tokens: self.tokens.clone(),
            truncated: self.truncated,
            token_vectors: self.token_vectors().decode(),
            sentence: self.sentence.clone(),
            intent: self.intent(),
        }
    }

    /// Metadata as a JSON object.
    pub fn metadata(&self) -> serde_json::Map<String, serde_json::Value> {
        serde_json::from_str(&self.metadata_json).unwrap_or_default()
    }

    /// About the size of [`StoredDoc::to_bytes`] (within a few bytes per field), without
    /// encoding: what a write checks free space against.
    pub fn approx_bytes(&self) -> u64 {
        let text: usize = self.tokens.iter().map(|t| t.text.len() + 12).sum();
        let floats =
            self.token_scales.len() + self.sentence.len() + self.mu.len() + self.sigma.len();
        // A string is its bytes after a varint length: 1 byte below 251, 3 up to 64 KiB.
        let context: usize = self
            .context
            .iter()
            .map(|c| c.len() + if c.len() < 251 { 1 } else { 3 })
            .sum();
        (self.id.len()
            + self.text.len()
            + self.metadata_json.len()
            + text
            + self.token_codes.len()
            + 4 * floats
            + context
            + 33) as u64
    }

    /// Encodes for disk.
    pub fn to_bytes(&self) -> Vec<u8> {
        bincode::serde::encode_to_vec(self, bincode::config::standard()).expect("in-memory encode")
    }

    /// Decodes from disk. Damaged bytes are an error, never a panic or a huge allocation:
    /// lengths are bounded by `MAX_RECORD_BYTES` before anything is allocated, and a record
    /// that decodes is checked to be consistent (what readers index into) before it is used.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let config = bincode::config::standard().with_limit::<MAX_RECORD_BYTES>();
        let doc: StoredDoc = bincode::serde::decode_from_slice(bytes, config)
            .map(|(doc, _)| doc)
            .map_err(|e| InternalError::Corrupt(format!("undecodable document record: {e}")))?;
        doc.check().map_err(|why| {
            InternalError::Corrupt(format!("inconsistent document record {:?}: {why}", doc.id))
        })?;
        Ok(doc)
    }

    /// What every reader assumes of a record.
    fn check(&self) -> std::result::Result<(), String> {
        let (n, dim) = (self.tokens.len(), self.sentence.len());
        // Every record is written with both vectors (16 zero bytes decoded as one without).
        if dim == 0 || self.mu.is_empty() {
            return Err("no sentence vector or no intent".into());
        }
        if self.token_codes.len() != n * dim || self.token_scales.len() != n {
            return Err(format!(
                "{} token codes and {} scales for {n} tokens of {dim} dimensions",
                self.token_codes.len(),
                self.token_scales.len()
            ));
        }
        if self.mu.len() != self.sigma.len() {
            return Err("intent mean and deviation differ in length".into());
        }
        let chars = self.text.chars().count();
        if let Some(t) = self
            .tokens
            .iter()
            .find(|t| t.start > t.end || t.end > chars)
        {
            return Err(format!("token {:?} lies outside the text", t.text));
        }
        Ok(())
    }
}

/// Largest record [`StoredDoc::from_bytes`] decodes: far above any real document (a 512-token
/// text at 1,024 dimensions is about 0.5 MiB).
pub const MAX_RECORD_BYTES: usize = 64 << 20;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record() -> StoredDoc {
        let text = "How do I reset my password?".to_string();
        let tokens = vec![
            Token {
                text: "how".into(),
                id: 2129,
                start: 0,
                end: 3,
            },
            Token {
                text: "password".into(),
                id: 20786,
                start: 18,
                end: 26,
            },
        ];
        StoredDoc {
            id: "pw".into(),
            internal: 7,
            text,
            metadata_json: "{\"site\":\"faq\"}".into(),
            tokens,
            truncated: false,
            token_codes: vec![1, -2, 3, 4, 5, -6],
            token_scales: vec![0.5, 0.25],
            sentence: vec![0.6, 0.8, 0.0],
            mu: vec![0.1; 3],
            sigma: vec![1.0; 3],
            context: vec!["Use the link on the sign-in page.".into(), "x".repeat(300)],
        }
    }

    #[test]
    fn a_record_round_trips_and_a_huge_length_is_refused_without_allocating() {
        let doc = record();
        assert_eq!(StoredDoc::from_bytes(&doc.to_bytes()).unwrap(), doc);
        for doc in [doc.clone(), doc.clone().with_context(Vec::new())] {
            let (approx, exact) = (doc.approx_bytes(), doc.to_bytes().len() as u64);
            assert!(
                approx >= exact && approx <= exact + 64,
                "{approx} vs {exact}"
            );
        }
        // A varint length prefix of 2^62 for the id: refused, not allocated.
        let mut bytes = vec![0xff];
        bytes.extend_from_slice(&(1u64 << 62).to_le_bytes());
        assert!(StoredDoc::from_bytes(&bytes).is_err());
        let mut bad = doc.clone();
        bad.token_scales.pop();
        assert!(StoredDoc::from_bytes(&bad.to_bytes())
            .unwrap_err()
            .to_string()
            .contains("scales"));
        let mut bad = doc;
        bad.tokens[1].end = 99;
        assert!(StoredDoc::from_bytes(&bad.to_bytes()).is_err());
    }

    /// Found by the fuzz target `record` (tests/it/fuzz.rs): 16 zero bytes decoded as a
    /// record without vectors, and reading its token vectors panicked.
    #[test]
    fn a_record_without_vectors_is_refused() {
        let e = StoredDoc::from_bytes(&[0u8; 16]).unwrap_err().to_string();
        assert!(e.contains("no sentence vector"), "{e}");
        let mut doc = record();
        doc.mu.clear();
        doc.sigma.clear();
        assert!(StoredDoc::from_bytes(&doc.to_bytes()).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Fuzzing the decoder: any bytes, and any corruption of a real record, decode to an
        /// error or to a record every reader can use; nothing panics.
        #[test]
        fn damaged_records_never_panic(
            noise in proptest::collection::vec(any::<u8>(), 0..256),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
            cut in any::<usize>(),
        ) {
            for bytes in [noise.clone(), {
                let mut b = record().to_bytes();
                for (at, x) in &flips {
                    let i = at % b.len();
                    b[i] ^= x;
                }
                b.truncate(cut % (b.len() + 1));
                b
            }] {
                if let Ok(doc) = StoredDoc::from_bytes(&bytes) {
                    let _ = doc.token_vectors().decode();
                    let _ = doc.encoded();
                    let _ = doc.metadata();
                }
            }
        }
    }
}
