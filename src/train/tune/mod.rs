//! Choosing a collection's search defaults without labels: the held-out slice of a context
//! harvest ([`super::context`]) is a small graded test set — each held-out question is a query
//! whose relevant documents are its harvested partners, gain by grade — and every candidate
//! configuration (first stages, fusion weights, rerank on/off, RCMD weights) is searched with
//! it through the real pipeline. The built-in default stays unless another beats its nDCG@10
//! by [`MIN_GAIN`], or when the grades do not reflect the questions at all
//! ([`Harvest::unrelated`]). [`tune_collection`] runs it on a collection, from its documents
//! to its stored defaults.

mod collection;

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::context::{held_out, ContextDoc, Harvest};
use crate::engine::Collection;
use crate::error::{Result, UserError};
use crate::search::{FusionWeights, Mode, Rerank, SearchParams, Weighting};

pub use collection::{find_grader, tune_collection, TuneJob, Tuned};

/// The least nDCG@10 gain over the built-in default for which another configuration is chosen.
pub const MIN_GAIN: f64 = 0.005;

/// One configuration's agreement with the harvested grades.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuneRow {
    /// "hybrid 1/1/1 → RCMD" and the like.
    pub name: String,
    /// First stages.
    pub mode: Mode,
    /// Rerank.
    pub rerank: Rerank,
    /// RCMD's token weights.
    pub weights: Weighting,
    /// Fusion weights (hybrid).
    pub fusion: FusionWeights,
    /// Mean nDCG@10 over the held-out queries, gains from the harvested grades.
    pub ndcg_at_10: f64,
}

impl TuneRow {
    /// The row's settings as search parameters (other fields default).
    pub fn params(&self) -> SearchParams {
        SearchParams {
            mode: self.mode,
            rerank: self.rerank,
            weights: self.weights,
            fusion: self.fusion,
            ..SearchParams::default()
        }
    }
}

/// What [`tune`] measured and chose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tuning {
    /// Held-out questions searched.
    pub queries: usize,
    /// Every configuration, in the order tried (the built-in default first).
    pub rows: Vec<TuneRow>,
    /// Index of the chosen row.
    pub chosen: usize,
    /// Spearman correlation of the harvested grades with the question cosine
    /// ([`Harvest::grade_vs_question_spearman`]): how much the grades are about the questions.
    #[serde(default)]
    pub grade_vs_question_spearman: f64,
    /// Why the grades could not choose ([`Harvest::unrelated`]): the built-in default was
    /// kept whatever the rows say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unrelated: Option<String>,
}

impl Tuning {
    /// The chosen row.
    pub fn chosen(&self) -> &TuneRow {
        &self.rows[self.chosen]
    }

    /// One sentence: what was chosen and why, with the numbers.
    pub fn reason(&self) -> String {
        let (c, d) = (self.chosen(), &self.rows[0]);
        if let Some(why) = &self.unrelated {
            format!(
                "the built-in default ({}) stays, whatever agreed best on {} held-out \
                 questions: {why}",
                d.name, self.queries
            )
        } else if self.chosen == 0 {
            format!(
                "the built-in default ({}) agreed best with the grades harvested from context \
                 on {} held-out questions (nDCG@10 {:.3}; no other of {} configurations beat it \
                 by {MIN_GAIN})",
                d.name,
                self.queries,
                d.ndcg_at_10,
                self.rows.len() - 1
            )
        } else {
            format!(
                "{} agreed best with the grades harvested from context on {} held-out \
                 questions: nDCG@10 {:.3} against {:.3} for the built-in default ({}), best of \
                 {} configurations",
                c.name,
                self.queries,
                c.ndcg_at_10,
                d.ndcg_at_10,
                d.name,
                self.rows.len()
            )
        }
    }
}

/// The configurations tried: the built-in default first, then each first stage alone and
/// hybrid with other fusion weights, each without rerank, with RCMD, with IDF-RCMD and by
/// P(duplicate); with `context` (the collection has context vectors), each first stage again
/// with `rerank: context`, last.
pub fn candidates(context: bool) -> Vec<TuneRow> {
    let fusion = |cosine, w2, lexical| FusionWeights {
        cosine,
        w2,
        lexical,
        ..FusionWeights::default()
    };
    let default = SearchParams::default();
    let mut stages: Vec<(Mode, FusionWeights)> = vec![
        (Mode::Hybrid, default.fusion),
        (Mode::Cosine, default.fusion),
        (Mode::W2, default.fusion),
        (Mode::Hybrid, fusion(1.0, 0.0, 1.0)),
        (Mode::Hybrid, fusion(1.0, 1.0, 0.0)),
        (Mode::Hybrid, fusion(2.0, 1.0, 1.0)),
        (Mode::Hybrid, fusion(1.0, 0.5, 0.5)),
    ];
    stages.dedup();
    let reranks = [
        (Rerank::Rcmd, Weighting::Uniform),
        (Rerank::None, Weighting::Uniform),
        (Rerank::Rcmd, Weighting::Idf),
        (Rerank::Probability, Weighting::Uniform),
    ];
    let by_stage = stages.iter().flat_map(|&s| reranks.map(|r| (s, r)));
    // The context rows last: the rows before keep their places (and ties their winners).
    let with_context = stages
        .iter()
        .filter(|_| context)
        .map(|&s| (s, (Rerank::Context, Weighting::Uniform)));
    let rows: Vec<TuneRow> = by_stage
        .chain(with_context)
        .map(|((mode, fusion), (rerank, weights))| TuneRow {
            name: name(mode, fusion, rerank, weights),
            mode,
            rerank,
            weights,
            fusion,
            ndcg_at_10: 0.0,
        })
        .collect();
    // The built-in default (hybrid 1/1/1 → RCMD, uniform) is first by construction.
    debug_assert!(rows[0].mode == default.mode && rows[0].rerank == default.rerank);
    rows
}

fn name(mode: Mode, f: FusionWeights, rerank: Rerank, weights: Weighting) -> String {
    let stage = match mode {
        Mode::Hybrid => format!("hybrid {}/{}/{}", f.cosine, f.w2, f.lexical),
        Mode::Cosine => "cosine".into(),
        Mode::W2 => "w2".into(),
        Mode::Lexical => "lexical".into(),
    };
    match (rerank, weights) {
        (Rerank::None, _) => stage,
        (Rerank::Probability, _) => format!("{stage} → P(duplicate)"),
        (Rerank::Rcmd, Weighting::Uniform) => format!("{stage} → RCMD"),
        (Rerank::Rcmd, Weighting::Idf) => format!("{stage} → IDF-RCMD"),
        (Rerank::Context, _) => format!("{stage} → context"),
    }
}

/// nDCG@10 of a ranked list of gains against the query's gains in ideal order (pure; 0 when
/// no gain is positive).
pub fn ndcg_at_10(ranked: &[f64], all_gains: &[f64]) -> f64 {
    let dcg = |g: &[f64]| -> f64 {
        g.iter()
            .take(10)
            .enumerate()
            .map(|(i, x)| x / ((i + 2) as f64).log2())
            .sum()
    };
    let mut ideal = all_gains.to_vec();
    ideal.sort_by(|a, b| b.total_cmp(a));
    let best = dcg(&ideal);
    if best <= 0.0 {
        0.0
    } else {
        dcg(ranked) / best
    }
}

/// The row to choose (pure): the best nDCG@10 if it beats the built-in default (row 0) by
/// [`MIN_GAIN`], else row 0. Of equals, the first: configurations that rerank the same pool by
/// the same score tie, and the earlier one is the simpler.
pub fn choose(rows: &[TuneRow]) -> usize {
    let best = (0..rows.len()).fold(0, |best, i| {
        if rows[i].ndcg_at_10 > rows[best].ndcg_at_10 {
            i
        } else {
            best
        }
    });
    if rows
        .get(best)
        .is_some_and(|b| b.ndcg_at_10 >= rows[0].ndcg_at_10 + MIN_GAIN)
    {
        best
    } else {
        0
    }
}

/// Searches the held-out questions of `harvest` in `collection` with every [`candidates`]
/// configuration and chooses one. A query's judged documents are its harvested partners and
/// every hit of any configuration (pooled, so that a hit only one first stage finds — say a
/// lexical one — is judged like the rest, [`super::context::Grader`]); a document's gain is its grade
/// above the middle (grade − 2.5, over 2.5). The query itself and copies of its text are
/// skipped in its hits. At most `max_queries` queries (in document order).
/// `progress(done, total)`.
pub fn tune(
    collection: &Collection<'_>,
    docs: &[ContextDoc],
    harvest: &Harvest,
    held_out_every: u64,
    max_queries: usize,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Tuning> {
    let mut gains = held_out_gains(docs, harvest, held_out_every);
    let mut queries: Vec<usize> = gains.keys().copied().collect();
    queries.sort_unstable();
    queries.truncate(max_queries);
    if queries.is_empty() {
        return Err(UserError::InvalidArgument {
            name: "collection",
            reason: format!(
                "no held-out question (one in {held_out_every}, --held-out-every) has a \
                 harvested partner to search for; the collection needs more documents with \
                 context (a few hundred), or hold out more of them"
            ),
        }
        .into());
    }
    let position: HashMap<&str, usize> = docs
        .iter()
        .enumerate()
        .map(|(i, d)| (d.id.as_str(), i))
        .collect();
    let encoder = collection.encoder();
    let encoded = queries
        .iter()
        .map(|&q| encoder.encode_one(&docs[q].text))
        .collect::<Result<Vec<_>>>()?;
    // `rerank: context` is tried when the collection has context vectors of its model.
    let view = collection.view();
    let context = view
        .db()
        .has_context_vectors(view.name(), &view.settings().model.fingerprint)?;
    let mut rows = candidates(context);
    let total = (rows.len() * queries.len()) as u64;
    let mut done = 0u64;
    // ranked[row][query]: the top 10 hits as indices into `docs` (None: not among them).
    let mut ranked: Vec<Vec<Vec<Option<usize>>>> = Vec::with_capacity(rows.len());
    for row in &rows {
        let params = SearchParams {
            k: 12,
            ..row.params()
        };
        let mut lists = Vec::with_capacity(queries.len());
        for (&q, query) in queries.iter().zip(&encoded) {
            let doc = &docs[q];
            let hits = collection.search_encoded(&doc.text, query, &params)?.hits;
            lists.push(
                hits.iter()
                    .filter(|h| h.id != doc.id && h.text.trim() != doc.text.trim())
                    .take(10)
                    .map(|h| position.get(h.id.as_str()).copied())
                    .collect(),
            );
            done += 1;
            progress(done, total);
        }
        ranked.push(lists);
    }
    // Pool: every hit of every configuration is judged.
    for (k, &q) in queries.iter().enumerate() {
        let judged = gains.entry(q).or_default();
        for d in ranked.iter().flat_map(|lists| lists[k].iter().flatten()) {
            if !judged.contains_key(d) {
                let g = harvest.grader.grade(q, *d).map_or(0.0, gain);
                judged.insert(*d, g);
            }
        }
    }
    for (row, lists) in rows.iter_mut().zip(&ranked) {
        row.ndcg_at_10 = mean_ndcg(&queries, lists, &gains);
    }
    let unrelated = harvest.unrelated();
    let chosen = if unrelated.is_some() {
        0
    } else {
        choose(&rows)
    };
    Ok(Tuning {
        queries: queries.len(),
        rows,
        chosen,
        grade_vs_question_spearman: harvest.grade_vs_question_spearman,
        unrelated,
    })
}

/// A pair's gain from its grade: how far above the middle (grade − 2.5, over 2.5), 0 below it.
fn gain(grade: f64) -> f64 {
    ((grade - 2.5) / 2.5).max(0.0)
}

/// For each held-out question, the gain of every harvested partner above the middle grade.
fn held_out_gains(
    docs: &[ContextDoc],
    harvest: &Harvest,
    held_out_every: u64,
) -> HashMap<usize, HashMap<usize, f64>> {
    let mut gains: HashMap<usize, HashMap<usize, f64>> = HashMap::new();
    for p in &harvest.pairs {
        if gain(p.grade) <= 0.0 {
            continue;
        }
        for (q, d) in [(p.a, p.b), (p.b, p.a)] {
            if held_out(&docs[q].id, held_out_every) {
                gains.entry(q).or_default().insert(d, gain(p.grade));
            }
        }
    }
    gains
}

/// Mean nDCG@10 of one configuration's ranked lists (`lists[k]` is `queries[k]`'s) against the
/// pooled gains.
fn mean_ndcg(
    queries: &[usize],
    lists: &[Vec<Option<usize>>],
    gains: &HashMap<usize, HashMap<usize, f64>>,
) -> f64 {
    let sum: f64 = queries
        .iter()
        .zip(lists)
        .map(|(q, list)| {
            let g = &gains[q];
            let got: Vec<f64> = list
                .iter()
                .map(|d| d.and_then(|d| g.get(&d).copied()).unwrap_or(0.0))
                .collect();
            let all: Vec<f64> = g.values().copied().collect();
            ndcg_at_10(&got, &all)
        })
        .sum();
    sum / queries.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ndcg_is_1_for_the_ideal_order_and_lower_otherwise() {
        let gains = [1.0, 0.5];
        assert!((ndcg_at_10(&[1.0, 0.5, 0.0], &gains) - 1.0).abs() < 1e-12);
        let swapped = ndcg_at_10(&[0.5, 1.0], &gains);
        assert!(swapped < 1.0 && swapped > 0.5, "{swapped}");
        assert_eq!(ndcg_at_10(&[0.0, 0.0], &gains), 0.0);
        assert_eq!(ndcg_at_10(&[], &[]), 0.0);
    }

    #[test]
    fn the_built_in_default_comes_first_and_every_name_is_distinct() {
        let rows = candidates(true);
        let d = SearchParams::default();
        assert_eq!(
            (
                rows[0].mode,
                rows[0].rerank,
                rows[0].weights,
                rows[0].fusion
            ),
            (d.mode, d.rerank, d.weights, d.fusion)
        );
        let names: std::collections::HashSet<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names.len(), rows.len());
        assert_eq!(rows[0].name, "hybrid 1/1/1 → RCMD");
        // Without context vectors the context rows are left out; with them they come last.
        let without = candidates(false);
        assert_eq!(without.len() + 7, rows.len());
        assert!(without.iter().all(|r| r.rerank != Rerank::Context));
        assert_eq!(rows[without.len()].name, "hybrid 1/1/1 → context");
        assert!(rows[without.len()..]
            .iter()
            .all(|r| r.rerank == Rerank::Context));
    }

    #[test]
    fn the_first_of_equal_configurations_is_chosen_and_the_default_without_a_clear_gain() {
        let mut rows = candidates(false);
        let score = |rows: &mut [TuneRow], v: &[(usize, f64)]| {
            for r in rows.iter_mut() {
                r.ndcg_at_10 = 0.5;
            }
            for &(i, x) in v {
                rows[i].ndcg_at_10 = x;
            }
        };
        // Rows 3, 7 and 11 tie at the top (the same pool reranked by the same score).
        score(&mut rows, &[(3, 0.8), (7, 0.8), (11, 0.8)]);
        assert_eq!(choose(&rows), 3);
        // Within MIN_GAIN of the built-in default: the default stays.
        score(&mut rows, &[(0, 0.8), (5, 0.8 + MIN_GAIN / 2.0)]);
        assert_eq!(choose(&rows), 0);
        score(&mut rows, &[(0, 0.8), (5, 0.8 + 2.0 * MIN_GAIN)]);
        assert_eq!(choose(&rows), 5);
    }

    #[test]
    fn with_unrelated_grades_the_reason_says_the_default_stays_and_why() {
        let t = Tuning {
            queries: 300,
            rows: candidates(false),
            chosen: 0,
            grade_vs_question_spearman: 0.05,
            unrelated: crate::train::context::unrelated_context(0.05),
        };
        let r = t.reason();
        assert!(
            r.contains("hybrid 1/1/1 → RCMD") && r.contains("stays") && r.contains("0.05"),
            "{r}"
        );
    }

    #[test]
    fn the_reason_names_the_choice_and_the_numbers() {
        let mut rows = candidates(false);
        rows[0].ndcg_at_10 = 0.5;
        rows[4].ndcg_at_10 = 0.6;
        let t = Tuning {
            queries: 40,
            rows,
            chosen: 4,
            grade_vs_question_spearman: 0.7,
            unrelated: None,
        };
        let r = t.reason();
        assert!(
            r.contains("cosine")
                && r.contains("0.600")
                && r.contains("0.500")
                && r.contains("40 held-out"),
            "{r}"
        );
    }
}
