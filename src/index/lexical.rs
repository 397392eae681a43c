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

pub use crate::text::terms;

/// BM25 term-frequency saturation.
const K1: f32 = 1.2;
/// BM25 length normalisation.
const B: f32 = 0.75;

/// One indexed document.
#[derive(Debug, Clone)]
struct Doc {
    id: String,
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
    slots: HashMap<String, u32>,
    live: usize,
    total_len: u64,
}

impl Inner {
    fn remove(&mut self, id: &str) {
        let Some(slot) = self.slots.remove(id) else {
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

    fn insert(&mut self, id: &str, text: &str) {
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
            id: id.to_string(),
            terms: doc_terms,
            len,
            live: true,
        });
        self.slots.insert(id.to_string(), slot);
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
            self.slots.insert(doc.id.clone(), slot);
            self.docs.push(doc);
        }
    }

    fn df_of(&self, term: &str) -> u32 {
        self.vocab.get(term).map_or(0, |&t| self.df[t as usize])
    }
}

/// The lexical index of one collection, keyed by external id.
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
        self.inner.read().expect("lock").live
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds or replaces a document.
    pub fn upsert(&self, id: &str, text: &str) {
        let mut inner = self.inner.write().expect("lock");
        inner.remove(id);
        inner.insert(id, text);
    }

    /// Removes a document (no-op if absent).
    pub fn remove(&self, id: &str) {
        self.inner.write().expect("lock").remove(id);
    }

    /// Top-k documents by BM25 over the query's terms: (id, score), best first; documents
    /// sharing no term with the query are never returned.
    pub fn search(&self, text: &str, k: usize) -> Vec<(String, f32)> {
        let q_terms = terms(text);
        if q_terms.is_empty() || k == 0 {
            return Vec::new();
        }
        let inner = self.inner.read().expect("lock");
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
            .filter(|(_, &s)| s > 0.0)
            .map(|(i, &s)| (i as u32, s))
            .collect();
        let by_score = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if hits.len() > k {
            hits.select_nth_unstable_by(k - 1, by_score);
            hits.truncate(k);
        }
        hits.sort_by(by_score);
        hits.into_iter()
            .map(|(slot, s)| (inner.docs[slot as usize].id.clone(), s))
            .collect()
    }

    /// idf(term) = ln((N + 1) / (df + 1)) + 1 over the indexed documents.
    pub fn idf(&self, term: &str) -> f32 {
        let inner = self.inner.read().expect("lock");
        let (n, df) = (inner.live as f64, inner.df_of(term) as f64);
        (((n + 1.0) / (df + 1.0)).ln() + 1.0) as f32
    }

    /// Runs `f` with an IDF lookup that holds the lock once (for scoring many candidates).
    pub fn with_idf<R>(&self, f: impl FnOnce(&dyn Fn(&str) -> f32) -> R) -> R {
        let inner = self.inner.read().expect("lock");
        let n = inner.live as f64;
        let idf = |t: &str| (((n + 1.0) / (inner.df_of(t) as f64 + 1.0)).ln() + 1.0) as f32;
        f(&idf)
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
        idx.upsert("a", "how do I learn rust");
        idx.upsert("b", "best pizza in naples");
        idx.upsert("c", "learn rust fast");
        let hits = idx.search("learning rust", 2);
        assert_eq!(hits.len(), 2);
        assert!(
            hits.iter().all(|(id, _)| id == "a" || id == "c"),
            "{hits:?}"
        );
        // The shorter document with the same matches ranks first (length normalisation).
        assert_eq!(idx.search("learn rust", 1)[0].0, "c");
        assert!(idx.idf("pizza") > idx.idf("rust"));
        idx.upsert("c", "pizza pizza");
        assert_eq!(idx.search("learn rust", 5).len(), 1);
        idx.remove("a");
        assert!(idx.search("learn rust", 5).is_empty());
        assert_eq!(idx.len(), 2);
        assert_eq!(idx.idf("rust"), (3f32 / 1.0).ln() + 1.0);
    }

    #[test]
    fn compaction_keeps_results() {
        let idx = LexicalIndex::new();
        for round in 0..5 {
            for i in 0..400 {
                idx.upsert(
                    &format!("d{i}"),
                    &format!("question {i} about topic {}", (i + round) % 7),
                );
            }
        }
        assert_eq!(idx.len(), 400);
        let hits = idx.search("question 17 about topic", 3);
        assert_eq!(hits[0].0, "d17");
        assert_eq!(idx.inner.read().unwrap().df_of("question"), 400);
    }
}
