//! The backend boundary: what a place that keeps collections must do ([`Backend`]), what a
//! read of one collection must answer ([`CollectionView`]), and what a backend may not offer
//! ([`Capability`]). The embedded store (`embedded/`) and Milvus (`milvus/`) implement them;
//! [`super::Database`] picks one when it opens and nothing above `db` knows which it got. A
//! third backend is a new module implementing these two traits.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::{CollectionInfo, ContextVectorsStamp, EncodeFn, NewDocument, ReindexReport};
use crate::error::{Result, UserError};
use crate::index::{Filter, LexicalIndex};
use crate::model::ModelIdentity;
use crate::score::calibration::Calibrator;
use crate::store::{CollectionSettings, SearchDefaults, StoredDoc, Upserted};
use crate::types::Encoded;

/// Something a backend may not offer. Asking for it there is refused with
/// [`UserError::NotSupported`], naming what to do instead ([`Capability::instead`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// Re-encoding a collection onto another model in place (`kindred reindex`, `adapt`).
    Reindex,
    /// Stored context vectors (`rerank: context`, `kindred tune`'s context step).
    ContextVectors,
}

impl Capability {
    /// What the capability is, as a refusal names it.
    pub fn what(self) -> &'static str {
        match self {
            Capability::Reindex => "reindex",
            Capability::ContextVectors => "context vectors (rerank: context)",
        }
    }

    /// What to do on a backend without it.
    pub fn instead(self) -> &'static str {
        match self {
            Capability::Reindex => {
                "create a new collection and ingest the documents into it with the new model"
            }
            Capability::ContextVectors => "use rerank rcmd, probability or none on this backend",
        }
    }
}

/// The embedded backend's name, as refusals and logs give it.
pub(crate) const EMBEDDED: &str = "embedded";
/// The Milvus backend's name.
pub(crate) const MILVUS: &str = "milvus";

/// What the embedded backend offers: everything.
pub(crate) fn embedded_offers(capability: Capability) -> bool {
    match capability {
        Capability::Reindex | Capability::ContextVectors => true,
    }
}

/// What the Milvus backend offers: no reindex (a Milvus collection keeps one model's
/// vectors), no context vectors.
pub(crate) fn milvus_offers(capability: Capability) -> bool {
    match capability {
        Capability::Reindex | Capability::ContextVectors => false,
    }
}

/// The refusal of `capability` on backend `backend`.
pub(crate) fn not_supported(backend: &'static str, capability: Capability) -> crate::Error {
    UserError::NotSupported {
        what: capability.what().into(),
        backend,
        fix: capability.instead().into(),
    }
    .into()
}

/// Which documents a vector stage searches among: given ids (None: all), or those a filter
/// admits.
#[derive(Clone, Copy)]
pub(crate) enum Within<'a> {
    Ids(Option<&'a [u64]>),
    Filter(&'a Filter),
}

/// A place that keeps collections: documents and metadata, sentence vectors, intents, token
/// vectors, search, deletes, counts, and each collection's settings, calibration, search
/// defaults and review verdicts. Arguments are checked above it (names, documents, models);
/// a backend refuses only what it alone can know (an unknown collection, say).
pub(crate) trait Backend: Send + Sync {
    /// Its name in refusals and logs ("embedded", "milvus").
    fn name(&self) -> &'static str;

    /// Whether it offers `capability`; the optional methods below refuse when it does not.
    fn supports(&self, capability: Capability) -> bool;

    /// Collection `name`'s settings.
    fn settings(&self, name: &str) -> Result<CollectionSettings>;

    /// Live documents in collection `name`.
    fn count(&self, name: &str) -> Result<u64>;

    /// Names and settings of all collections.
    fn collections(&self) -> Result<Vec<(String, CollectionSettings)>>;

    /// Creates collection `name` (its name already checked).
    fn create_collection(&self, name: &str, settings: &CollectionSettings) -> Result<()>;

    /// Drops collection `name` and everything it holds.
    fn drop_collection(&self, name: &str) -> Result<()>;

    /// Collection `name`'s settings, stats and index health.
    fn info(&self, name: &str) -> Result<CollectionInfo>;

    /// Stores (or with None clears) collection `name`'s search defaults, already validated
    /// against its settings.
    fn set_search_defaults(&self, name: &str, defaults: Option<SearchDefaults>) -> Result<()>;

    /// Collection `name`'s search defaults as stored, stale or not.
    fn search_defaults(&self, name: &str) -> Result<Option<SearchDefaults>>;

    /// Stores `calibrator` as collection `name`'s own.
    fn set_calibrator(&self, name: &str, calibrator: &Calibrator) -> Result<()>;

    /// Upserts `records` (built from `docs`, checked, encoded by `model`): all or none.
    fn upsert(
        &self,
        name: &str,
        model: &ModelIdentity,
        docs: &[(NewDocument, Encoded)],
        records: Vec<StoredDoc>,
    ) -> Result<Vec<Upserted>>;

    /// Deletes document `id`; true if it existed.
    fn delete(&self, name: &str, id: &str) -> Result<bool>;

    /// A stored document by external id.
    fn get(&self, name: &str, id: &str) -> Result<Option<StoredDoc>>;

    /// Every live document, decoded as the iterator is advanced.
    fn documents<'a>(
        &'a self,
        name: &str,
    ) -> Result<Box<dyn Iterator<Item = Result<StoredDoc>> + 'a>>;

    /// Up to `limit` documents before position `before`: (position, external id).
    fn recent(&self, name: &str, before: Option<u64>, limit: usize) -> Result<Vec<(u64, String)>>;

    /// Stores labelled pair `key` (a review verdict), replacing one under that key.
    fn put_pair(&self, name: &str, key: &str, value: &[u8]) -> Result<()>;

    /// Every labelled pair: (key, value).
    fn pairs(&self, name: &str) -> Result<Vec<(String, Vec<u8>)>>;

    /// Labelled pair `key`, if there is one.
    fn pair(&self, name: &str, key: &str) -> Result<Option<Vec<u8>>>;

    /// Removes labelled pair `key`; true if it was there.
    fn remove_pair(&self, name: &str, key: &str) -> Result<bool>;

    /// A read handle on collection `name`, taken once per request.
    fn view<'a>(&'a self, name: &str) -> Result<Box<dyn CollectionView + 'a>>;

    /// Loads what collections need for their first search now rather than on first use.
    fn warm_up(&self) -> Result<()>;

    /// Saves what changed of the in-memory indexes; how many collections it saved.
    fn checkpoint(&self) -> Result<usize> {
        Ok(0)
    }

    /// Recovers from a storage fault once the cause is gone; whether it did anything.
    fn recover(&self) -> Result<bool> {
        Ok(false)
    }

    /// Collections that failed to load at their last try, with why.
    fn load_failures(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Keeps at least `bytes` free on the disk it writes to (refusing writes below).
    fn set_min_free_bytes(&self, _bytes: u64) {}

    /// Reports index rebuilds to `progress`.
    fn set_progress(&mut self, _progress: super::Progress) {}

    /// What collection `name`'s context vectors were made with (None: it has none).
    fn context_vectors_stamp(&self, _name: &str) -> Result<Option<ContextVectorsStamp>> {
        Ok(None)
    }

    /// Stores context vectors ([`Capability::ContextVectors`]).
    fn set_context_vectors(
        &self,
        _name: &str,
        _model: &ModelIdentity,
        _vectors: &[(u64, Vec<f32>)],
        _replace: bool,
    ) -> Result<()> {
        Err(not_supported(self.name(), Capability::ContextVectors))
    }

    /// Re-encodes a collection onto another model ([`Capability::Reindex`]).
    fn reindex(
        &self,
        _name: &str,
        _model: &ModelIdentity,
        _encode: EncodeFn<'_>,
        _model_path: Option<&Path>,
        _progress: &dyn Fn(u64, u64),
    ) -> Result<ReindexReport> {
        Err(not_supported(self.name(), Capability::Reindex))
    }

    /// The embedded store, for tests that inspect it (None elsewhere).
    #[cfg(feature = "test-support")]
    fn embedded_store(&self) -> Option<&crate::store::Store> {
        None
    }
}

/// A read of one collection as of when it was taken: what a search's stages ask. Vectors
/// arrive checked for their dimension ([`super::View`] does that once for every backend).
pub(crate) trait CollectionView: Send + Sync {
    /// The collection's settings.
    fn settings(&self) -> &CollectionSettings;

    /// True once the collection switched to new indexes under this view (take a new one).
    fn is_retired(&self) -> bool {
        false
    }

    /// Whether metadata filters are applied inside the vector search rather than from a list
    /// of admitted ids.
    fn pushes_filters(&self) -> bool;

    /// The k nearest by cosine of sentence vectors: (internal id, cosine), best first.
    fn cosine(&self, sentence: &[f32], k: usize, within: Within<'_>) -> Result<Vec<(u64, f32)>>;

    /// The k nearest by W2 of intents (`embedded`: [μ; σ]): (internal id, W2), nearest first.
    fn w2(&self, embedded: Vec<f32>, k: usize, within: Within<'_>) -> Result<Vec<(u64, f32)>>;

    /// The k best by BM25, only among `among` when given.
    fn lexical(&self, text: &str, k: usize, among: Option<&[u64]>) -> Result<Vec<(u64, f32)>>;

    /// The k best by BM25 among the documents `filter` admits.
    fn lexical_filtered(&self, text: &str, k: usize, filter: &Filter) -> Result<Vec<(u64, f32)>>;

    /// The live documents `filter` admits (empty where filters are pushed down).
    fn admitted(&self, filter: &Filter) -> Vec<u64>;

    /// How many live documents `filter` admits.
    fn matching(&self, filter: &Filter) -> Result<usize>;

    /// Whether a search among `n` admitted documents scores each of them exactly.
    fn scans_exactly(&self, n: usize) -> bool;

    /// TF-IDF cosine of `text` with each of `docs`.
    fn lexical_similarities(&self, text: &str, docs: &[(u64, &str)]) -> Vec<f32>;

    /// The lexical index (for IDF weights).
    fn lexical_index(&self) -> &LexicalIndex;

    /// Loads documents ahead of [`CollectionView::get_internal`] where that saves calls.
    fn prefetch(&self, _internals: &[u64]) -> Result<()> {
        Ok(())
    }

    /// A live document by internal id.
    fn get_internal(&self, internal: u64) -> Result<Option<StoredDoc>>;

    /// The collection's calibrator (its own, else the shipped default).
    fn calibrator(&self) -> Result<Arc<Calibrator>>;

    /// The context vectors of `internals`, when a current set exists.
    fn context_vectors(&self, internals: &[u64]) -> Result<Option<HashMap<u64, Vec<f32>>>>;

    /// The collection's search defaults, stale or not.
    fn search_defaults(&self) -> Result<Option<Arc<SearchDefaults>>>;
}
