//! Explanations as data: everything a UI needs to show why two questions match — both texts'
//! words and phrase chunks with char spans, per-direction RCMD scores, the token and word
//! alignments with their cosines, the phrase alignment (chunk pairs with a relation type and a
//! 0–5 score), and the contribution matrices whose entries add up to the score. Like tantivy's
//! `Explanation`, it repeats the score computation term by term; rendering is someone else's job.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::align::{pair_features, Aligner, ChunkLink, ChunkPairFeatures, PairInput};
use super::cosine::dot;
use super::rcmd::{rcmd, Link, Rcmd, Tokens, Weights};
use super::words::{content_words, group_words, merge_words, word_matrix, Chunk, Word};
use crate::text::chunk::Chunker;
use crate::text::normalize::normalize;
use crate::types::{Encoded, Token};

/// One side of an explanation, as input.
#[derive(Debug, Clone, Copy)]
pub struct Sentence<'a> {
    /// The original text (offsets point into it).
    pub text: &'a str,
    /// Its content wordpieces.
    pub tokens: &'a [Token],
    /// One unit vector per content wordpiece.
    pub vectors: Tokens<'a>,
}

impl<'a> Sentence<'a> {
    /// The sentence an [`Encoded`] describes.
    pub fn of(text: &'a str, encoded: &'a Encoded) -> Self {
        Sentence {
            text,
            tokens: &encoded.tokens,
            vectors: Tokens::new(&encoded.token_vectors, encoded.dim()),
        }
    }
}

/// One side of an explanation, as output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Side {
    /// The original text.
    pub text: String,
    /// Content wordpieces with char spans.
    pub tokens: Vec<Token>,
    /// Words (merged wordpieces) with char spans and token ranges.
    pub words: Vec<Word>,
    /// Phrase chunks (runs of words) with char spans; `aligned` false for chunks in no chunk
    /// alignment.
    pub chunks: Vec<Chunk>,
}

/// A dense row-major matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Matrix {
    /// Number of rows (side a).
    pub rows: usize,
    /// Number of columns (side b).
    pub cols: usize,
    /// `rows × cols` values, row-major.
    pub values: Vec<f32>,
}

impl Matrix {
    /// Entry (i, j).
    pub fn get(&self, i: usize, j: usize) -> f32 {
        self.values[i * self.cols + j]
    }
}

/// How a word pair was chosen by the transport plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// A token of the a-word sends its mass to a token of the b-word.
    AToB,
    /// A token of the b-word sends its mass to a token of the a-word.
    BToA,
    /// Both.
    Both,
}

/// An aligned word pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WordLink {
    /// Word index in a.
    pub a: usize,
    /// Word index in b.
    pub b: usize,
    /// The highest cosine among the token links between the two words.
    pub cosine: f32,
    /// The pair's total contribution to the score.
    pub contribution: f32,
    /// Which plan(s) chose the pair.
    pub direction: Direction,
}

/// Why two texts score what they score under RCMD.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    /// Side a.
    pub a: Side,
    /// Side b.
    pub b: Side,
    /// `uniform` or `idf`.
    pub weighting: String,
    /// RCMD_1 (a→b).
    pub forward: f32,
    /// RCMD_2 (b→a).
    pub backward: f32,
    /// s_RCMD = (forward + backward) / 2 = the sum of every contribution.
    pub score: f32,
    /// For each token of a: its partner in b (the a→b plan).
    pub a_to_b: Vec<Link>,
    /// For each token of b: its partner in a (the b→a plan).
    pub b_to_a: Vec<Link>,
    /// Token-pair contributions ½(T1 + T2) ⊙ (1 − M), `a.tokens × b.tokens`.
    pub token_contributions: Matrix,
    /// Word-pair contributions (sums over their pieces), `a.words × b.words`.
    pub word_contributions: Matrix,
    /// Word-pair similarity: the highest cosine between their pieces, `a.words × b.words`.
    pub word_cosines: Matrix,
    /// Word pairs joined by the transport plans, by descending contribution.
    pub word_alignments: Vec<WordLink>,
    /// Chunk-pair contributions (sums over their tokens), `a.chunks × b.chunks`.
    pub chunk_contributions: Matrix,
    /// The phrase alignment: chunk pairs people would align, each with a relation type, a 0–5
    /// score, the link model's probability and its contribution; in (a, b) order. A chunk may
    /// be in several pairs.
    pub chunk_alignments: Vec<ChunkLink>,
}

impl Explanation {
    /// The numbers in its matrices: what its size in an answer grows with (about ten bytes of
    /// JSON each), so callers can bound a response before sending it.
    pub fn cells(&self) -> usize {
        self.token_contributions.values.len()
            + self.word_contributions.values.len()
            + self.word_cosines.values.len()
            + self.chunk_contributions.values.len()
    }
}

/// Each side's chunks as char spans of its text, in order.
pub type Chunks<'a> = (&'a [Range<usize>], &'a [Range<usize>]);

/// Where an explanation's phrase chunks come from: each text's chunks as char spans of the
/// text, in order. The encoder is one (the contextual chunker over its own hidden states);
/// [`WordChunks`] needs nothing.
pub trait ChunkSource: Sync {
    /// Chunks of each of `texts`.
    fn chunks(&self, texts: &[&str]) -> Vec<Vec<Range<usize>>>;
}

/// The shipped word-feature chunker ([`Chunker::builtin`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct WordChunks;

impl ChunkSource for WordChunks {
    fn chunks(&self, texts: &[&str]) -> Vec<Vec<Range<usize>>> {
        texts
            .iter()
            .map(|t| chunk_spans(Chunker::builtin(), t))
            .collect()
    }
}

/// Explains RCMD(a, b) with each side chunked by `source`.
pub fn explain_chunked(
    a: Sentence<'_>,
    b: Sentence<'_>,
    weights: Weights<'_>,
    source: &dyn ChunkSource,
) -> Explanation {
    let chunks = source.chunks(&[a.text, b.text]);
    explain_with_chunks(a, b, weights, Some((&chunks[0], &chunks[1])))
}

/// Explains RCMD(a, b), with each side chunked by the shipped chunker.
pub fn explain(a: Sentence<'_>, b: Sentence<'_>, weights: Weights<'_>) -> Explanation {
    explain_with_chunks(a, b, weights, None)
}

/// Explains RCMD(a, b); `chunks` gives each side's chunks as char spans (e.g. gold chunks)
/// instead of the shipped chunker's.
pub fn explain_with_chunks(
    a: Sentence<'_>,
    b: Sentence<'_>,
    weights: Weights<'_>,
    chunks: Option<Chunks<'_>>,
) -> Explanation {
    explain_with(a, b, weights, chunks, Aligner::builtin())
}

/// Explains RCMD(a, b) with the given chunks (or the shipped chunker's) and phrase aligner.
pub fn explain_with(
    a: Sentence<'_>,
    b: Sentence<'_>,
    weights: Weights<'_>,
    chunks: Option<Chunks<'_>>,
    aligner: &Aligner,
) -> Explanation {
    let r = rcmd(a.vectors, b.vectors, weights);
    let (l1, l2) = (a.vectors.len(), b.vectors.len());
    let words_a = merge_words(a.text, a.tokens);
    let words_b = merge_words(b.text, b.tokens);
    let token_contributions = Matrix {
        rows: l1,
        cols: l2,
        values: r.contribution_matrix(),
    };
    let word_contributions = Matrix {
        rows: words_a.len(),
        cols: words_b.len(),
        values: word_matrix(&token_contributions.values, l2, &words_a, &words_b),
    };
    let cosines = token_cosines(a.vectors, b.vectors);
    let word_cosines = Matrix {
        rows: words_a.len(),
        cols: words_b.len(),
        values: words_a
            .iter()
            .flat_map(|wa| {
                let cosines = &cosines;
                words_b.iter().map(move |wb| {
                    wa.tokens
                        .clone()
                        .flat_map(|k| wb.tokens.clone().map(move |l| cosines[k * l2 + l]))
                        .fold(f32::NEG_INFINITY, f32::max)
                })
            })
            .collect(),
    };
    let word_alignments = word_links(
        &r.a_to_b,
        &r.b_to_a,
        &words_a,
        &words_b,
        &word_contributions,
    );

    let spans = |given: Option<&[Range<usize>]>, text: &str| match given {
        Some(spans) => spans.to_vec(),
        None => chunk_spans(Chunker::builtin(), text),
    };
    let mut chunks_a = group_words(a.text, &words_a, &spans(chunks.map(|c| c.0), a.text));
    let mut chunks_b = group_words(b.text, &words_b, &spans(chunks.map(|c| c.1), b.text));
    let phrases = Phrases::of(
        cosines,
        l2,
        &r,
        (&chunks_a, &words_a),
        (&chunks_b, &words_b),
    );
    let chunk_alignments = aligner.align(&phrases.input(&token_contributions.values));
    for link in &chunk_alignments {
        chunks_a[link.a].aligned = true;
        chunks_b[link.b].aligned = true;
    }
    let (tokens_a, tokens_b) = (&phrases.tokens_a, &phrases.tokens_b);
    let chunk_contributions = Matrix {
        rows: tokens_a.len(),
        cols: tokens_b.len(),
        values: block_sums(&token_contributions.values, l2, tokens_a, tokens_b),
    };

    let side = |s: Sentence<'_>, words: Vec<Word>, chunks: Vec<Chunk>| Side {
        text: s.text.to_string(),
        tokens: s.tokens.to_vec(),
        words,
        chunks,
    };
    Explanation {
        a: side(a, words_a, chunks_a),
        b: side(b, words_b, chunks_b),
        weighting: match weights {
            Weights::Uniform => "uniform".into(),
            Weights::Given(..) => "idf".into(),
        },
        forward: r.forward,
        backward: r.backward,
        score: r.score,
        a_to_b: r.a_to_b,
        b_to_a: r.b_to_a,
        token_contributions,
        word_contributions,
        word_cosines,
        word_alignments,
        chunk_contributions,
        chunk_alignments,
    }
}

/// What the phrase aligner reads of a pair, owned: token cosines, the plans' partners, and
/// each side's chunks as token ranges and content words.
struct Phrases {
    cosines: Vec<f32>,
    l2: usize,
    a_partner: Vec<usize>,
    b_partner: Vec<usize>,
    tokens_a: Vec<Range<usize>>,
    tokens_b: Vec<Range<usize>>,
    content_a: Vec<Vec<String>>,
    content_b: Vec<Vec<String>>,
}

impl Phrases {
    fn of(
        cosines: Vec<f32>,
        l2: usize,
        r: &Rcmd,
        (chunks_a, words_a): (&[Chunk], &[Word]),
        (chunks_b, words_b): (&[Chunk], &[Word]),
    ) -> Phrases {
        let token_ranges =
            |chunks: &[Chunk], words: &[Word]| chunks.iter().map(|c| c.tokens(words)).collect();
        let content = |chunks: &[Chunk], words: &[Word]| {
            chunks
                .iter()
                .map(|c| content_words(&words[c.words.clone()]))
                .collect()
        };
        Phrases {
            cosines,
            l2,
            a_partner: r.a_to_b.iter().map(|l| l.partner).collect(),
            b_partner: r.b_to_a.iter().map(|l| l.partner).collect(),
            tokens_a: token_ranges(chunks_a, words_a),
            tokens_b: token_ranges(chunks_b, words_b),
            content_a: content(chunks_a, words_a),
            content_b: content(chunks_b, words_b),
        }
    }

    fn input<'a>(&'a self, contributions: &'a [f32]) -> PairInput<'a> {
        PairInput {
            cosines: &self.cosines,
            contributions,
            l2: self.l2,
            a_partner: &self.a_partner,
            b_partner: &self.b_partner,
            chunks_a: &self.tokens_a,
            chunks_b: &self.tokens_b,
            words_a: &self.content_a,
            words_b: &self.content_b,
        }
    }
}

/// The chunks of both sides (as [`explain_with_chunks`] forms them from char spans) and the
/// features of every chunk pair, row-major: what fitting the phrase aligner reads.
pub fn chunk_pair_features(
    a: Sentence<'_>,
    b: Sentence<'_>,
    weights: Weights<'_>,
    (spans_a, spans_b): Chunks<'_>,
) -> (Vec<Chunk>, Vec<Chunk>, Vec<ChunkPairFeatures>) {
    let r = rcmd(a.vectors, b.vectors, weights);
    let contributions = r.contribution_matrix();
    let words_a = merge_words(a.text, a.tokens);
    let words_b = merge_words(b.text, b.tokens);
    let chunks_a = group_words(a.text, &words_a, spans_a);
    let chunks_b = group_words(b.text, &words_b, spans_b);
    let cosines = token_cosines(a.vectors, b.vectors);
    let phrases = Phrases::of(
        cosines,
        b.vectors.len(),
        &r,
        (&chunks_a, &words_a),
        (&chunks_b, &words_b),
    );
    let features = pair_features(&phrases.input(&contributions));
    (chunks_a, chunks_b, features)
}

/// `chunker`'s chunks of `text` as char spans of the original text: chunked as tokenized,
/// after normalisation (entities decoded, whitespace collapsed).
pub fn chunk_spans(chunker: &Chunker, text: &str) -> Vec<Range<usize>> {
    let normal = normalize(text);
    chunker
        .chunk(&normal.text)
        .into_iter()
        .map(|r| normal.to_original(r))
        .collect()
}

/// Every token pair's cosine (dot of unit rows), `l1 × l2` row-major.
fn token_cosines(a: Tokens<'_>, b: Tokens<'_>) -> Vec<f32> {
    (0..a.len())
        .flat_map(|k| (0..b.len()).map(move |l| dot(a.row(k), b.row(l))))
        .collect()
}

/// Sums a token-level `l1 × l2` matrix over blocks of token ranges.
fn block_sums(tokens: &[f32], l2: usize, a: &[Range<usize>], b: &[Range<usize>]) -> Vec<f32> {
    a.iter()
        .flat_map(|ra| {
            b.iter().map(move |rb| {
                ra.clone()
                    .flat_map(|k| rb.clone().map(move |l| tokens[k * l2 + l]))
                    .sum()
            })
        })
        .collect()
}

/// Word pairs joined by at least one token link, with the best cosine among those links.
fn word_links(
    a_to_b: &[Link],
    b_to_a: &[Link],
    words_a: &[Word],
    words_b: &[Word],
    contributions: &Matrix,
) -> Vec<WordLink> {
    let word_of = |words: &[Word], token: usize| {
        words
            .iter()
            .position(|w| w.tokens.contains(&token))
            .expect("every token is in a word")
    };
    let mut pairs: BTreeMap<(usize, usize), (f32, bool, bool)> = BTreeMap::new();
    for (k, l) in a_to_b.iter().enumerate() {
        let e = pairs
            .entry((word_of(words_a, k), word_of(words_b, l.partner)))
            .or_insert((f32::NEG_INFINITY, false, false));
        e.0 = e.0.max(l.cosine);
        e.1 = true;
    }
    for (k, l) in b_to_a.iter().enumerate() {
        let e = pairs
            .entry((word_of(words_a, l.partner), word_of(words_b, k)))
            .or_insert((f32::NEG_INFINITY, false, false));
        e.0 = e.0.max(l.cosine);
        e.2 = true;
    }
    let mut links: Vec<WordLink> = pairs
        .into_iter()
        .map(|((a, b), (cosine, ab, ba))| WordLink {
            a,
            b,
            cosine,
            contribution: contributions.get(a, b),
            direction: match (ab, ba) {
                (true, true) => Direction::Both,
                (true, false) => Direction::AToB,
                _ => Direction::BToA,
            },
        })
        .collect();
    links.sort_by(|x, y| y.contribution.total_cmp(&x.contribution));
    links
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::score::words::tests::tok;

    #[test]
    fn explanation_adds_up_and_merges_words() {
        // a: "big cats" (big, cat, ##s); b: "large cat" (large, cat).
        let a_tokens = [tok("big", 0, 3), tok("cat", 4, 7), tok("##s", 7, 8)];
        let b_tokens = [tok("large", 0, 5), tok("cat", 6, 9)];
        let s = std::f32::consts::FRAC_1_SQRT_2;
        let a_vec = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, s, s];
        let b_vec = [s, 0.0, s, 0.0, 1.0, 0.0];
        let a = Sentence {
            text: "big cats",
            tokens: &a_tokens,
            vectors: Tokens::new(&a_vec, 3),
        };
        let b = Sentence {
            text: "large cat",
            tokens: &b_tokens,
            vectors: Tokens::new(&b_vec, 3),
        };
        let e = explain(a, b, Weights::Uniform);
        let words: Vec<&str> = e.a.words.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(words, ["big", "cats"]);
        let token_sum: f32 = e.token_contributions.values.iter().sum();
        let word_sum: f32 = e.word_contributions.values.iter().sum();
        let chunk_sum: f32 = e.chunk_contributions.values.iter().sum();
        assert!((token_sum - e.score).abs() < 1e-6 && (word_sum - e.score).abs() < 1e-6);
        assert!(
            (chunk_sum - e.score).abs() < 1e-6,
            "chunk contributions add up too"
        );
        // "cats" ↔ "cat" is chosen by both plans; "big" ↔ "large" too.
        let cat = e
            .word_alignments
            .iter()
            .find(|l| l.a == 1)
            .expect("cats aligned");
        assert_eq!((cat.b, cat.direction), (1, Direction::Both));
        assert!((cat.cosine - 1.0).abs() < 1e-6);
        assert!((e.word_cosines.get(1, 1) - 1.0).abs() < 1e-6);
        assert!((e.word_cosines.get(0, 0) - s).abs() < 1e-6);
        let chunks: Vec<&str> = e.a.chunks.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(
            chunks.concat().replace(' ', ""),
            "bigcats",
            "chunks cover the words"
        );
        let json = serde_json::to_string(&e).expect("serialises");
        let back: Explanation = serde_json::from_str(&json).expect("deserialises");
        assert_eq!(back, e);
    }
}
