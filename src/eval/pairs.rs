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

    #[test]
    fn graded_files_become_labelled_pairs_by_threshold() {
        let dir = tempfile::tempdir().unwrap();
        let sts = dir.path().join("sts-train.csv");
        std::fs::write(
            &sts,
            "g\tf\t2012\t1\t5.000\tA plane takes off.\tAn airplane takes off.\n\
             g\tf\t2012\t2\t3.000\tA man plays.\tA man sings.\n\
             g\tf\t2012\t3\t0.500\tA cat eats.\tThe market fell.\n",
        )
        .unwrap();
        let sick = dir.path().join("SICK_train.txt");
        std::fs::write(
            &sick,
            "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n\
             1\tKids play.\tChildren play.\t4.5\tENTAILMENT\n",
        )
        .unwrap();
        let qqp = dir.path().join("dev.tsv");
        std::fs::write(&qqp, "1\ta\tb\t7\n").unwrap();
        assert!(is_graded_file(&sts).unwrap() && is_graded_file(&sick).unwrap());
        assert!(!is_graded_file(&qqp).unwrap());
        let pairs = read_graded_as_labelled(&sts).unwrap();
        assert_eq!(pairs.len(), 2, "the 3.0 pair is left out");
        assert!(pairs[0].duplicate && !pairs[1].duplicate);
        assert_eq!(pairs[1].b, "The market fell.");
        let pairs = read_graded_as_labelled(&sick).unwrap();
        assert_eq!(pairs.len(), 1);
        assert!(pairs[0].duplicate && pairs[0].a == "Kids play.");
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

/// Gold similarity at or above which a graded pair counts as a duplicate for training.
pub const GRADED_DUPLICATE: f64 = 4.0;
/// Gold similarity at or below which a graded pair counts as a non-duplicate for training.
pub const GRADED_DISTINCT: f64 = 2.0;

/// True when `path` is an STS-B or SICK file rather than a labelled-pair file: a SICK header,
/// or a first line whose fifth column is a score and whose first is not a 0/1 label.
pub fn is_graded_file(path: &Path) -> Result<bool> {
    let raw = std::fs::read(path).map_err(io_err(format!("reading {}", path.display())))?;
    let text = String::from_utf8_lossy(&raw);
    let Some(first) = text.lines().find(|l| !l.trim().is_empty()) else {
        return Ok(false);
    };
    let cols: Vec<&str> = first.split('\t').collect();
    Ok(first.starts_with("pair_ID\t")
        || (cols.len() >= 7
            && !matches!(cols[0].trim(), "0" | "1")
            && cols[4].trim().parse::<f64>().is_ok()))
}

/// Reads an STS-B or SICK file as labelled pairs for training: gold ≥ [`GRADED_DUPLICATE`] is a
/// duplicate, ≤ [`GRADED_DISTINCT`] a non-duplicate; the pairs between are left out (their
/// label would be a guess).
pub fn read_graded_as_labelled(path: &Path) -> Result<Vec<LabelledPair>> {
    Ok(read_scored_pairs(path)?
        .into_iter()
        .filter_map(|p| {
            let duplicate = if p.gold >= GRADED_DUPLICATE {
                true
            } else if p.gold <= GRADED_DISTINCT {
                false
            } else {
                return None;
            };
            Some(LabelledPair {
                a: p.a,
                b: p.b,
                duplicate,
            })
        })
        .collect())
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
