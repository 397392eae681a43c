//! Lexical recall: TF-IDF over word unigrams and bigrams (tf-idf-vectorizer), incremental,
//! rebuilt from the store on open (papers/context-based-sentence-similarity-surrogate.txt §3.3).
//! Also the source of IDF weights: idf(t) = ln((N + 1) / (df(t) + 1)) + 1.

use std::sync::{Arc, RwLock};

use tf_idf_vectorizer::vectorizer::evaluate::query::Query;
use tf_idf_vectorizer::{Corpus, SimilarityAlgorithm, TFIDFVectorizer, TermFrequency};

/// Lower-cased word unigrams and bigrams ("how", "how do", …) of a text.
pub fn terms(text: &str) -> Vec<String> {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let bigrams = words.windows(2).map(|w| format!("{} {}", w[0], w[1]));
    words.iter().cloned().chain(bigrams).collect()
}

/// The TF-IDF index of one collection, keyed by external id.
pub struct LexicalIndex {
    corpus: Arc<Corpus>,
    inner: RwLock<TFIDFVectorizer<f32, String>>,
}

impl std::fmt::Debug for LexicalIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LexicalIndex")
            .field("docs", &self.len())
            .finish()
    }
}

impl Default for LexicalIndex {
    fn default() -> Self {
        Self::new()
    }
}

impl LexicalIndex {
    /// An empty index.
    pub fn new() -> Self {
        let corpus = Arc::new(Corpus::new());
        LexicalIndex {
            inner: RwLock::new(TFIDFVectorizer::new(corpus.clone())),
            corpus,
        }
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.inner.read().expect("lock").doc_num()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds or replaces a document.
    pub fn upsert(&self, id: &str, text: &str) {
        let mut tf = TermFrequency::new();
        tf.add_terms(&terms(text));
        let mut inner = self.inner.write().expect("lock");
        let key = id.to_string();
        if inner.contains_doc(&key) {
            inner.del_doc(&key);
        }
        inner.add_doc(key, &tf);
    }

    /// Removes a document (no-op if absent).
    pub fn remove(&self, id: &str) {
        let mut inner = self.inner.write().expect("lock");
        let key = id.to_string();
        if inner.contains_doc(&key) {
            inner.del_doc(&key);
        }
    }

    /// Top-k documents by TF-IDF cosine with `text`: (id, score), best first.
    pub fn search(&self, text: &str, k: usize) -> Vec<(String, f32)> {
        let q_terms = terms(text);
        if q_terms.is_empty() || k == 0 {
            return Vec::new();
        }
        let mut tf = TermFrequency::new();
        tf.add_terms(&q_terms);
        let query = Query::from_freq_or(&tf);
        let mut inner = self.inner.write().expect("lock");
        let mut hits = inner.similarity(&SimilarityAlgorithm::CosineSimilarity, &tf, Some(&query));
        hits.sort_by_score_desc().top_k(k);
        hits.list
            .into_iter()
            .filter(|h| h.score.is_finite() && h.score > 0.0)
            .map(|h| (h.key, h.score as f32))
            .collect()
    }

    /// idf(term) = ln((N + 1) / (df + 1)) + 1 over the indexed documents.
    pub fn idf(&self, term: &str) -> f32 {
        let n = self.corpus.get_doc_num() as f64;
        let df = self.corpus.get_term_count(term) as f64;
        (((n + 1.0) / (df + 1.0)).ln() + 1.0) as f32
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
        assert!(idx.idf("pizza") > idx.idf("rust"));
        idx.upsert("c", "pizza pizza");
        assert_eq!(idx.search("learn rust", 5).len(), 1);
        idx.remove("a");
        assert!(idx.search("learn rust", 5).is_empty());
        assert_eq!(idx.len(), 2);
    }
}
