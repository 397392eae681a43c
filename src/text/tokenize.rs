//! Wordpiece tokenization from a Hugging Face `tokenizer.json`, with char offsets, the
//! special-token mask and truncation at the model's maximum length.

use std::path::Path;

use tokenizers::{
    PaddingParams, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy,
};

use crate::error::{InternalError, Result, UserError};
use crate::types::Token;

/// One tokenized text: the full model input and the content tokens users see.
#[derive(Debug, Clone, PartialEq)]
pub struct Tokenized {
    /// Input ids, [CLS] … [SEP] included, no padding.
    pub ids: Vec<u32>,
    /// Per input id: true for special tokens ([CLS], [SEP], …).
    pub special: Vec<bool>,
    /// The content tokens (special ones removed), in order, with char offsets.
    pub tokens: Vec<Token>,
    /// The text was cut at the maximum length.
    pub truncated: bool,
}

/// A tokenizer configured for kindred: no padding (the encoder pads per batch) and truncation
/// at the model's maximum length.
#[derive(Clone)]
pub struct TextTokenizer {
    inner: Tokenizer,
    max_len: usize,
    pad_id: u32,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("max_len", &self.max_len)
            .field("pad_id", &self.pad_id)
            .finish()
    }
}

impl TextTokenizer {
    /// Loads `tokenizer.json`, overriding its padding (the file of all-MiniLM pads to 128) and
    /// truncating at `max_len` wordpieces including [CLS] and [SEP].
    pub fn from_file(path: &Path, max_len: usize) -> Result<Self> {
        let mut inner = Tokenizer::from_file(path).map_err(|e| UserError::InvalidModelDir {
            path: path.parent().unwrap_or(path).to_path_buf(),
            reason: format!("tokenizer.json cannot be loaded: {e}"),
        })?;
        let pad_id = inner
            .get_padding()
            .map(|p: &PaddingParams| p.pad_id)
            .or_else(|| inner.token_to_id("[PAD]"))
            .unwrap_or(0);
        inner.with_padding(None);
        inner
            .with_truncation(Some(TruncationParams {
                max_length: max_len,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
                direction: TruncationDirection::Right,
            }))
            .map_err(|e| InternalError::Tokenizer(e.to_string()))?;
        Ok(TextTokenizer {
            inner,
            max_len,
            pad_id,
        })
    }

    /// The padding id the encoder uses.
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// Maximum length in wordpieces, specials included.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Tokenizes one text. `index` is the text's position in the caller's request, for errors.
    /// Errors: empty/whitespace-only text, or a text that yields no content token.
    pub fn tokenize(&self, text: &str, index: usize) -> Result<Tokenized> {
        if text.trim().is_empty() {
            return Err(UserError::EmptyText { index }.into());
        }
        let enc = self
            .inner
            .encode_char_offsets(text, true)
            .map_err(|e| InternalError::Tokenizer(e.to_string()))?;
        let special: Vec<bool> = enc
            .get_special_tokens_mask()
            .iter()
            .map(|&m| m != 0)
            .collect();
        let tokens: Vec<Token> = enc
            .get_tokens()
            .iter()
            .zip(enc.get_ids())
            .zip(enc.get_offsets())
            .zip(&special)
            .filter(|(_, &s)| !s)
            .map(|(((t, &id), &(start, end)), _)| Token {
                text: t.clone(),
                id,
                start,
                end,
            })
            .collect();
        if tokens.is_empty() {
            return Err(UserError::NoContentTokens {
                index,
                preview: text.chars().take(40).collect(),
            }
            .into());
        }
        Ok(Tokenized {
            ids: enc.get_ids().to_vec(),
            special,
            tokens,
            truncated: !enc.get_overflowing().is_empty(),
        })
    }
}
