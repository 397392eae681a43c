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
