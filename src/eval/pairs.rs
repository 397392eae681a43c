//! Labelled question pairs: the Quora (QQP) TSV layout `label<TAB>q1<TAB>q2[<TAB>id]`, which is
//! also what kindred exports from its duplicate review. Blank lines are skipped; anything else
//! that does not parse is an error naming the line.

use std::path::Path;

use crate::error::{io_err, Result, UserError};

/// One labelled pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelledPair {
    /// First question.
    pub a: String,
    /// Second question.
    pub b: String,
    /// True when they are duplicates.
    pub duplicate: bool,
}

/// Reads a pair file.
pub fn read_pairs(path: &Path) -> Result<Vec<LabelledPair>> {
    let raw = std::fs::read(path).map_err(io_err(format!("reading {}", path.display())))?;
    // Some QQP lines carry stray bytes that are not UTF-8; keep the rest of the line.
    let text = String::from_utf8_lossy(&raw);
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |reason: &str| {
            UserError::InvalidArgument {
            name: "pairs file",
            reason: format!(
                "{} line {}: {reason}; expected label<TAB>question1<TAB>question2[<TAB>id] with label 0 or 1",
                path.display(),
                n + 1
            ),
        }
        };
        let mut cols = line.split('\t');
        let (label, a, b) = match (cols.next(), cols.next(), cols.next()) {
            (Some(l), Some(a), Some(b)) => (l.trim(), a.trim(), b.trim()),
            _ => return Err(bad("fewer than 3 tab-separated columns").into()),
        };
        let duplicate = match label {
            "1" => true,
            "0" => false,
            other => return Err(bad(&format!("label {other:?}")).into()),
        };
        if a.is_empty() || b.is_empty() {
            return Err(bad("an empty question").into());
        }
        out.push(LabelledPair {
            a: a.into(),
            b: b.into(),
            duplicate,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_qqp_lines_and_names_bad_ones() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.tsv");
        std::fs::write(&p, "1\tHow are you?\tHow do you do?\t7\n\n0\ta\tb\n").unwrap();
        let pairs = read_pairs(&p).unwrap();
        assert_eq!(pairs.len(), 2);
        assert!(pairs[0].duplicate && !pairs[1].duplicate);
        assert_eq!(pairs[0].b, "How do you do?");
        std::fs::write(&p, "1\ta\tb\nyes\ta\tb\n").unwrap();
        let e = read_pairs(&p).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("\"yes\""), "{e}");
    }
}

/// A pair with a graded similarity (STS-B, SICK).
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredPair {
    /// First sentence.
    pub a: String,
    /// Second sentence.
    pub b: String,
    /// Gold similarity (STS-B 0-5, SICK relatedness 1-5).
    pub gold: f64,
}

/// Reads an STS-B file (`genre<TAB>file<TAB>year<TAB>id<TAB>score<TAB>s1<TAB>s2[...]`) or a SICK
/// file (header `pair_ID<TAB>sentence_A<TAB>sentence_B<TAB>relatedness_score...`), told apart
/// by the SICK header.
pub fn read_scored_pairs(path: &Path) -> Result<Vec<ScoredPair>> {
    let raw = std::fs::read(path).map_err(io_err(format!("reading {}", path.display())))?;
    let text = String::from_utf8_lossy(&raw);
    let mut lines = text.lines().enumerate().peekable();
    let sick = lines
        .peek()
        .is_some_and(|(_, l)| l.starts_with("pair_ID\t"));
    if sick {
        lines.next();
    }
    let (ia, ib, is) = if sick { (1, 2, 3) } else { (5, 6, 4) };
    let mut out = Vec::new();
    for (n, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split('\t').collect();
        let bad = || {
            UserError::InvalidArgument {
            name: "similarity file",
            reason: format!(
                "{} line {}: expected STS-B (score in column 5, sentences in 6 and 7) or SICK (pair_ID, sentence_A, sentence_B, relatedness_score) columns",
                path.display(),
                n + 1
            ),
        }
        };
        let (Some(a), Some(b), Some(score)) = (cols.get(ia), cols.get(ib), cols.get(is)) else {
            return Err(bad().into());
        };
        let gold: f64 = score.trim().parse().map_err(|_| bad())?;
        out.push(ScoredPair {
            a: a.trim().into(),
            b: b.trim().into(),
            gold,
        });
    }
    Ok(out)
}
