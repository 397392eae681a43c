//! Word units and the iSTS bracketed chunk format: a text cut into units as the BERT basic
//! tokenizer cuts it ([`units`]), a line of a `*.chunk.txt` file read into tokens and chunks
//! ([`parse_bracketed`]), and a tokenized sentence seen as the units the chunker decides on
//! ([`UnitSentence`]). Pure: no files, no weights.

use std::ops::Range;

use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::{
    NormalizedString, Normalizer, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer,
};

/// One line of an iSTS `*.chunk.txt` file (`[ Former Nazi guard ] [ dead ] [ at 91 ]`): its
/// tokens, and its chunks as ranges of token indices covering every token in order. Read
/// leniently, as the released files need (one line of answers-students reads `[ in [ a closed
/// path ]`): a `[` inside a chunk starts the next chunk, a token outside brackets is a chunk of
/// its own, a stray `]` is ignored. None when the line has no token.
pub fn parse_bracketed(line: &str) -> Option<(Vec<String>, Vec<Range<usize>>)> {
    let mut tokens: Vec<String> = Vec::new();
    let mut chunks: Vec<Range<usize>> = Vec::new();
    let mut open: Option<usize> = None;
    let close = |start: usize, end: usize, chunks: &mut Vec<Range<usize>>| {
        if start < end {
            chunks.push(start..end);
        }
    };
    for piece in line.split_whitespace() {
        match piece {
            "[" => {
                if let Some(start) = open {
                    close(start, tokens.len(), &mut chunks);
                }
                open = Some(tokens.len());
            }
            "]" => {
                if let Some(start) = open.take() {
                    close(start, tokens.len(), &mut chunks);
                }
            }
            t => {
                tokens.push(t.to_string());
                if open.is_none() {
                    close(tokens.len() - 1, tokens.len(), &mut chunks);
                }
            }
        }
    }
    if let Some(start) = open {
        close(start, tokens.len(), &mut chunks);
    }
    (!tokens.is_empty()).then_some((tokens, chunks))
}

/// The word units of `text` as char ranges (Unicode scalar values, as kindred's tokens count),
/// cut as the BERT basic tokenizer cuts words before wordpieces: on whitespace; every
/// punctuation character (Unicode P*, and every ASCII symbol such as `$`, `+`, `^`) is a unit
/// of its own, as is every CJK ideograph; control characters belong to no unit. Case and
/// accents are kept, so a unit's range reads back the text as written.
pub fn units(text: &str) -> Vec<Range<usize>> {
    let mut normalized = NormalizedString::from(text);
    // Cleaning (control characters out) and spaces around CJK ideographs; no lower-casing and
    // no accent stripping, which would not change where words break.
    BertNormalizer::new(true, true, Some(false), false)
        .normalize(&mut normalized)
        .expect("the BERT normalizer cannot fail");
    let mut pieces = PreTokenizedString::from(normalized);
    BertPreTokenizer
        .pre_tokenize(&mut pieces)
        .expect("the BERT pre-tokenizer cannot fail");
    pieces
        .get_splits(OffsetReferential::Original, OffsetType::Char)
        .into_iter()
        .map(|(_, (start, end), _)| start..end)
        .filter(|r| !r.is_empty())
        .collect()
}

/// A sentence as the chunker sees it: its units, whether each is glued to the one before (no
/// space between them), and, in training data, whether each starts a chunk.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct UnitSentence {
    pub(crate) units: Vec<String>,
    pub(crate) glued: Vec<bool>,
    pub(crate) starts: Vec<bool>,
}

impl UnitSentence {
    /// The units of a raw text.
    pub(crate) fn of_text(text: &str) -> (Self, Vec<Range<usize>>) {
        let chars: Vec<char> = text.chars().collect();
        let spans = units(text);
        let units = spans
            .iter()
            .map(|r| chars[r.clone()].iter().collect())
            .collect();
        let glued = spans
            .iter()
            .enumerate()
            .map(|(i, r)| i > 0 && spans[i - 1].end == r.start)
            .collect();
        let sentence = UnitSentence {
            units,
            glued,
            starts: Vec::new(),
        };
        (sentence, spans)
    }

    /// The units of iSTS tokens with gold chunks (token ranges): a token that starts a chunk
    /// makes its first unit start one; the other units of a token continue its chunk. Tokens
    /// are space-separated, so only units of one token are glued, except the clitics the
    /// Penn Treebank splits off (`'s`, `n't`), which raw text glues to the word before.
    pub(crate) fn of_tokens(tokens: &[String], chunks: &[Range<usize>]) -> Self {
        let mut chunk_starts = vec![false; tokens.len()];
        for c in chunks {
            if let Some(s) = chunk_starts.get_mut(c.start) {
                *s = true;
            }
        }
        let mut out = UnitSentence::default();
        let mut pending_start = false;
        for (token, &starts_chunk) in tokens.iter().zip(&chunk_starts) {
            let token = ptb_token(token);
            let chars: Vec<char> = token.chars().collect();
            let spans = units(token);
            pending_start |= starts_chunk;
            let clitic = is_clitic(token);
            for (j, r) in spans.iter().enumerate() {
                let first_unit = out.units.is_empty();
                out.units.push(chars[r.clone()].iter().collect());
                out.glued.push(match j {
                    0 => clitic && !first_unit,
                    _ => spans[j - 1].end == r.start,
                });
                out.starts.push(first_unit || j == 0 && pending_start);
            }
            if !spans.is_empty() {
                pending_start = false;
            }
        }
        out
    }

    /// Chunks as unit ranges, from per-unit start flags.
    pub(crate) fn ranges(starts: &[bool]) -> Vec<Range<usize>> {
        let mut out: Vec<Range<usize>> = Vec::new();
        for (i, &s) in starts.iter().enumerate() {
            match out.last_mut() {
                Some(last) if !s => last.end = i + 1,
                _ => out.push(i..i + 1),
            }
        }
        out
    }
}

/// The raw text of a Penn Treebank bracket or quote token (`-LRB-` → `(`, ``` `` ``` → `"`).
pub(crate) fn ptb_token(token: &str) -> &str {
    match token {
        "-LRB-" => "(",
        "-RRB-" => ")",
        "-LSB-" => "[",
        "-RSB-" => "]",
        "-LCB-" => "{",
        "-RCB-" => "}",
        "``" | "''" => "\"",
        t => t,
    }
}

/// Penn Treebank clitics, written glued to the word before.
fn is_clitic(token: &str) -> bool {
    matches!(
        token.to_lowercase().as_str(),
        "'s" | "'re" | "'ve" | "'ll" | "'d" | "'m" | "n't"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bracketed_chunks() {
        let (tokens, chunks) =
            parse_bracketed("[ Former Nazi guard ] [ dead ] [ at 91 ] ").expect("parses");
        assert_eq!(tokens, ["Former", "Nazi", "guard", "dead", "at", "91"]);
        assert_eq!(chunks, [0..3, 3..4, 4..6]);
        // The released files' oddities.
        let chunks_of = |l: &str| parse_bracketed(l).expect("parses").1;
        assert_eq!(
            chunks_of("[ is ] [ in [ a path ] [ but ]"),
            [0..1, 1..2, 2..4, 4..5]
        );
        assert_eq!(chunks_of("[ a ] b ] [ c"), [0..1, 1..2, 2..3]);
        assert!(parse_bracketed(" [ ] ").is_none());
    }

    fn unit_texts(text: &str) -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        units(text)
            .into_iter()
            .map(|r| chars[r].iter().collect())
            .collect()
    }

    #[test]
    fn units_split_like_bert() {
        assert_eq!(units("Hello, world!"), [0..5, 5..6, 7..12, 12..13]);
        assert_eq!(
            unit_texts("U.S. don't pay $5+tax"),
            ["U", ".", "S", ".", "don", "'", "t", "pay", "$", "5", "+", "tax"]
        );
        // Char offsets, not bytes: "é" is two bytes, one char.
        assert_eq!(units("café au lait."), [0..4, 5..7, 8..12, 12..13]);
        assert_eq!(
            unit_texts("naïve «quote» — yes"),
            ["naïve", "«", "quote", "»", "—", "yes"]
        );
        // Every CJK ideograph is a unit; kana and hangul words are not cut.
        assert_eq!(unit_texts("我爱北京 ok"), ["我", "爱", "北", "京", "ok"]);
        assert_eq!(units("  \t\n "), Vec::<Range<usize>>::new());
        // Control characters belong to no unit and do not cut a word.
        assert_eq!(units("a\u{0}b c"), [0..3, 4..5]);
    }

    #[test]
    fn tokens_become_units_with_their_chunk_starts() {
        let (tokens, chunks) = parse_bracketed(
            "[ The U.S. ] [ is ] [ in a closed path. ] [ Japan 's yuan ] [ -LRB- up -RRB- ]",
        )
        .expect("parses");
        let s = UnitSentence::of_tokens(&tokens, &chunks);
        assert_eq!(
            s.units,
            [
                "The", "U", ".", "S", ".", "is", "in", "a", "closed", "path", ".", "Japan", "'",
                "s", "yuan", "(", "up", ")"
            ]
        );
        let starts: Vec<usize> = (0..s.starts.len()).filter(|&i| s.starts[i]).collect();
        assert_eq!(starts, [0, 5, 6, 11, 15]);
        let glued: Vec<usize> = (0..s.glued.len()).filter(|&i| s.glued[i]).collect();
        // Inside "U.S." and "path.", and the clitic "'s" glued to "Japan" as raw text has it.
        assert_eq!(glued, [2, 3, 4, 10, 12, 13]);
        assert_eq!(
            UnitSentence::ranges(&s.starts),
            [0..5, 5..6, 6..11, 11..15, 15..18]
        );
    }
}
