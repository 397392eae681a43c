//! Metadata filters and the index that answers them exactly.
//!
//! A [`Filter`] is parsed once from the JSON object a search is given: each top-level key maps
//! to a condition the document's metadata value at that key must meet (all must hold):
//!
//! ```text
//! "key": "a" | 3 | true           equal (a metadata array matches if any element is equal)
//! "key": {"in": ["a", "b", 3]}    equal to any of the list
//! "key": {"gte": 1, "lt": 5}      numeric range (any of gt, gte, lt, lte)
//! ```
//!
//! Numbers compare as f64 (1 and 1.0 are equal). Only top-level scalar values (and scalars in
//! top-level arrays) are indexed; nested objects are stored but cannot be filtered on.
//!
//! [`MetadataIndex`] keeps, per key, a sorted posting list of internal ids for each string and
//! boolean value and an ordered map for numbers, so a filter's matching documents — and so its
//! exact cardinality — come from the index without reading a record. [`Filter::matches`] is
//! the same predicate over one document's metadata (the pipeline's last check and the tests'
//! truth).

use std::collections::{BTreeMap, HashMap};
use std::sync::RwLock;

use crate::error::{Result, UserError};
use crate::sync::RwLockExt;

type Json = serde_json::Value;
type JsonMap = serde_json::Map<String, Json>;

/// A total order on f64 for the numeric map (NaN never occurs: JSON has none; -0 is 0).
#[derive(Debug, Clone, Copy)]
struct Num(f64);
impl PartialEq for Num {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for Num {}
impl PartialOrd for Num {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Num {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}
impl Num {
    fn of(n: &serde_json::Number) -> Option<Num> {
        n.as_f64().filter(|v| v.is_finite()).map(|v| Num(v + 0.0))
    }
}

/// A scalar metadata value as filters see it.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
enum Scalar {
    Str(String),
    Bool(bool),
    /// The bits of a finite f64 (after -0 → 0), for hashing.
    Num(u64),
}

impl Scalar {
    fn of(v: &Json) -> Option<Scalar> {
        match v {
            Json::String(s) => Some(Scalar::Str(s.clone())),
            Json::Bool(b) => Some(Scalar::Bool(*b)),
            Json::Number(n) => Num::of(n).map(|n| Scalar::Num(n.0.to_bits())),
            _ => None,
        }
    }

    fn to_json(&self) -> Json {
        match self {
            Scalar::Str(s) => Json::String(s.clone()),
            Scalar::Bool(b) => Json::Bool(*b),
            Scalar::Num(bits) => {
                let x = f64::from_bits(*bits);
                if x.fract() == 0.0 && x.abs() < 9e15 {
                    Json::from(x as i64)
                } else {
                    serde_json::Number::from_f64(x).map_or(Json::Null, Json::Number)
                }
            }
        }
    }

    fn number(&self) -> Option<f64> {
        match self {
            Scalar::Num(bits) => Some(f64::from_bits(*bits)),
            _ => None,
        }
    }
}

/// What one key's value must be.
#[derive(Debug, Clone, PartialEq)]
enum Condition {
    /// Equal to any of these (one for plain equality).
    AnyOf(Vec<Scalar>),
    /// A number within the bounds: (bound, inclusive).
    Range {
        low: Option<(f64, bool)>,
        high: Option<(f64, bool)>,
    },
}

impl Condition {
    fn holds_for(&self, v: &Scalar) -> bool {
        match self {
            Condition::AnyOf(values) => values.contains(v),
            Condition::Range { low, high } => v.number().is_some_and(|x| {
                low.is_none_or(|(b, inc)| if inc { x >= b } else { x > b })
                    && high.is_none_or(|(b, inc)| if inc { x <= b } else { x < b })
            }),
        }
    }
}

/// One clause of a [`Filter`] as plain values ([`Filter::clauses_json`]).
#[derive(Debug, Clone, PartialEq)]
pub enum ClauseJson {
    /// The value (or an element of an array value) equals one of these.
    AnyOf(Vec<Json>),
    /// A number within the bounds: (bound, inclusive).
    Range {
        /// Lower bound.
        low: Option<(f64, bool)>,
        /// Upper bound.
        high: Option<(f64, bool)>,
    },
}

/// A parsed metadata filter: every clause must hold.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Filter {
    clauses: Vec<(String, Condition)>,
}

const OPERATORS: &str = "a string, number or boolean to match, {\"in\": [values]}, or a range \
                         like {\"gte\": 1, \"lt\": 5} (gt, gte, lt, lte)";

impl Filter {
    /// Parses a search's `filter` object; the error names the key and the accepted forms.
    pub fn parse(raw: &JsonMap) -> Result<Filter> {
        let clauses = raw
            .iter()
            .map(|(key, v)| Ok((key.clone(), condition(key, v)?)))
            .collect::<Result<_>>()?;
        Ok(Filter { clauses })
    }

    /// The clauses as JSON values, for a backend that evaluates filters itself (the Milvus
    /// backend turns them into its expressions): (key, condition), in the filter's order.
    pub fn clauses_json(&self) -> Vec<(String, ClauseJson)> {
        self.clauses
            .iter()
            .map(|(key, cond)| {
                let c = match cond {
                    Condition::AnyOf(values) => {
                        ClauseJson::AnyOf(values.iter().map(Scalar::to_json).collect())
                    }
                    Condition::Range { low, high } => ClauseJson::Range {
                        low: *low,
                        high: *high,
                    },
                };
                (key.clone(), c)
            })
            .collect()
    }

    /// True when the filter admits everything.
    pub fn is_empty(&self) -> bool {
        self.clauses.is_empty()
    }

    /// Whether a document with this metadata passes.
    pub fn matches(&self, metadata: &JsonMap) -> bool {
        self.clauses.iter().all(|(key, cond)| {
            metadata
                .get(key)
                .is_some_and(|v| scalars(v).any(|s| cond.holds_for(&s)))
        })
    }
}

fn condition(key: &str, v: &Json) -> Result<Condition> {
    let bad = |reason: String| -> Result<Condition> {
        Err(UserError::InvalidArgument {
            name: "filter",
            reason: format!("{key:?}: {reason}; use {OPERATORS}"),
        }
        .into())
    };
    if let Some(s) = Scalar::of(v) {
        return Ok(Condition::AnyOf(vec![s]));
    }
    let Json::Object(ops) = v else {
        return bad(match v {
            Json::Array(_) => "a list is not a value (for any of several values use \"in\")".into(),
            _ => format!("{v} is not a value to match"),
        });
    };
    if ops.is_empty() {
        return bad("an empty object is not a condition".into());
    }
    if let Some(list) = ops.get("in") {
        if ops.len() > 1 {
            return bad("\"in\" cannot be combined with other operators".into());
        }
        let Json::Array(items) = list else {
            return bad(format!("\"in\" needs a list, not {list}"));
        };
        let values: Option<Vec<Scalar>> = items.iter().map(Scalar::of).collect();
        return match values {
            Some(values) if !values.is_empty() => Ok(Condition::AnyOf(values)),
            Some(_) => bad("\"in\" needs at least one value".into()),
            None => bad("\"in\" takes strings, numbers and booleans only".into()),
        };
    }
    let (mut low, mut high) = (None, None);
    for (op, bound) in ops {
        let Some(b) = bound.as_number().and_then(Num::of) else {
            return bad(format!("{op:?} needs a number, not {bound}"));
        };
        let (slot, inclusive) = match op.as_str() {
            "gt" => (&mut low, false),
            "gte" => (&mut low, true),
            "lt" => (&mut high, false),
            "lte" => (&mut high, true),
            other => return bad(format!("unknown operator {other:?}")),
        };
        if slot.is_some() {
            return bad(format!("{op:?} repeats a bound"));
        }
        *slot = Some((b.0, inclusive));
    }
    Ok(Condition::Range { low, high })
}

/// The scalars of a metadata value: itself, or the scalar elements of an array.
fn scalars(v: &Json) -> impl Iterator<Item = Scalar> + '_ {
    let items: Box<dyn Iterator<Item = &Json>> = match v {
        Json::Array(items) => Box::new(items.iter()),
        v => Box::new(std::iter::once(v)),
    };
    items.filter_map(Scalar::of)
}

/// One key's postings.
#[derive(Default)]
struct Field {
    /// String and boolean values → sorted internal ids.
    terms: HashMap<Scalar, Vec<u64>>,
    /// Numbers → sorted internal ids.
    numbers: BTreeMap<Num, Vec<u64>>,
}

impl Field {
    fn posting(&mut self, s: &Scalar) -> &mut Vec<u64> {
        match s.number() {
            Some(x) => self.numbers.entry(Num(x)).or_default(),
            None => self.terms.entry(s.clone()).or_default(),
        }
    }

    fn forget(&mut self, s: &Scalar) {
        match s.number() {
            Some(x) => {
                self.numbers.remove(&Num(x));
            }
            None => {
                self.terms.remove(s);
            }
        }
    }

    /// Sorted ids whose value meets `cond`.
    fn matching(&self, cond: &Condition) -> Vec<u64> {
        let lists: Vec<&Vec<u64>> = match cond {
            Condition::AnyOf(values) => values
                .iter()
                .filter_map(|s| match s.number() {
                    Some(x) => self.numbers.get(&Num(x)),
                    None => self.terms.get(s),
                })
                .collect(),
            Condition::Range { low, high } => {
                use std::ops::Bound::{Excluded, Included, Unbounded};
                let bound = |b: &Option<(f64, bool)>| match b {
                    Some((x, true)) => Included(Num(*x)),
                    Some((x, false)) => Excluded(Num(*x)),
                    None => Unbounded,
                };
                let (lo, hi) = (bound(low), bound(high));
                let empty = match (&lo, &hi) {
                    (Included(a) | Excluded(a), Included(b) | Excluded(b)) => {
                        a > b || (a == b && !matches!((&lo, &hi), (Included(_), Included(_))))
                    }
                    _ => false,
                };
                if empty {
                    Vec::new()
                } else {
                    self.numbers.range((lo, hi)).map(|(_, ids)| ids).collect()
                }
            }
        };
        union(&lists)
    }
}

/// The sorted union of sorted lists.
fn union(lists: &[&Vec<u64>]) -> Vec<u64> {
    match lists {
        [] => Vec::new(),
        [one] => one.to_vec(),
        _ => {
            let mut all: Vec<u64> = lists.iter().flat_map(|l| l.iter().copied()).collect();
            all.sort_unstable();
            all.dedup();
            all
        }
    }
}

/// The sorted intersection of two sorted lists.
fn intersect(a: &[u64], b: &[u64]) -> Vec<u64> {
    let (small, large) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    small
        .iter()
        .copied()
        .filter(|x| large.binary_search(x).is_ok())
        .collect()
}

#[derive(Default)]
struct Inner {
    fields: HashMap<String, Field>,
    /// What each document contributed, for removal: (key, value) pairs.
    docs: HashMap<u64, Vec<(String, Scalar)>>,
}

/// The metadata index of one collection, keyed by internal id.
#[derive(Default)]
pub struct MetadataIndex {
    inner: RwLock<Inner>,
}

impl std::fmt::Debug for MetadataIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.reading();
        f.debug_struct("MetadataIndex")
            .field("docs", &inner.docs.len())
            .field("keys", &inner.fields.len())
            .finish()
    }
}

impl MetadataIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Indexes document `id`'s metadata (replacing what it had).
    pub fn upsert(&self, id: u64, metadata: &JsonMap) {
        let mut inner = self.inner.writing();
        remove(&mut inner, id);
        insert(&mut inner, id, pairs(metadata));
    }

    /// Whether document `id` is indexed with exactly `metadata`'s filterable values.
    pub fn holds(&self, id: u64, metadata: &JsonMap) -> bool {
        let pairs = pairs(metadata);
        match self.inner.reading().docs.get(&id) {
            Some(held) => *held == pairs,
            None => pairs.is_empty(),
        }
    }

    /// What a saved index holds: each document's (key, value) pairs, by ascending id.
    pub(crate) fn snapshot(&self) -> MetadataSnapshot {
        let inner = self.inner.reading();
        let mut docs: Vec<(u64, Vec<(String, Scalar)>)> =
            inner.docs.iter().map(|(&id, p)| (id, p.clone())).collect();
        docs.sort_unstable_by_key(|d| d.0);
        MetadataSnapshot { docs }
    }

    /// The index a snapshot was taken of; None when it does not hold together (ids out of
    /// order, a document without values, unsorted or repeated pairs, a number that is not
    /// finite).
    pub(crate) fn from_snapshot(snapshot: MetadataSnapshot) -> Option<Self> {
        let ascending = snapshot.docs.windows(2).all(|w| w[0].0 < w[1].0);
        let sound = |p: &[(String, Scalar)]| {
            !p.is_empty()
                && p.windows(2).all(|w| w[0] < w[1])
                && p.iter().all(|(_, s)| s.number().is_none_or(f64::is_finite))
        };
        if !ascending || !snapshot.docs.iter().all(|(_, p)| sound(p)) {
            return None;
        }
        let mut inner = Inner::default();
        for (id, pairs) in snapshot.docs {
            insert(&mut inner, id, pairs);
        }
        Some(MetadataIndex {
            inner: RwLock::new(inner),
        })
    }

    /// Forgets document `id` (no-op if absent).
    pub fn remove(&self, id: u64) {
        remove(&mut self.inner.writing(), id);
    }

    /// The internal ids of the documents `filter` admits, ascending. An empty filter admits
    /// every document, which this index does not list: callers check [`Filter::is_empty`].
    pub fn matching(&self, filter: &Filter) -> Vec<u64> {
        let inner = self.inner.reading();
        let mut lists: Vec<Vec<u64>> = Vec::with_capacity(filter.clauses.len());
        for (key, cond) in &filter.clauses {
            let Some(field) = inner.fields.get(key) else {
                return Vec::new();
            };
            let ids = field.matching(cond);
            if ids.is_empty() {
                return ids;
            }
            lists.push(ids);
        }
        lists.sort_by_key(Vec::len);
        let mut lists = lists.into_iter();
        let first = lists.next().unwrap_or_default();
        lists.fold(first, |acc, l| intersect(&acc, &l))
    }
}

/// A document's filterable (key, value) pairs, sorted and without repeats.
fn pairs(metadata: &JsonMap) -> Vec<(String, Scalar)> {
    let mut pairs: Vec<(String, Scalar)> = metadata
        .iter()
        .flat_map(|(k, v)| scalars(v).map(move |s| (k.clone(), s)))
        .collect();
    pairs.sort();
    pairs.dedup();
    pairs
}

/// Indexes document `id` (not indexed yet) with `pairs`.
fn insert(inner: &mut Inner, id: u64, pairs: Vec<(String, Scalar)>) {
    for (key, s) in &pairs {
        let posting = inner.fields.entry(key.clone()).or_default().posting(s);
        if posting.last().is_none_or(|&last| last < id) {
            posting.push(id);
        } else if let Err(at) = posting.binary_search(&id) {
            posting.insert(at, id);
        }
    }
    if !pairs.is_empty() {
        inner.docs.insert(id, pairs);
    }
}

/// A saved metadata index ([`MetadataIndex::snapshot`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct MetadataSnapshot {
    docs: Vec<(u64, Vec<(String, Scalar)>)>,
}

fn remove(inner: &mut Inner, id: u64) {
    let Some(pairs) = inner.docs.remove(&id) else {
        return;
    };
    for (key, s) in pairs {
        let Some(field) = inner.fields.get_mut(&key) else {
            continue;
        };
        let posting = field.posting(&s);
        if let Ok(at) = posting.binary_search(&id) {
            posting.remove(at);
        }
        if posting.is_empty() {
            field.forget(&s);
        }
        if field.terms.is_empty() && field.numbers.is_empty() {
            inner.fields.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Json) -> JsonMap {
        match v {
            Json::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    fn filter(v: Json) -> Filter {
        Filter::parse(&map(v)).unwrap()
    }

    fn docs() -> Vec<(u64, JsonMap)> {
        vec![
            (1, map(json!({"g": "a", "n": 1, "tags": ["x", "y"]}))),
            (2, map(json!({"g": "b", "n": 2.5, "ok": true}))),
            (
                5,
                map(json!({"g": "a", "n": 3, "tags": ["y"], "deep": {"g": "a"}})),
            ),
            (7, map(json!({"g": "c", "n": -1, "ok": false}))),
            (9, map(json!({}))),
        ]
    }

    fn index() -> MetadataIndex {
        let ix = MetadataIndex::new();
        for (id, m) in docs() {
            ix.upsert(id, &m);
        }
        ix
    }

    /// The index's answer equals the predicate's over every document.
    fn check(ix: &MetadataIndex, f: &Filter) -> Vec<u64> {
        let truth: Vec<u64> = docs()
            .into_iter()
            .filter(|(_, m)| f.matches(m))
            .map(|(id, _)| id)
            .collect();
        assert_eq!(ix.matching(f), truth, "{f:?}");
        truth
    }

    #[test]
    fn equality_in_and_ranges_match_the_predicate() {
        let ix = index();
        for (f, want) in [
            (json!({"g": "a"}), vec![1, 5]),
            (json!({"g": "a", "n": 3.0}), vec![5]),
            (json!({"tags": "y"}), vec![1, 5]),
            (json!({"g": {"in": ["b", "c", 4]}}), vec![2, 7]),
            (json!({"n": {"gte": 1, "lt": 3}}), vec![1, 2]),
            (json!({"n": {"gt": 1}}), vec![2, 5]),
            (json!({"n": {"lte": -1}}), vec![7]),
            (json!({"n": {"gt": 3, "lt": 1}}), vec![]),
            (json!({"n": {"gte": 3, "lte": 3}}), vec![5]),
            (json!({"ok": false}), vec![7]),
            (json!({"missing": 1}), vec![]),
            (json!({"g": "a", "ok": true}), vec![]),
            (json!({"n": "1"}), vec![]),
        ] {
            assert_eq!(check(&ix, &filter(f.clone())), want, "{f}");
        }
    }

    #[test]
    fn upsert_and_remove_keep_postings_exact() {
        let ix = index();
        ix.upsert(5, &map(json!({"g": "b"})));
        ix.remove(1);
        assert_eq!(ix.matching(&filter(json!({"g": "a"}))), Vec::<u64>::new());
        assert_eq!(ix.matching(&filter(json!({"g": "b"}))), vec![2, 5]);
        assert_eq!(ix.matching(&filter(json!({"n": {"gte": -10}}))), vec![2, 7]);
        ix.upsert(3, &map(json!({"g": "b"})));
        assert_eq!(ix.matching(&filter(json!({"g": "b"}))), vec![2, 3, 5]);
        assert_eq!(format!("{ix:?}"), "MetadataIndex { docs: 4, keys: 3 }");
    }

    #[test]
    fn bad_filters_name_the_key_and_the_forms() {
        for (f, says) in [
            (
                json!({"g": ["a", "b"]}),
                "for any of several values use \"in\"",
            ),
            (json!({"g": null}), "null is not a value"),
            (json!({"g": {}}), "empty object"),
            (json!({"g": {"in": "a"}}), "\"in\" needs a list"),
            (json!({"g": {"in": []}}), "at least one value"),
            (
                json!({"g": {"in": [{"x": 1}]}}),
                "strings, numbers and booleans",
            ),
            (json!({"g": {"in": [1], "gt": 0}}), "cannot be combined"),
            (json!({"n": {"gte": "1"}}), "\"gte\" needs a number"),
            (json!({"n": {"near": 1}}), "unknown operator \"near\""),
        ] {
            let e = Filter::parse(&map(f.clone())).unwrap_err().to_string();
            assert!(
                e.contains(says) && e.contains("\"in\": [values]"),
                "{f}: {e}"
            );
            assert!(e.contains(r#""g""#) || e.contains(r#""n""#), "{f}: {e}");
        }
    }
}
