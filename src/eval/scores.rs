//! Per-pair scores of every stage, written out so metrics kindred does not compute (MAP, MRR
//! per question, error analysis) can be computed elsewhere: `kindred eval pairs --scores FILE`.
//!
//! Two formats, chosen by the file's extension: JSON Lines (`.jsonl`, `.ndjson`: one object per
//! pair, the fields of [`PairScores`]) or, for any other name, TSV with a header row and the
//! same columns in the same order (`siamese` empty when the model has no classifier; the
//! texts last, tabs and line breaks in them replaced by spaces).

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::LabelledPair;
use crate::score::calibration::Calibrator;
use crate::score::features::PairFeatures;

/// One pair's scores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairScores {
    /// Which set the pair is from ("dev" or "test").
    pub split: String,
    /// Its 0-based position in that set (the set's files in order).
    pub pair: usize,
    /// 1 for duplicates, 0 otherwise.
    pub label: u8,
    /// Cosine of the sentence vectors.
    pub cosine: f32,
    /// 2-Wasserstein distance of the intents (lower is closer).
    pub w2: f32,
    /// RCMD_1, q1 → q2.
    pub rcmd_forward: f32,
    /// RCMD_2, q2 → q1.
    pub rcmd_backward: f32,
    /// s_RCMD = (forward + backward) / 2.
    pub rcmd: f32,
    /// TF-IDF cosine over word uni- and bigrams.
    pub lexical: f32,
    /// The model's variational-siamese P(duplicate), when it carries a classifier.
    pub siamese: Option<f32>,
    /// The calibrated P(duplicate).
    pub probability: f32,
    /// First question.
    pub q1: String,
    /// Second question.
    pub q2: String,
}

/// The rows of one set: its pairs, their features (in the same order) and the calibration
/// that gives P(duplicate).
pub fn pair_scores(
    split: &str,
    pairs: &[LabelledPair],
    features: &[PairFeatures],
    cal: &Calibrator,
) -> Vec<PairScores> {
    assert_eq!(pairs.len(), features.len(), "one feature set per pair");
    pairs
        .iter()
        .zip(features)
        .enumerate()
        .map(|(i, (p, f))| PairScores {
            split: split.into(),
            pair: i,
            label: u8::from(p.duplicate),
            cosine: f.cosine,
            w2: f.w2,
            rcmd_forward: f.rcmd_forward,
            rcmd_backward: f.rcmd_backward,
            rcmd: f.rcmd(),
            lexical: f.lexical,
            siamese: f.siamese,
            probability: cal.probability(f),
            q1: p.a.clone(),
            q2: p.b.clone(),
        })
        .collect()
}

/// The format for `path`: JSON Lines for `.jsonl` / `.ndjson`, else TSV.
pub fn is_jsonl(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("jsonl") || e.eq_ignore_ascii_case("ndjson"))
}

/// The TSV header, the columns in [`PairScores`] order.
pub const TSV_HEADER: &str = "split\tpair\tlabel\tcosine\tw2\trcmd_forward\trcmd_backward\trcmd\tlexical\tsiamese\tprobability\tq1\tq2";

/// Writes `rows` as JSON Lines (`jsonl`) or TSV with a header.
pub fn write_scores(mut out: impl Write, rows: &[PairScores], jsonl: bool) -> std::io::Result<()> {
    if jsonl {
        for r in rows {
            serde_json::to_writer(&mut out, r)?;
            out.write_all(b"\n")?;
        }
        return out.flush();
    }
    writeln!(out, "{TSV_HEADER}")?;
    let clean = |t: &str| t.replace(['\t', '\n', '\r'], " ");
    for r in rows {
        writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            r.split,
            r.pair,
            r.label,
            r.cosine,
            r.w2,
            r.rcmd_forward,
            r.rcmd_backward,
            r.rcmd,
            r.lexical,
            r.siamese.map_or(String::new(), |s| s.to_string()),
            r.probability,
            clean(&r.q1),
            clean(&r.q2),
        )?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> PairScores {
        PairScores {
            split: "test".into(),
            pair: 3,
            label: 1,
            cosine: 0.5,
            w2: 1.25,
            rcmd_forward: 0.75,
            rcmd_backward: 0.25,
            rcmd: 0.5,
            lexical: 0.125,
            siamese: None,
            probability: 0.875,
            q1: "a\tb".into(),
            q2: "c".into(),
        }
    }

    #[test]
    fn tsv_has_a_header_and_one_clean_line_per_pair() {
        let mut out = Vec::new();
        write_scores(&mut out, &[row()], false).expect("writes");
        let text = String::from_utf8(out).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], TSV_HEADER);
        assert_eq!(
            lines[1],
            "test\t3\t1\t0.5\t1.25\t0.75\t0.25\t0.5\t0.125\t\t0.875\ta b\tc"
        );
        assert_eq!(lines[1].split('\t').count(), TSV_HEADER.split('\t').count());
    }

    #[test]
    fn jsonl_reads_back() {
        let mut out = Vec::new();
        write_scores(&mut out, &[row(), row()], true).expect("writes");
        let text = String::from_utf8(out).expect("utf-8");
        let back: Vec<PairScores> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("a row"))
            .collect();
        assert_eq!(back, [row(), row()]);
        assert!(is_jsonl(Path::new("s.JSONL")) && !is_jsonl(Path::new("s.tsv")));
    }
}
