//! ROUGE-1, ROUGE-2 and ROUGE-L F-measures of a candidate text against a reference, as the
//! rouge-score package computes them without stemming (its tokenizer: [`plain_words`]):
//! ROUGE-N from clipped n-gram overlap, ROUGE-L from the longest common subsequence, each
//! `2PR / (P + R)` and 0 when either side has no n-gram. Checked against rouge-score on a
//! fixture (`tests/golden/make_rouge_fixture.py`). Pure.

use std::collections::HashMap;

use serde::Serialize;

use crate::text::plain_words;

/// F-measures of one candidate, or means over many.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Rouge {
    /// ROUGE-1 F.
    pub rouge1: f64,
    /// ROUGE-2 F.
    pub rouge2: f64,
    /// ROUGE-L F.
    #[serde(rename = "rougeL")]
    pub rouge_l: f64,
}

impl Rouge {
    /// The mean of `scores` (zeros when empty).
    pub fn mean(scores: &[Rouge]) -> Rouge {
        let n = scores.len().max(1) as f64;
        let sum = |f: fn(&Rouge) -> f64| scores.iter().map(f).sum::<f64>() / n;
        Rouge {
            rouge1: sum(|r| r.rouge1),
            rouge2: sum(|r| r.rouge2),
            rouge_l: sum(|r| r.rouge_l),
        }
    }
}

/// ROUGE of `candidate` against `reference`.
pub fn rouge(candidate: &str, reference: &str) -> Rouge {
    rouge_words(&plain_words(candidate), &plain_words(reference))
}

/// ROUGE of word sequences.
pub fn rouge_words(candidate: &[String], reference: &[String]) -> Rouge {
    Rouge {
        rouge1: ngram_f(candidate, reference, 1),
        rouge2: ngram_f(candidate, reference, 2),
        rouge_l: f_measure(lcs(candidate, reference), candidate.len(), reference.len()),
    }
}

fn f_measure(overlap: usize, candidate: usize, reference: usize) -> f64 {
    if candidate == 0 || reference == 0 || overlap == 0 {
        return 0.0;
    }
    let p = overlap as f64 / candidate as f64;
    let r = overlap as f64 / reference as f64;
    2.0 * p * r / (p + r)
}

fn ngrams(words: &[String], n: usize) -> HashMap<&[String], usize> {
    let mut counts = HashMap::new();
    for g in words.windows(n) {
        *counts.entry(g).or_insert(0) += 1;
    }
    counts
}

fn ngram_f(candidate: &[String], reference: &[String], n: usize) -> f64 {
    let (c, r) = (ngrams(candidate, n), ngrams(reference, n));
    let overlap: usize = c
        .iter()
        .map(|(g, &k)| k.min(r.get(g).copied().unwrap_or(0)))
        .sum();
    f_measure(overlap, c.values().sum(), r.values().sum())
}

/// Length of the longest common subsequence.
fn lcs(a: &[String], b: &[String]) -> usize {
    let mut row = vec![0usize; b.len() + 1];
    for x in a {
        let mut diagonal = 0;
        for (j, y) in b.iter().enumerate() {
            let up = row[j + 1];
            row[j + 1] = if x == y {
                diagonal + 1
            } else {
                row[j + 1].max(row[j])
            };
            diagonal = up;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rouge_counts_clipped_overlap_and_the_longest_common_subsequence() {
        let r = rouge("the cat the cat sat", "The cat sat on the mat.");
        // Unigrams: candidate {the 2, cat 2, sat 1}, reference {the 2, cat, sat, on, mat}:
        // overlap 2 + 1 + 1 = 4 of 5 and of 6.
        let f1 = 2.0 * (4.0 / 5.0) * (4.0 / 6.0) / (4.0 / 5.0 + 4.0 / 6.0);
        assert!((r.rouge1 - f1).abs() < 1e-12, "{r:?}");
        // Bigrams: "the cat" (clipped to 1) and "cat sat": 2 of 4 and of 5.
        let f2 = 2.0 * (2.0 / 4.0) * (2.0 / 5.0) / (2.0 / 4.0 + 2.0 / 5.0);
        assert!((r.rouge2 - f2).abs() < 1e-12, "{r:?}");
        // LCS "the cat sat": 3 of 5 and of 6.
        let fl = 2.0 * (3.0 / 5.0) * (3.0 / 6.0) / (3.0 / 5.0 + 3.0 / 6.0);
        assert!((r.rouge_l - fl).abs() < 1e-12, "{r:?}");
        assert_eq!(rouge("", "a b"), Rouge::default());
        assert_eq!(rouge("a b", "a b").rouge_l, 1.0);
        let m = Rouge::mean(&[rouge("a", "a"), rouge("b", "a")]);
        assert_eq!(m.rouge1, 0.5);
    }

    /// Every pair of the rouge-score fixture (tests/golden/make_rouge_fixture.py) scores the
    /// same here.
    #[test]
    fn rouge_matches_the_rouge_score_package() {
        let fixture: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/golden/rouge.json")).unwrap();
        let pairs = fixture["pairs"].as_array().unwrap();
        assert!(pairs.len() > 100);
        for p in pairs {
            let r = rouge(
                p["candidate"].as_str().unwrap(),
                p["reference"].as_str().unwrap(),
            );
            for (got, key) in [
                (r.rouge1, "rouge1"),
                (r.rouge2, "rouge2"),
                (r.rouge_l, "rougeL"),
            ] {
                let want = p[key].as_f64().unwrap();
                assert!((got - want).abs() < 1e-9, "{key} {got} != {want} for {p}");
            }
        }
    }
}
