//! `kindred eval alignment`: kindred's phrase alignment against the human alignments of
//! SemEval-2016 Task 2 (interpretable STS), scored with the official F1s ([`ists::evaluate`]),
//! next to a model-free word-overlap baseline chunked and scored by the same code.
//!
//! A pair's sentences are the task's tokens joined by single spaces, so every token has a
//! char span; kindred's chunks (its own chunker's, or the gold chunks as spans) map back to the
//! task's token ids by overlap.

use std::ops::Range;

use serde::Serialize;

use super::ists::{self, ChunkAlignment, F1s, IstsPair, WaPair};
use crate::error::Result;
use crate::score::align::ChunkPairFeatures;
use crate::score::align::{Aligner, ChunkLink};
use crate::score::explain::{chunk_pair_features, explain_with, ChunkSource, Sentence, WordChunks};
use crate::score::words::Chunk;
use crate::score::Weights;
use crate::types::Encoded;
use crate::Encoder;

/// The learned models an alignment run uses (the shipped ones, or files being evaluated).
#[derive(Clone, Copy)]
pub struct Models<'a> {
    /// Chunks text when the gold chunks are not used.
    pub chunker: &'a dyn ChunkSource,
    /// Links chunks and labels the links.
    pub aligner: &'a Aligner,
}

impl Models<'static> {
    /// The models shipped with kindred.
    pub fn builtin() -> Self {
        Models {
            chunker: &WordChunks,
            aligner: Aligner::builtin(),
        }
    }
}

/// Whose chunks the alignment uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Chunking {
    /// kindred's own chunker (what users get).
    Own,
    /// The task's gold chunks.
    Gold,
}

/// One sentence of a pair: its text (the tokens joined by spaces) and each token's char span.
#[derive(Debug, Clone)]
pub struct TaskSentence {
    /// The tokens joined by single spaces.
    pub text: String,
    /// Char span of each task token in `text`.
    pub spans: Vec<Range<usize>>,
}

impl TaskSentence {
    /// The sentence of `tokens`.
    pub fn of(tokens: &[String]) -> TaskSentence {
        let mut spans = Vec::with_capacity(tokens.len());
        let mut at = 0;
        for t in tokens {
            let len = t.chars().count();
            spans.push(at..at + len);
            at += len + 1;
        }
        TaskSentence {
            text: tokens.join(" "),
            spans,
        }
    }

    /// Chunk char spans: the gold chunks' (token ranges), or `chunker`'s.
    pub fn chunk_spans(
        &self,
        gold: Option<&[Range<usize>]>,
        chunker: &dyn ChunkSource,
    ) -> Vec<Range<usize>> {
        match gold {
            Some(chunks) => chunks
                .iter()
                .filter(|c| !c.is_empty() && c.end <= self.spans.len())
                .map(|c| self.spans[c.start].start..self.spans[c.end - 1].end)
                .collect(),
            None => chunker.chunks(&[&self.text]).pop().unwrap_or_default(),
        }
    }

    /// The task's 1-based token ids a char span overlaps.
    pub fn token_ids(&self, start: usize, end: usize) -> Vec<usize> {
        self.spans
            .iter()
            .enumerate()
            .filter(|(_, s)| s.start < end && s.end > start)
            .map(|(k, _)| k + 1)
            .collect()
    }
}

/// A pair's two sentences.
pub fn sentences(pair: &IstsPair) -> (TaskSentence, TaskSentence) {
    (
        TaskSentence::of(&pair.tokens1),
        TaskSentence::of(&pair.tokens2),
    )
}

/// Each side's chunks as task-token ranges, when known.
type GoldChunks<'a> = (Option<&'a [Range<usize>]>, Option<&'a [Range<usize>]>);

/// The gold chunks of a pair when `chunking` asks for them and the pair has them.
fn gold_chunks(pair: &IstsPair, chunking: Chunking) -> GoldChunks<'_> {
    match chunking {
        Chunking::Gold => (pair.chunks1.as_deref(), pair.chunks2.as_deref()),
        Chunking::Own => (None, None),
    }
}

/// Encodes the sentences of `pairs` (each once), reporting sentences done to `progress`.
pub fn encode_pairs(
    encoder: &Encoder,
    pairs: &[IstsPair],
    progress: impl FnMut(usize),
) -> Result<Vec<(Encoded, Encoded)>> {
    let texts: Vec<String> = pairs
        .iter()
        .flat_map(|p| [p.tokens1.join(" "), p.tokens2.join(" ")])
        .collect();
    let mut encoded = encoder.encode_with_progress(&texts, progress)?.into_iter();
    let mut out = Vec::with_capacity(pairs.len());
    while let (Some(a), Some(b)) = (encoded.next(), encoded.next()) {
        out.push((a, b));
    }
    Ok(out)
}

/// The task's lines for kindred's chunks and chunk links: one line per link, one NOALI line per
/// unaligned chunk.
pub fn wa_lines(
    (sa, sb): (&TaskSentence, &TaskSentence),
    (chunks_a, chunks_b): (&[Chunk], &[Chunk]),
    links: &[(usize, usize, &str, f32)],
) -> Vec<ChunkAlignment> {
    let ids_a = |c: &Chunk| sa.token_ids(c.start, c.end);
    let ids_b = |c: &Chunk| sb.token_ids(c.start, c.end);
    let mut lines: Vec<ChunkAlignment> = links
        .iter()
        .map(|&(i, j, relation, score)| ChunkAlignment {
            a: ids_a(&chunks_a[i]),
            b: ids_b(&chunks_b[j]),
            types: vec![relation.to_string()],
            score: Some(score.round()),
        })
        .collect();
    let noali = |a: Vec<usize>, b: Vec<usize>| ChunkAlignment {
        a,
        b,
        types: vec!["NOALI".into()],
        score: None,
    };
    for (i, c) in chunks_a.iter().enumerate() {
        if !links.iter().any(|l| l.0 == i) {
            lines.push(noali(ids_a(c), Vec::new()));
        }
    }
    for (j, c) in chunks_b.iter().enumerate() {
        if !links.iter().any(|l| l.1 == j) {
            lines.push(noali(Vec::new(), ids_b(c)));
        }
    }
    lines
}

/// kindred's alignment of one encoded pair, as the task's lines.
pub fn kindred_pair(
    pair: &IstsPair,
    (ea, eb): (&Encoded, &Encoded),
    chunking: Chunking,
    weights: Weights<'_>,
    models: Models<'_>,
) -> WaPair {
    let (sa, sb) = sentences(pair);
    let (ga, gb) = gold_chunks(pair, chunking);
    let (spans_a, spans_b) = (
        sa.chunk_spans(ga, models.chunker),
        sb.chunk_spans(gb, models.chunker),
    );
    let e = explain_with(
        Sentence::of(&sa.text, ea),
        Sentence::of(&sb.text, eb),
        weights,
        Some((&spans_a, &spans_b)),
        models.aligner,
    );
    let links: Vec<(usize, usize, &str, f32)> = e
        .chunk_alignments
        .iter()
        .map(|l: &ChunkLink| (l.a, l.b, l.relation.name(), l.score))
        .collect();
    wa_pair(
        pair,
        wa_lines((&sa, &sb), (&e.a.chunks, &e.b.chunks), &links),
    )
}

/// The chunks and chunk-pair features of one encoded pair (what fitting the aligner reads).
pub fn pair_features(
    pair: &IstsPair,
    (ea, eb): (&Encoded, &Encoded),
    chunking: Chunking,
    chunker: &dyn ChunkSource,
) -> (
    TaskSentence,
    TaskSentence,
    Vec<Chunk>,
    Vec<Chunk>,
    Vec<ChunkPairFeatures>,
) {
    let (sa, sb) = sentences(pair);
    let (ga, gb) = gold_chunks(pair, chunking);
    let (spans_a, spans_b) = (sa.chunk_spans(ga, chunker), sb.chunk_spans(gb, chunker));
    let (ca, cb, f) = chunk_pair_features(
        Sentence::of(&sa.text, ea),
        Sentence::of(&sb.text, eb),
        Weights::Uniform,
        (&spans_a, &spans_b),
    );
    (sa, sb, ca, cb, f)
}

/// The word-overlap baseline on the same chunks: chunk pairs sharing the most lower-cased
/// words (not punctuation), mutually; EQUI 5 when their words are the same set, else SIMI 3.
pub fn overlap_pair(pair: &IstsPair, chunking: Chunking, chunker: &dyn ChunkSource) -> WaPair {
    let (sa, sb) = sentences(pair);
    let (ga, gb) = gold_chunks(pair, chunking);
    let chunks = |s: &TaskSentence, gold: Option<&[Range<usize>]>, tokens: &[String]| {
        s.chunk_spans(gold, chunker)
            .into_iter()
            .map(|span| {
                let words: Vec<String> = s
                    .token_ids(span.start, span.end)
                    .into_iter()
                    .map(|k| tokens[k - 1].to_lowercase())
                    .filter(|w| w.chars().any(char::is_alphanumeric))
                    .collect();
                (span, words)
            })
            .collect::<Vec<_>>()
    };
    let (ca, cb) = (
        chunks(&sa, ga, &pair.tokens1),
        chunks(&sb, gb, &pair.tokens2),
    );
    let shared = |a: &[String], b: &[String]| a.iter().filter(|w| b.contains(w)).count();
    let best = |counts: &mut dyn Iterator<Item = (usize, usize)>| {
        counts.fold(
            (usize::MAX, 0),
            |b, (k, v)| if v > b.1 { (k, v) } else { b },
        )
    };
    let mut links = Vec::new();
    for (i, (_, wa)) in ca.iter().enumerate() {
        let (j, count) = best(
            &mut cb
                .iter()
                .enumerate()
                .map(|(j, (_, wb))| (j, shared(wa, wb))),
        );
        if count == 0 {
            continue;
        }
        let (back, _) = best(
            &mut ca
                .iter()
                .enumerate()
                .map(|(k, (_, w))| (k, shared(w, &cb[j].1))),
        );
        if back == i {
            let same = shared(wa, &cb[j].1) == wa.len() && wa.len() == cb[j].1.len();
            links.push((
                i,
                j,
                if same { "EQUI" } else { "SIMI" },
                if same { 5.0 } else { 3.0 },
            ));
        }
    }
    let as_chunks = |cs: &[(Range<usize>, Vec<String>)]| -> Vec<Chunk> {
        cs.iter()
            .map(|(span, _)| Chunk {
                text: String::new(),
                start: span.start,
                end: span.end,
                words: 0..0,
                aligned: false,
            })
            .collect()
    };
    wa_pair(
        pair,
        wa_lines((&sa, &sb), (&as_chunks(&ca), &as_chunks(&cb)), &links),
    )
}

fn wa_pair(pair: &IstsPair, alignments: Vec<ChunkAlignment>) -> WaPair {
    WaPair {
        id: pair.id,
        tokens1: pair.tokens1.clone(),
        tokens2: pair.tokens2.clone(),
        alignments,
    }
}

/// The gold alignment of pairs, as the scorer reads it (pairs without gold left out).
pub fn gold_pairs(pairs: &[IstsPair]) -> Vec<WaPair> {
    pairs
        .iter()
        .filter_map(|p| p.gold.clone().map(|g| wa_pair(p, g)))
        .collect()
}

/// One genre's scores.
#[derive(Debug, Clone, Serialize)]
pub struct GenreReport {
    /// The genre.
    pub genre: String,
    /// Pairs scored.
    pub pairs: usize,
    /// Whose chunks.
    pub chunking: Chunking,
    /// kindred's phrase alignment.
    pub kindred: F1s,
    /// The word-overlap baseline on the same chunks.
    pub word_overlap: F1s,
}

/// Scores system alignments of `pairs` against their gold, with the overlap baseline.
pub fn report(
    genre: &str,
    pairs: &[IstsPair],
    system: &[WaPair],
    chunking: Chunking,
    chunker: &dyn ChunkSource,
) -> GenreReport {
    let gold = gold_pairs(pairs);
    let overlap: Vec<WaPair> = pairs
        .iter()
        .map(|p| overlap_pair(p, chunking, chunker))
        .collect();
    GenreReport {
        genre: genre.to_string(),
        pairs: pairs.len(),
        chunking,
        kindred: ists::evaluate(&gold, system),
        word_overlap: ists::evaluate(&gold, &overlap),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_tokens_map_to_char_spans_and_back() {
        let s = TaskSentence::of(&["café".into(), "au".into(), "lait".into()]);
        assert_eq!(s.text, "café au lait");
        assert_eq!(s.spans, [0..4, 5..7, 8..12]);
        assert_eq!(s.token_ids(0, 7), [1, 2]);
        assert_eq!(
            s.chunk_spans(Some(&[0..1, 1..3]), &WordChunks),
            [0..4, 5..12]
        );
    }

    #[test]
    fn overlap_baseline_links_chunks_sharing_words() {
        // a: [the big dog] [runs] [.]; b: [runs] [the dog] → (0,1) SIMI 3 (two shared words
        // of three), (1,0) EQUI 5; "." shares nothing and is unaligned.
        let split = |t: &str| t.split(' ').map(String::from).collect::<Vec<_>>();
        let p = IstsPair {
            id: 1,
            tokens1: split("the big dog runs ."),
            tokens2: split("runs the dog"),
            chunks1: Some(vec![0..3, 3..4, 4..5]),
            chunks2: Some(vec![0..1, 1..3]),
            gold: None,
        };
        let wa = overlap_pair(&p, Chunking::Gold, &WordChunks);
        type Line<'a> = (Vec<usize>, Vec<usize>, &'a str, Option<f32>);
        let lines: Vec<Line<'_>> = wa
            .alignments
            .iter()
            .map(|l| (l.a.clone(), l.b.clone(), l.types[0].as_str(), l.score))
            .collect();
        assert_eq!(
            lines,
            [
                (vec![1, 2, 3], vec![2, 3], "SIMI", Some(3.0)),
                (vec![4], vec![1], "EQUI", Some(5.0)),
                (vec![5], vec![], "NOALI", None),
            ]
        );
    }
}
