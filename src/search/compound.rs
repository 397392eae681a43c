//! Compound questions and what a query asks beyond a match (INTERSENT fusion and difference,
//! design.md §3), over the candidates a search already scored.
//!
//! A compound query asks two stored questions at once ("How do I reset my password and change
//! the email on my account?"). For every way the text splits in two at a join (" and ", "? ",
//! "; ", …), the candidates closest to each half pair up, and the pair is judged as one virtual
//! document — its sentence vector the fusion of the two, its token vectors both sets, its text
//! both texts — with the same features and judge as a single match. The query is compound when
//! such a pair's P(duplicate) reaches the threshold and beats every single match: the answer
//! then names both parts and the query phrases each one explains (the phrase whose tokens align
//! better with it). Pairs no split points at are not judged: among single questions they were
//! flagged far too often (EVALUATION.md, "Compound questions").
//!
//! What a query asks beyond a match: its phrases whose content words find no close token in
//! the match, and the difference of the two vectors read back as the nearest stored questions.
//!
//! Pure: vectors, texts and the judge in; the model's operators and the collection's lookups
//! come as closures ([`Pairing`]).

use std::collections::HashMap;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::{pair_features, Explainable, Hit, Judge};
use crate::math::dot;
use crate::score::quant::I8Tokens;
use crate::score::rerank::Reranker;
use crate::score::{Tokens, Weights};
use crate::text::chunk::is_function_word;
use crate::types::{Encoded, Gaussian};

/// Each part of a compound must alone explain at least this share of the query's content
/// tokens (aligned at [`ALIGNED`] and better than by the other part).
pub const EXCLUSIVE_SHARE: f32 = 0.2;
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
    /// The same difference read back as words by the model's decoder (none without one), the
    /// match's own words and function words left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub words: Vec<String>,
}

/// The words of `decoded` (a vector read back) that the match `text` does not say and that
/// are not function words: what a difference adds, in the decoder's order.
pub fn words_beyond(decoded: Vec<String>, text: &str) -> Vec<String> {
    let said: std::collections::HashSet<String> =
        crate::text::plain_words(text).into_iter().collect();
    decoded
        .into_iter()
        .filter(|w| !said.contains(w) && !is_function_word(w))
        .collect()
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

/// An operation on two sentence vectors.
pub type VectorOp<'a> = dyn Fn(&[f32], &[f32]) -> Vec<f32> + 'a;

/// What judging a pair as one document, and reading a difference back, need from the model
/// and the collection.
pub struct Pairing<'a> {
    /// Fusion of two sentence vectors (the model's operator, else arithmetic).
    pub fuse: &'a VectorOp<'a>,
    /// Difference of two sentence vectors, `a ⊖ b` (the model's operator, else arithmetic).
    pub difference: &'a VectorOp<'a>,
    /// The intent of a set of token vectors (`n × d`), as the model makes intents.
    pub intent: &'a dyn Fn(&[f32]) -> Gaussian,
    /// Lexical similarity of the query to a text, with the collection's IDF.
    pub lexical: &'a dyn Fn(&str) -> f32,
    /// The stored questions nearest a vector, leaving out the document with the given id.
    pub nearest: &'a dyn Fn(&[f32], &str) -> Vec<Nearest>,
    /// The words a vector reads back as (the model's decoder; none without one).
    pub words: &'a dyn Fn(&[f32]) -> Vec<String>,
    /// The sentence vectors of the query's two halves, for every way it splits at a
    /// coordinator or a sentence break ([`halves`]).
    pub halves: &'a [(Vec<f32>, Vec<f32>)],
}

/// Words and marks a compound question's two halves meet at.
const JOINS: [&str; 7] = ["? ", "; ", ". ", ", and ", " and ", " also ", " plus "];

/// Most ways a text is split in two.
pub const MOST_SPLITS: usize = 3;

/// The ways `text` splits in two at a join (" and ", "? ", "; ", …), the earliest joins first,
/// at most [`MOST_SPLITS`]; both halves keep at least two words.
pub fn halves(text: &str) -> Vec<(String, String)> {
    // ASCII lower-casing keeps every byte offset of `text`.
    let lower = text.to_ascii_lowercase();
    let mut cuts: Vec<(usize, usize)> = JOINS
        .iter()
        .flat_map(|j| lower.match_indices(j).map(|(at, m)| (at, at + m.len())))
        .collect();
    cuts.sort_unstable();
    cuts.dedup_by_key(|c| c.0);
    cuts.into_iter()
        .map(|(at, end)| {
            let left = text[..at].trim_end_matches([' ', ',']).to_string();
            (left, text[end..].trim().to_string())
        })
        .filter(|(l, r)| l.split_whitespace().count() >= 2 && r.split_whitespace().count() >= 2)
        .take(MOST_SPLITS)
        .collect()
}

/// The compound `hits` (the scored candidates) make for `query`, if one beats every single
/// match at `threshold`. `chunks`: the query's phrase chunks (char spans).
///
/// For every way the text splits in two at a join ([`halves`]), the candidates closest to each
/// half pair up, and the pair is judged as one document. The best-fitting pair (the halves'
/// cosines with their parts, summed) whose P(duplicate) reaches the threshold and beats every
/// single match is the compound, provided each part alone explains at least
/// [`EXCLUSIVE_SHARE`] of the query's content tokens better than the other does.
pub fn detect(
    judge: &Judge<'_>,
    (text, query): (&str, &Encoded),
    hits: &[(Hit, Explainable)],
    pairing: &Pairing<'_>,
    (chunks, content): (&[Range<usize>], &[bool]),
    threshold: f32,
) -> Option<Compound> {
    let words: Vec<usize> = (0..content.len()).filter(|&t| content[t]).collect();
    if words.len() < 2 || hits.len() < 2 {
        return None;
    }
    let best_single = hits
        .iter()
        .map(|(h, _)| h.probability)
        .fold(0.0f32, f32::max);
    let pairs = candidate_pairs(pairing, hits);
    let mut aligned: HashMap<usize, Vec<f32>> = HashMap::new();
    for &(i, j, _) in &pairs {
        for k in [i, j] {
            aligned
                .entry(k)
                .or_insert_with(|| token_alignment(query, &hits[k].1.vectors.decode()));
        }
    }
    let exclusive = |a: &[f32], b: &[f32]| {
        words
            .iter()
            .filter(|&&t| a[t] >= ALIGNED && a[t] > b[t])
            .count()
    };
    let d = query.dim();
    let query_tokens = Tokens::new(&query.token_vectors, d);
    let mut reranker = Reranker::new();
    let (i, j, probability, _) = pairs
        .iter()
        .filter(|&&(i, j, _)| {
            let (ai, aj) = (&aligned[&i], &aligned[&j]);
            let least = exclusive(ai, aj).min(exclusive(aj, ai));
            least as f32 >= EXCLUSIVE_SHARE * words.len() as f32
        })
        .map(|&(i, j, fit)| {
            let (a, b) = (&hits[i].1, &hits[j].1);
            // Both token sets as one document: the stored codes side by side.
            let codes = [a.vectors.codes(), b.vectors.codes()].concat();
            let scales = [a.vectors.scales(), b.vectors.scales()].concat();
            let both = I8Tokens::from_parts(codes, scales, d).expect("rows of one dimension");
            let directions = reranker.directions_i8_weighted(query_tokens, &both, Weights::Uniform);
            let fused = (pairing.fuse)(&a.sentence, &b.sentence);
            let intent = (pairing.intent)(&both.decode());
            let joined = format!("{} {}", a.text, b.text);
            let features = pair_features(
                judge,
                (&query.sentence, &query.intent),
                (&fused, &intent),
                directions.uniform,
                (pairing.lexical)(&joined),
            );
            (i, j, judge.probability(&features), fit)
        })
        .filter(|&(_, _, p, _)| p >= threshold && p > best_single)
        .max_by(|a, b| a.3.total_cmp(&b.3))?;
    let (a, b) = (&hits[i], &hits[j]);
    let (pa, pb) = phrases_of((text, query, content), chunks, (&aligned[&i], &aligned[&j]));
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

/// For each split of the query, the candidates closest to its halves (by cosine with each
/// half's vector; two different candidates): (first, second, the two cosines summed), each
/// pair once.
fn candidate_pairs(pairing: &Pairing<'_>, hits: &[(Hit, Explainable)]) -> Vec<(usize, usize, f32)> {
    let closest = |half: &[f32], other: Option<usize>| {
        (0..hits.len())
            .filter(|&i| Some(i) != other)
            .map(|i| (i, dot(half, &hits[i].1.sentence)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    };
    let mut pairs: Vec<(usize, usize, f32)> = Vec::new();
    for (left, right) in pairing.halves {
        let Some((i, fit_i)) = closest(left, None) else {
            continue;
        };
        let Some((j, fit_j)) = closest(right, Some(i)) else {
            continue;
        };
        if !pairs
            .iter()
            .any(|p| (p.0, p.1) == (i, j) || (p.0, p.1) == (j, i))
        {
            pairs.push((i, j, fit_i + fit_j));
        }
    }
    pairs
}

/// The query's phrases each part explains: a chunk goes to the part its content tokens align
/// with better on average (`sa`, `sb`: per query token, the best cosine with each part), and
/// to neither when both stay under [`ALIGNED`].
fn phrases_of(
    (text, query, content): (&str, &Encoded, &[bool]),
    chunks: &[Range<usize>],
    (sa, sb): (&[f32], &[f32]),
) -> (Vec<String>, Vec<String>) {
    let (mut pa, mut pb) = (Vec::new(), Vec::new());
    for chunk in chunks {
        let members = tokens_in(query, content, chunk);
        let mean =
            |s: &[f32]| members.iter().map(|&t| s[t]).sum::<f32>() / members.len().max(1) as f32;
        let (ma, mb) = (mean(sa), mean(sb));
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
    (pa, pb)
}

/// The query's phrases (`chunks`, char spans of `text`) that `doc`'s tokens leave unexplained:
/// none of their content tokens (`content`, per token) reaches [`ALIGNED`] with any token of
/// the document.
pub fn unmatched_phrases(
    (text, query): (&str, &Encoded),
    doc: &Explainable,
    (chunks, content): (&[Range<usize>], &[bool]),
) -> Vec<String> {
    let best = token_alignment(query, &doc.vectors.decode());
    chunks
        .iter()
        .filter(|chunk| {
            let members = tokens_in(query, content, chunk);
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
pub fn content_tokens(text: &str, query: &Encoded) -> Vec<bool> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_split_at_joins_with_two_words_a_side() {
        let h = halves("How do I reset my password and change the email on my account?");
        assert_eq!(
            h,
            [(
                "How do I reset my password".to_string(),
                "change the email on my account?".to_string()
            )]
        );
        let h = halves("Can I pay with PayPal? Also, do you ship abroad?");
        assert_eq!(h[0].0, "Can I pay with PayPal");
        assert_eq!(h[0].1, "Also, do you ship abroad?");
        // A join with one word on a side is no split; nor is a text without one.
        assert!(halves("Salt and pepper?").is_empty());
        assert!(halves("How do I cancel my subscription?").is_empty());
        // Non-ASCII text keeps its offsets.
        let h = halves("Wie lösche ich İhr Konto and wo finde ich Rechnungen?");
        assert_eq!(h[0].0, "Wie lösche ich İhr Konto");
        assert!(halves("a and b and c and d and e").len() <= MOST_SPLITS);
    }

    #[test]
    fn words_beyond_leave_out_the_match_and_function_words() {
        let decoded = ["how", "refund", "paypal", "order", "with", "paid"].map(String::from);
        let beyond = words_beyond(decoded.to_vec(), "How do I get a Refund for an order?");
        assert_eq!(beyond, ["paypal", "paid"]);
        assert!(words_beyond(Vec::new(), "anything").is_empty());
    }

    #[test]
    fn only_content_words_count() {
        let text = "How do I reset it";
        let token = |start: usize, end: usize| crate::types::Token {
            text: text[start..end].to_lowercase(),
            id: 0,
            start,
            end,
        };
        let query = Encoded {
            tokens: vec![
                token(0, 3),
                token(4, 6),
                token(7, 8),
                token(9, 14),
                token(15, 17),
            ],
            truncated: false,
            token_vectors: vec![0.0; 5],
            sentence: vec![1.0],
            intent: Gaussian {
                mu: vec![0.0],
                sigma: vec![1.0],
            },
        };
        assert_eq!(
            content_tokens(text, &query),
            [false, false, false, true, false]
        );
        assert_eq!(
            tokens_in(&query, &content_tokens(text, &query), &(4..14)),
            [3]
        );
    }
}
