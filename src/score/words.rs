//! From wordpieces to what people read: words (pieces merged with the tokenizer's offsets),
//! word-pair contributions (sums over their pieces), and chunks (phrases) as runs of words.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::text::normalize::normalize_text;
use crate::types::Token;

/// A word: one or more consecutive wordpieces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Word {
    /// The word as people read it: its span of the original text with HTML entities decoded.
    pub text: String,
    /// Char offset of its start in the original text.
    pub start: usize,
    /// Char offset of its end (exclusive).
    pub end: usize,
    /// The content tokens it spans.
    pub tokens: Range<usize>,
}

/// Merges wordpieces into words: a piece continues the previous word when the tokenizer marks
/// it as a continuation (`##` prefix) and it starts where the previous piece ended.
pub fn merge_words(text: &str, tokens: &[Token]) -> Vec<Word> {
    let mut words: Vec<Word> = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        match words.last_mut() {
            Some(w) if t.text.starts_with("##") && t.start == w.end => {
                w.end = t.end;
                w.tokens.end = i + 1;
            }
            _ => words.push(Word {
                text: String::new(),
                start: t.start,
                end: t.end,
                tokens: i..i + 1,
            }),
        }
    }
    let chars: Vec<char> = text.chars().collect();
    for w in &mut words {
        w.text = shown(&chars, w.start, w.end);
    }
    words
}

/// The chars `start..end` of a text as people read them: HTML entities decoded, whitespace
/// collapsed (the offsets still point at the original).
fn shown(chars: &[char], start: usize, end: usize) -> String {
    let raw: String = chars[start.min(chars.len())..end.min(chars.len())]
        .iter()
        .collect();
    normalize_text(&raw).into_owned()
}

/// A chunk (phrase): a run of consecutive words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// The chunk as people read it: its span of the original text, entities decoded and
    /// whitespace collapsed.
    pub text: String,
    /// Char offset of its start in the original text.
    pub start: usize,
    /// Char offset of its end (exclusive).
    pub end: usize,
    /// The words it spans.
    pub words: Range<usize>,
    /// True when it is in at least one chunk alignment.
    pub aligned: bool,
}

impl Chunk {
    /// The content tokens it spans.
    pub fn tokens(&self, words: &[Word]) -> Range<usize> {
        match (
            words.get(self.words.start),
            self.words.end.checked_sub(1).and_then(|l| words.get(l)),
        ) {
            (Some(first), Some(last)) if !self.words.is_empty() => {
                first.tokens.start..last.tokens.end
            }
            _ => 0..0,
        }
    }
}

/// Groups words into chunks given the chunks' char spans in `text` (in order): a word joins the
/// last span that starts at or before it (the first span when none does); a span that gets no
/// word — outside what was tokenized — is dropped.
pub fn group_words(text: &str, words: &[Word], spans: &[Range<usize>]) -> Vec<Chunk> {
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut last_span = usize::MAX;
    for (i, w) in words.iter().enumerate() {
        let span = spans.iter().rposition(|s| s.start <= w.start).unwrap_or(0);
        match chunks.last_mut() {
            Some(c) if span == last_span => {
                c.end = w.end;
                c.words.end = i + 1;
            }
            _ => chunks.push(Chunk {
                text: String::new(),
                start: w.start,
                end: w.end,
                words: i..i + 1,
                aligned: false,
            }),
        }
        last_span = span;
    }
    let chars: Vec<char> = text.chars().collect();
    for c in &mut chunks {
        c.text = shown(&chars, c.start, c.end);
    }
    chunks
}

/// The lower-cased words of a chunk that are not punctuation only.
pub fn content_words(words: &[Word]) -> Vec<String> {
    words
        .iter()
        .filter(|w| w.text.chars().any(char::is_alphanumeric))
        .map(|w| w.text.to_lowercase())
        .collect()
}

/// Sums a token-level `l1 × l2` matrix (row-major) into a word-level one.
pub fn word_matrix(tokens: &[f32], l2: usize, words_a: &[Word], words_b: &[Word]) -> Vec<f32> {
    let mut out = vec![0f32; words_a.len() * words_b.len()];
    for (wi, wa) in words_a.iter().enumerate() {
        for (wj, wb) in words_b.iter().enumerate() {
            out[wi * words_b.len() + wj] = wa
                .tokens
                .clone()
                .flat_map(|k| wb.tokens.clone().map(move |l| (k, l)))
                .map(|(k, l)| tokens[k * l2 + l])
                .sum();
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A wordpiece for tests.
    pub(crate) fn tok(text: &str, start: usize, end: usize) -> Token {
        Token {
            text: text.into(),
            id: 0,
            start,
            end,
        }
    }

    #[test]
    fn pieces_merge_into_words_with_original_spelling() {
        // "Naïve unhappiness?" → naive | un ##hap ##piness | ?
        let text = "Naïve unhappiness?";
        let tokens = [
            tok("naive", 0, 5),
            tok("un", 6, 8),
            tok("##hap", 8, 11),
            tok("##piness", 11, 17),
            tok("?", 17, 18),
        ];
        let words = merge_words(text, &tokens);
        let texts: Vec<&str> = words.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(texts, ["Naïve", "unhappiness", "?"]);
        assert_eq!(words[1].tokens, 1..4);
        assert_eq!((words[1].start, words[1].end), (6, 17));
        let cafe = merge_words("caf&eacute;", &[tok("cafe", 0, 11)]);
        assert_eq!(
            (cafe[0].text.as_str(), cafe[0].end),
            ("café", 11),
            "entity decoded, offsets on the original"
        );
    }

    #[test]
    fn word_matrix_sums_pieces() {
        let wa = [
            Word {
                text: "a".into(),
                start: 0,
                end: 1,
                tokens: 0..2,
            },
            Word {
                text: "b".into(),
                start: 2,
                end: 3,
                tokens: 2..3,
            },
        ];
        let wb = [Word {
            text: "c".into(),
            start: 0,
            end: 1,
            tokens: 0..2,
        }];
        let tokens = [0.1, 0.2, 0.3, 0.0, 0.5, 0.25];
        let m = word_matrix(&tokens, 2, &wa, &wb);
        assert!((m[0] - 0.6).abs() < 1e-6 && (m[1] - 0.75).abs() < 1e-6);
    }

    #[test]
    fn words_group_into_chunks_by_span() {
        // "the black dog , runs" with chunks [the black dog] [,] [runs]; "," gets no word here
        // (as if the tokenizer dropped it) and its chunk is dropped.
        let text = "the black dog , runs";
        let tokens = [
            tok("the", 0, 3),
            tok("black", 4, 9),
            tok("dog", 10, 13),
            tok("runs", 16, 20),
        ];
        let words = merge_words(text, &tokens);
        let chunks = group_words(text, &words, &[0..13, 14..15, 16..20]);
        let texts: Vec<&str> = chunks.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(texts, ["the black dog", "runs"]);
        assert_eq!(chunks[1].words, 3..4);
        assert_eq!(chunks[0].tokens(&words), 0..3);
        assert_eq!(content_words(&words[0..2]), ["the", "black"]);
    }
}
