//! Compositional operations on sentence vectors, measured (INTERSENT, design.md): fusion (two
//! parts of a split sentence → the complex sentence), difference (the complex sentence minus
//! its second part → the first part) and compression (a long sentence → its compression),
//! each scored by where its target ranks in a hard pool of sentence vectors — every sentence of
//! the files, inputs as well as targets, plus any extra questions — so that an answer landing
//! on one of its own inputs is a miss. Reports R@1, R@10 and MRR@10 per operation and system:
//! `identity` (the input's own vector), `arithmetic` (the normalised sum or difference) and
//! `concatenation` (the two parts encoded as one text) are the baselines that `kindred` (the
//! model's learned operators, when it carries them) must beat.
//!
//! Reads WikiSplit TSV (`complex<TAB>part1 <::::> part2`) and the Google compression CSV
//! (`original,compressed`, header first, a field quoted only when it holds a comma).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use rayon::prelude::*;
use serde::Serialize;

use super::rouge::{rouge, Rouge};
use crate::error::{io_err, Result, UserError};
use crate::math::dot;
use crate::model::decoder::WordDecoder;
use crate::model::operators::Operation;
use crate::Encoder;

/// One WikiSplit row: a complex sentence and the two sentences it was split into.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// The complex sentence.
    pub complex: String,
    /// Its first part.
    pub part1: String,
    /// Its second part.
    pub part2: String,
}

/// One compression pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Compression {
    /// The sentence.
    pub original: String,
    /// Its compression.
    pub compressed: String,
}

fn bad_file(path: &Path, line: usize, reason: &str) -> crate::Error {
    UserError::InvalidArgument {
        name: "operations file",
        reason: format!("{} line {line}: {reason}", path.display()),
    }
    .into()
}

/// The first `limit` rows (all: None) of a WikiSplit TSV file.
pub fn read_wikisplit(path: &Path, limit: Option<usize>) -> Result<Vec<Split>> {
    let text =
        std::fs::read_to_string(path).map_err(io_err(format!("reading {}", path.display())))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if limit.is_some_and(|n| out.len() >= n) {
            break;
        }
        if line.trim().is_empty() {
            continue;
        }
        let (complex, parts) = line
            .split_once('\t')
            .ok_or_else(|| bad_file(path, i + 1, "no tab between the sentence and its split"))?;
        let (part1, part2) = parts.split_once("<::::>").ok_or_else(|| {
            bad_file(
                path,
                i + 1,
                "the split has no `<::::>` between its two parts",
            )
        })?;
        out.push(Split {
            complex: complex.trim().to_string(),
            part1: part1.trim().to_string(),
            part2: part2.trim().to_string(),
        });
    }
    Ok(out)
}

/// The first `limit` rows (all: None) of a compression CSV file (`original,compressed`).
pub fn read_compression(path: &Path, limit: Option<usize>) -> Result<Vec<Compression>> {
    let text =
        std::fs::read_to_string(path).map_err(io_err(format!("reading {}", path.display())))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if i == 0 && line.trim() == "original,compressed" {
            continue;
        }
        if limit.is_some_and(|n| out.len() >= n) {
            break;
        }
        if line.trim().is_empty() {
            continue;
        }
        let fields =
            csv_fields(line).ok_or_else(|| bad_file(path, i + 1, "an unterminated quote"))?;
        let [original, compressed] = <[String; 2]>::try_from(fields)
            .map_err(|f| bad_file(path, i + 1, &format!("{} fields, not 2", f.len())))?;
        out.push(Compression {
            original,
            compressed,
        });
    }
    Ok(out)
}

/// The fields of one CSV line (a field quoted with `"` may hold commas; `""` is a quote).
fn csv_fields(line: &str) -> Option<Vec<String>> {
    let (mut fields, mut field, mut quoted, mut chars) =
        (Vec::new(), String::new(), false, line.chars().peekable());
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            ('"', true) => quoted = false,
            ('"', false) if field.is_empty() => quoted = true,
            (',', false) => fields.push(std::mem::take(&mut field)),
            (c, _) => field.push(c),
        }
    }
    if quoted {
        return None;
    }
    fields.push(field);
    Some(fields)
}

/// Where targets ranked: recall at 1 and 10, MRR at 10.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RankScores {
    /// Share of targets ranked first.
    pub r1: f64,
    /// Share of targets in the top 10.
    pub r10: f64,
    /// Mean reciprocal rank, 0 past 10.
    pub mrr10: f64,
}

/// The 1-based rank of pool entry `target` for `query` (unit vectors): one more than the
/// entries scoring strictly higher, so ties go the target's way, as identical texts share one
/// entry.
pub fn rank_of(pool: &[Vec<f32>], query: &[f32], target: usize) -> usize {
    let t = dot(query, &pool[target]);
    1 + pool
        .iter()
        .enumerate()
        .filter(|&(i, v)| i != target && dot(query, v) > t)
        .count()
}

/// R@1, R@10 and MRR@10 of `ranks` (1-based).
pub fn scores_of(ranks: &[usize]) -> RankScores {
    let n = ranks.len().max(1) as f64;
    let share = |k: usize| ranks.iter().filter(|&&r| r <= k).count() as f64 / n;
    RankScores {
        r1: share(1),
        r10: share(10),
        mrr10: ranks
            .iter()
            .map(|&r| if r <= 10 { 1.0 / r as f64 } else { 0.0 })
            .sum::<f64>()
            / n,
    }
}

/// One system's scores on one operation: where its answers ranked the targets, and, when the
/// model carries a decoder, ROUGE of its answers read back as words against the targets' text.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SystemScores {
    /// Ranks (absent for `decode`, which ranks nothing).
    #[serde(flatten)]
    pub ranks: Option<RankScores>,
    /// ROUGE of the decoded answer against the target.
    #[serde(flatten)]
    pub rouge: Option<Rouge>,
}

/// Per operation (`fusion`, `difference`, `compression`; `decode`: the targets' own vectors
/// read back, with a decoder), per system, where the targets ranked; with the pool's size and
/// the rows measured.
#[derive(Debug, Clone, Serialize)]
pub struct OperatorReport {
    /// Operation → system → scores (a system is absent where it does not apply).
    #[serde(flatten)]
    pub operations: BTreeMap<String, BTreeMap<String, SystemScores>>,
    /// Distinct sentences in the pool.
    pub pool: usize,
    /// WikiSplit rows and compression pairs measured.
    pub rows: (usize, usize),
    /// The `decode` row's read-backs (what the decoder said, the target text), for checking
    /// its ROUGE with another implementation.
    #[serde(skip)]
    pub read_backs: Vec<ReadBack>,
}

/// A vector read back as words, beside the text it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReadBack {
    /// The decoder's words, as one text.
    pub said: String,
    /// The text whose vector was read back.
    pub target: String,
}

/// Measures the baselines of every operation over `splits` and `compressions`, in a pool of
/// their sentences and `extra` (e.g. real questions), and kindred's operators where the
/// encoder's model carries them; with the model's decoder, every answer read back as words
/// too. `progress(done, total)` counts texts encoded.
pub fn eval_operators(
    encoder: &Encoder,
    splits: &[Split],
    compressions: &[Compression],
    extra: &[String],
    progress: &dyn Fn(u64, u64),
) -> Result<OperatorReport> {
    // Every distinct text once: the pool, and the inputs' vectors.
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut texts: Vec<&str> = Vec::new();
    let all = splits
        .iter()
        .flat_map(|s| [s.complex.as_str(), s.part1.as_str(), s.part2.as_str()])
        .chain(
            compressions
                .iter()
                .flat_map(|c| [c.original.as_str(), c.compressed.as_str()]),
        )
        .chain(extra.iter().map(String::as_str));
    for t in all {
        index.entry(t).or_insert_with(|| {
            texts.push(t);
            texts.len() - 1
        });
    }
    let joined: Vec<String> = splits
        .iter()
        .map(|s| format!("{} {}", s.part1, s.part2))
        .collect();
    let total = (texts.len() + joined.len()) as u64;
    let mut done = 0u64;
    let mut encode = |batch: &[&str]| -> Result<Vec<Vec<f32>>> {
        let mut out = Vec::with_capacity(batch.len());
        for chunk in batch.chunks(256) {
            out.extend(encoder.encode(chunk)?.into_iter().map(|e| e.sentence));
            done += chunk.len() as u64;
            progress(done, total);
        }
        Ok(out)
    };
    let pool = Pool {
        vectors: encode(&texts)?,
        texts,
        index,
        decoder: encoder.decoder(),
    };
    let joined_refs: Vec<&str> = joined.iter().map(String::as_str).collect();
    let concatenated = encode(&joined_refs)?;
    let mut operations = baselines(&pool, splits, &concatenated, compressions);
    if let Some(ops) = encoder.operators() {
        for (op, scores) in learned(&pool, ops, splits, compressions) {
            operations
                .entry(op.name().into())
                .or_default()
                .insert("kindred".into(), scores);
        }
    }
    let mut read_backs = Vec::new();
    if let Some(decoder) = pool.decoder {
        let targets = splits
            .iter()
            .flat_map(|s| [s.complex.as_str(), s.part1.as_str()])
            .chain(compressions.iter().map(|c| c.compressed.as_str()));
        let mut seen = std::collections::HashSet::new();
        let targets: Vec<usize> = targets
            .map(|t| pool.at(t))
            .filter(|&i| seen.insert(i))
            .collect();
        let (rouge, said) = read_back(decoder, &pool, &targets);
        read_backs = said;
        operations.entry("decode".into()).or_default().insert(
            "kindred".into(),
            SystemScores {
                ranks: None,
                rouge: Some(rouge),
            },
        );
    }
    Ok(OperatorReport {
        operations,
        pool: pool.vectors.len(),
        rows: (splits.len(), compressions.len()),
        read_backs,
    })
}

/// Mean ROUGE of pool entries `targets` read back from their own vectors, and each
/// read-back.
fn read_back(decoder: &WordDecoder, pool: &Pool<'_>, targets: &[usize]) -> (Rouge, Vec<ReadBack>) {
    let (scores, read): (Vec<Rouge>, Vec<ReadBack>) = targets
        .par_iter()
        .map(|&i| {
            let said = said(decoder, &pool.vectors[i]);
            let target = pool.texts[i].to_string();
            (rouge(&said, &target), ReadBack { said, target })
        })
        .unzip();
    (Rouge::mean(&scores), read)
}

/// The words `decoder` reads `v` as, as one text.
fn said(decoder: &WordDecoder, v: &[f32]) -> String {
    decoder.words(v).join(" ")
}

/// The encoded pool: every distinct sentence's vector, by text; and the model's decoder.
struct Pool<'t> {
    index: HashMap<&'t str, usize>,
    texts: Vec<&'t str>,
    vectors: Vec<Vec<f32>>,
    decoder: Option<&'t WordDecoder>,
}

impl Pool<'_> {
    /// The position of `text` in the pool.
    fn at(&self, text: &str) -> usize {
        self.index[text]
    }

    /// The vector of `text`.
    fn v(&self, text: &str) -> &[f32] {
        &self.vectors[self.at(text)]
    }

    /// The scores of answering each query vector with its target's position (and ROUGE of
    /// the answer read back against the target's text, with a decoder).
    fn scores(&self, queries: Vec<(Vec<f32>, usize)>) -> SystemScores {
        let ranks: Vec<(usize, Option<Rouge>)> = queries
            .par_iter()
            .map(|(q, target)| {
                let read = self
                    .decoder
                    .map(|d| rouge(&said(d, q), self.texts[*target]));
                (rank_of(&self.vectors, q, *target), read)
            })
            .collect();
        let (ranks, read): (Vec<usize>, Vec<Option<Rouge>>) = ranks.into_iter().unzip();
        let read: Option<Vec<Rouge>> = read.into_iter().collect();
        SystemScores {
            ranks: Some(scores_of(&ranks)),
            rouge: read.map(|r| Rouge::mean(&r)),
        }
    }
}

/// Identity, arithmetic and concatenation (fusion only) for each operation with rows.
fn baselines(
    pool: &Pool<'_>,
    splits: &[Split],
    concatenated: &[Vec<f32>],
    compressions: &[Compression],
) -> BTreeMap<String, BTreeMap<String, SystemScores>> {
    let mut operations: BTreeMap<String, BTreeMap<String, SystemScores>> = BTreeMap::new();
    let v = |t: &str| pool.v(t).to_vec();
    if !splits.is_empty() {
        let target = |s: &Split| pool.at(&s.complex);
        let arithmetic =
            |s: &Split| Operation::Fusion.arithmetic(pool.v(&s.part1), Some(pool.v(&s.part2)));
        let fusion = operations.entry("fusion".into()).or_default();
        fusion.insert(
            "identity".into(),
            pool.scores(splits.iter().map(|s| (v(&s.part1), target(s))).collect()),
        );
        fusion.insert(
            "arithmetic".into(),
            pool.scores(splits.iter().map(|s| (arithmetic(s), target(s))).collect()),
        );
        fusion.insert(
            "concatenation".into(),
            pool.scores(
                splits
                    .iter()
                    .zip(concatenated)
                    .map(|(s, c)| (c.clone(), target(s)))
                    .collect(),
            ),
        );
        let target = |s: &Split| pool.at(&s.part1);
        let arithmetic = |s: &Split| {
            Operation::Difference.arithmetic(pool.v(&s.complex), Some(pool.v(&s.part2)))
        };
        let difference = operations.entry("difference".into()).or_default();
        difference.insert(
            "identity".into(),
            pool.scores(splits.iter().map(|s| (v(&s.complex), target(s))).collect()),
        );
        difference.insert(
            "arithmetic".into(),
            pool.scores(splits.iter().map(|s| (arithmetic(s), target(s))).collect()),
        );
    }
    if !compressions.is_empty() {
        let queries = compressions
            .iter()
            .map(|c| (v(&c.original), pool.at(&c.compressed)))
            .collect();
        operations
            .entry("compression".into())
            .or_default()
            .insert("identity".into(), pool.scores(queries));
    }
    operations
}

/// Kindred's learned operators on the rows of each operation the model carries.
fn learned(
    pool: &Pool<'_>,
    ops: &crate::model::operators::Operators,
    splits: &[Split],
    compressions: &[Compression],
) -> Vec<(Operation, SystemScores)> {
    let v = |t: &str| pool.v(t);
    // Per operation: (input, second input, target) of every row it is measured on.
    type Queries<'a> = Vec<(&'a [f32], Option<&'a [f32]>, usize)>;
    let rows: [(Operation, Queries<'_>); 3] = [
        (
            Operation::Fusion,
            splits
                .iter()
                .map(|s| (v(&s.part1), Some(v(&s.part2)), pool.at(&s.complex)))
                .collect(),
        ),
        (
            Operation::Difference,
            splits
                .iter()
                .map(|s| (v(&s.complex), Some(v(&s.part2)), pool.at(&s.part1)))
                .collect(),
        ),
        (
            Operation::Compression,
            compressions
                .iter()
                .map(|c| (v(&c.original), None, pool.at(&c.compressed)))
                .collect(),
        ),
    ];
    rows.into_iter()
        .filter(|(op, queries)| !queries.is_empty() && ops.has(*op))
        .map(|(op, queries)| {
            let answers = queries
                .into_iter()
                .map(|(u, w, target)| (ops.apply(op, u, w), target))
                .collect();
            (op, pool.scores(answers))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_follow_the_quotes() {
        assert_eq!(csv_fields("a,b").unwrap(), ["a", "b"]);
        assert_eq!(csv_fields("\"a, c\",b").unwrap(), ["a, c", "b"]);
        assert_eq!(
            csv_fields("\"say \"\"hi\"\"\",x").unwrap(),
            ["say \"hi\"", "x"]
        );
        assert!(csv_fields("\"open,b").is_none());
    }

    #[test]
    fn ranks_count_what_scores_above_the_target() {
        let pool = vec![vec![1.0, 0.0], vec![0.0, 1.0], vec![0.8, 0.6]];
        assert_eq!(rank_of(&pool, &[1.0, 0.0], 0), 1);
        assert_eq!(rank_of(&pool, &[1.0, 0.0], 2), 2);
        assert_eq!(rank_of(&pool, &[1.0, 0.0], 1), 3);
        let s = scores_of(&[1, 2, 11, 1]);
        assert_eq!((s.r1, s.r10), (0.5, 0.75));
        assert!((s.mrr10 - (1.0 + 0.5 + 0.0 + 1.0) / 4.0).abs() < 1e-12);
    }

    #[test]
    fn files_are_read_with_errors_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("w.tsv");
        std::fs::write(&ws, "A and B .\tA . <::::> B .\nno tab here\n").unwrap();
        let e = read_wikisplit(&ws, None).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("tab"), "{e}");
        let got = read_wikisplit(&ws, Some(1)).unwrap();
        assert_eq!(got[0].part2, "B .");
        let gc = dir.path().join("c.csv");
        std::fs::write(&gc, "original,compressed\r\n\"Long, long text.\",Text.\r\n").unwrap();
        let got = read_compression(&gc, None).unwrap();
        assert_eq!(got[0].original, "Long, long text.");
        assert_eq!(got[0].compressed, "Text.");
    }
}
