//! Lexical recall over word unigrams and bigrams (papers/context-based-sentence-similarity-
//! surrogate.txt §3.3): an in-memory inverted index, incremental, saved at checkpoints with the
//! metadata index (`super::text`) and rebuilt from the store when that file is unusable.
//!
//! Candidates are ranked by BM25 (k1 = 1.2, b = 0.75), the TF-IDF weighting with saturated
//! term frequency and length normalisation, computed only over the postings of the query's
//! terms. (kindred first used tf-idf-vectorizer 0.10, whose similarity scans every document:
//! 50 ms per query at 50k questions, measured in BENCHMARKS.md.) The top k are found with
//! MaxScore (Turtle & Flood 1995): posting lists are walked document by document in slot order,
//! each term carries an upper bound of what it can add to a score, and once k documents are
//! held, the terms whose bounds together cannot lift a document past the k-th score only score
//! the documents the other terms bring (skipping ahead in their lists), so the lists of common
//! words ("what", "how do") are mostly jumped over. The result is the exhaustive ranking's
//! (equal scores ordered by slot; the sums' f32 rounding can differ in the last bit). The
//! index is also the source of IDF weights:
//! idf(t) = ln((N + 1) / (df(t) + 1)) + 1.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::RwLock;

use crate::score::features::tfidf_cosine;
use crate::sync::RwLockExt;
pub use crate::text::terms;

/// BM25 term-frequency saturation.
const K1: f32 = 1.2;
/// BM25 length normalisation.
const B: f32 = 0.75;

/// One indexed document.
#[derive(Debug, Clone)]
struct Doc {
    /// Internal id of the document.
    id: u64,
    /// (term id, term frequency).
    terms: Vec<(u32, u16)>,
    /// Number of terms (with repeats).
    len: u32,
}

/// One document's entry in a term's list: what scoring it needs, so that walking a list
/// touches no other memory (8 bytes, as a (slot, tf) pair takes with its padding).
#[derive(Debug, Clone, Copy)]
struct Posting {
    slot: u32,
    tf: u16,
    /// The document's number of terms, at most 65,535 (BM25's length normalisation treats a
    /// longer document as that long).
    len: u16,
}

impl Posting {
    fn new(slot: u32, tf: u16, len: u32) -> Self {
        Posting {
            slot,
            tf,
            len: u16::try_from(len).unwrap_or(u16::MAX),
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    vocab: HashMap<String, u32>,
    /// Per term, in slot order; slots of removed documents stay until compaction.
    postings: Vec<Vec<Posting>>,
    /// Per term: live documents containing it.
    df: Vec<u32>,
    /// Per term, over its postings (dead ones too, until compaction): the largest term
    /// frequency and the shortest document: what bounds the term's BM25 contribution.
    max_tf: Vec<u16>,
    min_len: Vec<u16>,
    docs: Vec<Doc>,
    /// Per slot: the document is live (not removed or replaced).
    alive: Vec<bool>,
    slots: HashMap<u64, u32>,
    live: usize,
    total_len: u64,
}

impl Inner {
    fn remove(&mut self, id: u64) {
        let Some(slot) = self.slots.remove(&id) else {
            return;
        };
        self.alive[slot as usize] = false;
        let doc = &self.docs[slot as usize];
        for &(t, _) in &doc.terms {
            self.df[t as usize] -= 1;
        }
        self.live -= 1;
        self.total_len -= u64::from(doc.len);
        // Drop dead postings once they outnumber live documents.
        if self.docs.len() > 2 * self.live.max(512) {
            self.compact();
        }
    }

    fn insert(&mut self, id: u64, text: &str) {
        let mut counts: HashMap<u32, u16> = HashMap::new();
        let mut len = 0u32;
        for term in terms(text) {
            let t = self.term_id(term);
            let c = counts.entry(t).or_insert(0);
            *c = c.saturating_add(1);
            len += 1;
        }
        let mut doc_terms: Vec<(u32, u16)> = counts.into_iter().collect();
        doc_terms.sort_unstable();
        self.add(Doc {
            id,
            terms: doc_terms,
            len,
        });
    }

    /// The id of `term`, added to the vocabulary if new.
    fn term_id(&mut self, term: String) -> u32 {
        let next = self.vocab.len() as u32;
        let t = *self.vocab.entry(term).or_insert(next);
        if t == next {
            self.postings.push(Vec::new());
            self.df.push(0);
            self.max_tf.push(0);
            self.min_len.push(u16::MAX);
        }
        t
    }

    /// Adds a live document whose terms are in the vocabulary.
    fn add(&mut self, doc: Doc) {
        for &(t, _) in &doc.terms {
            self.df[t as usize] += 1;
        }
        self.live += 1;
        self.total_len += u64::from(doc.len);
        self.place(doc);
    }

    /// Appends `doc` at the next slot: its postings, bounds and slot (not its counts).
    fn place(&mut self, doc: Doc) {
        let slot = self.docs.len() as u32;
        for &(t, tf) in &doc.terms {
            let (t, posting) = (t as usize, Posting::new(slot, tf, doc.len));
            self.postings[t].push(posting);
            self.max_tf[t] = self.max_tf[t].max(tf);
            self.min_len[t] = self.min_len[t].min(posting.len);
        }
        self.slots.insert(doc.id, slot);
        self.docs.push(doc);
        self.alive.push(true);
    }

    fn compact(&mut self) {
        let docs = std::mem::take(&mut self.docs);
        let alive = std::mem::take(&mut self.alive);
        self.postings.iter_mut().for_each(Vec::clear);
        self.max_tf.fill(0);
        self.min_len.fill(u16::MAX);
        self.slots.clear();
        for (doc, _) in docs.into_iter().zip(alive).filter(|&(_, live)| live) {
            self.place(doc);
        }
    }

    fn df_of(&self, term: &str) -> u32 {
        self.vocab.get(term).map_or(0, |&t| self.df[t as usize])
    }

    /// The query's terms the index knows, each with its BM25 scorer, by term id.
    fn scorers(&self, q_terms: &[String]) -> Vec<TermScorer<'_>> {
        let n = self.live as f32;
        let avg_len = self.total_len as f32 / n;
        let mut q_counts: HashMap<u32, f32> = HashMap::new();
        for t in q_terms {
            if let Some(&id) = self.vocab.get(t) {
                *q_counts.entry(id).or_insert(0.0) += 1.0;
            }
        }
        let mut scorers: Vec<TermScorer<'_>> = q_counts
            .into_iter()
            .filter(|&(t, _)| self.df[t as usize] > 0)
            .map(|(t, qtf)| {
                let t = t as usize;
                let df = self.df[t] as f32;
                let weight = qtf * (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                let bm25 = Bm25 { weight, avg_len };
                // The contribution rises with tf and falls with length: the largest tf over
                // the shortest length bounds it; the slack covers f32 rounding of the sums.
                let bound = bm25.contribution(self.max_tf[t], self.min_len[t]) * (1.0 + 1e-5);
                TermScorer {
                    postings: &self.postings[t],
                    at: 0,
                    bm25,
                    bound,
                    term: t as u32,
                }
            })
            .collect();
        scorers.sort_by(|a, b| a.bound.total_cmp(&b.bound).then(a.term.cmp(&b.term)));
        scorers
    }

    /// The k best live documents `allow` admits by BM25 over `q_terms`, best first (ties: the
    /// lower slot first): by MaxScore over the terms' posting lists, or by scoring every
    /// posting when MaxScore would walk most of them anyway (`plan` forces one way in tests).
    fn top_k(
        &self,
        q_terms: &[String],
        k: usize,
        allow: &dyn Fn(u64) -> bool,
        plan: Plan,
    ) -> Vec<Held> {
        // No more can be returned (and capacities below stay in reason for any k).
        let k = k.min(self.live);
        let mut lists = self.scorers(q_terms);
        let all: usize = lists.iter().map(|l| l.postings.len()).sum();
        if plan == Plan::Scan || (plan == Plan::Auto && all <= SCAN_ALWAYS) {
            return self.scan(&lists, k, allow);
        }
        // below[i]: the most terms 0..=i (by rising bound) can add together.
        let below: Vec<f32> = lists
            .iter()
            .scan(0f32, |sum, l| {
                *sum += l.bound;
                Some(*sum)
            })
            .collect();
        // No document scoring below `floor` can be among the k best (k documents score at
        // least that); once k are held, none scoring at most `threshold` can join them (a
        // later slot loses a tie).
        let floor = self.seed_floor(&lists, k, allow);
        let mut threshold = 0f32;
        let mut held: BinaryHeap<Held> = BinaryHeap::with_capacity(k + 1);
        let out_of_reach =
            |score: f32, full: bool, threshold: f32| score < floor || (full && score <= threshold);
        // Terms before `essential` cannot lift a document into the k best on their own: they
        // only score the documents the essential terms bring.
        let mut essential = below
            .iter()
            .take_while(|&&b| out_of_reach(b, false, 0.0))
            .count();
        let walked: usize = lists[essential..].iter().map(|l| l.postings.len()).sum();
        if plan == Plan::Auto && walked * SCAN_COST_RATIO > all {
            return self.scan(&lists, k, allow);
        }
        while let Some(slot) = lists[essential..]
            .iter()
            .filter_map(TermScorer::current)
            .min()
        {
            let mut score = 0f32;
            for l in &mut lists[essential..] {
                if l.current() == Some(slot) {
                    score += l.take();
                }
            }
            if !self.alive[slot as usize] {
                continue;
            }
            let full = held.len() == k;
            let mut beaten = false;
            for i in (0..essential).rev() {
                if out_of_reach(score + below[i], full, threshold) {
                    beaten = true;
                    break;
                }
                let l = &mut lists[i];
                if l.seek(slot) {
                    score += l.take();
                }
            }
            if beaten
                || out_of_reach(score, full, threshold)
                || score <= 0.0
                || !allow(self.docs[slot as usize].id)
            {
                continue;
            }
            held.push(Held { slot, score });
            if held.len() > k {
                held.pop();
            }
            if held.len() == k {
                threshold = held.peek().map_or(0.0, |h| h.score);
                while essential < lists.len() && out_of_reach(below[essential], true, threshold) {
                    essential += 1;
                }
            }
        }
        // Best first: the heap's order has the best as least.
        held.into_sorted_vec()
    }

    /// A score k admitted documents reach: the k-th best full score among the first few
    /// documents of the most selective terms' lists (they are likely among the best), or 0.
    /// Starting from it lets MaxScore skip the common terms' lists from the first document
    /// rather than once k documents have been walked. (Slightly under the k-th score, so that
    /// f32 rounding never makes it exceed a true top score.)
    fn seed_floor(&self, lists: &[TermScorer<'_>], k: usize, allow: &dyn Fn(u64) -> bool) -> f32 {
        let want = 2 * k;
        let mut seeds: Vec<u32> = Vec::with_capacity(want);
        for l in lists.iter().rev() {
            seeds.extend(l.postings.iter().take(want - seeds.len()).map(|p| p.slot));
            if seeds.len() == want {
                break;
            }
        }
        seeds.sort_unstable();
        seeds.dedup();
        let mut scores: Vec<f32> = seeds
            .into_iter()
            .filter(|&slot| self.alive[slot as usize] && allow(self.docs[slot as usize].id))
            .map(|slot| lists.iter().filter_map(|l| l.score_of(slot)).sum())
            .collect();
        if scores.len() < k {
            return 0.0;
        }
        let (_, kth, _) = scores.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
        *kth * (1.0 - 1e-5)
    }

    /// The k best by scoring every posting of `lists` into one accumulator per slot.
    fn scan(&self, lists: &[TermScorer<'_>], k: usize, allow: &dyn Fn(u64) -> bool) -> Vec<Held> {
        let mut scores = vec![0f32; self.docs.len()];
        for l in lists {
            for &p in l.postings {
                scores[p.slot as usize] += l.bm25.of(p);
            }
        }
        let mut hits: Vec<Held> = scores
            .iter()
            .enumerate()
            .filter(|&(slot, &score)| score > 0.0 && self.alive[slot] && allow(self.docs[slot].id))
            .map(|(slot, &score)| Held {
                slot: slot as u32,
                score,
            })
            .collect();
        if hits.len() > k {
            hits.select_nth_unstable(k - 1);
            hits.truncate(k);
        }
        hits.sort_unstable();
        hits
    }
}

/// How [`Inner::top_k`] finds the k best.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// MaxScore, or the scan when the query's lists hold at most [`SCAN_ALWAYS`] postings or
    /// MaxScore would walk more than 1 / [`SCAN_COST_RATIO`] of them.
    Auto,
    /// Always MaxScore.
    #[cfg(test)]
    Prune,
    /// Always the scan.
    Scan,
}

/// A posting walked by MaxScore costs about this many scanned ones (its cursors, the heap;
/// measured with benches/lexical.rs).
const SCAN_COST_RATIO: usize = 3;

/// Up to this many postings the scan beats MaxScore's set-up (seeding a threshold, sorting
/// the terms): about what a question's terms have at 20,000 documents.
const SCAN_ALWAYS: usize = 40_000;

/// BM25's contribution of one term with the query weight (query tf × idf) folded in.
#[derive(Debug, Clone, Copy)]
struct Bm25 {
    weight: f32,
    avg_len: f32,
}

impl Bm25 {
    fn of(self, p: Posting) -> f32 {
        self.contribution(p.tf, p.len)
    }

    /// The contribution of a posting of `tf` in a document of `len` terms.
    fn contribution(self, tf: u16, len: u16) -> f32 {
        let tf = f32::from(tf);
        let norm = K1 * (1.0 - B + B * f32::from(len) / self.avg_len);
        self.weight * tf * (K1 + 1.0) / (tf + norm)
    }
}

/// A cursor over one query term's postings.
struct TermScorer<'a> {
    postings: &'a [Posting],
    at: usize,
    bm25: Bm25,
    /// At least any contribution the term can make.
    bound: f32,
    term: u32,
}

impl TermScorer<'_> {
    /// The slot under the cursor (None: the list is done).
    fn current(&self) -> Option<u32> {
        self.postings.get(self.at).map(|p| p.slot)
    }

    /// The contribution of the posting under the cursor; moves on.
    fn take(&mut self) -> f32 {
        let p = self.postings[self.at];
        self.at += 1;
        self.bm25.of(p)
    }

    /// The contribution to `slot`'s score, looked up (not moving the cursor).
    fn score_of(&self, slot: u32) -> Option<f32> {
        let at = self.postings.binary_search_by_key(&slot, |p| p.slot).ok()?;
        Some(self.bm25.of(self.postings[at]))
    }

    /// Moves the cursor to the first posting at or after `slot` (galloping: the lists are in
    /// slot order); true when that posting is `slot`'s.
    fn seek(&mut self, slot: u32) -> bool {
        let rest = &self.postings[self.at..];
        let mut step = 1;
        while step < rest.len() && rest[step].slot < slot {
            step *= 2;
        }
        let window = &rest[..rest.len().min(step + 1)];
        self.at += window.partition_point(|p| p.slot < slot);
        self.current() == Some(slot)
    }
}

/// A document held among the k best; ordered so that the heap's top is the one to drop
/// first: the lowest score, and of equal scores the later slot.
#[derive(Debug, Clone, Copy)]
struct Held {
    slot: u32,
    score: f32,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Held {}

impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Held {
    /// Greater is worse.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then(self.slot.cmp(&other.slot))
    }
}

/// The lexical index of one collection, keyed by the documents' internal ids.
#[derive(Default)]
pub struct LexicalIndex {
    inner: RwLock<Inner>,
}

impl std::fmt::Debug for LexicalIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LexicalIndex")
            .field("docs", &self.len())
            .finish()
    }
}

impl LexicalIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.inner.reading().live
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds or replaces a document.
    pub fn upsert(&self, id: u64, text: &str) {
        let mut inner = self.inner.writing();
        inner.remove(id);
        inner.insert(id, text);
    }

    /// Removes a document (no-op if absent).
    pub fn remove(&self, id: u64) {
        self.inner.writing().remove(id);
    }

    /// Top-k documents by BM25 over the query's terms: (id, score), best first; documents
    /// sharing no term with the query are never returned.
    pub fn search(&self, text: &str, k: usize) -> Vec<(u64, f32)> {
        self.search_where(text, k, &|_| true)
    }

    /// [`Self::search`] over only the documents `allow` admits (checked before the cut to k).
    pub fn search_where(
        &self,
        text: &str,
        k: usize,
        allow: &dyn Fn(u64) -> bool,
    ) -> Vec<(u64, f32)> {
        let q_terms = terms(text);
        if q_terms.is_empty() || k == 0 {
            return Vec::new();
        }
        let inner = self.inner.reading();
        if inner.live == 0 {
            return Vec::new();
        }
        inner
            .top_k(&q_terms, k, allow, Plan::Auto)
            .into_iter()
            .map(|Held { slot, score }| (inner.docs[slot as usize].id, score))
            .collect()
    }

    /// [`Self::search`] without pruning, as kindred searched before MaxScore: every posting of
    /// the query's terms scored into a per-document accumulator, then the best k selected.
    /// The reference the pruned search is tested and benchmarked against (benches/lexical.rs).
    pub fn search_exhaustive(&self, text: &str, k: usize) -> Vec<(u64, f32)> {
        let q_terms = terms(text);
        let inner = self.inner.reading();
        if q_terms.is_empty() || k == 0 || inner.live == 0 {
            return Vec::new();
        }
        inner
            .top_k(&q_terms, k, &|_| true, Plan::Scan)
            .into_iter()
            .map(|h| (inner.docs[h.slot as usize].id, h.score))
            .collect()
    }

    /// idf(term) = ln((N + 1) / (df + 1)) + 1 over the indexed documents.
    pub fn idf(&self, term: &str) -> f32 {
        let inner = self.inner.reading();
        let (n, df) = (inner.live as f64, inner.df_of(term) as f64);
        (((n + 1.0) / (df + 1.0)).ln() + 1.0) as f32
    }

    /// Runs `f` with an IDF lookup that holds the lock once (for scoring many candidates).
    pub fn with_idf<R>(&self, f: impl FnOnce(&dyn Fn(&str) -> f32) -> R) -> R {
        let inner = self.inner.reading();
        let n = inner.live as f64;
        let idf = |t: &str| (((n + 1.0) / (inner.df_of(t) as f64 + 1.0)).ln() + 1.0) as f32;
        f(&idf)
    }

    /// TF-IDF cosine ([`crate::score::features::lexical_similarity`]) of `text` with each of
    /// `docs` (internal ids), from the terms indexed for them: no document is re-tokenised.
    /// A document not in the index scores 0.
    pub fn similarities(&self, text: &str, docs: &[u64]) -> Vec<f32> {
        let inner = self.inner.reading();
        let n = inner.live as f64;
        let idf_of_df = |df: u32| (((n + 1.0) / (f64::from(df) + 1.0)).ln() + 1.0) as f32;
        // Query terms by id; terms the index has never seen get ids past the vocabulary
        // (df 0) so they still weigh in the query's norm.
        let mut unseen: HashMap<&str, u32> = HashMap::new();
        let mut query: HashMap<u32, f32> = HashMap::new();
        let q_terms = terms(text);
        for t in &q_terms {
            let id = match inner.vocab.get(t) {
                Some(&id) => id,
                None => {
                    let next = inner.vocab.len() as u32 + unseen.len() as u32;
                    *unseen.entry(t.as_str()).or_insert(next)
                }
            };
            *query.entry(id).or_insert(0.0) += 1.0;
        }
        let idf = |t: u32| idf_of_df(inner.df.get(t as usize).copied().unwrap_or(0));
        docs.iter()
            .map(|internal| {
                let Some(&slot) = inner.slots.get(internal) else {
                    return 0.0;
                };
                let doc: HashMap<u32, f32> = inner.docs[slot as usize]
                    .terms
                    .iter()
                    .map(|&(t, tf)| (t, f32::from(tf)))
                    .collect();
                tfidf_cosine(&query, &doc, idf)
            })
            .collect()
    }

    /// Whether document `id` is indexed.
    pub fn contains(&self, id: u64) -> bool {
        self.inner.reading().slots.contains_key(&id)
    }

    /// The indexed documents' ids, in no particular order.
    pub fn ids(&self) -> Vec<u64> {
        self.inner.reading().slots.keys().copied().collect()
    }

    /// Whether document `id` is indexed with exactly the terms of `text`.
    pub fn holds(&self, id: u64, text: &str) -> bool {
        let inner = self.inner.reading();
        let Some(&slot) = inner.slots.get(&id) else {
            return false;
        };
        let (mut counts, mut len) = (HashMap::<u32, u16>::new(), 0u32);
        for term in terms(text) {
            let Some(&t) = inner.vocab.get(&term) else {
                return false;
            };
            let c = counts.entry(t).or_insert(0);
            *c = c.saturating_add(1);
            len += 1;
        }
        let mut fresh: Vec<(u32, u16)> = counts.into_iter().collect();
        fresh.sort_unstable();
        let doc = &inner.docs[slot as usize];
        doc.len == len && doc.terms == fresh
    }

    /// What a saved index holds: its live documents in slot order and its vocabulary
    /// (everything else is derived when it is read back).
    pub(crate) fn snapshot(&self) -> LexicalSnapshot {
        let inner = self.inner.reading();
        let mut vocab = vec![String::new(); inner.vocab.len()];
        for (term, &t) in &inner.vocab {
            vocab[t as usize] = term.clone();
        }
        let docs = inner
            .docs
            .iter()
            .zip(&inner.alive)
            .filter(|&(_, &live)| live)
            .map(|(d, _)| (d.id, d.len, d.terms.clone()))
            .collect();
        LexicalSnapshot { vocab, docs }
    }

    /// The index a snapshot was taken of; None when it does not hold together (a term id past
    /// the vocabulary, a term twice in the vocabulary or in a document, an id twice).
    pub(crate) fn from_snapshot(snapshot: LexicalSnapshot) -> Option<Self> {
        let mut inner = Inner::default();
        for term in snapshot.vocab {
            let known = inner.vocab.len();
            if inner.term_id(term) as usize != known {
                return None;
            }
        }
        let terms = inner.vocab.len();
        for (id, len, doc_terms) in snapshot.docs {
            let ascending = doc_terms.windows(2).all(|w| w[0].0 < w[1].0);
            let known = doc_terms.iter().all(|&(t, _)| (t as usize) < terms);
            if !ascending || !known || inner.slots.contains_key(&id) {
                return None;
            }
            inner.add(Doc {
                id,
                terms: doc_terms,
                len,
            });
        }
        Some(LexicalIndex {
            inner: RwLock::new(inner),
        })
    }
}

/// A saved lexical index ([`LexicalIndex::snapshot`]): the vocabulary by term id, and each
/// live document as (internal id, number of terms, (term id, term frequency) ascending).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct LexicalSnapshot {
    pub(super) vocab: Vec<String>,
    pub(super) docs: Vec<SavedDoc>,
}

/// A saved document: (internal id, number of terms, (term id, term frequency) ascending).
type SavedDoc = (u64, u32, Vec<(u32, u16)>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_are_unigrams_and_bigrams() {
        assert_eq!(terms("How do I?"), ["how", "do", "i", "how do", "do i"]);
        assert!(terms("  ?! ").is_empty());
    }

    #[test]
    fn search_upsert_remove_and_idf() {
        let idx = LexicalIndex::new();
        idx.upsert(1, "how do I learn rust");
        idx.upsert(2, "best pizza in naples");
        idx.upsert(3, "learn rust fast");
        let hits = idx.search("learning rust", 2);
        assert_eq!(hits.len(), 2);
        assert!(hits.iter().all(|&(id, _)| id == 1 || id == 3), "{hits:?}");
        // The shorter document with the same matches ranks first (length normalisation).
        assert_eq!(idx.search("learn rust", 1)[0].0, 3);
        assert!(idx.idf("pizza") > idx.idf("rust"));
        idx.upsert(3, "pizza pizza");
        assert_eq!(idx.search("learn rust", 5).len(), 1);
        idx.remove(1);
        assert!(idx.search("learn rust", 5).is_empty());
        assert_eq!(idx.len(), 2);
        assert_eq!(idx.idf("rust"), (3f32 / 1.0).ln() + 1.0);
    }

    #[test]
    fn a_filtered_search_cuts_to_k_after_filtering() {
        let idx = LexicalIndex::new();
        for i in 0..50 {
            idx.upsert(i, "learn rust fast and well");
        }
        idx.upsert(100, "should I learn rust or go");
        // Fifty better matches do not crowd the one admitted document out of a depth of 5.
        let hits = idx.search_where("learn rust fast", 5, &|id| id >= 100);
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), vec![100]);
        assert!(!idx.search("learn rust fast", 5).iter().any(|h| h.0 == 100));
    }

    /// Every live admitted document's BM25 by brute force, best first (ties: earlier slot).
    fn exhaustive(idx: &LexicalIndex, text: &str, allow: &dyn Fn(u64) -> bool) -> Vec<(u64, f32)> {
        let inner = idx.inner.read().unwrap();
        let scorers = inner.scorers(&terms(text));
        let mut all: Vec<(u32, u64, f32)> = inner
            .docs
            .iter()
            .enumerate()
            .filter(|&(slot, d)| inner.alive[slot] && allow(d.id))
            .map(|(slot, d)| {
                let len = u16::try_from(d.len).unwrap_or(u16::MAX);
                let score = scorers
                    .iter()
                    .filter(|s| s.postings.iter().any(|p| p.slot == slot as u32))
                    .map(|s| {
                        let tf = d
                            .terms
                            .iter()
                            .find(|&&(t, _)| t == s.term)
                            .map_or(0, |x| x.1);
                        s.bm25.contribution(tf, len)
                    })
                    .sum::<f32>();
                (slot as u32, d.id, score)
            })
            .filter(|&(_, _, s)| s > 0.0)
            .collect();
        all.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
        all.into_iter().map(|(_, id, s)| (id, s)).collect()
    }

    /// The pruned top k is the exhaustive one: the same scores position by position, and the
    /// same documents wherever a score is not tied (up to f32 rounding) with its neighbours.
    fn assert_same_top(got: &[(u64, f32)], all: &[(u64, f32)], k: usize, what: &str) {
        let want = &all[..all.len().min(k)];
        assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
        let close = |a: f32, b: f32| (a - b).abs() <= 1e-4 * a.abs().max(1.0);
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                close(g.1, w.1),
                "{what}: rank {i}: score {} vs {}",
                g.1,
                w.1
            );
            let tied = all
                .iter()
                .enumerate()
                .any(|(j, o)| j != i && close(o.1, w.1));
            if !tied {
                assert_eq!(g.0, w.0, "{what}: rank {i}");
            }
        }
    }

    #[test]
    fn pruned_search_equals_the_exhaustive_ranking() {
        // A skewed vocabulary (a few very common words, many rare ones), duplicate texts (ties),
        // removals and replacements (dead postings, stale bounds), filters and many depths.
        let mut state = crate::score::stats::SplitMix64(11);
        let mut rng = move || state.next_u64();
        let common = ["how", "do", "i", "what", "is", "the", "best", "way", "to"];
        let word = |r: u64| -> String {
            match r % 10 {
                0..=5 => common[(r / 10) as usize % common.len()].to_string(),
                6..=8 => format!("w{}", (r / 10) % 300),
                _ => format!("rare{}", (r / 10) % 5000),
            }
        };
        let text = |rng: &mut dyn FnMut() -> u64| -> String {
            let n = 1 + rng() % 14;
            (0..n).map(|_| word(rng())).collect::<Vec<_>>().join(" ")
        };
        let idx = LexicalIndex::new();
        let mut queries = Vec::new();
        for id in 0..3000u64 {
            let t = text(&mut rng);
            idx.upsert(id, &t);
            if id % 7 == 0 {
                idx.upsert(id + 100_000, &t); // an exact duplicate
            }
            if id % 150 == 0 {
                queries.push(t);
            }
        }
        for id in (0..3000u64).step_by(5) {
            idx.remove(id);
        }
        for id in (1..3000u64).step_by(11) {
            let t = text(&mut rng);
            idx.upsert(id, &t);
        }
        queries.push("how do i".into());
        queries.push("rare17 the best way".into());
        for q in &queries {
            for k in [1, 3, 10, 100, 5000, usize::MAX] {
                let all = exhaustive(&idx, q, &|_| true);
                assert_same_top(&idx.search(q, k), &all, k, &format!("{q:?} k {k}"));
                let scanned = idx.search_exhaustive(q, k);
                assert_same_top(&scanned, &all, k, &format!("{q:?} k {k} scan"));
                let pruned = |allow: &dyn Fn(u64) -> bool| {
                    let inner = idx.inner.read().unwrap();
                    let held = inner.top_k(&terms(q), k, allow, Plan::Prune);
                    held.iter()
                        .map(|h| (inner.docs[h.slot as usize].id, h.score))
                        .collect::<Vec<_>>()
                };
                let what = format!("{q:?} k {k} MaxScore");
                assert_same_top(&pruned(&|_| true), &all, k, &what);
                let odd = |id: u64| id % 2 == 1;
                let all = exhaustive(&idx, q, &odd);
                let what = format!("{q:?} k {k} odd");
                assert_same_top(&idx.search_where(q, k, &odd), &all, k, &what);
                assert_same_top(&pruned(&odd), &all, k, &format!("{what} MaxScore"));
            }
        }
    }

    #[test]
    fn compaction_keeps_results() {
        let idx = LexicalIndex::new();
        for round in 0..5 {
            for i in 0..400 {
                idx.upsert(i, &format!("question {i} about topic {}", (i + round) % 7));
            }
        }
        assert_eq!(idx.len(), 400);
        let hits = idx.search("question 17 about topic", 3);
        assert_eq!(hits[0].0, 17);
        assert_eq!(idx.inner.read().unwrap().df_of("question"), 400);
    }

    #[test]
    fn similarities_match_the_pure_lexical_similarity() {
        use crate::score::features::lexical_similarity;
        let idx = LexicalIndex::new();
        let texts = [
            "how do I learn rust",
            "learn rust fast, learn it well",
            "best pizza in naples",
            "how do I make pizza",
        ];
        for (i, t) in texts.iter().enumerate() {
            idx.upsert(i as u64, t);
        }
        let query = "how do I learn to make pizza in rust?";
        let got = idx.similarities(query, &[0, 1, 2, 3, 99]);
        for (i, t) in texts.iter().enumerate() {
            let want = idx.with_idf(|idf| lexical_similarity(&terms(query), &terms(t), idf));
            assert!((got[i] - want).abs() < 1e-6, "{i}: {} vs {want}", got[i]);
        }
        assert!(got[0] > 0.0 && got[3] > 0.0);
        assert_eq!(got[4], 0.0, "a document not in the index");
    }
}
