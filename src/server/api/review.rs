//! Duplicate review: the queue's pages and items, an admin's verdicts as given and as stored.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::search::{Beyond, Compound, Hit};
use crate::review;

/// One question of a pair: a stored document (with its id) or a submitted text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PairSide {
    /// The stored document's id; absent for a question that was only submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The question.
    pub text: String,
}

impl From<review::PairSide> for PairSide {
    fn from(s: review::PairSide) -> Self {
        PairSide {
            id: s.id,
            text: s.text,
        }
    }
}

impl From<PairSide> for review::PairSide {
    fn from(s: PairSide) -> Self {
        review::PairSide {
            id: s.id,
            text: s.text,
        }
    }
}

/// An admin's verdict on a pair of questions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
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

impl From<review::Verdict> for Verdict {
    fn from(v: review::Verdict) -> Self {
        Verdict {
            a: v.a.into(),
            b: v.b.into(),
            duplicate: v.duplicate,
            probability: v.probability,
        }
    }
}

impl From<Verdict> for review::Verdict {
    fn from(v: Verdict) -> Self {
        review::Verdict {
            a: v.a.into(),
            b: v.b.into(),
            duplicate: v.duplicate,
            probability: v.probability,
        }
    }
}

/// A verdict as stored: with its key and when it was given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StoredVerdict {
    /// The pair's key (the same for (a, b) and (b, a)); a new verdict on the pair replaces it.
    pub key: String,
    /// The verdict.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// Unix time (seconds) it was given.
    pub at: u64,
}

impl From<review::StoredVerdict> for StoredVerdict {
    fn from(v: review::StoredVerdict) -> Self {
        StoredVerdict {
            key: v.key,
            verdict: v.verdict.into(),
            at: v.at,
        }
    }
}

/// A question waiting for review: a stored document and its best other match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ReviewItem {
    /// The recently written document.
    pub document: PairSide,
    /// Its best match among the other documents, with every stage's score and P(duplicate)
    /// (and the explanation when asked for).
    pub matched: Hit,
    /// The pair's key (what a verdict on it is stored under).
    pub key: String,
    /// What the document asks beyond its match: its phrases no token of the match aligns
    /// with, and that difference read back as stored questions. Absent when every phrase is
    /// matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beyond: Option<Beyond>,
    /// The two other documents the document asks at once, when their fusion matches it better
    /// than any single one and reaches the threshold (as the duplicate check's `compound`);
    /// such a document is queued even when its best single match is below the threshold.
    /// Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compound: Option<Compound>,
}

impl From<review::ReviewItem> for ReviewItem {
    fn from(i: review::ReviewItem) -> Self {
        ReviewItem {
            document: i.document.into(),
            matched: i.matched.into(),
            key: i.key,
            beyond: i.beyond.map(Into::into),
            compound: i.compound.map(Into::into),
        }
    }
}

/// One page of the review queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
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
    /// Items left without the explanation asked for (`limits.max_explain_cells`; absent when 0).
    #[serde(default, skip_serializing_if = "crate::search::is_zero")]
    pub unexplained: usize,
}

impl From<review::ReviewPage> for ReviewPage {
    fn from(p: review::ReviewPage) -> Self {
        ReviewPage {
            items: p.items.into_iter().map(ReviewItem::from).collect(),
            threshold: p.threshold,
            scanned: p.scanned,
            next_before: p.next_before,
            unexplained: p.unexplained,
        }
    }
}
