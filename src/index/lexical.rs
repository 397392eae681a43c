//! Lexical recall over word unigrams and bigrams (papers/context-based-sentence-similarity-
//! surrogate.txt §3.3): an in-memory inverted index, incremental, rebuilt from the store on open.
//!
//! Candidates are ranked by BM25 (k1 = 1.2, b = 0.75), the TF-IDF weighting with saturated
//! term frequency and length normalisation, computed only over the postings of the query's
//! terms. (kindred first used tf-idf-vectorizer 0.10, whose similarity scans every document:
//! 50 ms per query at 50k questions, measured in BENCHMARKS.md; this index answers in well
//! under a millisecond.) The index is also the source of IDF weights:
//! idf(t) = ln((N + 1) / (df(t) + 1)) + 1.

use std::collections::HashMap;
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
    live: bool,
}

#[derive(Debug, Default)]
struct Inner {
    vocab: HashMap<String, u32>,
    /// Per term: (document slot, tf); slots of removed documents stay until compaction.
    postings: Vec<Vec<(u32, u16)>>,
    /// Per term: live documents containing it.
    df: Vec<u32>,
    docs: Vec<Doc>,
    slots: HashMap<u64, u32>,
    live: usize,
    total_len: u64,
}

impl Inner {
    fn remove(&mut self, id: u64) {
        let Some(slot) = self.slots.remove(&id) else {
            return;
        };
        let doc = &mut self.docs[slot as usize];
        doc.live = false;
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
            let next = self.vocab.len() as u32;
            let t = *self.vocab.entry(term).or_insert(next);
            if t == next {
                self.postings.push(Vec::new());
                self.df.push(0);
            }
            let c = counts.entry(t).or_insert(0);
            *c = c.saturating_add(1);
            len += 1;
        }
        let slot = self.docs.len() as u32;
        let mut doc_terms: Vec<(u32, u16)> = counts.into_iter().collect();
        doc_terms.sort_unstable();
        for &(t, tf) in &doc_terms {
            self.postings[t as usize].push((slot, tf));
            self.df[t as usize] += 1;
        }
        self.docs.push(Doc {
            id,
            terms: doc_terms,
            len,
            live: true,
        });
        self.slots.insert(id, slot);
        self.live += 1;
        self.total_len += u64::from(len);
    }

    fn compact(&mut self) {
        let docs = std::mem::take(&mut self.docs);
        self.postings.iter_mut().for_each(Vec::clear);
        self.slots.clear();
        for doc in docs.into_iter().filter(|d| d.live) {
            let slot = self.docs.len() as u32;
            for &(t, tf) in &doc.terms {
                self.postings[t as usize].push((slot, tf));
            }
            self.slots.insert(doc.id, slot);
            self.docs.push(doc);
        }
    }

    fn df_of(&self, term: &str) -> u32 {
        self.vocab.get(term).map_or(0, |&t| self.df[t as usize])
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
        let n = inner.live as f32;
        let avg_len = inner.total_len as f32 / n;
        let mut q_counts: HashMap<u32, f32> = HashMap::new();
        for t in &q_terms {
            if let Some(&id) = inner.vocab.get(t) {
                *q_counts.entry(id).or_insert(0.0) += 1.0;
            }
        }
        let mut scores = vec![0f32; inner.docs.len()];
        for (&t, &qtf) in &q_counts {
            let df = inner.df[t as usize] as f32;
            if df == 0.0 {
                continue;
            }
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(slot, tf) in &inner.postings[t as usize] {
                let doc = &inner.docs[slot as usize];
                if !doc.live {
                    continue;
                }
                let tf = f32::from(tf);
                let norm = K1 * (1.0 - B + B * doc.len as f32 / avg_len);
                scores[slot as usize] += qtf * idf * tf * (K1 + 1.0) / (tf + norm);
            }
        }
        let mut hits: Vec<(u32, f32)> = scores
            .iter()
            .enumerate()
            .filter(|&(i, &s)| s > 0.0 && allow(inner.docs[i].id))
            .map(|(i, &s)| (i as u32, s))
            .collect();
        let by_score = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if hits.len() > k {
            hits.select_nth_unstable_by(k - 1, by_score);
            hits.truncate(k);
        }
        hits.sort_by(by_score);
        hits.into_iter()
            .map(|(slot, s)| (inner.docs[slot as usize].id, s))
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
}

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
