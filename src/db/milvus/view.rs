//! The Milvus backend's read of one collection: settings and layout read once per view,
//! searches sent to the server with filters pushed down, this node's BM25 index, and the
//! documents a search loads in one call.

use super::*;
use crate::db::backend::{not_supported, Capability, CollectionView, Within};
use crate::db::LEXICAL_FILTER_DEPTH;
use crate::score::calibration::Calibrator;
use crate::store::SearchDefaults;

/// A view on the Milvus backend: settings and layout read once, this node's BM25 index, and
/// the documents loaded so far (a search loads its candidates in one call,
/// [`CollectionView::prefetch`]).
pub(super) struct MilvusView {
    pub(super) remote: Arc<Remote>,
    pub(super) name: String,
    pub(super) settings: CollectionSettings,
    pub(super) layout: Layout,
    pub(super) lexical: Arc<LexicalIndex>,
    pub(super) loaded: Mutex<HashMap<u64, StoredDoc>>,
}

impl MilvusView {
    /// A search of `vector` in `field` of this view's collection.
    fn query<'w>(
        &self,
        field: VectorField,
        vector: Vec<f32>,
        k: usize,
        within: Within<'w>,
    ) -> VectorQuery<'w> {
        let (filter, among) = match within {
            Within::Ids(ids) => (None, ids),
            Within::Filter(f) => (Some(f), None),
        };
        VectorQuery {
            field,
            vector,
            k,
            ef: self.settings.hnsw.ef_search,
            filter,
            among,
        }
    }

    fn full_text(&self) -> bool {
        self.layout == Layout::FullText
    }
}

impl CollectionView for MilvusView {
    fn settings(&self) -> &CollectionSettings {
        &self.settings
    }

    fn pushes_filters(&self) -> bool {
        true
    }

    fn cosine(&self, sentence: &[f32], k: usize, within: Within<'_>) -> Result<Vec<(u64, f32)>> {
        let query = self.query(VectorField::Sentence, sentence.to_vec(), k, within);
        self.remote.search(&self.name, query)
    }

    fn w2(&self, embedded: Vec<f32>, k: usize, within: Within<'_>) -> Result<Vec<(u64, f32)>> {
        let query = self.query(VectorField::W2, embedded, k, within);
        let hits = self.remote.search(&self.name, query)?;
        // Milvus's L2 is squared; the graphs here answer the distance itself.
        Ok(hits
            .into_iter()
            .map(|(i, d)| (i, d.max(0.0).sqrt()))
            .collect())
    }

    /// On the full-text layout Milvus answers it; on the others, this node's BM25 index.
    fn lexical(&self, text: &str, k: usize, among: Option<&[u64]>) -> Result<Vec<(u64, f32)>> {
        if self.full_text() {
            return self.remote.full_text(&self.name, text, k, None, among);
        }
        Ok(match among {
            Some(ids) => self
                .lexical
                .search_where(text, k, &|id| ids.binary_search(&id).is_ok()),
            None => self.lexical.search(text, k),
        })
    }

    /// On the full-text layout Milvus applies the filter inside its BM25 search. Otherwise
    /// this node's BM25 candidates are taken deeper and deeper (from 4k, ×4 a round) and the
    /// server says which of them the filter admits, until k are found, the index has no more
    /// documents sharing a term with `text`, or [`LEXICAL_FILTER_DEPTH`] candidates were
    /// looked at.
    fn lexical_filtered(&self, text: &str, k: usize, filter: &Filter) -> Result<Vec<(u64, f32)>> {
        if self.full_text() {
            return self
                .remote
                .full_text(&self.name, text, k, Some(filter), None);
        }
        let mut depth = (4 * k).max(64);
        // Ids already asked about (by id, not position: writes may land between rounds).
        let mut seen = std::collections::HashSet::new();
        let mut admitted = std::collections::HashSet::new();
        loop {
            let hits = self.lexical.search(text, depth);
            let fresh: Vec<u64> = hits
                .iter()
                .map(|&(id, _)| id)
                .filter(|&id| seen.insert(id))
                .collect();
            admitted.extend(self.remote.admitted_among(&self.name, filter, &fresh)?);
            let mut kept: Vec<(u64, f32)> = hits
                .iter()
                .filter(|(id, _)| admitted.contains(id))
                .copied()
                .collect();
            if kept.len() >= k || hits.len() < depth || depth >= LEXICAL_FILTER_DEPTH {
                kept.truncate(k);
                return Ok(kept);
            }
            depth = (depth * 4).min(LEXICAL_FILTER_DEPTH);
        }
    }

    fn admitted(&self, _filter: &Filter) -> Vec<u64> {
        Vec::new()
    }

    fn matching(&self, filter: &Filter) -> Result<usize> {
        Ok(self.remote.count_where(&self.name, filter)? as usize)
    }

    /// Milvus decides for itself; its filtered HNSW search is approximate.
    fn scans_exactly(&self, _n: usize) -> bool {
        false
    }

    /// On the full-text layout, where this node's index is a sample, from each text's terms
    /// with the index's IDF; otherwise from the terms the index holds for each.
    fn lexical_similarities(&self, text: &str, docs: &[(u64, &str)]) -> Vec<f32> {
        if !self.full_text() {
            let ids: Vec<u64> = docs.iter().map(|&(id, _)| id).collect();
            return self.lexical.similarities(text, &ids);
        }
        let query = crate::text::terms(text);
        self.lexical.with_idf(|idf| {
            docs.iter()
                .map(|(_, t)| {
                    crate::score::features::lexical_similarity(&query, &crate::text::terms(t), idf)
                })
                .collect()
        })
    }

    fn lexical_index(&self) -> &LexicalIndex {
        &self.lexical
    }

    fn prefetch(&self, internals: &[u64]) -> Result<()> {
        let missing: Vec<u64> = {
            let loaded = self.loaded.locked();
            internals
                .iter()
                .copied()
                .filter(|i| !loaded.contains_key(i))
                .collect()
        };
        if !missing.is_empty() {
            let got = self.remote.get_many(&self.name, &missing)?;
            self.loaded.locked().extend(got);
        }
        Ok(())
    }

    fn get_internal(&self, internal: u64) -> Result<Option<StoredDoc>> {
        if let Some(d) = self.loaded.locked().get(&internal) {
            return Ok(Some(d.clone()));
        }
        Ok(self
            .remote
            .get_many(&self.name, &[internal])?
            .remove(&internal))
    }

    /// Read from the server for each view, so every node uses the latest.
    fn calibrator(&self) -> Result<Arc<Calibrator>> {
        Ok(Arc::new(calibrator(&self.remote, &self.name)?))
    }

    fn context_vectors(&self, _internals: &[u64]) -> Result<Option<HashMap<u64, Vec<f32>>>> {
        Err(not_supported(
            crate::db::backend::MILVUS,
            Capability::ContextVectors,
        ))
    }

    fn search_defaults(&self) -> Result<Option<Arc<SearchDefaults>>> {
        search_defaults(&self.remote, &self.name)
    }
}
