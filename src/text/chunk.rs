//! Phrase chunks: splitting a text into the short phrases people align ("[ the black dog ]
//! [ runs ] [ on the beach ]"), learned from the gold chunks of SemEval-2016 iSTS.
//!
//! Also reads the bracketed chunk format of the iSTS `*.chunk.txt` files, the chunker's
//! training data.

use std::ops::Range;

/// One line of an iSTS `*.chunk.txt` file (`[ Former Nazi guard ] [ dead ] [ at 91 ]`): its
/// tokens, and its chunks as ranges of token indices covering every token in order. Read
/// leniently, as the released files need (one line of answers-students reads `[ in [ a closed
/// path ]`): a `[` inside a chunk starts the next chunk, a token outside brackets is a chunk of
/// its own, a stray `]` is ignored. None when the line has no token.
pub fn parse_bracketed(line: &str) -> Option<(Vec<String>, Vec<Range<usize>>)> {
    let mut tokens: Vec<String> = Vec::new();
    let mut chunks: Vec<Range<usize>> = Vec::new();
    let mut open: Option<usize> = None;
    let mut close = |start: usize, end: usize, chunks: &mut Vec<Range<usize>>| {
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
        assert_eq!(chunks_of("[ is ] [ in [ a path ] [ but ]"), [0..1, 1..2, 2..4, 4..5]);
        assert_eq!(chunks_of("[ a ] b ] [ c"), [0..1, 1..2, 2..3]);
        assert!(parse_bracketed(" [ ] ").is_none());
    }
}
