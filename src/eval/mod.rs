//! Evaluation: the metrics kindred reports about itself (pair classification now; retrieval
//! and correlation with the evaluation commands), labelled pair files, and scoring labelled
//! pairs with every feature the duplicate model reads.

pub mod alignment;
pub mod chunks;
pub mod compound;
pub mod forum;
pub mod ists;
pub mod operators;
pub mod pairs;
pub mod retrieval;
pub mod rouge;
pub mod scores;

use std::collections::HashMap;

use crate::error::Result;
use crate::index::lexical::terms;
use crate::index::LexicalIndex;
use crate::score::calibration::Calibrator;
use crate::score::features::{lexical_similarity, PairFeatures};
use crate::score::stats as metrics;
use crate::score::weights::token_weights;
use crate::score::{dot, rcmd, w2, Tokens, Weights};
use crate::search::Weighting;
use crate::Encoder;
use serde::{Deserialize, Serialize};

pub use pairs::{
    is_graded_file, read_graded_as_labelled, read_pairs, read_scored_pairs, LabelledPair,
    ScoredPair,
};

/// A temporary database (alive as long as the returned directory guard) with collection
/// `name` holding `docs`, encoded `chunk` at a time; `progress(what, done, total)`. What the
/// retrieval and forum evaluations rank in.
pub(crate) fn temporary_collection(
    encoder: &Encoder,
    name: &str,
    docs: &[crate::db::NewDocument],
    (chunk, what): (usize, &str),
    progress: &dyn Fn(&str, u64, u64),
) -> Result<(tempfile::TempDir, crate::db::Database)> {
    let dir =
        tempfile::tempdir().map_err(crate::error::io_err("creating a temporary directory"))?;
    let db = crate::db::Database::open(dir.path(), crate::store::Durability::Relaxed)?;
    db.create_collection(
        name,
        &crate::store::CollectionSettings::for_model(encoder.identity().clone()),
    )?;
    let mut done = 0u64;
    for part in docs.chunks(chunk) {
        let texts: Vec<&str> = part.iter().map(|d| d.text.as_str()).collect();
        let encoded = encoder.encode(&texts)?;
        db.upsert_encoded(
            name,
            encoder.identity(),
            part.iter().cloned().zip(encoded).collect(),
        )?;
        done += part.len() as u64;
        progress(what, done, docs.len() as u64);
    }
    Ok((dir, db))
}

/// Scores labelled pairs: encodes each distinct text once (reporting texts done to
/// `progress`) and computes every [`PairFeatures`]. IDF comes from `lexicon` (a collection's),
/// or, without one, from the distinct texts of the pairs themselves. RCMD is uniform.
pub fn score_pairs(
    encoder: &Encoder,
    pairs: &[LabelledPair],
    lexicon: Option<&LexicalIndex>,
    progress: impl FnMut(usize),
) -> Result<Vec<PairFeatures>> {
    score_pairs_weighted(encoder, pairs, lexicon, Weighting::Uniform, progress)
}

/// [`score_pairs`] with RCMD's token weights `weights`: with idf, each wordpiece weighs its
/// word's IDF from the same source as the lexical similarity's.
pub fn score_pairs_weighted(
    encoder: &Encoder,
    pairs: &[LabelledPair],
    lexicon: Option<&LexicalIndex>,
    weights: Weighting,
    progress: impl FnMut(usize),
) -> Result<Vec<PairFeatures>> {
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut texts: Vec<&str> = Vec::new();
    for p in pairs {
        for t in [p.a.as_str(), p.b.as_str()] {
            index.entry(t).or_insert_with(|| {
                texts.push(t);
                texts.len() - 1
            });
        }
    }
    let encoded = encoder.encode_with_progress(&texts, progress)?;
    let own;
    let lexicon = match lexicon {
        Some(l) => l,
        None => {
            own = LexicalIndex::new();
            for (i, t) in texts.iter().enumerate() {
                own.upsert(i as u64, t);
            }
            &own
        }
    };
    let term_lists: Vec<Vec<String>> = texts.iter().map(|t| terms(t)).collect();
    let token_weights: Vec<Vec<f32>> = match weights {
        Weighting::Uniform => Vec::new(),
        Weighting::Idf => lexicon.with_idf(|idf| {
            texts
                .iter()
                .zip(&encoded)
                .map(|(t, e)| token_weights(t, &e.tokens, idf))
                .collect()
        }),
    };
    Ok(pairs
        .iter()
        .map(|p| {
            let (i, j) = (index[p.a.as_str()], index[p.b.as_str()]);
            let (a, b) = (&encoded[i], &encoded[j]);
            let r = rcmd(
                Tokens::new(&a.token_vectors, a.dim()),
                Tokens::new(&b.token_vectors, b.dim()),
                match weights {
                    Weighting::Uniform => Weights::Uniform,
                    Weighting::Idf => Weights::Given(&token_weights[i], &token_weights[j]),
                },
            );
            PairFeatures {
                cosine: dot(&a.sentence, &b.sentence),
                w2: w2(&a.intent, &b.intent),
                rcmd_forward: r.forward,
                rcmd_backward: r.backward,
                lexical: lexical_similarity(&term_lists[i], &term_lists[j], |t| lexicon.idf(t)),
                siamese: encoder
                    .heads()
                    .classifier
                    .as_ref()
                    .map(|c| c.probability(&a.intent, &b.intent)),
            }
        })
        .collect())
}

/// AUC on test and accuracy at the dev-chosen threshold, for one score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairScoreQuality {
    /// The score ("cosine", "w2", …).
    pub score: String,
    /// ROC AUC on the dev pairs.
    pub dev_auc: f64,
    /// ROC AUC on the test pairs.
    pub test_auc: f64,
    /// Threshold maximising dev accuracy (on the score as listed; W2 is negated).
    pub threshold: f64,
    /// Test accuracy at that threshold.
    pub test_accuracy: f64,
}

/// One named score of a pair, higher meaning "more likely duplicates".
type Scorer = Box<dyn Fn(&PairFeatures) -> f64>;

/// `kindred eval pairs`: every score and the calibrated probability (fitted on dev).
pub fn eval_pairs(
    dev: &[(PairFeatures, bool)],
    test: &[(PairFeatures, bool)],
    model: &str,
) -> Result<Vec<PairScoreQuality>> {
    let cal = Calibrator::fit(dev, model, "dev")?;
    Ok(eval_pairs_with(dev, test, cal))
}

/// [`eval_pairs`] with the probability from `cal` (fitted on `dev` by the caller).
pub fn eval_pairs_with(
    dev: &[(PairFeatures, bool)],
    test: &[(PairFeatures, bool)],
    cal: Calibrator,
) -> Vec<PairScoreQuality> {
    let scores: Vec<(&str, Scorer)> = vec![
        ("cosine", Box::new(|f| f.cosine as f64)),
        ("w2 (negated)", Box::new(|f| -(f.w2 as f64))),
        ("rcmd", Box::new(|f| f.rcmd() as f64)),
        ("rcmd a→b", Box::new(|f| f.rcmd_forward as f64)),
        ("rcmd b→a", Box::new(|f| f.rcmd_backward as f64)),
        ("lexical", Box::new(|f| f.lexical as f64)),
        ("P(duplicate)", Box::new(move |f| cal.probability(f) as f64)),
    ];
    let mut scores = scores;
    if dev.iter().chain(test).all(|(f, _)| f.siamese.is_some()) && !dev.is_empty() {
        scores.push((
            "variational-siamese P",
            Box::new(|f| f64::from(f.siamese.unwrap_or(0.0))),
        ));
    }
    scores
        .into_iter()
        .map(|(name, f)| {
            let (ds, dl): (Vec<f64>, Vec<bool>) = dev.iter().map(|(x, l)| (f(x), *l)).unzip();
            let (ts, tl): (Vec<f64>, Vec<bool>) = test.iter().map(|(x, l)| (f(x), *l)).unzip();
            let (threshold, _) = metrics::best_threshold(&ds, &dl);
            PairScoreQuality {
                score: name.into(),
                dev_auc: metrics::auc(&ds, &dl).unwrap_or(f64::NAN),
                test_auc: metrics::auc(&ts, &tl).unwrap_or(f64::NAN),
                threshold,
                test_accuracy: metrics::accuracy(&ts, &tl, threshold),
            }
        })
        .collect()
}

/// Spearman ×100 of one score against gold similarity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StsQuality {
    /// The score.
    pub score: String,
    /// Spearman correlation × 100.
    pub spearman_x100: f64,
}

/// `kindred eval sts`: Spearman ×100 for cosine, W2 (negated) and RCMD (uniform).
pub fn eval_sts(
    encoder: &Encoder,
    pairs: &[ScoredPair],
    progress: impl FnMut(usize),
) -> Result<Vec<StsQuality>> {
    eval_sts_weighted(encoder, pairs, Weighting::Uniform, progress)
}

/// [`eval_sts`] with RCMD's token weights `weights` (idf: from the pairs' own texts).
pub fn eval_sts_weighted(
    encoder: &Encoder,
    pairs: &[ScoredPair],
    weights: Weighting,
    progress: impl FnMut(usize),
) -> Result<Vec<StsQuality>> {
    let labelled: Vec<LabelledPair> = pairs
        .iter()
        .map(|p| LabelledPair {
            a: p.a.clone(),
            b: p.b.clone(),
            duplicate: false,
        })
        .collect();
    let features = score_pairs_weighted(encoder, &labelled, None, weights, progress)?;
    let gold: Vec<f64> = pairs.iter().map(|p| p.gold).collect();
    let rho = |f: &dyn Fn(&PairFeatures) -> f64| {
        let s: Vec<f64> = features.iter().map(f).collect();
        metrics::spearman(&s, &gold).unwrap_or(f64::NAN) * 100.0
    };
    Ok(vec![
        StsQuality {
            score: "cosine".into(),
            spearman_x100: rho(&|f| f.cosine as f64),
        },
        StsQuality {
            score: "w2 (negated)".into(),
            spearman_x100: rho(&|f| -(f.w2 as f64)),
        },
        StsQuality {
            score: "rcmd".into(),
            spearman_x100: rho(&|f| f.rcmd() as f64),
        },
    ])
}
