//! From wordpieces to what people read: words (pieces merged with the tokenizer's offsets),
//! word-pair contributions (sums over their pieces) and chunk alignment by mutual argmax over
//! mean chunk contributions (papers/clrcmd-rcmd-optimal-transport-sts.txt §4.3).

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::types::Token;

/// A word: one or more consecutive wordpieces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Word {
    /// The word as written in the original text.
    pub text: String,
    /// Char offset of its start in the original text.
    pub start: usize,
    /// Char offset of its end (exclusive).
    pub end: usize,
    /// The content tokens it spans.
    pub tokens: Range<usize>,
}

/// A pair of aligned chunks and their mean contribution.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ChunkLink {
    /// Chunk index on side a.
    pub a: usize,
    /// Chunk index on side b.
    pub b: usize,
    /// Mean token-pair contribution between the two chunks.
    pub score: f32,
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
        w.text = chars[w.start.min(chars.len())..w.end.min(chars.len())]
            .iter()
            .collect();
    }
    words
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

/// Chunk alignment: with C_ij = mean over k ∈ chunk_a(i), l ∈ chunk_b(j) of the token
/// contribution (k, l), align (i, j) iff j = argmax_j' C_ij', i = argmax_i' C_i'j and C_ij > 0.
/// Chunks are token ranges; `contrib` is the dense `l1 × l2` contribution matrix.
pub fn chunk_alignment(
    contrib: &[f32],
    l2: usize,
    chunks_a: &[Range<usize>],
    chunks_b: &[Range<usize>],
) -> Vec<ChunkLink> {
    let (n, m) = (chunks_a.len(), chunks_b.len());
    let mut c = vec![0f32; n * m];
    for (i, ca) in chunks_a.iter().enumerate() {
        for (j, cb) in chunks_b.iter().enumerate() {
            let size = (ca.len() * cb.len()).max(1) as f32;
            let sum: f32 = ca
                .clone()
                .flat_map(|k| cb.clone().map(move |l| contrib[k * l2 + l]))
                .sum();
            c[i * m + j] = sum / size;
        }
    }
    let argmax = |vals: &mut dyn Iterator<Item = (usize, f32)>| {
        vals.fold((usize::MAX, f32::NEG_INFINITY), |best, (k, v)| {
            if v > best.1 {
                (k, v)
            } else {
                best
            }
        })
    };
    let mut out = Vec::new();
    for i in 0..n {
        let (j, v) = argmax(&mut (0..m).map(|j| (j, c[i * m + j])));
        if j == usize::MAX || v <= 0.0 {
            continue;
        }
        let (back, _) = argmax(&mut (0..n).map(|k| (k, c[k * m + j])));
        if back == i {
            out.push(ChunkLink {
                a: i,
                b: j,
                score: v,
            });
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
    fn chunks_align_by_mutual_argmax() {
        // 3 × 2 token matrix; chunks a = {0,1}, {2}; b = {0}, {1}.
        let contrib = [0.4, 0.0, 0.2, 0.0, 0.0, 0.3];
        let links = chunk_alignment(&contrib, 2, &[0..2, 2..3], &[0..1, 1..2]);
        assert_eq!(
            links,
            vec![
                ChunkLink {
                    a: 0,
                    b: 0,
                    score: 0.3
                },
                ChunkLink {
                    a: 1,
                    b: 1,
                    score: 0.3
                }
            ]
        );
    }
}
