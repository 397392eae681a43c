//! The embedded backend's read of one collection: its in-memory indexes (graphs, BM25,
//! metadata) as of when the view was taken, and the store for records.

use std::collections::HashMap;
use std::sync::Arc;

use super::indexes::Indexes;
use super::{cached_defaults, context_stamp};
use crate::db::backend::{CollectionView, Within};
use crate::db::info::CALIBRATION_KEY;
use crate::error::Result;
use crate::index::{Filter, LexicalIndex};
use crate::score::calibration::Calibrator;
use crate::store::{CollectionSettings, SearchDefaults, Store, StoredDoc};
use crate::sync::{MutexExt, RwLockExt};

/// A view on the embedded backend.
pub(super) struct LocalView<'a> {
    pub store: &'a Store,
    pub name: String,
    pub ix: Arc<Indexes>,
}

impl LocalView<'_> {
    /// The graphs' `among` for `within` (a filter becomes its admitted ids).
    fn among<'w>(&self, within: Within<'w>) -> Option<std::borrow::Cow<'w, [u64]>> {
        match within {
            Within::Ids(ids) => ids.map(std::borrow::Cow::Borrowed),
            Within::Filter(f) => Some(std::borrow::Cow::Owned(self.admitted(f))),
        }
    }
}

impl CollectionView for LocalView<'_> {
    fn settings(&self) -> &CollectionSettings {
        &self.ix.settings
    }

    fn is_retired(&self) -> bool {
        self.ix.is_retired()
    }

    fn pushes_filters(&self) -> bool {
        false
    }

    fn cosine(&self, sentence: &[f32], k: usize, within: Within<'_>) -> Result<Vec<(u64, f32)>> {
        let among = self.among(within);
        let hits = self
            .ix
            .cosine
            .reading()
            .search(sentence, k, among.as_deref());
        Ok(hits.into_iter().map(|(i, d)| (i, 1.0 - d)).collect())
    }

    fn w2(&self, embedded: Vec<f32>, k: usize, within: Within<'_>) -> Result<Vec<(u64, f32)>> {
        let among = self.among(within);
        Ok(self.ix.w2.reading().search(&embedded, k, among.as_deref()))
    }

    fn lexical(&self, text: &str, k: usize, among: Option<&[u64]>) -> Result<Vec<(u64, f32)>> {
        let lexical = &self.ix.lexical;
        Ok(match among {
            Some(ids) => lexical.search_where(text, k, &|id| ids.binary_search(&id).is_ok()),
            None => lexical.search(text, k),
        })
    }

    /// The metadata index filters before BM25 cuts.
    fn lexical_filtered(&self, text: &str, k: usize, filter: &Filter) -> Result<Vec<(u64, f32)>> {
        self.lexical(text, k, Some(&self.admitted(filter)))
    }

    fn admitted(&self, filter: &Filter) -> Vec<u64> {
        self.ix.metadata.matching(filter)
    }

    fn matching(&self, filter: &Filter) -> Result<usize> {
        Ok(self.ix.metadata.matching(filter).len())
    }

    fn scans_exactly(&self, n: usize) -> bool {
        n <= crate::index::hnsw::EXACT_SCAN_MAX
    }

    fn lexical_similarities(&self, text: &str, docs: &[(u64, &str)]) -> Vec<f32> {
        let ids: Vec<u64> = docs.iter().map(|&(id, _)| id).collect();
        self.ix.lexical.similarities(text, &ids)
    }

    fn lexical_index(&self) -> &LexicalIndex {
        &self.ix.lexical
    }

    fn get_internal(&self, internal: u64) -> Result<Option<StoredDoc>> {
        self.store.get_internal(&self.name, internal)
    }

    /// Decoded once per generation and kept.
    fn calibrator(&self) -> Result<Arc<Calibrator>> {
        let mut cached = self.ix.calibrator.locked();
        if let Some(c) = cached.as_ref() {
            return Ok(c.clone());
        }
        let stored = self.store.meta(&self.name, CALIBRATION_KEY)?;
        let c = match stored.map(|b| serde_json::from_slice::<Calibrator>(&b)) {
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                tracing::warn!(collection = %self.name, error = %e, "the stored calibration is damaged; using the default until `kindred calibrate` replaces it");
                Calibrator::default_for_minilm()
            }
            None => Calibrator::default_for_minilm(),
        };
        let c = Arc::new(c);
        *cached = Some(c.clone());
        Ok(c)
    }

    fn context_vectors(&self, internals: &[u64]) -> Result<Option<HashMap<u64, Vec<f32>>>> {
        let current = context_stamp(self.store, &self.name)?
            .is_some_and(|s| s.model == self.ix.settings.model.fingerprint);
        if !current {
            return Ok(None);
        }
        let stored = self.store.context_vectors(&self.name, internals)?;
        Ok(Some(
            stored
                .into_iter()
                .filter_map(|(id, b)| Some((id, crate::score::context::decode_vector(&b)?)))
                .collect(),
        ))
    }

    fn search_defaults(&self) -> Result<Option<Arc<SearchDefaults>>> {
        cached_defaults(self.store, &self.name, &self.ix)
    }
}
