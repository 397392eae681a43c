//! Compound questions and what a query asks beyond a match (INTERSENT fusion and difference,
//! design.md §3), over the candidates a search already scored.
//!
//! A compound query asks two stored questions at once ("How do I reset my password and change
//! the email on my account?"). Each pair of the best single matches is judged as one virtual
//! document — its sentence vector the fusion of the two, its token vectors both sets, its text
//! both texts — with the same features and judge as a single match. The query is compound when
//! the best pair's P(duplicate) reaches the threshold and beats every single match: the answer
//! then names both parts and the query phrases each one explains (the phrase whose tokens align
//! better with it).
//!
//! What a query asks beyond a match: its phrases whose tokens find no close token in the match.
//!
//! Pure: vectors, texts and the judge in; the encoder's operators come as closures.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::{pair_features, Explainable, Hit, Judge};
use crate::math::dot;
use crate::score::rerank::Reranker;
use crate::score::{Tokens, Weights};
use crate::text::chunk::is_function_word;
use crate::types::{Encoded, Gaussian};

/// Single matches (the best by cosine) that pair up into compounds.
pub const PAIR_POOL: usize = 10;
/// Pairs (the best by the arithmetic fusion's cosine) judged in full.
const JUDGED_PAIRS: usize = 5;
/// A query token is explained by a document when its best cosine with one of the document's
/// tokens reaches this (contextual token vectors of unrelated words stay well below it).
pub const ALIGNED: f32 = 0.6;

/// A query that asks two stored questions at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compound {
    /// The two stored questions, each with the query phrases it explains.
    pub covers: Vec<Covered>,
    /// P(duplicate) of (the query, both questions as one).
    pub probability: f32,
}

/// One part of a compound.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Covered {
    /// External id.
    pub id: String,
    /// The stored question.
    pub text: String,
    /// Its own P(duplicate) against the whole query.
    pub probability: f32,
    /// The query's phrases it explains.
    pub phrases: Vec<String>,
}

/// What a query asks beyond one match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Beyond {
    /// The query's phrases with no close token in the match.
    pub phrases: Vec<String>,
    /// Stored questions nearest to the difference of the two vectors (query ⊖ match): what
    /// the rest of the query is about, read back as questions (the match itself left out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nearest: Vec<Nearest>,
}

/// A stored question near a vector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Nearest {
    /// External id.
    pub id: String,
    /// The stored question.
    pub text: String,
    /// Cosine with the vector.
    pub cosine: f32,
}

/// What judging a pair as one document, and reading a difference back, need from the model
/// and the collection.
pub struct Pairing<'a> {
    /// Fusion of two sentence vectors (the model's operator, else arithmetic).
    pub fuse: &'a dyn Fn(&[f32], &[f32]) -> Vec<f32>,
    /// Difference of two sentence vectors, `a ⊖ b` (the model's operator, else arithmetic).
    pub difference: &'a dyn Fn(&[f32], &[f32]) -> Vec<f32>,
    /// The intent of a set of token vectors (`n × d`), as the model makes intents.
    pub intent: &'a dyn Fn(&[f32]) -> Gaussian,
    /// Lexical similarity of the query to a text, with the collection's IDF.
    pub lexical: &'a dyn Fn(&str) -> f32,
    /// The stored questions nearest a vector, leaving out the document with the given id.
    pub nearest: &'a dyn Fn(&[f32], &str) -> Vec<Nearest>,
}

/// The compound the best single matches `hits` make for `query`, if one beats every single
/// match at `threshold`. `chunks`: the query's phrase chunks (char spans).
pub fn detect(
    judge: &Judge<'_>,
    (text, query): (&str, &Encoded),
    hits: &[(Hit, Explainable)],
    pairing: &Pairing<'_>,
    chunks: &[Range<usize>],
    threshold: f32,
) -> Option<Compound> {
    let best_single = hits
        .iter()
        .map(|(h, _)| h.probability)
        .fold(0.0f32, f32::max);
    let mut pool: Vec<usize> = (0..hits.len()).collect();
    pool.sort_by(|&a, &b| {
        hits[b]
            .0
            .stages
            .cosine
            .score
            .total_cmp(&hits[a].0.stages.cosine.score)
    });
    pool.truncate(PAIR_POOL);
    let mut pairs: Vec<(usize, usize, f32)> = Vec::new();
    for (n, &i) in pool.iter().enumerate() {
        for &j in &pool[n + 1..] {
            let sum: Vec<f32> = hits[i]
                .1
                .sentence
                .iter()
                .zip(&hits[j].1.sentence)
                .map(|(a, b)| a + b)
                .collect();
            let norm = dot(&sum, &sum).sqrt().max(1e-12);
            pairs.push((i, j, dot(&query.sentence, &sum) / norm));
        }
    }
    pairs.sort_by(|a, b| b.2.total_cmp(&a.2));
    pairs.truncate(JUDGED_PAIRS);
    let d = query.dim();
    let query_tokens = Tokens::new(&query.token_vectors, d);
    let mut reranker = Reranker::new();
    let (i, j, probability) = pairs
        .iter()
        .map(|&(i, j, _)| {
            let (a, b) = (&hits[i].1, &hits[j].1);
            let mut tokens = a.vectors.decode();
            tokens.extend(b.vectors.decode());
            let both = crate::score::quant::I8Tokens::encode(Tokens::new(&tokens, d));
            let directions = reranker.directions_i8_weighted(query_tokens, &both, Weights::Uniform);
            let fused = (pairing.fuse)(&a.sentence, &b.sentence);
            let intent = (pairing.intent)(&tokens);
            let joined = format!("{} {}", a.text, b.text);
            let features = pair_features(
                judge,
                (&query.sentence, &query.intent),
                (&fused, &intent),
                directions.uniform,
                (pairing.lexical)(&joined),
            );
            (i, j, judge.probability(&features))
        })
        .max_by(|a, b| a.2.total_cmp(&b.2))?;
    if probability < threshold || probability <= best_single {
        return None;
    }
    let (a, b) = (&hits[i], &hits[j]);
    let (sa, sb) = (
        token_alignment(query, &a.1.vectors.decode()),
        token_alignment(query, &b.1.vectors.decode()),
    );
    let (mut pa, mut pb) = (Vec::new(), Vec::new());
    let content = content_tokens(text, query);
    for chunk in chunks {
        let members = tokens_in(query, &content, chunk);
        let mean =
            |s: &[f32]| members.iter().map(|&t| s[t]).sum::<f32>() / members.len().max(1) as f32;
        let (ma, mb) = (mean(&sa), mean(&sb));
        if members.is_empty() || ma.max(mb) < ALIGNED {
            continue;
        }
        let phrase = slice_chars(text, chunk);
        if ma >= mb {
            pa.push(phrase)
        } else {
            pb.push(phrase)
        }
    }
    let part = |(hit, _): &(Hit, Explainable), phrases: Vec<String>| Covered {
        id: hit.id.clone(),
        text: hit.text.clone(),
        probability: hit.probability,
        phrases,
    };
    Some(Compound {
        covers: vec![part(a, pa), part(b, pb)],
        probability,
    })
}

/// The query's phrases (`chunks`, char spans of `text`) that `doc`'s tokens leave unexplained:
/// none of their tokens reaches [`ALIGNED`] with any token of the document.
pub fn unmatched_phrases(
    (text, query): (&str, &Encoded),
    doc: &Explainable,
    chunks: &[Range<usize>],
) -> Vec<String> {
    let best = token_alignment(query, &doc.vectors.decode());
    let content = content_tokens(text, query);
    chunks
        .iter()
        .filter(|chunk| {
            let members = tokens_in(query, &content, chunk);
            !members.is_empty() && members.iter().all(|&t| best[t] < ALIGNED)
        })
        .map(|chunk| slice_chars(text, chunk))
        .collect()
}

/// For each query token, its best cosine with any of `doc` (`n × d`, unit rows).
fn token_alignment(query: &Encoded, doc: &[f32]) -> Vec<f32> {
    let d = query.dim();
    query
        .token_vectors
        .chunks_exact(d)
        .map(|q| {
            doc.chunks_exact(d)
                .map(|t| dot(q, t))
                .fold(f32::NEG_INFINITY, f32::max)
        })
        .collect()
}

/// Indices of the query's tokens inside the char span `chunk` that belong to content words
/// (`content`, per token).
fn tokens_in(query: &Encoded, content: &[bool], chunk: &Range<usize>) -> Vec<usize> {
    query
        .tokens
        .iter()
        .enumerate()
        .filter(|&(i, t)| content[i] && t.start >= chunk.start && t.end <= chunk.end)
        .map(|(i, _)| i)
        .collect()
}

/// Per query token: whether the word it is part of carries content
/// ([`is_function_word`] says no for "how", "do", "and", …).
fn content_tokens(text: &str, query: &Encoded) -> Vec<bool> {
    let chars: Vec<char> = text.chars().collect();
    query
        .tokens
        .iter()
        .map(|t| {
            let (mut s, mut e) = (t.start.min(chars.len()), t.end.min(chars.len()));
            while s > 0 && chars[s - 1].is_alphanumeric() {
                s -= 1;
            }
            while e < chars.len() && chars[e].is_alphanumeric() {
                e += 1;
            }
            let word: String = chars[s..e].iter().collect();
            word.chars().any(char::is_alphanumeric) && !is_function_word(&word)
        })
        .collect()
}

fn slice_chars(text: &str, span: &Range<usize>) -> String {
    text.chars()
        .skip(span.start)
        .take(span.end.saturating_sub(span.start))
        .collect()
}
