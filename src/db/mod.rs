//! The database: one [`Backend`](backend::Backend) chosen when it opens, behind one facade.
//!
//! A database keeps its collections either in its data directory (the embedded backend,
//! `embedded/`: a sled store, the source of truth, plus each collection's HNSW graphs and BM25
//! index kept in step with it; the default) or in a Milvus server or cluster
//! ([`Location::Milvus`], `milvus/`). Either way it owns documents and metadata, sentence
//! vectors, intents, token vectors, ANN search with filters, deletes, counts, review verdicts
//! and each collection's settings, calibration and search defaults. Everything above
//! ([`View`] and up: encoding, fusion, RCMD, explanations, the API) is the same on both, and
//! nothing there knows which backend it runs on: what a backend does not offer is a
//! [`Capability`], refused with [`UserError::NotSupported`].
//!
//! This facade checks what a request gives (collection names before anything is built from
//! them, documents, vectors, models, search defaults) once for every backend; the backend
//! stores. Reads go through a [`View`], taken once per request. The database stores vectors;
//! it never encodes (that is [`crate::engine`]'s job).

mod backend;
mod document;
mod embedded;
mod info;
mod location;
#[cfg(feature = "milvus")]
mod milvus;
mod view;

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::model::ModelIdentity;
use crate::score::calibration::Calibrator;
use crate::store::{CollectionSettings, Durability, SearchDefaults, StoredDoc, Upserted};
use crate::types::Encoded;
use backend::Backend;

pub use backend::Capability;
use document::{check_model, sound_vectors};
pub use document::{
    one_or_many, validate, write_export, NewDocument, MAX_CONTEXT_BYTES, MAX_CONTEXT_TEXTS,
};
pub use embedded::{already_uses, EncodeFn};
use info::check_defaults;
pub use info::{
    CollectionInfo, ContextVectorsInfo, ContextVectorsStamp, IndexInfo, OpenedFrom, Progress,
    ReindexReport, SearchDefaultsInfo,
};
pub use location::{Location, MilvusSettings};
pub use view::{View, LEXICAL_FILTER_DEPTH};

/// The database.
pub struct Database {
    dir: PathBuf,
    backend: Box<dyn Backend>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("dir", &self.dir)
            .field("backend", &self.backend.name())
            .finish()
    }
}

impl Database {
    /// Opens the embedded database in `dir` (store in `dir/store`, index files in
    /// `dir/indexes`).
    pub fn open(dir: &Path, durability: Durability) -> Result<Self> {
        Ok(Database {
            dir: dir.to_path_buf(),
            backend: Box::new(embedded::Embedded::open(dir, durability)?),
        })
    }

    /// Opens a database whose collections live at `location`: [`Database::open`] for the
    /// embedded one; for Milvus, connects (checking the server answers), runs with `milvus`,
    /// and keeps only node-local files (upload jobs, ingest state) in `dir`.
    pub fn open_backend(
        dir: &Path,
        durability: Durability,
        location: &Location,
        milvus: &MilvusSettings,
    ) -> Result<Self> {
        match location {
            Location::Embedded => Self::open(dir, durability),
            Location::Milvus(url) => Self::open_milvus(dir, url, milvus),
        }
    }

    #[cfg(feature = "milvus")]
    fn open_milvus(dir: &Path, url: &str, settings: &MilvusSettings) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .map_err(crate::error::io_err(format!("creating {}", dir.display())))?;
        Ok(Database {
            dir: dir.to_path_buf(),
            backend: Box::new(milvus::Milvus::connect(url, settings)?),
        })
    }

    #[cfg(not(feature = "milvus"))]
    fn open_milvus(_dir: &Path, url: &str, _settings: &MilvusSettings) -> Result<Self> {
        Err(crate::error::UserError::NotSupported {
            what: format!("the Milvus backend ({url})"),
            backend: backend::EMBEDDED,
            fix: "this kindred was built without the `milvus` feature: build it with \
                  `cargo build --features milvus` (the default binary has it)"
                .into(),
        }
        .into())
    }

    /// Whether the backend offers `capability`.
    pub fn supports(&self, capability: Capability) -> bool {
        self.backend.supports(capability)
    }

    /// Refuses with [`UserError::NotSupported`] unless the backend offers `capability`.
    pub fn require(&self, capability: Capability) -> Result<()> {
        match self.supports(capability) {
            true => Ok(()),
            false => Err(backend::not_supported(self.backend.name(), capability)),
        }
    }

    /// The backend's name ("embedded", "milvus"), for refusals that name it.
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// Collection `name`'s settings.
    pub fn settings(&self, name: &str) -> Result<CollectionSettings> {
        self.backend.settings(name)
    }

    /// Live documents in collection `name`.
    pub fn count(&self, name: &str) -> Result<u64> {
        self.backend.count(name)
    }

    /// The data directory (store and indexes on the embedded backend; upload jobs and ingest
    /// state on every backend).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reports index rebuilds to `progress`.
    pub fn with_progress(mut self, progress: Progress) -> Self {
        self.backend.set_progress(progress);
        self
    }

    /// Keeps at least `bytes` free on the data disk: writes that would go below are refused
    /// (507 through the API) rather than filling it.
    pub fn set_min_free_bytes(&self, bytes: u64) {
        self.backend.set_min_free_bytes(bytes)
    }

    /// Stores labelled pair `key` of collection `name` (a review verdict, JSON), replacing one
    /// stored under that key. On the Milvus backend it is shared metadata, so every node sees
    /// it.
    pub fn put_pair(&self, name: &str, key: &str, value: &[u8]) -> Result<()> {
        self.backend.put_pair(name, key, value)
    }

    /// Every labelled pair of collection `name`: (key, value).
    pub fn pairs(&self, name: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.backend.pairs(name)
    }

    /// Labelled pair `key` of collection `name` (its value), if there is one.
    pub fn pair(&self, name: &str, key: &str) -> Result<Option<Vec<u8>>> {
        self.backend.pair(name, key)
    }

    /// Up to `limit` documents of collection `name` before position `before` (all: None),
    /// the last written first on the embedded backend (on Milvus, which keeps no write order,
    /// in a fixed order over the documents): (position, external id). A page's last position
    /// is the next page's `before`.
    pub fn recent(
        &self,
        name: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, String)>> {
        self.backend.recent(name, before, limit)
    }

    /// Removes labelled pair `key` of collection `name`; true if it was there.
    pub fn remove_pair(&self, name: &str, key: &str) -> Result<bool> {
        self.backend.remove_pair(name, key)
    }

    /// Creates a collection.
    pub fn create_collection(&self, name: &str, settings: &CollectionSettings) -> Result<()> {
        // The name first: a backend makes folder or collection names of it, and a path must
        // never be built from an unchecked one (`..` once removed the whole data directory).
        crate::store::validate_name(name)?;
        settings.hnsw.validate()?;
        self.backend.create_collection(name, settings)
    }

    /// Drops a collection, its documents and its index files.
    pub fn drop_collection(&self, name: &str) -> Result<()> {
        self.backend.drop_collection(name)
    }

    /// Names and settings of all collections.
    pub fn collections(&self) -> Result<Vec<(String, CollectionSettings)>> {
        self.backend.collections()
    }

    /// A collection's settings, stats and index health.
    pub fn info(&self, name: &str) -> Result<CollectionInfo> {
        self.backend.info(name)
    }

    /// Stores `defaults` as collection `name`'s search defaults, replacing any (`None` clears
    /// them); searches use them from now on where a request does not say. Refused, naming the
    /// field, when they do not validate ([`SearchDefaults::validate`]) or were chosen for
    /// another model than the collection's (choose them again after a reindex). A later
    /// reindex keeps them, stale: reported by [`Database::info`], not applied.
    pub fn set_search_defaults(&self, name: &str, defaults: Option<SearchDefaults>) -> Result<()> {
        check_defaults(name, &self.settings(name)?, defaults.as_ref())?;
        self.backend.set_search_defaults(name, defaults)
    }

    /// Collection `name`'s search defaults as stored, stale or not (None: it has none).
    pub fn search_defaults(&self, name: &str) -> Result<Option<SearchDefaults>> {
        self.backend.search_defaults(name)
    }

    /// Stores context vectors for collection `name` (the unit vectors
    /// [`crate::score::context`] compares a query with, by internal id), made with `model`,
    /// which must be the collection's. With `replace` they are the collection's whole set:
    /// those stored before are removed, and the set is stamped as `model`'s only once it is
    /// complete (a crash in between leaves no stamp, so no half set is used). Without, they
    /// are added to the set already stamped (a new document's). Derived data: documents and
    /// indexes are untouched. Needs [`Capability::ContextVectors`].
    pub fn set_context_vectors(
        &self,
        name: &str,
        model: &ModelIdentity,
        vectors: &[(u64, Vec<f32>)],
        replace: bool,
    ) -> Result<()> {
        self.require(Capability::ContextVectors)?;
        self.check_model(name, model)?;
        self.backend
            .set_context_vectors(name, model, vectors, replace)
    }

    /// What collection `name`'s context vectors were made with (None: it has none, or the
    /// backend keeps none). A stamp of another model than the collection's (a reindex since)
    /// is stale: searches do not use those vectors.
    pub fn context_vectors_stamp(&self, name: &str) -> Result<Option<ContextVectorsStamp>> {
        self.backend.context_vectors_stamp(name)
    }

    /// Whether collection `name` has a set of context vectors made with the model of
    /// fingerprint `model` (the one searches and new documents use).
    pub fn has_context_vectors(&self, name: &str, model: &str) -> Result<bool> {
        Ok(self
            .context_vectors_stamp(name)?
            .is_some_and(|s| s.model == model))
    }

    /// Upserts documents encoded by `model`: all of them, or (on any error) none. The model
    /// must be the collection's (checked here and, on the embedded backend, again under the
    /// writer lock, since a reindex may switch it meanwhile).
    #[tracing::instrument(level = "debug", skip(self, model, docs), fields(docs = docs.len()))]
    pub fn upsert_encoded(
        &self,
        name: &str,
        model: &ModelIdentity,
        docs: Vec<(NewDocument, Encoded)>,
    ) -> Result<Vec<Upserted>> {
        self.check_model(name, model)?;
        docs.iter()
            .try_for_each(|(d, e)| validate(d).and(sound_vectors(d, e, model)))?;
        let records: Vec<StoredDoc> = docs.iter().map(|(d, e)| d.record(e)).collect();
        self.backend.upsert(name, model, &docs, records)
    }

    /// Deletes a document; true if it existed.
    #[tracing::instrument(level = "debug", skip(self))]
    pub fn delete(&self, name: &str, id: &str) -> Result<bool> {
        self.backend.delete(name, id)
    }

    /// A stored document by external id.
    pub fn get(&self, name: &str, id: &str) -> Result<Option<StoredDoc>> {
        self.backend.get(name, id)
    }

    /// Every live document of collection `name` (its current generation), decoded one at a
    /// time as the iterator is advanced (memory stays flat in the collection's size): id,
    /// text, metadata ([`StoredDoc::metadata`]), context and vectors; in external-id order on
    /// the embedded backend, internal-id order on Milvus. Not a snapshot: writes made while it
    /// runs may or may not be seen. What trainers that read a whole collection use.
    pub fn documents(
        &self,
        name: &str,
    ) -> Result<Box<dyn Iterator<Item = Result<StoredDoc>> + '_>> {
        self.backend.documents(name)
    }

    /// Stores `calibrator` as the collection's own; searches use it from now on.
    pub fn set_calibrator(&self, name: &str, calibrator: &Calibrator) -> Result<()> {
        self.backend.set_calibrator(name, calibrator)
    }

    /// A read handle on collection `name`: its settings and indexes as of now, taken once per
    /// request so no step of a search looks the collection up again.
    pub fn view(&self, name: &str) -> Result<View<'_>> {
        Ok(View::new(self, name, self.backend.view(name)?))
    }

    /// Recovers from a storage fault once its cause is gone, so writes resume without a
    /// restart (the embedded store after sled met an I/O error, such as a full disk). Returns
    /// whether it did anything.
    pub fn recover_store(&self) -> Result<bool> {
        self.backend.recover()
    }

    /// Saves the in-memory indexes of every open collection that changed since they were last
    /// saved (nothing to save on Milvus). Returns how many were saved.
    pub fn checkpoint(&self) -> Result<usize> {
        self.backend.checkpoint()
    }

    /// Loads (or rebuilds) what every collection needs for its first search now rather than
    /// on first use (on Milvus: this node's BM25 indexes).
    pub fn warm_up(&self) -> Result<()> {
        self.backend.warm_up()
    }

    /// Refuses `model` unless it is the model the collection's vectors come from.
    pub fn check_model(&self, name: &str, model: &ModelIdentity) -> Result<()> {
        check_model(name, &self.settings(name)?, model)
    }

    /// The collections whose indexes failed to load at their last try, with why (`/readyz`
    /// is not ready while there are any: requests on them fail).
    pub fn load_failures(&self) -> Vec<(String, String)> {
        self.backend.load_failures()
    }

    /// Re-encodes collection `name` with `encode` (the texts' vectors under `model`, another
    /// model) as a new generation with new indexes, while the current generation keeps
    /// serving searches and writes; writes made meanwhile are caught up, then the collection
    /// switches to the new generation and the old one is dropped. `model_path` (the model's
    /// directory) is recorded so a server started with another model can load this one.
    /// `progress(done, total)` counts documents. On error the collection is untouched. Needs
    /// [`Capability::Reindex`].
    pub fn reindex(
        &self,
        name: &str,
        model: &ModelIdentity,
        encode: EncodeFn<'_>,
        model_path: Option<&Path>,
        progress: &dyn Fn(u64, u64),
    ) -> Result<ReindexReport> {
        self.require(Capability::Reindex)?;
        self.backend
            .reindex(name, model, encode, model_path, progress)
    }

    /// The embedded store, for tests that inspect or stamp it directly (None on Milvus).
    #[cfg(feature = "test-support")]
    pub fn embedded_store(&self) -> Option<&crate::store::Store> {
        self.backend.embedded_store()
    }
}
