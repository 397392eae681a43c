//! Learning a site's own notion of "same question" without labels, from the context its
//! questions come with (answers, comments, tags): papers/context-based-sentence-similarity-
//! surrogate.txt. Two questions mean the same when the same contexts are likely for both; that
//! signal is harvested over the collection's nearest-neighbour pairs ([`harvest`]) and turned
//! into training data for the existing trainers ([`training_sets`]): graded pairs for CoSENT,
//! the best pairs as InfoNCE positives with the worst as hard negatives, and a held-out slice
//! the run is selected on — all without a single label.
//!
//! Optionally, general questions from elsewhere are paired ([`general_pairs`]) and graded by the
//! base model, so that training can keep their order while it learns this site's.
//!
//! Two views of the signal, both from the current encoder:
//! - **context similarity**: the cosine of the two questions' context vectors (each the
//!   normalised mean of its context texts' sentence vectors);
//! - **cross retrieval**, the generation-probability view made cheap: how well each question
//!   retrieves the *other* question's context, ½·(cos(q_a, ctx_b) + cos(q_b, ctx_a)).
//!
//! Each is standardised over the mined pairs and the grade is their mean, mapped to 0–5 by its
//! rank among the pairs ([`grades`], pure).

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::error::{Result, UserError};
use crate::eval::{LabelledPair, ScoredPair};
use crate::score::dot;
use crate::Encoder;

/// A question and its context, as the harvest reads them.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextDoc {
    /// External id (decides the held-out slice).
    pub id: String,
    /// The question.
    pub text: String,
    /// Its context texts (may be empty: such a question takes part in no pair).
    pub context: Vec<String>,
}

impl ContextDoc {
    /// Whether it has a context text that is not blank (what takes it into a harvest).
    pub fn has_context(&self) -> bool {
        self.context.iter().any(|c| !c.trim().is_empty())
    }
}

/// Which view of the context signal grades a pair.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Cosine of the two context vectors.
    Context,
    /// ½·(cos(q_a, ctx_b) + cos(q_b, ctx_a)): the default, measured best on SemEval-2016
    /// Task 3 (EVALUATION.md).
    #[default]
    Retrieval,
    /// The mean of both, standardised.
    Both,
}

impl std::str::FromStr for Signal {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "context" => Ok(Signal::Context),
            "retrieval" => Ok(Signal::Retrieval),
            "both" => Ok(Signal::Both),
            _ => Err(UserError::InvalidArgument {
                name: "signal",
                reason: format!("{s:?}; use context, retrieval or both"),
            }
            .into()),
        }
    }
}

/// Harvest settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarvestOptions {
    /// Nearest neighbours per question, by question cosine and by context cosine each.
    pub neighbours: usize,
    /// Context texts read per question (the first ones).
    pub max_context_texts: usize,
    /// The grade.
    pub signal: Signal,
    /// Share of the mined pairs (best grades) that become InfoNCE positives.
    pub positive_share: f64,
    /// Share of the mined pairs (worst grades) that become hard negatives.
    pub negative_share: f64,
    /// One question in this many is held out (by id hash): its pairs select the run.
    pub held_out_every: u64,
    /// Questions harvested at most (mining is O(n²)): a larger collection is sampled, the
    /// same questions every run (by id hash).
    pub max_documents: usize,
    /// Context texts per harvested question (the first ones) that become InfoNCE positives
    /// of the question itself: a question should retrieve its own thread's answers (the
    /// paper's contextual model, trained on the site's own threads). 0: none.
    #[serde(default)]
    pub thread_positives: usize,
}

impl Default for HarvestOptions {
    fn default() -> Self {
        HarvestOptions {
            neighbours: 10,
            max_context_texts: 10,
            signal: Signal::Retrieval,
            positive_share: 0.15,
            negative_share: 0.3,
            held_out_every: 10,
            max_documents: 20_000,
            thread_positives: 0,
        }
    }
}

/// One mined pair and its signals.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HarvestedPair {
    /// Index of the first question in the harvested documents.
    pub a: usize,
    /// Index of the second.
    pub b: usize,
    /// Cosine of the questions' sentence vectors (how the current model sees the pair).
    pub question: f32,
    /// Cosine of the context vectors.
    pub context: f32,
    /// Cross retrieval.
    pub retrieval: f32,
    /// The graded similarity, 0–5.
    pub grade: f64,
}

/// What [`harvest`] found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Harvest {
    /// Questions read.
    pub documents: usize,
    /// Questions with at least one context text.
    pub with_context: usize,
    /// Context texts encoded.
    pub context_texts: usize,
    /// The mined pairs, graded.
    pub pairs: Vec<HarvestedPair>,
    /// Spearman correlation of the grade with the question cosine over the pairs: how much
    /// the context says that the current model does not already know (1: nothing).
    pub grade_vs_question_spearman: f64,
    /// Grades pairs that were not mined (not serialised).
    #[serde(skip)]
    pub grader: Grader,
}

/// The least Spearman correlation between a harvest's grades and its pairs' question cosine
/// for the context to count as being *about* its questions. Context that is about them (each
/// Qatar Living question's own comments) agrees at 0.50 (`--signal context`) to 0.71 (retrieval);
/// comments drawn at random from other threads agree at 0.05 (10,000 QQP questions,
/// EVALUATION.md), and a field every document shares grades every pair alike (0). Below this
/// the grades are noise to learn from and to tune by.
pub const MIN_GRADE_AGREEMENT: f64 = 0.15;

impl Harvest {
    /// Why the grades say nothing about "same question" (None when they may): they hardly
    /// agree with the questions' own similarity, as when the context belongs to other
    /// questions or is the same for all. One sentence, with the number and what to check.
    pub fn unrelated(&self) -> Option<String> {
        unrelated_context(self.grade_vs_question_spearman)
    }

    /// Whether the document at `index` (into the documents harvested from) was harvested.
    pub fn harvested(&self, index: usize) -> bool {
        matches!(self.grader.slot.get(index), Some(Some(_)))
    }
}

/// Questions [`precheck`] harvests.
pub const PRECHECK_DOCUMENTS: usize = 1_000;

/// [`Harvest::unrelated`] judged on a harvest of a fixed sample of `sample` questions (the
/// same ones every run, by id hash; [`PRECHECK_DOCUMENTS`] took 32 s on 2 cores with ten
/// comments each): what lets a collection whose context is not about its questions be
/// refused in a minute instead of after its whole harvest (13 minutes at 20,000 questions).
/// None, without harvesting anything, when at most twice `sample` questions carry context:
/// their whole harvest is quick. `progress(what, done, total)`.
pub fn precheck(
    encoder: &Encoder,
    docs: &[ContextDoc],
    options: &HarvestOptions,
    sample: usize,
    progress: &mut dyn FnMut(&str, u64, u64),
) -> Result<Option<String>> {
    let with_context = docs.iter().filter(|d| d.has_context()).count();
    if with_context <= 2 * sample {
        return Ok(None);
    }
    let options = HarvestOptions {
        max_documents: sample,
        ..options.clone()
    };
    Ok(harvest(encoder, docs, &options, progress)?
        .unrelated()
        .map(|why| format!("{why} (measured on a sample of {sample} questions)")))
}

/// The verdict of [`Harvest::unrelated`] for a grade-vs-question-cosine Spearman correlation
/// (pure).
pub fn unrelated_context(spearman: f64) -> Option<String> {
    (spearman.is_nan() || spearman < MIN_GRADE_AGREEMENT).then(|| {
        format!(
            "the grades harvested from context hardly agree with the questions' own similarity \
             (Spearman {spearman:.2} between a pair's grade and its question cosine; context \
             about its question gives 0.5 and more, below {MIN_GRADE_AGREEMENT} it is noise): \
             the context does not look like it belongs to its questions — check that each \
             document's `context` holds its own answers or comments and that every \
             --context-field names a key that tells questions apart"
        )
    })
}

pub use crate::score::context::mean_direction;

/// Grades from the two signals of each pair (pure): each standardised over the pairs, the
/// chosen view (or their mean), mapped to 0–5 by rank (ties share their mean rank).
pub fn grades(context: &[f32], retrieval: &[f32], signal: Signal) -> Vec<f64> {
    let scale = SignalScale::of(context, retrieval, signal);
    let raw: Vec<f64> = context
        .iter()
        .zip(retrieval)
        .map(|(&c, &r)| scale.raw(c, r))
        .collect();
    let ranks = crate::score::stats::average_ranks(&raw);
    let top = (raw.len().max(2) - 1) as f64;
    ranks.iter().map(|r| 5.0 * (r - 1.0) / top).collect()
}

/// How a pair's two signals become one raw score: each standardised by the mean and standard
/// deviation it has over the mined pairs, then the chosen view (or their mean).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SignalScale {
    signal: Signal,
    context: (f64, f64),
    retrieval: (f64, f64),
}

impl SignalScale {
    /// The scale of a set of pairs' signals.
    pub fn of(context: &[f32], retrieval: &[f32], signal: Signal) -> Self {
        let mean_sd = |v: &[f32]| -> (f64, f64) {
            let n = v.len().max(1) as f64;
            let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
            let var = v
                .iter()
                .map(|&x| (f64::from(x) - mean).powi(2))
                .sum::<f64>()
                / n;
            (mean, var.sqrt().max(1e-12))
        };
        SignalScale {
            signal,
            context: mean_sd(context),
            retrieval: mean_sd(retrieval),
        }
    }

    /// The raw score of one pair's signals.
    pub fn raw(&self, context: f32, retrieval: f32) -> f64 {
        let z = |x: f32, (mean, sd): (f64, f64)| (f64::from(x) - mean) / sd;
        let (c, r) = (z(context, self.context), z(retrieval, self.retrieval));
        match self.signal {
            Signal::Context => c,
            Signal::Retrieval => r,
            Signal::Both => 0.5 * (c + r),
        }
    }
}

/// The grade (0–5) a raw score would have among the mined pairs' raw scores `sorted`
/// (ascending), as [`grades`] ranks them (pure): a value equal to mined pairs' gets their
/// grade, one between two of them a grade halfway between theirs, one outside their range 0
/// or 5.
pub fn grade_among(sorted: &[f64], raw: f64) -> f64 {
    if sorted.len() < 2 {
        return 2.5;
    }
    let below = sorted.partition_point(|&x| x < raw);
    let equal = sorted[below..].partition_point(|&x| x <= raw);
    // The 0-based rank it would share with its equals, or fall between its neighbours at.
    let rank = if equal == 0 {
        below as f64 - 0.5
    } else {
        below as f64 + (equal - 1) as f64 / 2.0
    };
    (5.0 * rank / (sorted.len() - 1) as f64).clamp(0.0, 5.0)
}

/// Grades any pair of harvested questions, not only the mined ones, on the mined pairs' scale:
/// what lets [`super::tune`] judge every hit a configuration returns instead of only the
/// pairs that the harvest's own (cosine) mining found — a pool bias that held every lexical
/// hit at gain 0.
#[derive(Clone, Default, PartialEq)]
pub struct Grader {
    scale: SignalScale,
    /// Position among the harvested questions of each document (None: no context, or not
    /// sampled).
    slot: Vec<Option<usize>>,
    question: Vec<Vec<f32>>,
    context: Vec<Vec<f32>>,
    /// The mined pairs' raw scores, ascending.
    sorted: Vec<f64>,
}

impl std::fmt::Debug for Grader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grader")
            .field("questions", &self.question.len())
            .field("mined", &self.sorted.len())
            .finish()
    }
}

impl Grader {
    /// The grade (0–5) of documents `a` and `b` (indices into the harvested documents); None
    /// when either was not harvested.
    pub fn grade(&self, a: usize, b: usize) -> Option<f64> {
        let (i, j) = ((*self.slot.get(a)?)?, (*self.slot.get(b)?)?);
        let (q, c) = (&self.question, &self.context);
        let raw = self.scale.raw(
            dot(&c[i], &c[j]),
            0.5 * (dot(&q[i], &c[j]) + dot(&q[j], &c[i])),
        );
        Some(grade_among(&self.sorted, raw))
    }
}

/// Indices of the `k` largest values of `scores` except `skip`, best first.
fn top_k(scores: &[f32], k: usize, skip: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..scores.len()).filter(|&j| j != skip).collect();
    let k = k.min(idx.len());
    if k == 0 {
        return Vec::new();
    }
    idx.select_nth_unstable_by(k - 1, |&a, &b| scores[b].total_cmp(&scores[a]));
    idx.truncate(k);
    idx.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    idx
}

/// Harvests graded pairs: encodes the questions and their context texts with `encoder`, mines
/// each question's nearest neighbours by question cosine and by context cosine (exact, O(n²)
/// dot products), and grades each pair by its context signal. Questions without context and
/// pairs of identical texts are left out. `progress(what, done, total)`.
pub fn harvest(
    encoder: &Encoder,
    docs: &[ContextDoc],
    options: &HarvestOptions,
    progress: &mut dyn FnMut(&str, u64, u64),
) -> Result<Harvest> {
    // Indices into `docs` of the questions harvested.
    let mut index_of: Vec<usize> = (0..docs.len()).filter(|&i| docs[i].has_context()).collect();
    if index_of.len() > options.max_documents {
        index_of.sort_by_key(|&i| id_hash(&docs[i].id));
        index_of.truncate(options.max_documents);
        index_of.sort_unstable();
    }
    let kept: Vec<&ContextDoc> = index_of.iter().map(|&i| &docs[i]).collect();
    if kept.len() < 2 {
        return Err(UserError::InvalidArgument {
            name: "collection",
            reason: format!(
                "{} of its {} documents carry context; harvesting needs at least 2 — ingest \
                 documents with a `context` field (answers, comments) or name metadata keys \
                 with --context-field",
                kept.len(),
                docs.len()
            ),
        }
        .into());
    }
    let n = kept.len();
    let texts: Vec<&str> = kept.iter().map(|d| d.text.as_str()).collect();
    let mut done = 0u64;
    let q = encoder.encode_with_progress(&texts, |k| {
        done += k as u64;
        progress("encoding questions", done, n as u64);
    })?;
    let q: Vec<Vec<f32>> = q.into_iter().map(|e| e.sentence).collect();

    let (ctx, context_texts) = context_vectors(encoder, &kept, options, progress)?;
    let neighbours = neighbours(&q, &ctx, options.neighbours, progress);
    let pairs = unique_pairs(&neighbours, |i, j| {
        kept[i].text.trim() != kept[j].text.trim()
    });
    let context: Vec<f32> = pairs.iter().map(|&(a, b)| dot(&ctx[a], &ctx[b])).collect();
    let retrieval: Vec<f32> = pairs
        .iter()
        .map(|&(a, b)| 0.5 * (dot(&q[a], &ctx[b]) + dot(&q[b], &ctx[a])))
        .collect();
    let question: Vec<f32> = pairs.iter().map(|&(a, b)| dot(&q[a], &q[b])).collect();
    let g = grades(&context, &retrieval, options.signal);
    let scale = SignalScale::of(&context, &retrieval, options.signal);
    let mut sorted: Vec<f64> = context
        .iter()
        .zip(&retrieval)
        .map(|(&c, &r)| scale.raw(c, r))
        .collect();
    sorted.sort_by(f64::total_cmp);
    let mut slot = vec![None; docs.len()];
    for (k, &i) in index_of.iter().enumerate() {
        slot[i] = Some(k);
    }
    let qf: Vec<f64> = question.iter().map(|&x| f64::from(x)).collect();
    let spearman = crate::score::stats::spearman(&g, &qf).unwrap_or(0.0);
    Ok(Harvest {
        documents: docs.len(),
        with_context: n,
        context_texts,
        pairs: pairs
            .iter()
            .enumerate()
            .map(|(k, &(a, b))| HarvestedPair {
                a: index_of[a],
                b: index_of[b],
                question: question[k],
                context: context[k],
                retrieval: retrieval[k],
                grade: g[k],
            })
            .collect(),
        grade_vs_question_spearman: spearman,
        grader: Grader {
            scale,
            slot,
            question: q,
            context: ctx,
            sorted,
        },
    })
}

/// Each question's context vector (the normalised mean of its first `max_context_texts`
/// texts' sentence vectors, [`crate::engine::context_vectors`]), and how many texts were
/// encoded.
fn context_vectors(
    encoder: &Encoder,
    kept: &[&ContextDoc],
    options: &HarvestOptions,
    progress: &mut dyn FnMut(&str, u64, u64),
) -> Result<(Vec<Vec<f32>>, usize)> {
    let contexts: Vec<&[String]> = kept.iter().map(|d| d.context.as_slice()).collect();
    let mut texts = 0;
    let vectors = crate::engine::context_vectors(
        encoder,
        &contexts,
        options.max_context_texts,
        |done, total| {
            texts = total as usize;
            progress("encoding context", done, total);
        },
    )?;
    let ctx = vectors
        .into_iter()
        .map(|v| v.expect("every kept question has context"))
        .collect();
    Ok((ctx, texts))
}

/// Each question's `k` nearest neighbours by question cosine, then its `k` nearest by context
/// cosine (rows in parallel; O(n²) dot products).
fn neighbours(
    q: &[Vec<f32>],
    ctx: &[Vec<f32>],
    k: usize,
    progress: &mut dyn FnMut(&str, u64, u64),
) -> Vec<Vec<usize>> {
    use rayon::prelude::*;
    let n = q.len();
    let rows: Vec<Vec<usize>> = (0..n)
        .into_par_iter()
        .map(|i| {
            let qs: Vec<f32> = q.iter().map(|x| dot(&q[i], x)).collect();
            let cs: Vec<f32> = ctx.iter().map(|x| dot(&ctx[i], x)).collect();
            top_k(&qs, k, i)
                .into_iter()
                .chain(top_k(&cs, k, i))
                .collect()
        })
        .collect();
    progress("mining pairs", n as u64, n as u64);
    rows
}

fn id_hash(id: &str) -> u64 {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(id.as_bytes());
    u64::from_le_bytes(h[..8].try_into().expect("8 bytes"))
}

/// How the general texts that an adaptation keeps in order are paired (see [`general_pairs`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GeneralOptions {
    /// Nearest neighbours paired with each text (by the base model's cosine).
    pub neighbours: usize,
    /// Texts read at most (mining is O(n²)): a longer file is sampled, the same texts every
    /// run (by hash).
    pub max_texts: usize,
}

impl Default for GeneralOptions {
    fn default() -> Self {
        GeneralOptions {
            neighbours: 3,
            max_texts: 10_000,
        }
    }
}

/// The pairs of general texts an adaptation keeps in order (pure): each text with its `k`
/// nearest neighbours and one partner drawn at random (so that the pairs span near
/// paraphrases to strangers, as a duplicate detector meets them), each pair once, graded by
/// the base model's cosine. Vectors are unit rows.
pub fn general_pairs(vectors: &[Vec<f32>], k: usize) -> Vec<(usize, usize, f32)> {
    use rayon::prelude::*;
    let n = vectors.len();
    if n < 2 {
        return Vec::new();
    }
    let rows: Vec<Vec<usize>> = (0..n)
        .into_par_iter()
        .map(|i| {
            let scores: Vec<f32> = vectors.iter().map(|x| dot(&vectors[i], x)).collect();
            let mut row = top_k(&scores, k, i);
            let random = (id_hash(&format!("general {i}")) % (n as u64 - 1)) as usize;
            row.push(if random >= i { random + 1 } else { random });
            row
        })
        .collect();
    unique_pairs(&rows, |_, _| true)
        .into_iter()
        .map(|(a, b)| (a, b, dot(&vectors[a], &vectors[b])))
        .collect()
}

/// Each (i, j) of row i of `rows` as one pair (lower index first), in first-seen order, each
/// pair once, those that `keep(i, j)` (pure).
fn unique_pairs(rows: &[Vec<usize>], keep: impl Fn(usize, usize) -> bool) -> Vec<(usize, usize)> {
    let mut seen: HashSet<(usize, usize)> = HashSet::new();
    let mut pairs = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        for &j in row {
            let key = (i.min(j), i.max(j));
            if keep(i, j) && seen.insert(key) {
                pairs.push(key);
            }
        }
    }
    pairs
}

/// Reads general texts (one per line; blank lines and repeats skipped; at most
/// `options.max_texts`, sampled by hash), encodes them with the base `encoder` and returns
/// their [`general_pairs`] as graded pairs (gold = the base cosine) for
/// [`crate::train::clrcmd::ClrcmdRun::keep`].
pub fn general_training_pairs(
    encoder: &Encoder,
    lines: &str,
    options: &GeneralOptions,
    progress: &mut dyn FnMut(&str, u64, u64),
) -> Result<Vec<ScoredPair>> {
    let mut seen = HashSet::new();
    let mut texts: Vec<&str> = lines
        .lines()
        .map(str::trim)
        .filter(|t| !t.is_empty() && seen.insert(*t))
        .collect();
    if texts.len() > options.max_texts {
        texts.sort_by_key(|t| id_hash(t));
        texts.truncate(options.max_texts);
    }
    if texts.len() < 2 {
        return Err(UserError::InvalidArgument {
            name: "general texts",
            reason: format!(
                "{} distinct non-blank lines; give a text file of general questions, one per \
                 line (a few thousand keep the order well)",
                texts.len()
            ),
        }
        .into());
    }
    let total = texts.len() as u64;
    let mut done = 0u64;
    let vectors: Vec<Vec<f32>> = encoder
        .encode_with_progress(&texts, |k| {
            done += k as u64;
            progress("encoding general texts", done, total);
        })?
        .into_iter()
        .map(|e| e.sentence)
        .collect();
    Ok(general_pairs(&vectors, options.neighbours)
        .into_iter()
        .map(|(a, b, cos)| ScoredPair {
            a: texts[a].to_string(),
            b: texts[b].to_string(),
            gold: f64::from(cos),
        })
        .collect())
}

/// Whether a question is in the held-out slice (stable across runs: a hash of its id).
pub fn held_out(id: &str, every: u64) -> bool {
    every > 0 && id_hash(id).is_multiple_of(every)
}

/// The training data a harvest gives the trainers.
#[derive(Debug, Clone, Default)]
pub struct TrainingSets {
    /// InfoNCE data: positives (the best-graded pairs) and hard negatives (the worst).
    pub train: Vec<LabelledPair>,
    /// CoSENT data: every training pair with its grade.
    pub graded: Vec<ScoredPair>,
    /// Selection data: pairs touching a held-out question, best as duplicates, worst as not.
    pub dev: Vec<LabelledPair>,
}

/// Splits a harvest into [`TrainingSets`] (pure): pairs touching a held-out question go to
/// `dev`; of the rest, the top `positive_share` by grade are duplicates, the bottom
/// `negative_share` non-duplicates, and all are graded pairs. With `thread_positives`, each
/// harvested question outside the held-out slice is also a duplicate pair with each of its
/// first `thread_positives` context texts (after the harvested pairs).
pub fn training_sets(
    docs: &[ContextDoc],
    harvest: &Harvest,
    options: &HarvestOptions,
) -> TrainingSets {
    let cut = |share: f64| -> (f64, f64) {
        let mut g: Vec<f64> = harvest.pairs.iter().map(|p| p.grade).collect();
        g.sort_by(f64::total_cmp);
        if g.is_empty() {
            return (f64::INFINITY, f64::NEG_INFINITY);
        }
        let hi = g[((1.0 - share) * (g.len() - 1) as f64).round() as usize];
        let lo = g[((options.negative_share) * (g.len() - 1) as f64).round() as usize];
        (hi, lo)
    };
    let (hi, lo) = cut(options.positive_share);
    let mut sets = TrainingSets::default();
    for p in &harvest.pairs {
        let (a, b) = (&docs[p.a], &docs[p.b]);
        let label = if p.grade >= hi {
            Some(true)
        } else if p.grade <= lo {
            Some(false)
        } else {
            None
        };
        let pair = |duplicate| LabelledPair {
            a: a.text.clone(),
            b: b.text.clone(),
            duplicate,
        };
        if held_out(&a.id, options.held_out_every) || held_out(&b.id, options.held_out_every) {
            if let Some(d) = label {
                sets.dev.push(pair(d));
            }
            continue;
        }
        if let Some(d) = label {
            sets.train.push(pair(d));
        }
        sets.graded.push(ScoredPair {
            a: a.text.clone(),
            b: b.text.clone(),
            gold: p.grade,
        });
    }
    if options.thread_positives > 0 {
        for (i, d) in docs.iter().enumerate() {
            if !harvest.harvested(i) || held_out(&d.id, options.held_out_every) {
                continue;
            }
            for c in d
                .context
                .iter()
                .filter(|c| !c.trim().is_empty())
                .take(options.thread_positives)
            {
                sets.train.push(LabelledPair {
                    a: d.text.clone(),
                    b: c.clone(),
                    duplicate: true,
                });
            }
        }
    }
    sets
}

/// Comments per held-out question that [`thread_sets`] puts in `dev`, each beside one comment
/// from another thread.
pub const THREAD_DEV_COMMENTS: usize = 3;

/// The training data of a *contextual* model (pure): a question and the first `per_question`
/// non-empty context texts of its own thread are duplicate pairs, no labels read. Questions in
/// the held-out slice (`held_out_every`, as the harvest's) give `dev` instead: each of their
/// first [`THREAD_DEV_COMMENTS`] context texts as a duplicate, and as many texts of other
/// threads (picked by hash, the same every run) as non-duplicates. `graded` is empty.
///
/// A model trained on them learns which questions the site's answers belong to: the paper's
/// contextual model (papers/context-based-sentence-similarity-surrogate.txt), used as the
/// harvest's grader (`train context --grader thread`; EVALUATION.md, sessions 34-35).
pub fn thread_sets(docs: &[ContextDoc], per_question: usize, held_out_every: u64) -> TrainingSets {
    let texts = |d: &'_ ContextDoc| -> Vec<String> {
        d.context
            .iter()
            .filter(|c| !c.trim().is_empty())
            .cloned()
            .collect()
    };
    // Every context text with its thread, the pool other threads' texts are drawn from.
    let pool: Vec<(usize, String)> = docs
        .iter()
        .enumerate()
        .flat_map(|(i, d)| texts(d).into_iter().map(move |c| (i, c)))
        .collect();
    let mut sets = TrainingSets::default();
    for (i, d) in docs.iter().enumerate() {
        let own = texts(d);
        let pair = |b: &str, duplicate| LabelledPair {
            a: d.text.clone(),
            b: b.to_string(),
            duplicate,
        };
        if !held_out(&d.id, held_out_every) {
            sets.train
                .extend(own.iter().take(per_question).map(|c| pair(c, true)));
            continue;
        }
        for (k, c) in own.iter().take(THREAD_DEV_COMMENTS).enumerate() {
            sets.dev.push(pair(c, true));
            let start = (id_hash(&format!("{}#{k}", d.id)) % pool.len() as u64) as usize;
            let stranger = (0..pool.len())
                .map(|step| &pool[(start + step) % pool.len()])
                .find(|(thread, _)| *thread != i);
            if let Some((_, other)) = stranger {
                sets.dev.push(pair(other, false));
            }
        }
    }
    sets
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The contextual model's data: each question with its own first answers; held-out
    /// questions give dev pairs, own answers against other threads' (never their own).
    #[test]
    fn thread_sets_pair_questions_with_their_own_answers_and_hold_some_out() {
        let docs: Vec<ContextDoc> = (0..40)
            .map(|i| ContextDoc {
                id: format!("q{i}"),
                text: format!("question {i}"),
                context: match i % 4 {
                    0 => vec![],
                    1 => vec![" ".into(), format!("answer {i}.0")],
                    _ => (0..5).map(|k| format!("answer {i}.{k}")).collect(),
                },
            })
            .collect();
        let sets = thread_sets(&docs, 2, 5);
        assert!(sets.graded.is_empty());
        let held: Vec<&ContextDoc> = docs.iter().filter(|d| held_out(&d.id, 5)).collect();
        assert!(!held.is_empty() && held.len() < 20, "{}", held.len());
        let mut expected = Vec::new();
        for d in docs.iter().filter(|d| !held_out(&d.id, 5)) {
            let i = &d.id[1..];
            let n = match d.context.len() {
                0 => 0,
                2 => 1,
                _ => 2,
            };
            expected.extend((0..n).map(|k| (d.text.clone(), format!("answer {i}.{k}"))));
        }
        let got: Vec<(String, String)> = sets
            .train
            .iter()
            .inspect(|p| assert!(p.duplicate))
            .map(|p| (p.a.clone(), p.b.clone()))
            .collect();
        assert_eq!(got, expected, "first answers, blanks skipped");
        for p in &sets.dev {
            let i = &p.a["question ".len()..];
            let mine = p.b.starts_with(&format!("answer {i}."));
            assert_eq!(mine, p.duplicate, "{p:?}");
            assert!(held.iter().any(|d| d.text == p.a), "{p:?}");
        }
        let dev_positives = sets.dev.iter().filter(|p| p.duplicate).count();
        let expected_dev: usize = held
            .iter()
            .map(|d| {
                d.context
                    .iter()
                    .filter(|c| !c.trim().is_empty())
                    .count()
                    .min(3)
            })
            .sum();
        assert_eq!(dev_positives, expected_dev);
        assert_eq!(sets.dev.len(), 2 * expected_dev, "a stranger beside each");
        // The same pairs every run; nothing when no question is held out.
        assert_eq!(thread_sets(&docs, 2, 5).dev, sets.dev);
        assert!(thread_sets(&docs, 2, 0).dev.is_empty());
    }

    #[test]
    fn context_is_unrelated_below_the_least_agreement_and_for_constant_grades() {
        for low in [0.05, -0.3, 0.0, f64::NAN, MIN_GRADE_AGREEMENT - 1e-9] {
            let why = unrelated_context(low).expect("unrelated");
            assert!(why.contains("--context-field"), "{why}");
        }
        for fine in [MIN_GRADE_AGREEMENT, 0.5, 0.71, 1.0] {
            assert_eq!(unrelated_context(fine), None, "{fine}");
        }
        assert!(unrelated_context(0.053).unwrap().contains("0.05"));
    }

    #[test]
    fn a_new_pair_is_graded_on_the_mined_pairs_scale() {
        let raw = [0.1, 0.5, 0.5, 0.9];
        let mined = grades(&[0.0; 4], &raw.map(|x| x as f32), Signal::Retrieval);
        let scale = SignalScale::of(&[0.0; 4], &raw.map(|x| x as f32), Signal::Retrieval);
        let mut sorted: Vec<f64> = raw.iter().map(|&x| scale.raw(0.0, x as f32)).collect();
        sorted.sort_by(f64::total_cmp);
        // The mined pairs' own grades, ties included.
        for (x, g) in raw.iter().zip(&mined) {
            assert!((grade_among(&sorted, scale.raw(0.0, *x as f32)) - g).abs() < 1e-9);
        }
        assert_eq!(mined, vec![0.0, 2.5, 2.5, 5.0]);
        // Between two mined values: between their grades; outside: clamped.
        let between = grade_among(&sorted, scale.raw(0.0, 0.7));
        assert!(between > 2.5 && between < 5.0, "{between}");
        assert_eq!(grade_among(&sorted, scale.raw(0.0, -1.0)), 0.0);
        assert_eq!(grade_among(&sorted, scale.raw(0.0, 2.0)), 5.0);
        assert_eq!(grade_among(&[], 1.0), 2.5);
    }

    #[test]
    fn grades_follow_the_chosen_signal_by_rank_from_0_to_5() {
        // Exactly representable, so that the opposite signals cancel exactly.
        let context = [0.25, 0.75, 0.5];
        let retrieval = [0.75, 0.25, 0.5];
        assert_eq!(
            grades(&context, &retrieval, Signal::Context),
            vec![0.0, 5.0, 2.5]
        );
        assert_eq!(
            grades(&context, &retrieval, Signal::Retrieval),
            vec![5.0, 0.0, 2.5]
        );
        // Opposite signals cancel: all tie at the middle.
        let both = grades(&context, &retrieval, Signal::Both);
        assert!(both.iter().all(|&g| (g - 2.5).abs() < 1e-9), "{both:?}");
    }

    #[test]
    fn top_k_skips_the_question_itself_and_orders_best_first() {
        assert_eq!(top_k(&[0.9, 1.0, 0.2, 0.5], 2, 1), vec![0, 3]);
        assert_eq!(top_k(&[1.0], 3, 0), Vec::<usize>::new());
    }

    #[test]
    fn general_pairs_link_each_text_to_its_nearest_and_a_stranger_once_each() {
        // Two tight clusters on the unit circle: {0, 1, 2} near angle 0, {3, 4, 5} near π/2.
        let unit = |a: f32| vec![a.cos(), a.sin()];
        let v: Vec<Vec<f32>> = [0.0, 0.05, 0.1, 1.5, 1.55, 1.6]
            .iter()
            .map(|&a| unit(a))
            .collect();
        let pairs = general_pairs(&v, 1);
        let mut keys: Vec<(usize, usize)> = pairs.iter().map(|&(a, b, _)| (a, b)).collect();
        keys.sort_unstable();
        let n = keys.len();
        keys.dedup();
        assert_eq!(keys.len(), n, "each pair once: {pairs:?}");
        for &(a, b, cos) in &pairs {
            assert!(a < b, "ordered, never a text with itself: {pairs:?}");
            assert_eq!(cos, dot(&v[a], &v[b]), "graded by the base cosine");
        }
        // Every text is paired with its nearest neighbour (same cluster) ...
        for (i, j) in [(0, 1), (1, 2), (3, 4), (4, 5)] {
            assert!(keys.contains(&(i, j)), "{i}–{j} missing: {keys:?}");
        }
        // ... and with one drawn partner, so pairs span the range of cosines (n ≤ 2 per text).
        assert!(n <= 6 * 2 && n > 4, "{keys:?}");
        assert_eq!(general_pairs(&v, 1), pairs, "the same pairs every run");
        assert!(general_pairs(&v[..1], 3).is_empty());
    }

    #[test]
    fn training_sets_split_by_grade_and_hold_out_by_id() {
        let docs: Vec<ContextDoc> = (0..40)
            .map(|i| ContextDoc {
                id: format!("d{i}"),
                text: format!("question {i}"),
                context: vec![format!("answer {i}")],
            })
            .collect();
        let pairs: Vec<HarvestedPair> = (0..39)
            .map(|i| HarvestedPair {
                a: i,
                b: i + 1,
                question: 0.5,
                context: 0.0,
                retrieval: 0.0,
                grade: 5.0 * i as f64 / 38.0,
            })
            .collect();
        let h = Harvest {
            documents: 40,
            with_context: 40,
            context_texts: 40,
            pairs,
            grade_vs_question_spearman: 0.0,
            grader: Grader::default(),
        };
        let opts = HarvestOptions::default();
        let s = training_sets(&docs, &h, &opts);
        let held = |t: &str| held_out(&t.replace("question ", "d"), opts.held_out_every);
        assert!(
            !s.dev.is_empty(),
            "some of 40 ids hash into the held-out slice"
        );
        assert!(s.dev.iter().all(|p| held(&p.a) || held(&p.b)));
        assert!(s
            .train
            .iter()
            .chain(&s.dev)
            .all(|p| !held(&p.a) && !held(&p.b) || s.dev.contains(p)));
        // The best pairs are duplicates, the worst are not, the middle is only graded.
        let n = |d: bool| s.train.iter().filter(|p| p.duplicate == d).count();
        assert!(
            n(true) >= 1 && n(false) > n(true),
            "{} {}",
            n(true),
            n(false)
        );
        assert!(s.graded.len() > s.train.len());
        let best = s
            .graded
            .iter()
            .max_by(|a, b| a.gold.total_cmp(&b.gold))
            .unwrap();
        assert!(s.train.iter().any(|p| p.a == best.a && p.duplicate));
    }
}
