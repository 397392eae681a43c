//! Duplicate review: which recently written questions look like duplicates of stored ones,
//! and the admin's verdicts on question pairs.
//!
//! Owns the review queue (newest documents first, each with its best other match by the
//! search pipeline, kept when P(duplicate) reaches the threshold and the pair has no verdict
//! yet, with what the document asks beyond its match and the two documents it asks at once when
//! it is a compound of them) and the verdicts, stored in the
//! collection as labelled pairs (`pairs/c`) and exported in the QQP TSV layout
//! (`label<TAB>question1<TAB>question2<TAB>id`) that `kindred calibrate`, `kindred eval pairs`
//! and training read.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::db::Database;
use crate::engine::Collection;
use crate::error::{InternalError, Result, UserError};
use crate::search::{self, Beyond, Compound, Hit, SearchParams};

/// One question of a pair: a stored document (with its id) or a submitted text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairSide {
    /// The stored document's id; absent for a question that was only submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The question.
    pub text: String,
}

impl PairSide {
    fn identity(&self) -> String {
        match &self.id {
            Some(id) => format!("id:{id}"),
            None => format!("text:{}", self.text),
        }
    }
}

/// An admin's verdict on a pair of questions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The new (or submitted) question.
    pub a: PairSide,
    /// The stored question it was matched with.
    pub b: PairSide,
    /// True: the same question; false: different questions.
    pub duplicate: bool,
    /// The P(duplicate) the admin was shown, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<f32>,
}

/// A verdict as stored: with its key and when it was given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredVerdict {
    /// The pair's key (the same for (a, b) and (b, a)); a new verdict on the pair replaces it.
    pub key: String,
    /// The verdict.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// Unix time (seconds) it was given.
    pub at: u64,
}

/// The pair's key: SHA-256 of both sides' identities (id, or text when there is no id) in a
/// canonical order, as 32 hex digits.
pub fn pair_key(a: &PairSide, b: &PairSide) -> String {
    let (x, y) = (a.identity(), b.identity());
    let (first, second) = if x <= y { (x, y) } else { (y, x) };
    let mut h = Sha256::new();
    h.update(first.as_bytes());
    h.update([0u8]);
    h.update(second.as_bytes());
    h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn check_side(db: &Database, collection: &str, name: &'static str, s: &PairSide) -> Result<()> {
    if s.text.trim().is_empty() {
        return Err(UserError::InvalidArgument {
            name,
            reason: "an empty question; give the text that was judged".into(),
        }
        .into());
    }
    if let Some(id) = &s.id {
        if db.get(collection, id)?.is_none() {
            return Err(UserError::InvalidArgument {
                name,
                reason: format!(
                    "no document {:?} in collection {collection:?}; give the id of a stored document, or leave id out for a submitted question",
                    id.chars().take(80).collect::<String>()
                ),
            }
            .into());
        }
    }
    Ok(())
}

/// Stores a verdict durably in the collection (replacing an earlier one on the same pair).
pub fn record(db: &Database, collection: &str, verdict: Verdict) -> Result<StoredVerdict> {
    check_side(db, collection, "a", &verdict.a)?;
    check_side(db, collection, "b", &verdict.b)?;
    if let Some(p) = verdict.probability {
        if !(0.0..=1.0).contains(&p) {
            return Err(UserError::InvalidArgument {
                name: "probability",
                reason: format!("{p}; the P(duplicate) shown is between 0 and 1 (or absent)"),
            }
            .into());
        }
    }
    if verdict.a.identity() == verdict.b.identity() {
        return Err(UserError::InvalidArgument {
            name: "b",
            reason: "the same question as a; a verdict needs two different questions".into(),
        }
        .into());
    }
    let stored = StoredVerdict {
        key: pair_key(&verdict.a, &verdict.b),
        verdict,
        at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    let json = serde_json::to_vec(&stored).expect("verdicts serialise");
    db.put_pair(collection, &stored.key, &json)?;
    Ok(stored)
}

/// Every verdict of a collection, oldest first.
pub fn verdicts(db: &Database, collection: &str) -> Result<Vec<StoredVerdict>> {
    let mut out = db
        .pairs(collection)?
        .into_iter()
        .map(|(_, v)| decode(&v))
        .collect::<Result<Vec<_>>>()?;
    out.sort_by(|x, y| x.at.cmp(&y.at).then_with(|| x.key.cmp(&y.key)));
    Ok(out)
}

/// Removes a verdict; true if it existed.
pub fn remove(db: &Database, collection: &str, key: &str) -> Result<bool> {
    db.remove_pair(collection, key)
}

fn decode(bytes: &[u8]) -> Result<StoredVerdict> {
    serde_json::from_slice(bytes)
        .map_err(|e| InternalError::Corrupt(format!("undecodable verdict: {e}")).into())
}

/// The verdicts as a QQP-layout TSV (`label<TAB>question1<TAB>question2<TAB>key`, no header):
/// what `kindred calibrate --pairs`, `kindred eval pairs` and training read. Tabs and line
/// breaks inside questions become spaces.
pub fn to_tsv(verdicts: &[StoredVerdict]) -> String {
    let clean = |s: &str| s.replace(['\t', '\n', '\r'], " ");
    verdicts
        .iter()
        .map(|v| {
            format!(
                "{}\t{}\t{}\t{}\n",
                u8::from(v.verdict.duplicate),
                clean(&v.verdict.a.text),
                clean(&v.verdict.b.text),
                v.key
            )
        })
        .collect()
}

/// A question waiting for review: a stored document and its best other match.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReviewItem {
    /// The recently written document.
    pub document: PairSide,
    /// Its best match among the other documents, with every stage's score and P(duplicate)
    /// (and the explanation when asked for).
    pub matched: Hit,
    /// The pair's key (what a verdict on it is stored under).
    pub key: String,
    /// What the document asks beyond its match (the phrases no token of the match aligns
    /// with, and that difference read back as stored questions): what a moderator decides
    /// on. Absent when every phrase is matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beyond: Option<Beyond>,
    /// The two other documents the document asks at once, when their fusion matches it
    /// better than any single one and reaches the threshold (as the duplicate check's
    /// `compound`); absent otherwise. Such a document is queued even when its best single
    /// match is below the threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compound: Option<Compound>,
}

/// One page of the review queue.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReviewPage {
    /// Pairs at or above the threshold without a verdict, newest document first.
    pub items: Vec<ReviewItem>,
    /// The threshold used.
    pub threshold: f32,
    /// Documents looked at.
    pub scanned: usize,
    /// Pass as `before` to look at older documents; absent when there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_before: Option<u64>,
    /// Items left without the explanation asked for: explaining them would pass
    /// `explain_cells` (the newest items are the ones explained; absent when 0).
    #[serde(default, skip_serializing_if = "search::is_zero")]
    pub unexplained: usize,
}

/// What to look at for the review queue.
#[derive(Debug, Clone)]
pub struct ReviewQuery {
    /// P(duplicate) at or above which a pair is queued (default: the calibration's threshold).
    pub threshold: Option<f32>,
    /// Look at documents written before this position (a previous page's `next_before`).
    pub before: Option<u64>,
    /// How many recent documents to look at.
    pub scan: usize,
    /// Attach the RCMD explanation to each item.
    pub explain: bool,
    /// Most cells the page's explanations may hold (see [`SearchParams::explain_cells`]).
    pub explain_cells: usize,
}

/// Most documents one review page may scan.
pub const MAX_SCAN: usize = 1000;

/// The review queue: the newest `scan` documents (before `before`), each searched against the
/// other documents (hybrid + RCMD rerank, its stored vectors as the query, compounds checked);
/// a document whose best other match reaches the threshold, or that is a compound of two others
/// reaching it, is queued unless the pair with its best match already has a verdict, and each
/// pair appears once.
pub fn queue(col: &Collection<'_>, q: &ReviewQuery) -> Result<ReviewPage> {
    let (db, collection) = (col.view().db(), col.name());
    if q.scan == 0 || q.scan > MAX_SCAN {
        return Err(UserError::InvalidArgument {
            name: "scan",
            reason: format!("{}; use 1-{MAX_SCAN}", q.scan),
        }
        .into());
    }
    let threshold = match q.threshold {
        Some(t) if (0.0..=1.0).contains(&t) => t,
        Some(t) => {
            return Err(UserError::InvalidArgument {
                name: "threshold",
                reason: format!("{t}; a probability between 0 and 1"),
            }
            .into())
        }
        None => col.judge()?.threshold(),
    };
    let mut recent = db.recent(collection, q.before, q.scan + 1)?;
    let more = recent.len() > q.scan;
    recent.truncate(q.scan);
    let params = SearchParams {
        k: 1,
        explain: false,
        compound: true,
        rerank_depth: 20,
        depths: search::Depths {
            cosine: 20,
            w2: 20,
            lexical: 20,
        },
        ..SearchParams::default()
    };
    let found: Vec<Option<(ReviewItem, crate::Encoded)>> = recent
        .par_iter()
        .map(|(_, id)| -> Result<Option<(ReviewItem, crate::Encoded)>> {
            let Some(doc) = col.view().get(id)? else {
                return Ok(None); // deleted since
            };
            let query = doc.encoded();
            let out = col.search_beside(&doc.id, &doc.text, &query, &params)?;
            let compound = out.compound.filter(|c| c.probability >= threshold);
            let Some(best) = out.hits.into_iter().next() else {
                return Ok(None);
            };
            let document = PairSide {
                id: Some(doc.id.clone()),
                text: doc.text.clone(),
            };
            let key = pair_key(
                &document,
                &PairSide {
                    id: Some(best.id.clone()),
                    text: String::new(),
                },
            );
            // Only pairs above the threshold are looked up among the verdicts.
            let queued = best.probability >= threshold || compound.is_some();
            if !queued || db.pair(collection, &key)?.is_some() {
                return Ok(None);
            }
            Ok(Some((
                ReviewItem {
                    document,
                    matched: best,
                    key,
                    beyond: None,
                    compound,
                },
                query,
            )))
        })
        .collect::<Result<_>>()?;
    let mut seen = std::collections::HashSet::new();
    let mut budget = search::ExplainBudget::new(q.explain_cells);
    let mut items = Vec::new();
    for (mut item, query) in found.into_iter().flatten() {
        if !seen.insert(item.key.clone()) {
            continue;
        }
        let (doc, id) = (&item.document.text, &item.matched.id);
        if q.explain {
            item.matched.explanation = budget.try_admit(|| col.explain(doc, &query, id))?;
        }
        let asker = item.document.id.as_deref();
        item.beyond = col.beyond((doc, &query, asker), id)?;
        items.push(item);
    }
    Ok(ReviewPage {
        items,
        threshold,
        unexplained: budget.refused,
        scanned: recent.len(),
        next_before: if more {
            recent.last().map(|(internal, _)| *internal)
        } else {
            None
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(id: Option<&str>, text: &str) -> PairSide {
        PairSide {
            id: id.map(str::to_string),
            text: text.into(),
        }
    }

    #[test]
    fn pair_key_ignores_order_and_prefers_ids() {
        let (a, b) = (side(Some("1"), "How?"), side(Some("2"), "Why?"));
        assert_eq!(pair_key(&a, &b), pair_key(&b, &a));
        // With ids, the text does not matter (a document's text may be edited).
        assert_eq!(pair_key(&a, &b), pair_key(&side(Some("1"), "other"), &b));
        // A submitted text is not the stored document with that text.
        assert_ne!(pair_key(&a, &b), pair_key(&side(None, "How?"), &b));
        assert_eq!(pair_key(&a, &b).len(), 32);
    }

    #[test]
    fn tsv_is_the_qqp_layout_and_reads_back() {
        let v = |dup, a: &str, b: &str, at| StoredVerdict {
            key: pair_key(&side(None, a), &side(None, b)),
            verdict: Verdict {
                a: side(None, a),
                b: side(Some("7"), b),
                duplicate: dup,
                probability: Some(0.9),
            },
            at,
        };
        let tsv = to_tsv(&[
            v(true, "How do I\tlearn Rust?", "How to learn Rust?", 1),
            v(false, "What is love?", "What is\nlife?", 2),
        ]);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pairs.tsv");
        std::fs::write(&path, &tsv).expect("write");
        let pairs = crate::eval::pairs::read_pairs(&path).expect("reads back");
        assert_eq!(pairs.len(), 2);
        assert!(pairs[0].duplicate && !pairs[1].duplicate);
        assert_eq!(pairs[0].a, "How do I learn Rust?");
        assert_eq!(pairs[1].b, "What is life?");
    }
}
