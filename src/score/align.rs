//! Phrase alignment: from two texts' token cosines, their RCMD transport plans and each side's
//! chunks to the chunk pairs people would align — many-to-many where the plans say so — each
//! with a relation type (iSTS: EQUI, OPPO, SPE1, SPE2, SIMI, REL) and a 0–5 similarity score;
//! chunks in no pair are unaligned.
//!
//! Small learned models read one feature vector per chunk pair ([`pair_features`]): a
//! logistic link model (a pair is aligned when its probability clears a threshold and it is
//! its row's or its column's most likely pair), a softmax over relation types and a linear
//! score. A context pass then links chunks the link model left unaligned on both sides when
//! their neighbours are aligned to each other ([`context_features`]: people align parallel
//! phrases by position, "Gunmen" with "Militants" beside "kill" / "kill"). They are fitted on the iSTS 2016 training pairs outside the held-out part (`kindred
//! train aligner`, see `train::aligner`) and shipped in `aligner.json`. Fitting lives here too
//! ([`Softmax::fit`], [`Linear::fit`]) as pure functions of their examples.

use std::ops::Range;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::error::{InternalError, Result};

/// Relation types of aligned chunks (SemEval-2016 Task 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Relation {
    /// Same meaning.
    #[serde(rename = "EQUI")]
    Equi,
    /// Opposite meaning.
    #[serde(rename = "OPPO")]
    Oppo,
    /// The a-chunk is more specific than the b-chunk.
    #[serde(rename = "SPE1")]
    Spe1,
    /// The b-chunk is more specific than the a-chunk.
    #[serde(rename = "SPE2")]
    Spe2,
    /// Similar meaning.
    #[serde(rename = "SIMI")]
    Simi,
    /// Related meaning.
    #[serde(rename = "REL")]
    Rel,
}

impl Relation {
    /// Every relation, in the order of the relation model's classes.
    pub const ALL: [Relation; 6] = [
        Relation::Equi,
        Relation::Oppo,
        Relation::Spe1,
        Relation::Spe2,
        Relation::Simi,
        Relation::Rel,
    ];

    /// The task's name of the type (`EQUI`, …).
    pub fn name(self) -> &'static str {
        match self {
            Relation::Equi => "EQUI",
            Relation::Oppo => "OPPO",
            Relation::Spe1 => "SPE1",
            Relation::Spe2 => "SPE2",
            Relation::Simi => "SIMI",
            Relation::Rel => "REL",
        }
    }

    /// The relation a task type names (case-insensitive; `_FACT`/`_POL` suffixes ignored).
    pub fn parse(name: &str) -> Option<Relation> {
        let head = name.split('_').next().unwrap_or(name);
        Relation::ALL
            .into_iter()
            .find(|r| r.name().eq_ignore_ascii_case(head))
    }

    /// The relation seen from the other side (SPE1 ↔ SPE2).
    pub fn swapped(self) -> Relation {
        match self {
            Relation::Spe1 => Relation::Spe2,
            Relation::Spe2 => Relation::Spe1,
            r => r,
        }
    }
}

/// What aligning the chunks of one pair of texts reads.
#[derive(Debug, Clone, Copy)]
pub struct PairInput<'a> {
    /// Token cosines, `l1 × l2` row-major.
    pub cosines: &'a [f32],
    /// Token-pair RCMD contributions, `l1 × l2` row-major.
    pub contributions: &'a [f32],
    /// Number of tokens of b (the row length).
    pub l2: usize,
    /// For each token of a, its partner in b (the a→b plan).
    pub a_partner: &'a [usize],
    /// For each token of b, its partner in a (the b→a plan).
    pub b_partner: &'a [usize],
    /// Side a's chunks as token ranges (empty when a chunk has no token).
    pub chunks_a: &'a [Range<usize>],
    /// Side b's chunks as token ranges.
    pub chunks_b: &'a [Range<usize>],
    /// Side a's chunks' content words, lower-cased (punctuation left out).
    pub words_a: &'a [Vec<String>],
    /// Side b's chunks' content words.
    pub words_b: &'a [Vec<String>],
}

/// Number of features per chunk pair.
pub const FEATURES: usize = 35;

/// One chunk pair's features, or None when either chunk has no token (never aligned).
pub type ChunkPairFeatures = Option<[f32; FEATURES]>;

/// The features of every chunk pair, row-major (`chunks_a × chunks_b`): block similarity (the
/// chunk-level RCMD), the best and mean token cosine, the plans' mass between the chunks, word
/// overlap, how the pair ranks in its row and column, and the chunks' sizes.
pub fn pair_features(p: &PairInput<'_>) -> Vec<ChunkPairFeatures> {
    let (n, m) = (p.chunks_a.len(), p.chunks_b.len());
    let blocks: Vec<Option<Block>> = p
        .chunks_a
        .iter()
        .flat_map(|a| p.chunks_b.iter().map(move |b| Block::of(p, a, b)))
        .collect();
    let sim = |i: usize, j: usize| blocks[i * m + j].as_ref().map_or(0.0, |b| b.similarity);
    let row: Vec<(f32, f32)> = (0..n).map(|i| top2((0..m).map(|j| sim(i, j)))).collect();
    let col: Vec<(f32, f32)> = (0..m).map(|j| top2((0..n).map(|i| sim(i, j)))).collect();
    let (ln_n, ln_m) = (((n + 1) as f32).ln(), ((m + 1) as f32).ln());
    let mut out = Vec::with_capacity(n * m);
    for i in 0..n {
        for j in 0..m {
            let Some(b) = &blocks[i * m + j] else {
                out.push(None);
                continue;
            };
            let s = b.similarity;
            let margin = |(first, second): (f32, f32)| {
                if s == first {
                    s - second
                } else {
                    s - first
                }
            };
            let (mr, mc) = (margin(row[i]), margin(col[j]));
            let (best_row, best_col) = (s == row[i].0 && s > 0.0, s == col[j].0 && s > 0.0);
            let (wa, wb) = (&p.words_a[i], &p.words_b[j]);
            let shared = wa.iter().filter(|w| wb.contains(w)).count();
            let only_a = wa.iter().filter(|w| !wb.contains(w)).count();
            let only_b = wb.iter().filter(|w| !wa.contains(w)).count();
            let union = shared + only_a + only_b;
            let jaccard = shared as f32 / union.max(1) as f32;
            let overlap = f32::from(shared > 0);
            let (la, lb) = (b.len_a as f32, b.len_b as f32);
            let len_ratio = la.min(lb) / la.max(lb);
            let (ca, cb) = (wa.len() as f32, wb.len() as f32);
            let same = f32::from(only_a == 0 && only_b == 0 && shared > 0);
            out.push(Some([
                s,
                b.max_cosine,
                b.mean_cosine,
                b.contribution_mean * p.a_partner.len() as f32,
                b.contribution_sum,
                b.mass_a,
                b.mass_b,
                overlap,
                jaccard,
                mr,
                mc,
                len_ratio,
                f32::from(best_row),
                f32::from(best_col),
                f32::from(best_row && best_col),
                s * s,
                s * jaccard,
                b.mass_a * b.mass_b,
                mr.max(0.0),
                mc.max(0.0),
                s - row[i].0,
                s - col[j].0,
                (s - row[i].0) * (s - col[j].0),
                b.max_cosine * b.max_cosine,
                overlap * s,
                len_ratio * s,
                ln_n,
                ln_m,
                ca,
                cb,
                ca - cb,
                only_a as f32,
                only_b as f32,
                same,
                b.mass_a - b.mass_b,
            ]));
        }
    }
    out
}

/// The largest and second largest of some values (0 for missing ones).
fn top2(values: impl Iterator<Item = f32>) -> (f32, f32) {
    values.fold((0.0, 0.0), |(a, b), v| {
        if v > a {
            (v, a)
        } else if v > b {
            (a, v)
        } else {
            (a, b)
        }
    })
}

/// Statistics of the token block between two chunks.
struct Block {
    similarity: f32,
    max_cosine: f32,
    mean_cosine: f32,
    contribution_mean: f32,
    contribution_sum: f32,
    mass_a: f32,
    mass_b: f32,
    len_a: usize,
    len_b: usize,
}

impl Block {
    fn of(p: &PairInput<'_>, a: &Range<usize>, b: &Range<usize>) -> Option<Block> {
        if a.is_empty() || b.is_empty() {
            return None;
        }
        let cos = |k: usize, l: usize| p.cosines[k * p.l2 + l];
        let mut row_best = 0f32;
        let mut col_best = vec![f32::NEG_INFINITY; b.len()];
        let (mut max, mut sum, mut contribution) = (f32::NEG_INFINITY, 0f32, 0f32);
        for k in a.clone() {
            let mut best = f32::NEG_INFINITY;
            for (c, l) in b.clone().enumerate() {
                let v = cos(k, l);
                best = best.max(v);
                col_best[c] = col_best[c].max(v);
                sum += v;
                contribution += p.contributions[k * p.l2 + l];
            }
            row_best += best;
            max = max.max(best);
        }
        let cells = (a.len() * b.len()) as f32;
        let mass_a = a.clone().filter(|&k| b.contains(&p.a_partner[k])).count();
        let mass_b = b.clone().filter(|&l| a.contains(&p.b_partner[l])).count();
        Some(Block {
            similarity: 0.5
                * (row_best / a.len() as f32 + col_best.iter().sum::<f32>() / b.len() as f32),
            max_cosine: max,
            mean_cosine: sum / cells,
            contribution_mean: contribution / cells,
            contribution_sum: contribution,
            mass_a: mass_a as f32 / a.len() as f32,
            mass_b: mass_b as f32 / b.len() as f32,
            len_a: a.len(),
            len_b: b.len(),
        })
    }
}

/// Multinomial logistic regression on standardised features.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Softmax {
    /// Per-feature mean, subtracted first.
    pub mean: Vec<f32>,
    /// Per-feature scale (standard deviation), divided by next.
    pub scale: Vec<f32>,
    /// One weight row per class.
    pub weights: Vec<Vec<f32>>,
    /// One bias per class.
    pub bias: Vec<f32>,
}

/// Standardisation of features: (means, scales), scale 1 for a constant feature.
fn standardisation(x: &[Vec<f32>], dim: usize) -> (Vec<f32>, Vec<f32>) {
    let count = x.len().max(1) as f64;
    let mean: Vec<f64> = (0..dim)
        .map(|f| x.iter().map(|r| f64::from(r[f])).sum::<f64>() / count)
        .collect();
    let scale: Vec<f32> = (0..dim)
        .map(|f| {
            let var = x
                .iter()
                .map(|r| (f64::from(r[f]) - mean[f]).powi(2))
                .sum::<f64>()
                / count;
            if var > 1e-12 {
                var.sqrt() as f32
            } else {
                1.0
            }
        })
        .collect();
    (mean.into_iter().map(|v| v as f32).collect(), scale)
}

fn standardise(x: &[f32], mean: &[f32], scale: &[f32]) -> Vec<f64> {
    x.iter()
        .zip(mean.iter().zip(scale))
        .map(|(v, (m, s))| f64::from((v - m) / s))
        .collect()
}

fn softmax_in_place(z: &mut [f64]) {
    let max = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let total: f64 = z
        .iter_mut()
        .map(|v| {
            *v = (*v - max).exp();
            *v
        })
        .sum();
    z.iter_mut().for_each(|v| *v /= total);
}

impl Softmax {
    /// Class probabilities of one feature vector.
    pub fn probabilities(&self, x: &[f32]) -> Vec<f32> {
        let z = standardise(x, &self.mean, &self.scale);
        let mut logits: Vec<f64> = self
            .weights
            .iter()
            .zip(&self.bias)
            .map(|(w, b)| {
                f64::from(*b)
                    + w.iter()
                        .zip(&z)
                        .map(|(w, z)| f64::from(*w) * z)
                        .sum::<f64>()
            })
            .collect();
        softmax_in_place(&mut logits);
        logits.into_iter().map(|p| p as f32).collect()
    }

    /// Fits `classes` classes to examples `x` with labels `y` (< classes): full-batch Adam on
    /// the mean cross-entropy plus `l2`·‖W‖²/2, `iterations` steps. Deterministic.
    pub fn fit(x: &[Vec<f32>], y: &[usize], classes: usize, l2: f64, iterations: usize) -> Softmax {
        let dim = x.first().map_or(0, Vec::len);
        let (mean, scale) = standardisation(x, dim);
        let z: Vec<Vec<f64>> = x.iter().map(|r| standardise(r, &mean, &scale)).collect();
        // Parameters: per class, `dim` weights then the bias.
        let width = dim + 1;
        let mut theta = vec![0f64; classes * width];
        let mut adam = Adam::new(theta.len());
        let count = z.len().max(1) as f64;
        for _ in 0..iterations {
            let mut grad = vec![0f64; theta.len()];
            for (row, &label) in z.iter().zip(y) {
                let mut p: Vec<f64> = (0..classes)
                    .map(|c| {
                        let w = &theta[c * width..(c + 1) * width];
                        w[dim] + w[..dim].iter().zip(row).map(|(w, z)| w * z).sum::<f64>()
                    })
                    .collect();
                softmax_in_place(&mut p);
                for c in 0..classes {
                    let err = p[c] - f64::from(u8::from(c == label));
                    let g = &mut grad[c * width..(c + 1) * width];
                    g[..dim]
                        .iter_mut()
                        .zip(row)
                        .for_each(|(g, z)| *g += err * z);
                    g[dim] += err;
                }
            }
            for (k, g) in grad.iter_mut().enumerate() {
                *g /= count;
                if k % width != dim {
                    *g += l2 * theta[k];
                }
            }
            adam.step(&mut theta, &grad);
        }
        let class = |c: usize| &theta[c * width..(c + 1) * width];
        Softmax {
            mean,
            scale,
            weights: (0..classes)
                .map(|c| class(c)[..dim].iter().map(|&v| v as f32).collect())
                .collect(),
            bias: (0..classes).map(|c| class(c)[dim] as f32).collect(),
        }
    }
}

/// Adam (Kingma & Ba) with the usual constants and a step of 0.05.
struct Adam {
    m: Vec<f64>,
    v: Vec<f64>,
    t: i32,
}

impl Adam {
    fn new(len: usize) -> Adam {
        Adam {
            m: vec![0.0; len],
            v: vec![0.0; len],
            t: 0,
        }
    }

    fn step(&mut self, theta: &mut [f64], grad: &[f64]) {
        const RATE: f64 = 0.05;
        const B1: f64 = 0.9;
        const B2: f64 = 0.999;
        self.t += 1;
        let (c1, c2) = (1.0 - B1.powi(self.t), 1.0 - B2.powi(self.t));
        for k in 0..theta.len() {
            self.m[k] = B1 * self.m[k] + (1.0 - B1) * grad[k];
            self.v[k] = B2 * self.v[k] + (1.0 - B2) * grad[k] * grad[k];
            theta[k] -= RATE * (self.m[k] / c1) / ((self.v[k] / c2).sqrt() + 1e-8);
        }
    }
}

/// Ridge regression on standardised features.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Linear {
    /// Per-feature mean.
    pub mean: Vec<f32>,
    /// Per-feature scale.
    pub scale: Vec<f32>,
    /// Weights.
    pub weights: Vec<f32>,
    /// Intercept.
    pub bias: f32,
}

impl Linear {
    /// The prediction for one feature vector.
    pub fn predict(&self, x: &[f32]) -> f32 {
        let z = standardise(x, &self.mean, &self.scale);
        (f64::from(self.bias)
            + self
                .weights
                .iter()
                .zip(&z)
                .map(|(w, z)| f64::from(*w) * z)
                .sum::<f64>()) as f32
    }

    /// Least squares with an `l2` ridge (the intercept unpenalised), solved exactly.
    pub fn fit(x: &[Vec<f32>], y: &[f32], l2: f64) -> Linear {
        let dim = x.first().map_or(0, Vec::len);
        let (mean, scale) = standardisation(x, dim);
        let target_mean = y.iter().map(|&v| f64::from(v)).sum::<f64>() / y.len().max(1) as f64;
        // Normal equations (ZᵀZ + l2·n·I) w = Zᵀ(y − ȳ) on centred data.
        let mut a = vec![vec![0f64; dim + 1]; dim];
        for (r, &t) in x.iter().zip(y) {
            let z = standardise(r, &mean, &scale);
            for i in 0..dim {
                for j in 0..dim {
                    a[i][j] += z[i] * z[j];
                }
                a[i][dim] += z[i] * (f64::from(t) - target_mean);
            }
        }
        for (i, row) in a.iter_mut().enumerate() {
            row[i] += l2 * x.len() as f64;
        }
        let w = solve(a);
        Linear {
            mean,
            scale,
            weights: w.into_iter().map(|v| v as f32).collect(),
            bias: target_mean as f32,
        }
    }
}

/// Solves the augmented system `a` (dim × dim+1) by Gaussian elimination with partial
/// pivoting; a singular direction gets weight 0.
fn solve(mut a: Vec<Vec<f64>>) -> Vec<f64> {
    let dim = a.len();
    for col in 0..dim {
        let pivot = (col..dim)
            .max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))
            .unwrap_or(col);
        a.swap(col, pivot);
        if a[col][col].abs() < 1e-12 {
            continue;
        }
        let pivot_row = a[col].clone();
        for (row, r) in a.iter_mut().enumerate() {
            if row != col {
                let f = r[col] / pivot_row[col];
                r[col..]
                    .iter_mut()
                    .zip(&pivot_row[col..])
                    .for_each(|(x, p)| *x -= f * p);
            }
        }
    }
    (0..dim)
        .map(|i| {
            if a[i][i].abs() < 1e-12 {
                0.0
            } else {
                a[i][dim] / a[i][i]
            }
        })
        .collect()
}

/// An aligned chunk pair.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ChunkLink {
    /// Chunk index on side a.
    pub a: usize,
    /// Chunk index on side b.
    pub b: usize,
    /// The relation type.
    pub relation: Relation,
    /// Similarity of the two chunks, 0 (unrelated) to 5 (same meaning).
    pub score: f32,
    /// The link model's probability that people align the two chunks.
    pub probability: f32,
    /// The pair's share of s_RCMD: the sum of its token-pair contributions.
    pub contribution: f32,
}

/// The three models of phrase alignment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Aligner {
    /// Two classes: not aligned, aligned.
    pub link: Softmax,
    /// Probability a pair needs to be aligned.
    pub threshold: f32,
    /// One class per [`Relation::ALL`].
    pub relation: Softmax,
    /// The 0–5 score from the features and the relation (one-hot, appended).
    pub score: Linear,
    /// The context pass (two classes over [`context_features`]): links chunk pairs both left
    /// unaligned by the link model when their neighbours are aligned to each other, as people
    /// align "Gunmen" with "Militants" in "Gunmen kill nine people" / "Militants kill 6
    /// soldiers". None in aligners fitted without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Softmax>,
    /// Probability a context-pass pair needs to be aligned.
    #[serde(default)]
    pub context_threshold: f32,
}

/// Number of features of a chunk pair in the context pass.
pub const CONTEXT_FEATURES: usize = 14;

/// Rounds of the context pass (each may anchor the next).
const CONTEXT_ROUNDS: usize = 3;

/// The pairs the context pass considers: both chunks unaligned so far, both with tokens.
pub fn context_candidates(
    features: &[ChunkPairFeatures],
    linked: &[bool],
    n: usize,
    m: usize,
) -> Vec<(usize, usize)> {
    let row_free: Vec<bool> = (0..n).map(|i| !(0..m).any(|j| linked[i * m + j])).collect();
    let col_free: Vec<bool> = (0..m).map(|j| !(0..n).any(|i| linked[i * m + j])).collect();
    (0..n)
        .flat_map(|i| (0..m).map(move |j| (i, j)))
        .filter(|&(i, j)| row_free[i] && col_free[j] && features[i * m + j].is_some())
        .collect()
}

/// The context pass's features of chunk pair (i, j) of an `n × m` grid: its link probability
/// `p` and first two pair features (block similarity, best token cosine), whether the pairs
/// before and after it on the diagonal are linked (or it starts / ends both sentences), how far
/// apart the two chunks sit in their sentences, whether it is the likeliest pair among the
/// unaligned ones of its row and of its column, and how many chunks are unaligned on each side.
pub fn context_features(
    features: &[ChunkPairFeatures],
    p: &[f32],
    linked: &[bool],
    (n, m): (usize, usize),
    (i, j): (usize, usize),
) -> [f32; CONTEXT_FEATURES] {
    let at = |i: usize, j: usize| i * m + j;
    let f = features[at(i, j)].unwrap_or([0.0; FEATURES]);
    let row_free = |i: usize| !(0..m).any(|j| linked[at(i, j)]);
    let col_free = |j: usize| !(0..n).any(|i| linked[at(i, j)]);
    let left = i > 0 && j > 0 && linked[at(i - 1, j - 1)];
    let right = i + 1 < n && j + 1 < m && linked[at(i + 1, j + 1)];
    let start = i == 0 && j == 0;
    let end = i + 1 == n && j + 1 == m;
    let position = ((i as f32 + 0.5) / n as f32 - (j as f32 + 0.5) / m as f32).abs();
    let best_in_row = (0..m)
        .filter(|&k| col_free(k))
        .all(|k| p[at(i, k)] <= p[at(i, j)]);
    let best_in_col = (0..n)
        .filter(|&k| row_free(k))
        .all(|k| p[at(k, j)] <= p[at(i, j)]);
    let free_a = (0..n).filter(|&k| row_free(k)).count() as f32;
    let free_b = (0..m).filter(|&k| col_free(k)).count() as f32;
    let before = left || start;
    let after = right || end;
    [
        p[at(i, j)],
        f[0],
        f[1],
        f32::from(left),
        f32::from(right),
        f32::from(start),
        f32::from(end),
        f32::from(before && after),
        position,
        f32::from(best_in_row),
        f32::from(best_in_col),
        f32::from(best_in_row && best_in_col),
        (free_a + 1.0).ln(),
        (free_b + 1.0).ln(),
    ]
}

/// The aligner shipped with kindred (fitted by `kindred train aligner`).
const BUILTIN: &str = include_str!("aligner.json");

impl Aligner {
    /// The shipped aligner.
    pub fn builtin() -> &'static Aligner {
        static ALIGNER: OnceLock<Aligner> = OnceLock::new();
        ALIGNER
            .get_or_init(|| Aligner::from_json(BUILTIN).expect("the shipped aligner.json parses"))
    }

    /// Reads an aligner saved by [`Aligner::to_json`].
    pub fn from_json(text: &str) -> Result<Aligner> {
        let a: Aligner = serde_json::from_str(text)
            .map_err(|e| InternalError::Corrupt(format!("aligner model: {e}")))?;
        let ok = a.link.weights.len() == 2
            && a.relation.weights.len() == Relation::ALL.len()
            && a.link.mean.len() == FEATURES
            && a.relation.mean.len() == FEATURES
            && a.score.mean.len() == FEATURES + Relation::ALL.len()
            && a.context
                .as_ref()
                .is_none_or(|c| c.weights.len() == 2 && c.mean.len() == CONTEXT_FEATURES);
        if !ok {
            return Err(InternalError::Corrupt(format!(
                "aligner model: expected {FEATURES} features, 2 link classes and {} relations",
                Relation::ALL.len()
            ))
            .into());
        }
        Ok(a)
    }

    /// The aligner as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("an aligner serialises")
    }

    /// The probability that people align each chunk pair (0 for pairs without features).
    pub fn link_probabilities(&self, features: &[ChunkPairFeatures]) -> Vec<f32> {
        features
            .iter()
            .map(|f| f.map_or(0.0, |f| self.link.probabilities(&f)[1]))
            .collect()
    }

    /// Aligns the chunks of `input`: a pair is linked when its probability clears the threshold
    /// and is the largest of its row or of its column (so a chunk may take several partners).
    /// Links come in (a, b) order.
    pub fn align(&self, input: &PairInput<'_>) -> Vec<ChunkLink> {
        let features = pair_features(input);
        let (n, m) = (input.chunks_a.len(), input.chunks_b.len());
        self.decide(&features, n, m)
            .into_iter()
            .map(|(i, j, probability)| {
                let f = features[i * m + j].expect("decided pairs have features");
                let (relation, score) = self.label(&f);
                let contribution = input.chunks_a[i]
                    .clone()
                    .flat_map(|k| input.chunks_b[j].clone().map(move |l| (k, l)))
                    .map(|(k, l)| input.contributions[k * input.l2 + l])
                    .sum();
                ChunkLink {
                    a: i,
                    b: j,
                    relation,
                    score,
                    probability,
                    contribution,
                }
            })
            .collect()
    }

    /// The linked pairs (a, b, probability) among `n × m` chunk pairs' features, in (a, b)
    /// order: the link model's ([`Aligner::first_pass`]), then the context pass's: in each
    /// round, pairs of two still unaligned chunks whose context probability reaches its
    /// threshold and is the largest among such pairs of its row and of its column.
    pub fn decide(
        &self,
        features: &[ChunkPairFeatures],
        n: usize,
        m: usize,
    ) -> Vec<(usize, usize, f32)> {
        let p = self.link_probabilities(features);
        let mut links = self.first_pass(features, &p, n, m);
        let Some(context) = &self.context else {
            return links;
        };
        let mut linked = vec![false; n * m];
        for &(i, j, _) in &links {
            linked[i * m + j] = true;
        }
        for _ in 0..CONTEXT_ROUNDS {
            let candidates = context_candidates(features, &linked, n, m);
            let q: Vec<(usize, usize, f32)> = candidates
                .iter()
                .map(|&(i, j)| {
                    let x = context_features(features, &p, &linked, (n, m), (i, j));
                    (i, j, context.probabilities(&x)[1])
                })
                .collect();
            let chosen: Vec<(usize, usize, f32)> = q
                .iter()
                .copied()
                .filter(|&(i, j, prob)| {
                    prob >= self.context_threshold
                        && q.iter()
                            .filter(|&&(k, l, _)| k == i || l == j)
                            .all(|&(_, _, other)| other <= prob)
                })
                .collect();
            if chosen.is_empty() {
                break;
            }
            for &(i, j, _) in &chosen {
                linked[i * m + j] = true;
            }
            links.extend(chosen);
        }
        links.sort_by_key(|&(i, j, _)| (i, j));
        links
    }

    /// The link model's pairs (a, b, probability), in (a, b) order: probability `p` at least
    /// the threshold and the largest of its row or its column.
    pub fn first_pass(
        &self,
        features: &[ChunkPairFeatures],
        p: &[f32],
        n: usize,
        m: usize,
    ) -> Vec<(usize, usize, f32)> {
        let row_max: Vec<f32> = (0..n)
            .map(|i| (0..m).map(|j| p[i * m + j]).fold(0.0, f32::max))
            .collect();
        let col_max: Vec<f32> = (0..m)
            .map(|j| (0..n).map(|i| p[i * m + j]).fold(0.0, f32::max))
            .collect();
        (0..n)
            .flat_map(|i| (0..m).map(move |j| (i, j)))
            .filter(|&(i, j)| features[i * m + j].is_some())
            .map(|(i, j)| (i, j, p[i * m + j]))
            .filter(|&(i, j, prob)| {
                prob >= self.threshold && (prob >= row_max[i] || prob >= col_max[j])
            })
            .collect()
    }

    /// The relation and 0–5 score of an aligned pair.
    pub fn label(&self, f: &[f32; FEATURES]) -> (Relation, f32) {
        let p = self.relation.probabilities(f);
        let best = (0..p.len())
            .max_by(|&x, &y| p[x].total_cmp(&p[y]))
            .unwrap_or(0);
        let relation = Relation::ALL[best];
        let score = self
            .score
            .predict(&score_input(f, relation))
            .clamp(0.0, 5.0);
        (relation, score)
    }
}

/// The score model's input: the pair's features and the relation, one-hot.
pub fn score_input(f: &[f32; FEATURES], relation: Relation) -> Vec<f32> {
    f.iter()
        .copied()
        .chain(Relation::ALL.iter().map(|r| f32::from(*r == relation)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relations_read_task_names() {
        assert_eq!(Relation::parse("SPE1_FACT"), Some(Relation::Spe1));
        assert_eq!(Relation::parse("equi"), Some(Relation::Equi));
        assert_eq!(Relation::parse("NOALI"), None);
        assert_eq!(Relation::Spe1.swapped(), Relation::Spe2);
        let json = serde_json::to_string(&Relation::Simi).expect("serialises");
        assert_eq!(json, "\"SIMI\"");
    }

    /// Two tokens a side, one chunk per token; a0 ≈ b1 and a1 ≈ b0.
    fn crossed() -> (Vec<f32>, Vec<f32>) {
        let cos = vec![0.1, 0.9, 0.8, 0.2];
        let contributions = vec![0.0, 0.45, 0.4, 0.0];
        (cos, contributions)
    }

    #[test]
    fn features_rank_pairs_in_rows_and_columns() {
        let (cos, contributions) = crossed();
        let chunks = [0..1, 1..2];
        let words = [vec!["x".to_string()], vec!["y".to_string()]];
        let input = PairInput {
            cosines: &cos,
            contributions: &contributions,
            l2: 2,
            a_partner: &[1, 0],
            b_partner: &[1, 0],
            chunks_a: &chunks,
            chunks_b: &chunks,
            words_a: &words,
            words_b: &words,
        };
        let f = pair_features(&input);
        let (f01, f00) = (f[1].expect("features"), f[0].expect("features"));
        assert!((f01[0] - 0.9).abs() < 1e-6, "block similarity");
        assert_eq!(
            (f01[12], f01[13], f01[14]),
            (1.0, 1.0, 1.0),
            "best both ways"
        );
        assert_eq!((f00[12], f00[13]), (0.0, 0.0));
        assert_eq!(f01[5], 1.0, "a0's partner is b1");
        let empty = [0..1, 1..1];
        let input = PairInput {
            chunks_b: &empty,
            ..input
        };
        assert!(pair_features(&input)[1].is_none(), "a chunk without tokens");
    }

    #[test]
    fn context_features_see_aligned_neighbours() {
        // 3 × 3 chunks; (0, 0) and (2, 2) linked: (1, 1) sits between two links.
        let features = vec![Some([0.5; FEATURES]); 9];
        let p = [0.9, 0.1, 0.1, 0.1, 0.2, 0.3, 0.1, 0.1, 0.9];
        let mut linked = vec![false; 9];
        linked[0] = true;
        linked[8] = true;
        assert_eq!(context_candidates(&features, &linked, 3, 3), [(1, 1)]);
        let f = context_features(&features, &p, &linked, (3, 3), (1, 1));
        assert_eq!(f[0], 0.2);
        assert_eq!(
            &f[3..8],
            &[1.0, 1.0, 0.0, 0.0, 1.0],
            "left, right, start, end, both sides"
        );
        assert_eq!(f[8], 0.0, "same relative position");
        assert_eq!(
            &f[9..12],
            &[1.0, 1.0, 1.0],
            "the best unaligned pair of its row and column"
        );
        // Nothing linked yet: (0, 0) starts both sentences, (0, 2) neither.
        let none = vec![false; 9];
        let f = context_features(&features, &p, &none, (3, 3), (0, 0));
        assert_eq!(&f[3..8], &[0.0, 0.0, 1.0, 0.0, 0.0]);
        let f = context_features(&features, &p, &none, (3, 3), (0, 2));
        assert_eq!(&f[3..8], &[0.0, 0.0, 0.0, 0.0, 0.0]);
        assert!((f[8] - 2.0 / 3.0).abs() < 1e-6);
        assert_eq!(context_candidates(&features, &none, 3, 3).len(), 9);
    }

    #[test]
    fn softmax_and_linear_fit_separable_data() {
        let x: Vec<Vec<f32>> = (0..40).map(|i| vec![i as f32, 1.0]).collect();
        let y: Vec<usize> = (0..40).map(|i| usize::from(i >= 20)).collect();
        let m = Softmax::fit(&x, &y, 2, 1e-4, 300);
        assert!(m.probabilities(&[35.0, 1.0])[1] > 0.9);
        assert!(m.probabilities(&[3.0, 1.0])[1] < 0.1);
        let t: Vec<f32> = (0..40).map(|i| 2.0 * i as f32 + 1.0).collect();
        let l = Linear::fit(&x, &t, 0.0);
        assert!((l.predict(&[10.0, 1.0]) - 21.0).abs() < 1e-3);
    }

    #[test]
    fn the_shipped_aligner_links_the_crossed_pairs() {
        let (cos, contributions) = crossed();
        let chunks = [0..1, 1..2];
        let words_a = [vec!["dog".to_string()], vec!["runs".to_string()]];
        let words_b = [vec!["runs".to_string()], vec!["dog".to_string()]];
        let input = PairInput {
            cosines: &cos,
            contributions: &contributions,
            l2: 2,
            a_partner: &[1, 0],
            b_partner: &[1, 0],
            chunks_a: &chunks,
            chunks_b: &chunks,
            words_a: &words_a,
            words_b: &words_b,
        };
        let links = Aligner::builtin().align(&input);
        let pairs: Vec<(usize, usize)> = links.iter().map(|l| (l.a, l.b)).collect();
        assert_eq!(pairs, [(0, 1), (1, 0)]);
        assert!(links.iter().all(|l| (0.0..=5.0).contains(&l.score)));
        assert!((links[0].contribution - 0.45).abs() < 1e-6);
    }
}
