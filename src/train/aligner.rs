//! Fitting the phrase aligner ([`crate::score::align::Aligner`]) on SemEval-2016 iSTS pairs
//! outside the held-out part. The link model learns from every chunk pair under both the gold
//! chunks and kindred's own chunker's (label: the gold aligns any of their tokens), so it
//! knows the chunks users get; its threshold maximises the official F1 Ali on the same pairs
//! (mean over genres and both chunkings); the relation model and the score learn from the
//! gold-aligned pairs of the gold chunks; the context pass learns from the pairs the link model
//! leaves with both chunks unaligned, and its threshold is chosen with the link model's.

use serde::Serialize;

use crate::error::{Result, UserError};
use crate::eval::alignment::{encode_pairs, pair_features, wa_lines, Chunking, TaskSentence};
use crate::eval::ists::{self, ChunkAlignment, IstsPair, WaPair};
use crate::score::align::{
    context_candidates, context_features, score_input, Aligner, ChunkPairFeatures, Linear,
    Relation, Softmax,
};
use crate::score::explain::ChunkSource;
use crate::score::words::Chunk;
use crate::Encoder;

/// Thresholds tried for the link model and for the context pass.
const THRESHOLDS: [f32; 9] = [0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6];

/// One training pair, ready for fitting.
struct Example {
    genre: usize,
    chunking: Chunking,
    a: TaskSentence,
    b: TaskSentence,
    chunks_a: Vec<Chunk>,
    chunks_b: Vec<Chunk>,
    features: Vec<ChunkPairFeatures>,
    /// Per chunk pair: the gold line aligning them, if any.
    gold_links: Vec<Option<(Relation, f32)>>,
    gold: WaPair,
}

/// What fitting found.
#[derive(Debug, Clone, Serialize)]
pub struct AlignerFit {
    /// Training pairs per genre.
    pub pairs: Vec<(String, usize)>,
    /// The chosen link threshold.
    pub threshold: f32,
    /// F1 Ali (training pairs) per link threshold tried without the context pass, mean over
    /// genres and both chunkings.
    pub f1_by_threshold: Vec<(f32, f64)>,
    /// The chosen context-pass threshold (chosen with the link threshold, which may then
    /// differ from the best one alone).
    pub context_threshold: f32,
    /// F1 Ali (training pairs) per (link, context-pass) thresholds tried, as above.
    pub f1_by_thresholds: Vec<((f32, f32), f64)>,
}

/// Fits the aligner on the pairs of `genres` (name, pairs) that are not held out
/// ([`ists::held_out`]). `progress` gets the number of sentences encoded.
pub fn fit_aligner(
    encoder: &Encoder,
    genres: &[(String, Vec<IstsPair>)],
    chunker: &dyn ChunkSource,
    mut progress: impl FnMut(usize),
) -> Result<(Aligner, AlignerFit)> {
    let (examples, counts) = examples_of(encoder, genres, chunker, &mut progress)?;
    if examples.is_empty() {
        return Err(UserError::InvalidArgument {
            name: "--data",
            reason: "no training pairs with gold chunks and alignments: point it at the iSTS \
                     train folder (STSint.input.<genre>.{sent1,sent2}[.chunk].txt and .wa files)"
                .into(),
        }
        .into());
    }
    let (x, y): (Vec<Vec<f32>>, Vec<usize>) = examples
        .iter()
        .flat_map(|e| {
            e.features
                .iter()
                .zip(&e.gold_links)
                .filter_map(|(f, g)| f.map(|f| (f.to_vec(), usize::from(g.is_some()))))
        })
        .unzip();
    let link = Softmax::fit(&x, &y, 2, 1e-5, 300);
    let (relation, score) = fit_relation_and_score(&examples);
    let mut aligner = Aligner {
        link,
        threshold: 0.5,
        relation,
        score,
        context: None,
        context_threshold: 0.5,
    };
    let f1_by_threshold: Vec<(f32, f64)> = THRESHOLDS
        .iter()
        .map(|&t| {
            aligner.threshold = t;
            (t, mean_f1_ali(&aligner, &examples, genres.len()))
        })
        .collect();
    aligner.threshold = best(&f1_by_threshold);
    // The context pass learns from the pairs the link model leaves with both chunks unaligned;
    // then both thresholds are chosen together.
    let (cx, cy): (Vec<Vec<f32>>, Vec<usize>) = examples
        .iter()
        .flat_map(|e| context_examples(&aligner, e))
        .unzip();
    aligner.context = Some(Softmax::fit(&cx, &cy, 2, 1e-4, 300));
    let mut f1_by_thresholds = Vec::new();
    for &t in &THRESHOLDS {
        for &c in &THRESHOLDS {
            (aligner.threshold, aligner.context_threshold) = (t, c);
            f1_by_thresholds.push(((t, c), mean_f1_ali(&aligner, &examples, genres.len())));
        }
    }
    let ((t, c), _) =
        f1_by_thresholds
            .iter()
            .fold(((0.5, 0.5), f64::NEG_INFINITY), |b, &(tc, f)| {
                if f > b.1 {
                    (tc, f)
                } else {
                    b
                }
            });
    (aligner.threshold, aligner.context_threshold) = (t, c);
    Ok((
        aligner.clone(),
        AlignerFit {
            pairs: counts,
            threshold: aligner.threshold,
            f1_by_threshold,
            context_threshold: aligner.context_threshold,
            f1_by_thresholds,
        },
    ))
}

/// Training pairs per genre: (genre, pairs).
type PairCounts = Vec<(String, usize)>;

/// The training examples of every genre's pairs that are not held out (each under gold and
/// under own chunks), and each genre's number of pairs.
fn examples_of(
    encoder: &Encoder,
    genres: &[(String, Vec<IstsPair>)],
    chunker: &dyn ChunkSource,
    progress: &mut impl FnMut(usize),
) -> Result<(Vec<Example>, PairCounts)> {
    let mut examples = Vec::new();
    let mut counts = Vec::new();
    for (g, (name, pairs)) in genres.iter().enumerate() {
        let train: Vec<IstsPair> = pairs
            .iter()
            .filter(|p| !ists::held_out(p.id) && p.gold.is_some() && p.chunks1.is_some())
            .cloned()
            .collect();
        counts.push((name.clone(), train.len()));
        let encoded = encode_pairs(encoder, &train, &mut *progress)?;
        for (p, (ea, eb)) in train.iter().zip(&encoded) {
            for chunking in [Chunking::Gold, Chunking::Own] {
                examples.push(example(g, p, (ea, eb), chunking, chunker));
            }
        }
    }
    Ok((examples, counts))
}

/// The relation classifier and the score regression, fitted on the gold-chunk examples' gold
/// links.
fn fit_relation_and_score(examples: &[Example]) -> (Softmax, Linear) {
    let labelled: Vec<([f32; crate::score::align::FEATURES], Relation, f32)> = examples
        .iter()
        .filter(|e| e.chunking == Chunking::Gold)
        .flat_map(|e| {
            e.features
                .iter()
                .zip(&e.gold_links)
                .filter_map(|(f, g)| Some((((*f)?), g.as_ref()?.0, g.as_ref()?.1)))
        })
        .collect();
    let rx: Vec<Vec<f32>> = labelled.iter().map(|(f, _, _)| f.to_vec()).collect();
    let ry: Vec<usize> = labelled
        .iter()
        .map(|(_, r, _)| Relation::ALL.iter().position(|x| x == r).unwrap_or(0))
        .collect();
    let relation = Softmax::fit(&rx, &ry, Relation::ALL.len(), 1e-4, 300);
    let sx: Vec<Vec<f32>> = labelled
        .iter()
        .map(|(f, r, _)| score_input(f, *r))
        .collect();
    let sy: Vec<f32> = labelled.iter().map(|(_, _, s)| *s).collect();
    let score = Linear::fit(&sx, &sy, 1e-3);
    (relation, score)
}

/// The threshold with the best F1 (the first of equals).
fn best(f1_by_threshold: &[(f32, f64)]) -> f32 {
    f1_by_threshold
        .iter()
        .fold(
            (0.5, f64::NEG_INFINITY),
            |b, &(t, f)| if f > b.1 { (t, f) } else { b },
        )
        .0
}

/// The context pass's training examples of one pair: every pair of chunks the link model
/// leaves unaligned, labelled by the gold.
fn context_examples(aligner: &Aligner, e: &Example) -> Vec<(Vec<f32>, usize)> {
    let (n, m) = (e.chunks_a.len(), e.chunks_b.len());
    let p = aligner.link_probabilities(&e.features);
    let mut linked = vec![false; n * m];
    for (i, j, _) in aligner.first_pass(&e.features, &p, n, m) {
        linked[i * m + j] = true;
    }
    context_candidates(&e.features, &linked, n, m)
        .into_iter()
        .map(|(i, j)| {
            let x = context_features(&e.features, &p, &linked, (n, m), (i, j));
            (x.to_vec(), usize::from(e.gold_links[i * m + j].is_some()))
        })
        .collect()
}

fn example(
    genre: usize,
    p: &IstsPair,
    encoded: (&crate::Encoded, &crate::Encoded),
    chunking: Chunking,
    chunker: &dyn ChunkSource,
) -> Example {
    let (a, b, chunks_a, chunks_b, features) = pair_features(p, encoded, chunking, chunker);
    let gold_lines: &[ChunkAlignment] = p.gold.as_deref().unwrap_or(&[]);
    let gold_links = chunks_a
        .iter()
        .flat_map(|ca| chunks_b.iter().map(move |cb| (ca, cb)))
        .map(|(ca, cb)| {
            let (ids_a, ids_b) = (a.token_ids(ca.start, ca.end), b.token_ids(cb.start, cb.end));
            gold_lines
                .iter()
                .find(|l| {
                    l.a.iter().any(|t| ids_a.contains(t)) && l.b.iter().any(|t| ids_b.contains(t))
                })
                .and_then(|l| {
                    let relation = Relation::parse(l.types.first()?)?;
                    Some((relation, l.score.unwrap_or(0.0)))
                })
        })
        .collect();
    Example {
        genre,
        chunking,
        gold: WaPair {
            id: p.id,
            tokens1: p.tokens1.clone(),
            tokens2: p.tokens2.clone(),
            alignments: gold_lines.to_vec(),
        },
        a,
        b,
        chunks_a,
        chunks_b,
        features,
        gold_links,
    }
}

/// F1 Ali of `aligner`'s links on the examples, averaged over genres and chunkings.
fn mean_f1_ali(aligner: &Aligner, examples: &[Example], genres: usize) -> f64 {
    let mut total = 0.0;
    let groups: Vec<(usize, Chunking)> = (0..genres)
        .flat_map(|g| [(g, Chunking::Gold), (g, Chunking::Own)])
        .collect();
    for &(g, chunking) in &groups {
        let (mut gold, mut system) = (Vec::new(), Vec::new());
        for e in examples
            .iter()
            .filter(|e| e.genre == g && e.chunking == chunking)
        {
            let links: Vec<(usize, usize, &str, f32)> = aligner
                .decide(&e.features, e.chunks_a.len(), e.chunks_b.len())
                .into_iter()
                .map(|(i, j, _)| (i, j, "EQUI", 5.0))
                .collect();
            let lines = wa_lines((&e.a, &e.b), (&e.chunks_a, &e.chunks_b), &links);
            system.push(WaPair {
                alignments: lines,
                ..e.gold.clone()
            });
            gold.push(e.gold.clone());
        }
        total += ists::evaluate(&gold, &system).ali;
    }
    total / groups.len().max(1) as f64
}
