//! What the store keeps per document, and how it is encoded on disk (bincode 2, standard
//! configuration). Format version 1; any change here is a format change (see migrations/).

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
}

impl StoredDoc {
    /// Builds the record of an encoded document.
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
        }
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

    /// Encodes for disk.
    pub fn to_bytes(&self) -> Vec<u8> {
        bincode::serde::encode_to_vec(self, bincode::config::standard()).expect("in-memory encode")
    }

    /// Decodes from disk.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        bincode::serde::decode_from_slice(bytes, bincode::config::standard())
            .map(|(doc, _)| doc)
            .map_err(|e| InternalError::Corrupt(format!("undecodable document record: {e}")).into())
    }
}
