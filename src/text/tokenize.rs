//! Wordpiece tokenization from a Hugging Face `tokenizer.json`, with char offsets, the
//! special-token mask and truncation at the model's maximum length. Texts are normalized
//! first ([`super::normalize`]: character references decoded, whitespace collapsed); the
//! offsets point into the text as given.

use std::path::Path;

use tokenizers::{
    PaddingParams, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy,
};

use super::normalize::normalize;
use crate::error::{InternalError, Result, UserError};
use crate::types::Token;

/// One tokenized text: the full model input and the content tokens users see.
#[derive(Debug, Clone, PartialEq)]
pub struct Tokenized {
    /// Input ids, `[CLS]` … `[SEP]` included, no padding.
    pub ids: Vec<u32>,
    /// Per input id: true for special tokens (`[CLS]`, `[SEP]`, …).
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
    /// truncating at `max_len` wordpieces including `[CLS]` and `[SEP]`.
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

    /// Tokenizes one text: its normalized form ([`normalize`]: `What&#39;s` is read as
    /// `What's`), with each token's offsets mapped back into `text` (a piece of `café` written
    /// `caf&eacute;` spans those 11 chars). `index` is the text's position in the caller's
    /// request, for errors. Errors: a text that is empty once normalized (whitespace,
    /// `&nbsp;`), or one that yields no content token.
    pub fn tokenize(&self, text: &str, index: usize) -> Result<Tokenized> {
        let norm = normalize(text);
        if norm.text.is_empty() {
            return Err(UserError::EmptyText { index }.into());
        }
        let enc = self
            .inner
            .encode_char_offsets(norm.text.as_ref(), true)
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
            .map(|(((t, &id), &(start, end)), _)| {
                let original = norm.to_original(start..end);
                Token {
                    text: t.clone(),
                    id,
                    start: original.start,
                    end: original.end,
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A BERT-style `tokenizer.json` (uncased, accents stripped, wordpiece) with a tiny vocabulary.
    fn tiny() -> (tempfile::TempDir, TextTokenizer) {
        let vocab = [
            "[PAD]", "[UNK]", "[CLS]", "[SEP]", "what", "'", "s", "the", "best", "cafe", "in",
            "doha", "?", "&", "#", "39", ";", "eacute", "caf", "##e",
        ];
        let vocab: serde_json::Map<String, serde_json::Value> = vocab
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i.into()))
            .collect();
        let special = |id: usize, content: &str| {
            serde_json::json!({ "id": id, "content": content, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true })
        };
        let json = serde_json::json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": [special(0, "[PAD]"), special(1, "[UNK]"), special(2, "[CLS]"), special(3, "[SEP]")],
            "normalizer": { "type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                "strip_accents": null, "lowercase": true },
            "pre_tokenizer": { "type": "BertPreTokenizer" },
            "post_processor": { "type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2] },
            "decoder": null,
            "model": { "type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                "max_input_chars_per_word": 100, "vocab": vocab }
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, json.to_string()).expect("write tokenizer.json");
        let tok = TextTokenizer::from_file(&path, 32).expect("the tiny tokenizer loads");
        (dir, tok)
    }

    #[test]
    fn references_are_decoded_and_offsets_point_into_the_original() {
        let (_dir, tok) = tiny();
        let text = "What&#39;s the best caf&eacute;?";
        let t = tok.tokenize(text, 0).expect("tokenizes");
        let chars: Vec<char> = text.chars().collect();
        let shown: Vec<(&str, String)> = t
            .tokens
            .iter()
            .map(|k| (k.text.as_str(), chars[k.start..k.end].iter().collect()))
            .collect();
        let want = [
            ("what", "What"),
            ("'", "&#39;"),
            ("s", "s"),
            ("the", "the"),
            ("best", "best"),
            ("cafe", "caf&eacute;"),
            ("?", "?"),
        ];
        let want: Vec<(&str, String)> = want.iter().map(|(a, b)| (*a, b.to_string())).collect();
        assert_eq!(shown, want);
        assert!(!t.tokens.iter().any(|k| k.text == "39"));
        assert_eq!(t.ids.len(), t.tokens.len() + 2, "[CLS] and [SEP]");
    }

    #[test]
    fn whitespace_collapses_and_offsets_skip_it() {
        let (_dir, tok) = tiny();
        let text = "\u{a0} the\t\n\u{2003}best&nbsp; ";
        let t = tok.tokenize(text, 0).expect("tokenizes");
        let spans: Vec<(usize, usize)> = t.tokens.iter().map(|k| (k.start, k.end)).collect();
        assert_eq!(spans, [(2, 5), (8, 12)]);
    }

    #[test]
    fn a_text_empty_once_normalized_is_an_empty_text() {
        let (_dir, tok) = tiny();
        for text in ["", "  \t", "&nbsp;", " &#32;&#x3000; "] {
            let e = tok.tokenize(text, 3).expect_err("empty");
            assert!(
                matches!(e, crate::Error::User(UserError::EmptyText { index: 3 })),
                "{text:?}: {e}"
            );
        }
    }
}
