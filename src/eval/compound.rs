//! `kindred eval compound`: how well the duplicate check finds compound questions. From
//! duplicate pairs (q, q'), the q' go into a temporary collection; a compound query joins the q
//! of two unrelated pairs (" and ", "? Also, ", "; " in turn), and should answer `compound`
//! covering both their q'; each single q, asked alone, should not. Through the real duplicate
//! check (`Collection::duplicates`), with the model's operators when it carries them.

use std::collections::HashSet;
use std::sync::Arc;

use rayon::prelude::*;
use serde::Serialize;

use super::LabelledPair;
use crate::db::NewDocument;
use crate::engine::Engine;
use crate::error::{Result, UserError};
use crate::math::SplitMix64;
use crate::search::SearchParams;
use crate::Encoder;

/// How compounds are joined, in turn.
pub const JOINERS: [&str; 3] = [" and ", "? Also, ", "; "];

/// Options.
#[derive(Debug, Clone)]
pub struct CompoundOptions {
    /// Duplicate pairs used (the first ones with two distinct questions).
    pub pairs: usize,
    /// Compound queries made.
    pub compounds: usize,
    /// Single questions asked (the first pairs' q).
    pub singles: usize,
    /// Seed of which pairs join.
    pub seed: u64,
}

/// A share with its 95% Wilson interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Share {
    /// Successes over trials.
    pub rate: f64,
    /// Lower end of the 95% interval.
    pub low: f64,
    /// Upper end of the 95% interval.
    pub high: f64,
}

impl Share {
    /// `hits` of `n`, with its Wilson interval.
    pub fn of(hits: usize, n: usize) -> Share {
        if n == 0 {
            return Share {
                rate: 0.0,
                low: 0.0,
                high: 1.0,
            };
        }
        let (n, p, z) = (n as f64, hits as f64 / n as f64, 1.96f64);
        let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
        let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / (1.0 + z * z / n);
        Share {
            rate: p,
            low: (centre - half).max(0.0),
            high: (centre + half).min(1.0),
        }
    }
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct CompoundReport {
    /// Documents in the collection.
    pub documents: usize,
    /// Compound queries asked.
    pub compounds: usize,
    /// Compounds answered `compound` covering exactly their two parts.
    pub covered: Share,
    /// Compounds answered `compound` (whatever it covers).
    pub flagged: Share,
    /// Compounds whose two parts are the two most probable single matches.
    pub top2: Share,
    /// Compounds whose two parts are among the ten most probable single matches.
    pub top10: Share,
    /// Single questions asked.
    pub singles: usize,
    /// Single questions wrongly answered `compound`.
    pub false_flags: Share,
    /// Single questions whose duplicate is the most probable match.
    pub singles_top1: Share,
}

/// What one compound query answered.
struct Asked {
    covered: bool,
    flagged: bool,
    top2: bool,
    top10: bool,
}

/// Runs the evaluation in a temporary directory. `progress(what, done, total)`.
pub fn eval_compound(
    encoder: Arc<Encoder>,
    pairs: &[LabelledPair],
    opts: &CompoundOptions,
    progress: &(dyn Fn(&str, u64, u64) + Sync),
) -> Result<CompoundReport> {
    let chosen = usable_pairs(pairs, opts.pairs)?;
    let docs: Vec<NewDocument> = chosen
        .iter()
        .enumerate()
        .map(|(i, p)| NewDocument {
            id: format!("d{i}"),
            text: p.b.clone(),
            metadata: serde_json::Value::Null,
            context: Vec::new(),
        })
        .collect();
    let name = "compound";
    let (_dir, db) =
        super::temporary_collection(&encoder, name, &docs, (512, "indexing questions"), progress)?;
    let engine = Engine::with_encoder(Arc::new(db), encoder);
    let collection = engine.collection(name)?;
    let params = SearchParams {
        k: 10,
        ..SearchParams::default()
    };

    let compounds = make_compounds(&chosen, opts.compounds, opts.seed);
    let done = std::sync::atomic::AtomicU64::new(0);
    let total = (compounds.len() + opts.singles.min(chosen.len())) as u64;
    let tick = || {
        let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        progress("asking", n, total);
    };
    let outcomes: Vec<Asked> = compounds
        .par_iter()
        .map(|(text, i, j)| {
            let v = collection.duplicates(text, None, &params)?;
            tick();
            let want: HashSet<String> = [format!("d{i}"), format!("d{j}")].into();
            let covers: HashSet<String> = v
                .compound
                .as_ref()
                .map(|c| c.covers.iter().map(|p| p.id.clone()).collect())
                .unwrap_or_default();
            let top: HashSet<String> = v.matches.iter().take(2).map(|m| m.hit.id.clone()).collect();
            let ten: HashSet<String> = v.matches.iter().map(|m| m.hit.id.clone()).collect();
            Ok(Asked {
                covered: covers == want,
                flagged: v.compound.is_some(),
                top2: top == want,
                top10: want.is_subset(&ten),
            })
        })
        .collect::<Result<_>>()?;
    let singles: Vec<(bool, bool)> = chosen
        .iter()
        .take(opts.singles)
        .enumerate()
        .collect::<Vec<_>>()
        .par_iter()
        .map(|(i, p)| {
            let v = collection.duplicates(&p.a, None, &params)?;
            tick();
            let top1 = v
                .matches
                .first()
                .is_some_and(|m| m.hit.id == format!("d{i}"));
            Ok((v.compound.is_some(), top1))
        })
        .collect::<Result<_>>()?;
    let count = |f: fn(&Asked) -> bool| outcomes.iter().filter(|o| f(o)).count();
    let n = outcomes.len();
    Ok(CompoundReport {
        documents: docs.len(),
        compounds: n,
        covered: Share::of(count(|o| o.covered), n),
        flagged: Share::of(count(|o| o.flagged), n),
        top2: Share::of(count(|o| o.top2), n),
        top10: Share::of(count(|o| o.top10), n),
        singles: singles.len(),
        false_flags: Share::of(singles.iter().filter(|s| s.0).count(), singles.len()),
        singles_top1: Share::of(singles.iter().filter(|s| s.1).count(), singles.len()),
    })
}

/// The first `most` duplicate pairs of two distinct questions, no question twice; refused
/// when fewer than two are left.
fn usable_pairs(pairs: &[LabelledPair], most: usize) -> Result<Vec<&LabelledPair>> {
    let mut seen = HashSet::new();
    let chosen: Vec<&LabelledPair> = pairs
        .iter()
        .filter(|p| {
            p.duplicate && p.a != p.b && seen.insert(p.b.as_str()) && seen.insert(p.a.as_str())
        })
        .take(most)
        .collect();
    if chosen.len() < 2 {
        return Err(UserError::InvalidArgument {
            name: "pairs",
            reason: format!(
                "{} usable duplicate pairs (label 1, two distinct questions); give a file with more",
                chosen.len()
            ),
        }
        .into());
    }
    Ok(chosen)
}

/// `n` compounds of two different pairs' first questions, joined in turn by each of
/// [`JOINERS`]: (text, first pair, second pair).
fn make_compounds(chosen: &[&LabelledPair], n: usize, seed: u64) -> Vec<(String, usize, usize)> {
    let mut rng = SplitMix64(seed);
    (0..n)
        .map(|n| {
            let i = rng.below(chosen.len());
            let j = (i + 1 + rng.below(chosen.len() - 1)) % chosen.len();
            let first = chosen[i].a.trim_end_matches(['?', '.', ' ']);
            let joiner = JOINERS[n % JOINERS.len()];
            (format!("{first}{joiner}{}", chosen[j].a.trim()), i, j)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_intervals_hold_the_rate() {
        let s = Share::of(80, 100);
        assert!((s.rate - 0.8).abs() < 1e-12);
        assert!(
            s.low > 0.70 && s.low < 0.8 && s.high > 0.8 && s.high < 0.88,
            "{s:?}"
        );
        let none = Share::of(0, 300);
        assert_eq!(none.low, 0.0);
        assert!(none.high > 0.0 && none.high < 0.02, "{none:?}");
    }
}
