//! The database: the store (source of truth) plus each collection's indexes, kept in step.
//!
//! Writes go to the store first — atomically, and acknowledged only once durable — then to the
//! in-memory indexes. Indexes are saved with the store checkpoint (`seq`) they reflect; opening
//! a collection loads them when they match the store and rebuilds them from it otherwise (after
//! a crash, say, or a damaged index file). Replaced and deleted documents are tombstoned in the
//! vector indexes, and both graphs are rebuilt in the background when their tombstones pass
//! [`crate::index::hnsw::COMPACTION_RATIO`].
//!
//! Reads go through a [`View`], taken once per request: the collection's settings, indexes,
//! cached calibrator and search defaults, with documents loaded by internal id. Reindexing
//! ([`Database::reindex`], in `reindex.rs`) builds a new generation beside the serving one. The
//! database stores vectors; it never encodes (that is [`crate::engine`]'s job).
//!
//! The backend boundary: a database keeps its collections either here (the embedded backend:
//! sled store + HNSW graphs + BM25, the default) or in a Milvus server or cluster
//! ([`Backend::Milvus`], `remote.rs`). Either way it owns documents and metadata, sentence
//! vectors, intents, token vectors, ANN search with filters, deletes, counts, and the
//! collection's settings, calibration and search defaults; everything above ([`View`] and
//! up: encoding, fusion, RCMD, explanations, the API) is the same on both. What the Milvus
//! backend does not offer (reindex, index checkpoints) is refused with
//! [`UserError::NotSupported`]; the review queue and jobs stay in the node's local store.

mod indexes;
mod reindex;
mod remote;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};

use serde::{Deserialize, Serialize};

use crate::error::{io_err, InternalError, Result, UserError};
use crate::index::hnsw::{self, Metric, VectorIndex};
use crate::index::{files, text, Filter, LexicalIndex, MetadataIndex};
use crate::model::ModelIdentity;
use crate::score::calibration::Calibrator;
use crate::score::wasserstein::embed;
use crate::store::{
    validate_id, CollectionSettings, CollectionStats, Durability, SearchDefaults, Store, StoredDoc,
    Upserted, SEARCH_DEFAULTS_KEY,
};
use crate::sync::{MutexExt, RwLockExt};
use crate::text::TextFormat;
use crate::types::{Encoded, Gaussian, Rerank};
use indexes::{Entry, Indexes};
pub use reindex::{already_uses, EncodeFn, REINDEX_ON_MILVUS};

/// A document as a user gives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewDocument {
    /// External id (1–512 bytes).
    pub id: String,
    /// The question.
    pub text: String,
    /// A JSON object (or absent).
    #[serde(default)]
    pub metadata: serde_json::Value,
    /// Context: texts that go with the question (answers, comments, the FAQ entry it was
    /// filed under), stored verbatim with it and returned with it, never encoded or searched.
    /// In JSON a string or a list of strings (absent, `""` or `[]`: none); empty or
    /// whitespace-only texts are dropped. At most [`MAX_CONTEXT_TEXTS`] texts of
    /// [`MAX_CONTEXT_BYTES`] in all.
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub context: Vec<String>,
}

/// Most context texts a document may carry.
pub const MAX_CONTEXT_TEXTS: usize = 64;
/// Most bytes (UTF-8) a document's context texts may hold in all: 64 KiB.
pub const MAX_CONTEXT_BYTES: usize = 64 << 10;

impl NewDocument {
    /// The document as stored when its texts are written in `format`: for
    /// [`TextFormat::Html`], its text and each context text become their visible text.
    pub fn in_format(mut self, format: TextFormat) -> Self {
        let visible = |t: String| match format.visible(&t) {
            std::borrow::Cow::Borrowed(_) => t,
            std::borrow::Cow::Owned(v) => v,
        };
        if format != TextFormat::Text {
            self.text = visible(self.text);
            self.context = self.context.into_iter().map(visible).collect();
        }
        self
    }

    /// The context as stored: its texts that are not empty or whitespace only.
    fn stored_context(&self) -> Vec<String> {
        self.context
            .iter()
            .filter(|c| !c.trim().is_empty())
            .cloned()
            .collect()
    }
}

impl From<&StoredDoc> for NewDocument {
    /// The stored document as a user gives one: its id, text (as stored: HTML already made
    /// visible), metadata (an object, `{}` when it had none) and context.
    fn from(d: &StoredDoc) -> Self {
        NewDocument {
            id: d.id.clone(),
            text: d.text.clone(),
            metadata: serde_json::Value::Object(d.metadata()),
            context: d.context.clone(),
        }
    }
}

/// Writes `docs` to `out` as an export, one line per document: the JSON object ingest reads
/// ({"id", "text", "metadata", "context"}, context left out when empty). An export ingested
/// into a collection gives it the same documents (new vectors: they are the target's model's
/// to make). `written(n)` is told after each of them; `out` is flushed at the end. Returns how
/// many were written; stops at the first error, reading a document or writing it.
pub fn write_export(
    docs: impl Iterator<Item = Result<StoredDoc>>,
    out: &mut impl std::io::Write,
    mut written: impl FnMut(u64),
) -> Result<u64> {
    let mut n = 0u64;
    for doc in docs {
        serde_json::to_writer(&mut *out, &NewDocument::from(&doc?))
            .map_err(|e| io_err("writing an export")(e.into()))?;
        out.write_all(b"\n").map_err(io_err("writing an export"))?;
        n += 1;
        written(n);
    }
    out.flush().map_err(io_err("writing an export"))?;
    Ok(n)
}

/// Reads a document's context: one string, or a list of strings (`null` reads as none).
pub fn one_or_many<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<String>, D::Error> {
    struct Texts;
    impl<'de> serde::de::Visitor<'de> for Texts {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string or a list of strings")
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> std::result::Result<Self::Value, E> {
            Ok(vec![s.to_string()])
        }
        fn visit_string<E: serde::de::Error>(
            self,
            s: String,
        ) -> std::result::Result<Self::Value, E> {
            Ok(vec![s])
        }
        fn visit_unit<E: serde::de::Error>(self) -> std::result::Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_none<E: serde::de::Error>(self) -> std::result::Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> std::result::Result<Self::Value, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(MAX_CONTEXT_TEXTS));
            while let Some(s) = seq.next_element::<String>()? {
                out.push(s);
            }
            Ok(out)
        }
    }
    d.deserialize_any(Texts)
}

/// Index health of a collection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexInfo {
    /// Points in the cosine graph (tombstones included).
    pub cosine_points: usize,
    /// Points in the W2 graph (tombstones included).
    pub w2_points: usize,
    /// Tombstoned points in the cosine graph (replaced or deleted documents not yet compacted
    /// away); its live points are `cosine_points − tombstones`.
    pub tombstones: usize,
    /// Tombstoned points in the W2 graph. Usually equal to `tombstones`; they differ after a
    /// background compaction rebuilt one graph and not yet the other.
    pub w2_tombstones: usize,
    /// Documents in the lexical index.
    pub lexical_documents: usize,
    /// How this process's graphs came to be (embedded backend only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened: Option<OpenedFrom>,
}

/// How a process's graphs of a collection came to be when it opened them: read from their
/// saved files and caught up with the writes made after the save, or built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenedFrom {
    /// The store write the saved files reflected (the older of the two graphs'), when they
    /// were read from files; None: made empty (a new collection) or built from every stored
    /// document (no usable save).
    pub saved_seq: Option<u64>,
    /// Documents written after that save, added to the graphs when they were read.
    pub inserted: usize,
    /// Documents replaced or deleted after that save, tombstoned when the graphs were read.
    pub removed: usize,
    /// The store write the saved lexical and metadata indexes reflected, when they were read
    /// from their file; None: filled from every stored record.
    #[serde(default)]
    pub text_saved_seq: Option<u64>,
    /// Stored records the open read: every one when it built an index from the store; with
    /// all index files read, only those written since the save and a sample it checked.
    #[serde(default)]
    pub records_read: u64,
}

/// What `kindred collection stats` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectionInfo {
    /// Name.
    pub name: String,
    /// Settings.
    pub settings: CollectionSettings,
    /// Store format version.
    pub format_version: u32,
    /// Sizes.
    pub stats: CollectionStats,
    /// Indexes.
    pub index: IndexInfo,
    /// The search defaults its searches use where a request does not say (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_defaults: Option<SearchDefaultsInfo>,
    /// The context vectors `rerank: context` reads (absent: none, or the Milvus backend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_vectors: Option<ContextVectorsInfo>,
}

/// A collection's context vectors as its info reports them: which model made the set, for how
/// many documents, and whether a reindex since made it stale (then `rerank: context` is
/// refused until `kindred tune` or `reindex --context-vectors` makes it again).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextVectorsInfo {
    /// Which model made them, for how many documents.
    #[serde(flatten)]
    pub stamp: ContextVectorsStamp,
    /// True when `stamp.model` is not the collection's model: not used.
    pub stale: bool,
}

/// A collection's search defaults as its info reports them: the stored defaults and whether
/// they are stale (chosen for another model than the one its vectors now come from, after a
/// reindex): stale defaults are kept and shown but never applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchDefaultsInfo {
    /// The defaults, as stored.
    #[serde(flatten)]
    pub defaults: SearchDefaults,
    /// True when `defaults.model_fingerprint` is not the collection's model's: not applied.
    pub stale: bool,
}

/// Progress of a long operation: (what, done, total).
pub type Progress = Arc<dyn Fn(&str, u64, u64) + Send + Sync>;

/// What a reindex did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReindexReport {
    /// Documents in the collection after the switch.
    pub documents: u64,
    /// Documents encoded (more than `documents` when writes during the reindex were caught up).
    pub encoded: u64,
    /// The new generation.
    pub generation: u64,
    /// The model the collection now uses.
    pub model: ModelIdentity,
    /// Seconds from start to switch.
    pub seconds: f64,
}

/// A collection's indexes once loaded. Loading holds only this slot's lock, so a long rebuild
/// of one collection never blocks the others.
type Slot = Arc<Mutex<Option<Arc<Indexes>>>>;

/// Where a database keeps its collections.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Backend {
    /// In the data directory: sled store, HNSW graphs, BM25 (the default).
    #[default]
    Embedded,
    /// In the Milvus server or cluster at this URL (`milvus://HOST:PORT`).
    Milvus(String),
}

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim() {
            "" | "embedded" => Ok(Backend::Embedded),
            url if url.starts_with("milvus://") && url.len() > "milvus://".len() => {
                Ok(Backend::Milvus(url.to_string()))
            }
            other => Err(format!(
                "unknown backend {other:?}: use `embedded` (the default) or `milvus://HOST:PORT`"
            )),
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Embedded => f.write_str("embedded"),
            Backend::Milvus(url) => f.write_str(url),
        }
    }
}

/// The database.
pub struct Database {
    dir: PathBuf,
    store: Store,
    index_dir: PathBuf,
    open: RwLock<HashMap<String, Slot>>,
    /// Collections whose indexes failed to load at their last try, with why (a later load that
    /// succeeds clears its entry).
    load_failures: Mutex<std::collections::BTreeMap<String, String>>,
    progress: Option<Progress>,
    /// The Milvus backend, when collections live there (`store` then holds only this node's
    /// review queue).
    remote: Option<Arc<remote::Remote>>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("store", &self.store)
            .finish()
    }
}

impl Database {
    /// Opens the database in `dir` (store in `dir/store`, index files in `dir/indexes`).
    pub fn open(dir: &Path, durability: Durability) -> Result<Self> {
        let store = Store::open(&dir.join("store"), durability)?;
        // No reindex runs yet: generations nobody points at are leftovers of one that stopped.
        store.drop_orphan_generations()?;
        let index_dir = dir.join("indexes");
        hnsw::claim_folder(&index_dir, store.id(), |theirs| {
            UserError::IncompatibleStore {
                path: store.path().to_path_buf(),
                reason: format!(
                    "it is not the store the index files in {} were saved from (store {}, \
                     index files of store {theirs}): it was emptied, replaced or damaged, and \
                     the documents those indexes hold are not in it. Restore the data directory \
                     from a backup; or, to keep this store as it is, remove {} (the indexes are \
                     rebuilt from the store)",
                    index_dir.display(),
                    store.id(),
                    index_dir.display()
                ),
            }
            .into()
        })?;
        // Index folders no collection's current generation owns: an unfinished reindex's, the
        // old generation's of one killed between its switch and its cleanup (its folder may
        // be the plain name), a dropped collection's.
        let current = store.physical_names()?;
        if let Ok(entries) = std::fs::read_dir(&index_dir) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if entry.path().is_dir() && !current.contains(&name) {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        Ok(Database {
            dir: dir.to_path_buf(),
            store,
            index_dir,
            open: RwLock::new(HashMap::new()),
            load_failures: Mutex::default(),
            progress: None,
            remote: None,
        })
    }

    /// Opens a database on `backend`: [`Database::open`] for the embedded one; for Milvus,
    /// connects (checking the server answers) and keeps node-local state (the review queue,
    /// jobs, uploads) in `dir`.
    pub fn open_backend(dir: &Path, durability: Durability, backend: &Backend) -> Result<Self> {
        let mut db = Self::open(dir, durability)?;
        if let Backend::Milvus(url) = backend {
            db.remote = Some(Arc::new(remote::Remote::connect(url)?));
        }
        Ok(db)
    }

    /// Whether collections live here (the embedded backend), not in Milvus.
    pub fn is_embedded(&self) -> bool {
        self.remote.is_none()
    }

    /// Refuses `what` on the Milvus backend ([`UserError::NotSupported`]), naming `fix`.
    pub fn embedded_only(&self, what: &str, fix: &str) -> Result<()> {
        match self.remote {
            Some(_) => Err(UserError::NotSupported {
                what: what.into(),
                backend: "milvus",
                fix: fix.into(),
            }
            .into()),
            None => Ok(()),
        }
    }

    /// Collection `name`'s settings.
    pub fn settings(&self, name: &str) -> Result<CollectionSettings> {
        match &self.remote {
            Some(r) => r.require(name),
            None => self.store.settings(name),
        }
    }

    /// Live documents in collection `name`.
    pub fn count(&self, name: &str) -> Result<u64> {
        match &self.remote {
            Some(r) => {
                r.require(name)?;
                r.count(name)
            }
            None => self.store.count(name),
        }
    }

    /// The data directory (store, indexes, ingest state).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reports index rebuilds to `progress`.
    pub fn with_progress(mut self, progress: Progress) -> Self {
        self.progress = Some(progress);
        self
    }

    /// The index folder of physical name `physical` (`name` or `name@G`), checked to be one
    /// entry of `indexes/` ([`crate::store::names::child`]): the one way a path is made from
    /// a collection's name here.
    pub(crate) fn index_folder(&self, physical: &str) -> Result<PathBuf> {
        crate::store::names::child(&self.index_dir, physical)
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Stores labelled pair `key` of collection `name` (a review verdict, JSON), replacing one
    /// stored under that key. On the Milvus backend it is shared metadata, so every node sees
    /// it.
    pub fn put_pair(&self, name: &str, key: &str, value: &[u8]) -> Result<()> {
        match &self.remote {
            Some(r) => r.put_pair(name, key, value),
            None => self.store.put_pair(name, key.as_bytes(), value),
        }
    }

    /// Every labelled pair of collection `name`: (key, value).
    pub fn pairs(&self, name: &str) -> Result<Vec<(String, Vec<u8>)>> {
        match &self.remote {
            Some(r) => r.pairs(name),
            None => Ok(self
                .store
                .pairs(name)?
                .into_iter()
                .map(|(k, v)| (String::from_utf8_lossy(&k).into_owned(), v))
                .collect()),
        }
    }

    /// Labelled pair `key` of collection `name` (its value), if there is one.
    pub fn pair(&self, name: &str, key: &str) -> Result<Option<Vec<u8>>> {
        match &self.remote {
            Some(r) => r.pair(name, key),
            None => self.store.pair(name, key.as_bytes()),
        }
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
        match &self.remote {
            Some(r) => {
                r.require(name)?;
                r.recent(name, before, limit)
            }
            None => self.store.recent(name, before, limit),
        }
    }

    /// Removes labelled pair `key` of collection `name`; true if it was there.
    pub fn remove_pair(&self, name: &str, key: &str) -> Result<bool> {
        match &self.remote {
            Some(r) => r.remove_pair(name, key),
            None => self.store.remove_pair(name, key.as_bytes()),
        }
    }

    /// Creates a collection.
    pub fn create_collection(&self, name: &str, settings: &CollectionSettings) -> Result<()> {
        // The name first: it becomes a folder name below, and a path must never be built
        // from an unchecked one (`..` once removed the whole data directory).
        crate::store::validate_name(name)?;
        settings.hnsw.validate()?;
        if let Some(r) = &self.remote {
            return r.create_collection(name, settings);
        }
        // Index files left by a collection of that name whose drop stopped midway (or that a
        // checkpoint saved as it was dropped) must not be taken for the new one's.
        if let Err(crate::Error::User(UserError::UnknownCollection { .. })) =
            self.store.settings(name)
        {
            let leftover = self.index_folder(&settings.physical(name))?;
            if leftover.exists() {
                std::fs::remove_dir_all(&leftover).map_err(crate::error::io_err(format!(
                    "removing {}",
                    leftover.display()
                )))?;
            }
        }
        self.store.create_collection(name, settings)
    }

    /// Drops a collection, its documents and its index files.
    pub fn drop_collection(&self, name: &str) -> Result<()> {
        if let Some(r) = &self.remote {
            return r.drop_collection(name);
        }
        let physical = self.store.settings(name)?.physical(name);
        let dir = self.index_folder(&physical)?;
        self.store.drop_collection(name)?;
        self.open.writing().remove(name);
        self.load_failures.locked().remove(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .map_err(crate::error::io_err(format!("removing {}", dir.display())))?;
        }
        Ok(())
    }

    /// Names and settings of all collections.
    pub fn collections(&self) -> Result<Vec<(String, CollectionSettings)>> {
        match &self.remote {
            Some(r) => r.collections(),
            None => self.store.collections(),
        }
    }

    /// A collection's settings, stats and index health.
    pub fn info(&self, name: &str) -> Result<CollectionInfo> {
        if let Some(r) = &self.remote {
            return remote_info(r, name);
        }
        let ix = self.indexes(name)?;
        let index = {
            let (cosine, w2) = (ix.cosine.reading(), ix.w2.reading());
            IndexInfo {
                cosine_points: cosine.points(),
                w2_points: w2.points(),
                tombstones: cosine.tombstones(),
                w2_tombstones: w2.tombstones(),
                lexical_documents: ix.lexical.len(),
                opened: Some(ix.opened),
            }
        };
        let search_defaults = cached_defaults(self, name, &ix)?.map(|d| SearchDefaultsInfo {
            stale: d.is_stale(&ix.settings.model.fingerprint),
            defaults: (*d).clone(),
        });
        let context_vectors = self
            .context_vectors_stamp(name)?
            .map(|stamp| ContextVectorsInfo {
                stale: stamp.model != ix.settings.model.fingerprint,
                stamp,
            });
        Ok(CollectionInfo {
            name: name.into(),
            settings: ix.settings.clone(),
            format_version: self.store.format_version(),
            stats: self.store.stats(name)?,
            index,
            search_defaults,
            context_vectors,
        })
    }

    /// Stores `defaults` as collection `name`'s search defaults, replacing any (`None` clears
    /// them); searches use them from now on where a request does not say. Refused, naming the
    /// field, when they do not validate ([`SearchDefaults::validate`]) or were chosen for
    /// another model than the collection's (choose them again after a reindex). A later
    /// reindex keeps them, stale: reported by [`Database::info`], not applied.
    pub fn set_search_defaults(&self, name: &str, defaults: Option<SearchDefaults>) -> Result<()> {
        if let Some(r) = &self.remote {
            let settings = r.require(name)?;
            check_defaults(name, &settings, defaults.as_ref())?;
            let key = remote::meta_key(name, SEARCH_DEFAULTS_KEY);
            return match &defaults {
                Some(d) => r.set_meta(&key, &serde_json::to_string(d).expect("serialises")),
                None => r.remove_meta(&key).map(|_| ()),
            };
        }
        let ix = self.indexes(name)?;
        check_defaults(name, &ix.settings, defaults.as_ref())?;
        if defaults
            .as_ref()
            .is_some_and(|d| d.rerank == Rerank::Context)
            && !self.has_context_vectors(name, &ix.settings.model.fingerprint)?
        {
            return Err(UserError::InvalidArgument {
                name: "rerank",
                reason: format!(
                    "context: collection {name:?} has no context vectors made with its model, so \
                     every search would be refused; `kindred tune --collection {name}` makes them \
                     (and may choose rerank context itself)"
                ),
            }
            .into());
        }
        // Store and cache change under the cache's lock, so concurrent setters leave them
        // agreeing. Indexes a reindex switched to meanwhile read the store on first use.
        let mut cached = ix.search_defaults.locked();
        match &defaults {
            Some(d) => {
                let bytes = serde_json::to_vec(d).expect("search defaults serialise");
                self.store.set_meta(name, SEARCH_DEFAULTS_KEY, &bytes)?;
            }
            None => {
                self.store.remove_meta(name, SEARCH_DEFAULTS_KEY)?;
            }
        }
        *cached = Some(defaults.map(Arc::new));
        Ok(())
    }

    /// Collection `name`'s search defaults as stored, stale or not (None: it has none).
    pub fn search_defaults(&self, name: &str) -> Result<Option<SearchDefaults>> {
        if let Some(r) = &self.remote {
            r.require(name)?;
            return Ok(remote_defaults(r, name)?.map(|d| (*d).clone()));
        }
        let ix = self.indexes(name)?;
        Ok(cached_defaults(self, name, &ix)?.map(|d| (*d).clone()))
    }

    /// Stores context vectors for collection `name` (the unit vectors
    /// [`crate::score::context`] compares a query with, by internal id), made with `model`,
    /// which must be the collection's. With `replace` they are the collection's whole set:
    /// those stored before are removed, and the set is stamped as `model`'s only once it is
    /// complete (a crash in between leaves no stamp, so no half set is used). Without, they
    /// are added to the set already stamped (a new document's). Derived data: documents and
    /// indexes are untouched. The embedded backend only.
    pub fn set_context_vectors(
        &self,
        name: &str,
        model: &ModelIdentity,
        vectors: &[(u64, Vec<f32>)],
        replace: bool,
    ) -> Result<()> {
        self.embedded_only("context vectors (rerank: context)", CONTEXT_ON_MILVUS)?;
        self.check_model(name, model)?;
        let encoded: Vec<(u64, Vec<u8>)> = vectors
            .iter()
            .map(|(id, v)| (*id, crate::score::context::encode_vector(v)))
            .collect();
        if !replace {
            return self.store.put_context_vectors(name, &encoded, false);
        }
        self.store.remove_meta(name, CONTEXT_VECTORS_KEY)?;
        self.store.put_context_vectors(name, &encoded, true)?;
        let stamp = ContextVectorsStamp {
            model: model.fingerprint.clone(),
            documents: vectors.len() as u64,
        };
        let bytes = serde_json::to_vec(&stamp).expect("stamp serialises");
        self.store.set_meta(name, CONTEXT_VECTORS_KEY, &bytes)
    }

    /// What collection `name`'s context vectors were made with (None: it has none, or is on
    /// the Milvus backend). A stamp of another model than the collection's (a reindex since)
    /// is stale: searches do not use those vectors.
    pub fn context_vectors_stamp(&self, name: &str) -> Result<Option<ContextVectorsStamp>> {
        if self.remote.is_some() {
            return Ok(None);
        }
        Ok(self
            .store
            .meta(name, CONTEXT_VECTORS_KEY)?
            .and_then(|b| serde_json::from_slice(&b).ok()))
    }

    /// Whether collection `name` has a set of context vectors made with the model of
    /// fingerprint `model` (the one searches and new documents use; false on Milvus).
    pub fn has_context_vectors(&self, name: &str, model: &str) -> Result<bool> {
        Ok(self
            .context_vectors_stamp(name)?
            .is_some_and(|s| s.model == model))
    }

    /// Upserts documents encoded by `model`: all of them, or (on any error) none. The model
    /// must be the collection's (checked before and again under the writer lock, since a
    /// reindex may switch it meanwhile).
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
        let records: Vec<StoredDoc> = docs
            .iter()
            .map(|(d, e)| {
                let metadata = match &d.metadata {
                    serde_json::Value::Null => "{}".to_string(),
                    m => m.to_string(),
                };
                StoredDoc::new(d.id.clone(), 0, d.text.clone(), metadata, e)
                    .with_context(d.stored_context())
            })
            .collect();
        if let Some(r) = &self.remote {
            return r.upsert(name, records);
        }
        self.with_writer(name, |ix| {
            check_model(name, &ix.settings, model)?;
            let out = self.store.upsert(name, records)?;
            let removed: Vec<u64> = out.iter().filter_map(|u| u.replaced).collect();
            let added: Vec<Entry<'_>> = docs
                .iter()
                .zip(&out)
                .map(|((d, e), up)| Entry {
                    internal: up.internal,
                    text: &d.text,
                    sentence: &e.sentence,
                    intent: &e.intent,
                    metadata: match &d.metadata {
                        serde_json::Value::Object(m) => m.clone(),
                        _ => Default::default(),
                    },
                })
                .collect();
            ix.apply(&removed, &added)?;
            Ok(out)
        })
    }

    /// The collection's current indexes with their writer lock held, for `f`. A writer that
    /// waited while a reindex switched generations starts over with the new indexes.
    fn with_writer<T>(&self, name: &str, f: impl FnOnce(&Arc<Indexes>) -> Result<T>) -> Result<T> {
        loop {
            let ix = self.indexes(name)?;
            let _writer = ix.writer.locked();
            if !ix.is_retired() {
                return f(&ix);
            }
        }
    }

    /// Deletes a document; true if it existed.
    #[tracing::instrument(level = "debug", skip(self))]
    pub fn delete(&self, name: &str, id: &str) -> Result<bool> {
        if let Some(r) = &self.remote {
            r.require(name)?;
            return Ok(r.delete(name, id)?.is_some());
        }
        self.with_writer(name, |ix| {
            let Some(internal) = self.store.delete(name, id)? else {
                return Ok(false);
            };
            ix.apply(&[internal], &[])?;
            Ok(true)
        })
    }

    /// A stored document by external id.
    pub fn get(&self, name: &str, id: &str) -> Result<Option<StoredDoc>> {
        match &self.remote {
            Some(r) => {
                r.require(name)?;
                r.get(name, id)
            }
            None => self.store.get(name, id),
        }
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
        match &self.remote {
            Some(r) => {
                r.require(name)?;
                Ok(Box::new(r.iter(name)))
            }
            None => Ok(Box::new(self.store.iter(name)?)),
        }
    }

    /// Stores `calibrator` as the collection's own; searches use it from now on.
    pub fn set_calibrator(&self, name: &str, calibrator: &Calibrator) -> Result<()> {
        if let Some(r) = &self.remote {
            r.require(name)?;
            let json = serde_json::to_string(calibrator).expect("calibrator serialises");
            return r.set_meta(&remote::meta_key(name, CALIBRATION_KEY), &json);
        }
        let bytes = serde_json::to_vec(calibrator).expect("calibrator serialises");
        self.store.set_meta(name, CALIBRATION_KEY, &bytes)?;
        *self.indexes(name)?.calibrator.locked() = Some(Arc::new(calibrator.clone()));
        Ok(())
    }

    /// A read handle on collection `name`: its settings and indexes as of now, taken once per
    /// request so no step of a search looks the collection up again.
    pub fn view(&self, name: &str) -> Result<View<'_>> {
        let source = match &self.remote {
            Some(r) => Source::Remote(Box::new(RemoteView {
                settings: r.require(name)?,
                layout: r.layout(name)?,
                lexical: r.lexical(name)?,
                remote: r.clone(),
                loaded: Mutex::new(HashMap::new()),
            })),
            None => Source::Local(self.indexes(name)?),
        };
        Ok(View {
            db: self,
            name: name.to_string(),
            source,
        })
    }

    /// Reopens the store after sled met an I/O error (a full disk: sled then fails every
    /// write until reopened), once the disk has room again, so writes resume without a
    /// restart. Returns whether it reopened. With flush durability the indexes stay: they only
    /// ever took writes sled had flushed. With relaxed durability sled may have lost writes it
    /// acknowledged from memory, so every open collection's indexes load again from the store.
    pub fn recover_store(&self) -> Result<bool> {
        if self.remote.is_some() || !crate::error::storage_engine_io_failed() {
            return Ok(false);
        }
        // Never on a store whose files are gone: sled would make an empty store in their
        // place (a restart, after a restore, is the way out; `/readyz` says so).
        if self.store.free_below(0).is_some() || !self.store.files_present() {
            return Ok(false);
        }
        self.store.reopen(std::time::Duration::from_secs(5))?;
        if self.store.durability() == Durability::Relaxed {
            let slots: Vec<Slot> = self.open.reading().values().cloned().collect();
            for slot in slots {
                let Some(ix) = slot.locked().clone() else {
                    continue;
                };
                // The writer lock before the slot's, as a reindex takes them.
                let _writer = ix.writer.locked();
                ix.retired.store(true, std::sync::atomic::Ordering::Release);
                let mut current = slot.locked();
                if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &ix)) {
                    *current = None;
                }
            }
        }
        Ok(true)
    }

    /// Saves the vector indexes of every open collection that changed since they were last
    /// saved, with the checkpoint (store seq) they reflect. Returns how many were saved.
    #[tracing::instrument(level = "debug", skip(self))]
    pub fn checkpoint(&self) -> Result<usize> {
        let open: Vec<(String, Arc<Indexes>)> = {
            let slots: Vec<(String, Slot)> = self
                .open
                .reading()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            slots
                .into_iter()
                .filter_map(|(k, slot)| slot.locked().clone().map(|ix| (k, ix)))
                .collect()
        };
        // One collection's failure (a full disk, a bad folder) must not keep the others
        // from being saved: each is tried, the first error is returned after all of them.
        let mut saved = 0;
        let mut first_error = None;
        for (name, ix) in open {
            match self.checkpoint_one(&name, &ix) {
                Ok(true) => saved += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(collection = %name, error = %e, "saving the indexes failed; they are rebuilt from the store if the process stops before a later save");
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(saved),
        }
    }

    /// Saves one collection's graphs unless they are saved at the store's current position or
    /// fewer than 1% of their points changed since they were (the next open catches such
    /// files up); true when it wrote them.
    fn checkpoint_one(&self, name: &str, ix: &Indexes) -> Result<bool> {
        let _writer = ix.writer.locked();
        let seq = match self.store.seq(name) {
            Ok(seq) => seq,
            // Dropped since we listed it.
            Err(crate::Error::User(UserError::UnknownCollection { .. })) => return Ok(false),
            Err(e) => return Err(e),
        };
        let saved_seq = *ix.saved_seq.locked();
        let text_saved = ix.text_saved.load(Ordering::Acquire);
        if (saved_seq == Some(seq) && text_saved) || ix.is_retired() {
            return Ok(false);
        }
        // Saved files are caught up with the store at the next open: rewriting both whole
        // graphs (about 25 s at a million documents) for a few changes costs more than redoing
        // them then. Text indexes without a file get one whatever the graphs' state.
        let points = ix.cosine.reading().points() as u64;
        let unsaved = ix.unsaved.load(Ordering::Relaxed) as u64;
        let graphs = saved_seq != Some(seq)
            && (saved_seq.is_none() || unsaved.saturating_mul(100) >= points);
        if !graphs && text_saved {
            tracing::debug!(
                collection = name,
                unsaved,
                points,
                "checkpoint skipped: fewer than 1% of the points changed since the save"
            );
            return Ok(false);
        }
        // Index files share the store's disk: a save must not fill it (about 6 KiB per point
        // for both graphs of a 384-d model, a few hundred bytes for the text indexes).
        let per_point = if graphs { 6 << 10 } else { 512 };
        self.store.ensure_room(points.saturating_mul(per_point))?;
        // Never ahead of the store on disk (with relaxed durability the last writes may still
        // be in memory): a store found behind its indexes then always means lost data.
        self.store.flush()?;
        ix.save_files(&self.index_folder(&ix.physical)?, seq, graphs)?;
        Ok(true)
    }

    /// Loads (or rebuilds) every collection's indexes now rather than on first use (on Milvus:
    /// builds this node's BM25 indexes).
    pub fn warm_up(&self) -> Result<()> {
        if let Some(r) = &self.remote {
            // The vectors are Milvus's to load; this node builds its BM25 indexes.
            for (name, _) in r.collections()? {
                r.lexical(&name)?;
            }
            return Ok(());
        }
        // One collection that cannot load must not keep the others from loading.
        let mut first_error = None;
        for (name, _) in self.collections()? {
            if let Err(e) = self.indexes(&name) {
                tracing::error!(collection = %name, error = %e, "loading the indexes failed");
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Refuses `model` unless it is the model the collection's vectors come from.
    pub fn check_model(&self, name: &str, model: &ModelIdentity) -> Result<()> {
        check_model(name, &self.settings(name)?, model)
    }

    /// The collection's indexes, loading or rebuilding them on first use.
    fn indexes(&self, name: &str) -> Result<Arc<Indexes>> {
        let existing = self.open.reading().get(name).cloned();
        let slot = match existing {
            Some(slot) => slot,
            None => {
                // Unknown collections get no slot.
                self.store.settings(name)?;
                self.open
                    .writing()
                    .entry(name.to_string())
                    .or_default()
                    .clone()
            }
        };
        let mut guard = slot.locked();
        if let Some(ix) = guard.as_ref() {
            return Ok(ix.clone());
        }
        let ix = match self.load_indexes(name) {
            Ok(ix) => Arc::new(ix),
            Err(e) => {
                self.load_failures
                    .locked()
                    .insert(name.to_string(), e.to_string());
                return Err(e);
            }
        };
        self.load_failures.locked().remove(name);
        *guard = Some(ix.clone());
        Ok(ix)
    }

    /// The collections whose indexes failed to load at their last try, with why (`/readyz`
    /// is not ready while there are any: requests on them fail).
    pub fn load_failures(&self) -> Vec<(String, String)> {
        self.load_failures
            .locked()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn load_indexes(&self, name: &str) -> Result<Indexes> {
        let settings = self.store.settings(name)?;
        let seq = self.store.seq(name)?;
        let physical = settings.physical(name);
        let dir = self.index_folder(&physical)?;
        // Indexes are saved only after the store is flushed at their checkpoint, so a store
        // behind them lost writes it had on disk.
        let saved = ["cosine", "w2", "text"]
            .iter()
            .filter_map(|b| files::saved_seq(&dir, b))
            .max();
        if let Some(saved) = saved.filter(|&saved| saved > seq) {
            return Err(UserError::IncompatibleStore {
                path: self.store.path().to_path_buf(),
                reason: format!(
                    "collection {name:?} is at write {seq} in the store, but its indexes were \
                     saved at write {saved}: the store lost acknowledged writes (it was damaged, \
                     or restored from an older copy without its indexes). Restore the data \
                     directory from a backup; or, to go on with what the store holds, remove {} \
                     (its indexes are rebuilt from the store)",
                    dir.display()
                ),
            }
            .into());
        }
        let (d, k, p) = (
            settings.model.dim,
            settings.model.intent_dim(),
            settings.hnsw,
        );
        let loaded = (
            VectorIndex::load(&dir, "cosine", Metric::Cosine, d, p, seq),
            VectorIndex::load(&dir, "w2", Metric::L2, 2 * k, p, seq),
        );
        let caught_up = match loaded {
            (Some(cosine), Some(w2)) => match text::load(&dir, seq) {
                Some(text) => self.catch_up_from_ids((name, seq), [cosine, w2], text)?,
                None => self.catch_up((name, seq), [cosine, w2])?,
            },
            _ => None,
        };
        let (graphs, text, opened) = match caught_up {
            Some(done) => done,
            None => {
                tracing::info!(collection = name, seq, "rebuilding indexes from the store");
                self.rebuild(name, &settings)?
            }
        };
        Ok(Indexes::new(
            settings,
            physical,
            (graphs.0, graphs.1, text.0, text.1),
            opened,
        ))
    }

    /// Catches graphs and text indexes read from their files (each with the store checkpoint
    /// it was saved at) up with collection `name`'s documents without reading every record.
    /// The store's internal ids (its small `ids` tree) say which documents an index lacks
    /// (written after its save: their records are read and added) and which it holds that
    /// the store no longer has (replaced or deleted since: removed). Internal ids are never
    /// reused, so a held id is the store's document of that id. That is checked on
    /// [`SAMPLE_CHECKS`] documents spread over the collection (each index must hold exactly
    /// its record's vectors, terms and metadata values), and for every stored id, that no
    /// graph removed its point. None when a check fails: the files are of another history of
    /// the collection, and the caller rebuilds.
    fn catch_up_from_ids(
        &self,
        (name, seq): (&str, u64),
        [(cosine, saved_c), (w2, saved_w)]: [(VectorIndex, u64); 2],
        (lexical, metadata, saved_t): (LexicalIndex, MetadataIndex, u64),
    ) -> Result<Option<Loaded>> {
        let live: Vec<u64> = self.store.live_ids(name)?.into_iter().collect();
        let (mut lacking, mut held, mut foreign) = (Vec::new(), Vec::new(), 0usize);
        for &id in &live {
            let (c, w) = (cosine.status(id), w2.status(id));
            foreign += usize::from(c == Some(false) || w == Some(false));
            if c.is_none() || w.is_none() || !lexical.contains(id) {
                lacking.push(id);
            } else {
                held.push(id);
            }
        }
        let step = held.len().div_ceil(SAMPLE_CHECKS).max(1);
        let sample: Vec<u64> = held.iter().step_by(step).copied().collect();
        let total = (sample.len() + lacking.len()) as u64;
        let report = |done: usize| {
            if let Some(p) = &self.progress {
                p("reading store (indexes saved earlier)", done as u64, total);
            }
        };
        for (n, &id) in sample.iter().enumerate() {
            if foreign > 0 {
                break;
            }
            if n % 256 == 0 {
                report(n);
            }
            let same = self.store.get_internal(name, id)?.is_some_and(|doc| {
                cosine.holds(id, &doc.sentence) == Some(true)
                    && w2.holds(id, &embed(&doc.intent())) == Some(true)
                    && lexical.holds(id, &doc.text)
                    && metadata.holds(id, &doc.metadata())
            });
            foreign += usize::from(!same);
        }
        if foreign > 0 {
            tracing::warn!(collection = name, "index files disagree with the store (another history of the collection); rebuilding them from the store");
            hnsw::note_refused_file();
            return Ok(None);
        }
        let (mut missing_c, mut missing_w, mut text_added) = (Vec::new(), Vec::new(), 0usize);
        for (n, &id) in lacking.iter().enumerate() {
            if n % 256 == 0 {
                report(sample.len() + n);
            }
            let doc = self.store.get_internal(name, id)?.ok_or_else(|| {
                InternalError::Store(format!(
                    "collection {name:?}: internal id {id} is listed but has no record"
                ))
            })?;
            if cosine.status(id).is_none() {
                missing_c.push((id, doc.sentence.clone()));
            }
            if w2.status(id).is_none() {
                missing_w.push((id, embed(&doc.intent())));
            }
            if !lexical.contains(id) {
                lexical.upsert(id, &doc.text);
                metadata.upsert(id, &doc.metadata());
                text_added += 1;
            }
        }
        report(sample.len() + lacking.len());
        let (inserted_c, removed_c) = indexes::catch_up_with_store(&cosine, &live, &missing_c)?;
        let (inserted_w, removed_w) = indexes::catch_up_with_store(&w2, &live, &missing_w)?;
        let mut text_removed = 0usize;
        for id in lexical.ids() {
            if live.binary_search(&id).is_err() {
                lexical.remove(id);
                metadata.remove(id);
                text_removed += 1;
            }
        }
        let opened = OpenedFrom {
            saved_seq: Some(saved_c.min(saved_w)),
            inserted: inserted_c.max(inserted_w).max(text_added),
            removed: removed_c.max(removed_w).max(text_removed),
            text_saved_seq: Some(saved_t),
            records_read: total,
        };
        tracing::info!(
            collection = name,
            seq,
            saved = opened.saved_seq,
            inserted = opened.inserted,
            removed = opened.removed,
            records_read = opened.records_read,
            "indexes loaded and caught up with the store"
        );
        Ok(Some(((cosine, w2), (lexical, metadata), opened)))
    }

    /// Catches graphs read from their files (cosine, W2; each with the store checkpoint it was
    /// saved at) up with collection `name`'s documents, in one store pass that also fills the
    /// text indexes: adds the documents written after the save, tombstones those replaced or
    /// deleted since. None when a saved point holds other vectors than the stored document of
    /// its internal id, or was removed while the store has that id (files not of this
    /// collection's history: the caller rebuilds).
    fn catch_up(
        &self,
        (name, seq): (&str, u64),
        [(cosine, saved_c), (w2, saved_w)]: [(VectorIndex, u64); 2],
    ) -> Result<Option<Loaded>> {
        let (lexical, metadata) = (LexicalIndex::new(), MetadataIndex::new());
        let (mut live, mut missing_c, mut missing_w) = (Vec::new(), Vec::new(), Vec::new());
        let mut foreign = 0usize;
        let total = self.store.count(name)?;
        let report = |done: u64| {
            if let Some(p) = &self.progress {
                p("reading store (indexes saved earlier)", done, total);
            }
        };
        for (n, doc) in self.store.iter(name)?.enumerate() {
            if n % 1024 == 0 {
                report(n as u64);
            }
            let mut doc = doc?;
            lexical.upsert(doc.internal, &doc.text);
            metadata.upsert(doc.internal, &doc.metadata());
            live.push(doc.internal);
            match cosine.holds(doc.internal, &doc.sentence) {
                None => missing_c.push((doc.internal, std::mem::take(&mut doc.sentence))),
                Some(same) => foreign += usize::from(!same),
            }
            let intent = embed(&doc.intent());
            match w2.holds(doc.internal, &intent) {
                None => missing_w.push((doc.internal, intent)),
                Some(same) => foreign += usize::from(!same),
            }
        }
        if foreign > 0 {
            tracing::warn!(collection = name, points = foreign,
                "index files hold other vectors than the store for some documents; rebuilding them from the store");
            hnsw::note_refused_file();
            return Ok(None);
        }
        report(total);
        live.sort_unstable();
        let (inserted, removed) = indexes::catch_up_with_store(&cosine, &live, &missing_c)?;
        let (inserted_w, removed_w) = indexes::catch_up_with_store(&w2, &live, &missing_w)?;
        let saved = saved_c.min(saved_w);
        let opened = OpenedFrom {
            saved_seq: Some(saved),
            inserted: inserted.max(inserted_w),
            removed: removed.max(removed_w),
            text_saved_seq: None,
            records_read: live.len() as u64,
        };
        tracing::info!(
            collection = name,
            seq,
            saved,
            inserted = opened.inserted,
            removed = opened.removed,
            "vector indexes loaded and caught up with the store (text indexes filled from it)"
        );
        Ok(Some(((cosine, w2), (lexical, metadata), opened)))
    }

    /// Every index of collection `name` built from the store.
    fn rebuild(&self, name: &str, settings: &CollectionSettings) -> Result<Loaded> {
        let total = self.store.count(name)?;
        let (lexical, metadata) = (LexicalIndex::new(), MetadataIndex::new());
        let (mut sentences, mut intents) = (Vec::new(), Vec::new());
        for (n, doc) in self.store.iter(name)?.enumerate() {
            let mut doc = doc?;
            lexical.upsert(doc.internal, &doc.text);
            metadata.upsert(doc.internal, &doc.metadata());
            intents.push((doc.internal, embed(&doc.intent())));
            sentences.push((doc.internal, std::mem::take(&mut doc.sentence)));
            if let Some(p) = &self.progress {
                if n % 1024 == 0 {
                    p("reading store", n as u64, total);
                }
            }
        }
        if let Some(p) = &self.progress {
            p("building indexes", 0, total);
        }
        let built = indexes::graphs(settings, &sentences, &intents)?;
        if let Some(p) = &self.progress {
            p("building indexes", total, total);
        }
        let opened = OpenedFrom {
            records_read: sentences.len() as u64,
            ..OpenedFrom::default()
        };
        Ok((built, (lexical, metadata), opened))
    }
}

/// Indexes read from files and caught up with the store: the graphs, the text indexes, and
/// how they were opened.
type Loaded = (
    (VectorIndex, VectorIndex),
    (LexicalIndex, MetadataIndex),
    OpenedFrom,
);

/// Documents whose records an open checks against index files it read without a full pass
/// (spread evenly over the collection): files of another history of the collection hold
/// other vectors under most ids, so a mismatch shows in the first few.
const SAMPLE_CHECKS: usize = 1_000;

/// The store key of a collection's own calibrator.
const CALIBRATION_KEY: &str = "calibration";

/// What to do instead of `rerank: context` on the Milvus backend.
const CONTEXT_ON_MILVUS: &str = "use rerank rcmd, probability or none on this backend";

/// Meta key of a collection's [`ContextVectorsStamp`].
const CONTEXT_VECTORS_KEY: &str = "context_vectors";

/// Which model a collection's stored context vectors were made with, and for how many
/// documents when they were last made as a whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextVectorsStamp {
    /// The model's fingerprint.
    pub model: String,
    /// Documents with a context vector when the set was made (documents written since add
    /// theirs).
    pub documents: u64,
}

/// The collection's search defaults from `ix`'s cache, read from the store on first use. A
/// stored value that does not decode (damaged) is logged and treated as none, so searches go
/// on; setting or clearing the defaults replaces it.
fn cached_defaults(db: &Database, name: &str, ix: &Indexes) -> Result<Option<Arc<SearchDefaults>>> {
    let mut cached = ix.search_defaults.locked();
    if let Some(d) = cached.as_ref() {
        return Ok(d.clone());
    }
    let stored = db.store.meta(name, SEARCH_DEFAULTS_KEY)?;
    let d = match stored.map(|b| serde_json::from_slice::<SearchDefaults>(&b)) {
        Some(Ok(d)) => Some(Arc::new(d)),
        Some(Err(e)) => {
            tracing::warn!(collection = %name, error = %e, "the stored search defaults are damaged; searches use the server's until they are set or cleared again");
            None
        }
        None => None,
    };
    *cached = Some(d.clone());
    Ok(d)
}

/// A read handle on one collection ([`Database::view`]): its settings, its indexes as of when
/// it was taken, and its documents by internal id. First stages answer internal ids, which
/// are what the pipeline carries until it loads each candidate once.
pub struct View<'a> {
    db: &'a Database,
    name: String,
    source: Source,
}

/// Where a view reads from.
enum Source {
    /// The embedded backend: the collection's indexes and the store.
    Local(Arc<Indexes>),
    /// The Milvus backend.
    Remote(Box<RemoteView>),
}

/// How many BM25 candidates [`View::lexical_filtered`] looks at, at most, for one search on a
/// backend that applies filters itself.
pub const LEXICAL_FILTER_DEPTH: usize = 65_536;

/// Which documents a vector stage searches among: given ids (None: all), or those a filter
/// admits.
#[derive(Clone, Copy)]
enum Within<'a> {
    Ids(Option<&'a [u64]>),
    Filter(&'a Filter),
}

/// A view on the Milvus backend: settings and layout read once, this node's BM25 index, and
/// the documents loaded so far (a search loads its candidates in one call,
/// [`View::prefetch`]).
struct RemoteView {
    remote: Arc<remote::Remote>,
    settings: CollectionSettings,
    layout: remote::Layout,
    lexical: Arc<LexicalIndex>,
    loaded: Mutex<HashMap<u64, StoredDoc>>,
}

impl RemoteView {
    /// A search of `vector` in `field` of this view's collection.
    fn query<'w>(
        &self,
        field: remote::VectorField,
        vector: Vec<f32>,
        k: usize,
        within: Within<'w>,
    ) -> remote::VectorQuery<'w> {
        let (filter, among) = match within {
            Within::Ids(ids) => (None, ids),
            Within::Filter(f) => (Some(f), None),
        };
        remote::VectorQuery {
            field,
            vector,
            k,
            ef: self.settings.hnsw.ef_search,
            filter,
            among,
        }
    }
}

impl std::fmt::Debug for View<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View").field("name", &self.name).finish()
    }
}

impl View<'_> {
    /// The collection's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its settings (model, codec, HNSW parameters).
    pub fn settings(&self) -> &CollectionSettings {
        match &self.source {
            Source::Local(ix) => &ix.settings,
            Source::Remote(r) => &r.settings,
        }
    }

    /// The database it is a view of.
    pub fn db(&self) -> &Database {
        self.db
    }

    /// True once a reindex switched the collection to new indexes (take a new view).
    pub fn is_retired(&self) -> bool {
        match &self.source {
            Source::Local(ix) => ix.is_retired(),
            Source::Remote(_) => false,
        }
    }

    /// Whether the backend applies metadata filters inside its vector search
    /// ([`View::cosine_filtered`], [`View::w2_filtered`]) rather than from a list of admitted
    /// ids ([`View::admitted`]): the Milvus backend.
    pub fn pushes_filters(&self) -> bool {
        matches!(self.source, Source::Remote(_))
    }

    /// The k nearest documents by cosine of sentence vectors: (internal id, cosine), best
    /// first; only among `among` (ascending internal ids) when given.
    pub fn cosine(
        &self,
        sentence: &[f32],
        k: usize,
        among: Option<&[u64]>,
    ) -> Result<Vec<(u64, f32)>> {
        self.cosine_within(sentence, k, Within::Ids(among))
    }

    /// [`View::cosine`] among the documents `filter` admits, the backend applying it.
    pub fn cosine_filtered(
        &self,
        sentence: &[f32],
        k: usize,
        filter: &Filter,
    ) -> Result<Vec<(u64, f32)>> {
        self.cosine_within(sentence, k, Within::Filter(filter))
    }

    fn cosine_within(
        &self,
        sentence: &[f32],
        k: usize,
        within: Within<'_>,
    ) -> Result<Vec<(u64, f32)>> {
        self.same_dim("sentence", self.settings().model.dim, sentence.len())?;
        match &self.source {
            Source::Local(ix) => {
                let among = self.local_among(within);
                let hits = ix.cosine.reading().search(sentence, k, among.as_deref());
                Ok(hits.into_iter().map(|(i, d)| (i, 1.0 - d)).collect())
            }
            Source::Remote(r) => {
                let query = r.query(remote::VectorField::Sentence, sentence.to_vec(), k, within);
                r.remote.search(&self.name, query)
            }
        }
    }

    /// The k nearest documents by W2 of intents: (internal id, W2), nearest first; only among
    /// `among` when given.
    pub fn w2(
        &self,
        intent: &Gaussian,
        k: usize,
        among: Option<&[u64]>,
    ) -> Result<Vec<(u64, f32)>> {
        self.w2_within(intent, k, Within::Ids(among))
    }

    /// [`View::w2`] among the documents `filter` admits, the backend applying it.
    pub fn w2_filtered(
        &self,
        intent: &Gaussian,
        k: usize,
        filter: &Filter,
    ) -> Result<Vec<(u64, f32)>> {
        self.w2_within(intent, k, Within::Filter(filter))
    }

    fn w2_within(
        &self,
        intent: &Gaussian,
        k: usize,
        within: Within<'_>,
    ) -> Result<Vec<(u64, f32)>> {
        let dim = self.settings().model.intent_dim();
        self.same_dim("intent", dim, intent.mu.len())?;
        match &self.source {
            Source::Local(ix) => {
                let among = self.local_among(within);
                Ok(ix.w2.reading().search(&embed(intent), k, among.as_deref()))
            }
            Source::Remote(r) => {
                let query = r.query(remote::VectorField::W2, embed(intent), k, within);
                let hits = r.remote.search(&self.name, query)?;
                // Milvus's L2 is squared; the graphs here answer the distance itself.
                Ok(hits
                    .into_iter()
                    .map(|(i, d)| (i, d.max(0.0).sqrt()))
                    .collect())
            }
        }
    }

    /// The embedded graphs' `among` for `within` (a filter becomes its admitted ids).
    fn local_among<'w>(&self, within: Within<'w>) -> Option<std::borrow::Cow<'w, [u64]>> {
        match within {
            Within::Ids(ids) => ids.map(std::borrow::Cow::Borrowed),
            Within::Filter(f) => Some(std::borrow::Cow::Owned(self.admitted(f))),
        }
    }

    /// The k best documents by lexical BM25: (internal id, score), best first; only among
    /// `among` when given. On the Milvus backend's full-text layout Milvus answers it; on the
    /// others, this node's BM25 index.
    pub fn lexical(&self, text: &str, k: usize, among: Option<&[u64]>) -> Result<Vec<(u64, f32)>> {
        if let Source::Remote(r) = &self.source {
            if r.layout == remote::Layout::FullText {
                return r.remote.full_text(&self.name, text, k, None, among);
            }
        }
        let lexical = self.lexical_index();
        Ok(match among {
            Some(ids) => lexical.search_where(text, k, &|id| ids.binary_search(&id).is_ok()),
            None => lexical.search(text, k),
        })
    }

    /// [`View::lexical`] among the documents `filter` admits, on a backend that
    /// [pushes filters](View::pushes_filters) down. On the full-text layout Milvus applies
    /// the filter inside its BM25 search. Otherwise this node's BM25 candidates are taken
    /// deeper and deeper (from 4k, ×4 a round) and the backend says which of them the filter
    /// admits, until k are found, the index has no more documents sharing a term with `text`,
    /// or [`LEXICAL_FILTER_DEPTH`] candidates were looked at. (The embedded backend filters
    /// before it cuts, with its metadata index.)
    pub fn lexical_filtered(
        &self,
        text: &str,
        k: usize,
        filter: &Filter,
    ) -> Result<Vec<(u64, f32)>> {
        let r = match &self.source {
            Source::Local(_) => return self.lexical(text, k, Some(&self.admitted(filter))),
            Source::Remote(r) if r.layout == remote::Layout::FullText => {
                return r.remote.full_text(&self.name, text, k, Some(filter), None)
            }
            Source::Remote(r) => r,
        };
        let lexical = self.lexical_index();
        let mut depth = (4 * k).max(64);
        // Ids already asked about (by id, not position: writes may land between rounds).
        let mut seen = std::collections::HashSet::new();
        let mut admitted = std::collections::HashSet::new();
        loop {
            let hits = lexical.search(text, depth);
            let fresh: Vec<u64> = hits
                .iter()
                .map(|&(id, _)| id)
                .filter(|&id| seen.insert(id))
                .collect();
            admitted.extend(r.remote.admitted_among(&self.name, filter, &fresh)?);
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

    /// The live documents `filter` admits: internal ids, ascending. Empty on a backend that
    /// [pushes filters](View::pushes_filters) down (ask [`View::matching`] for the count).
    pub fn admitted(&self, filter: &Filter) -> Vec<u64> {
        match &self.source {
            Source::Local(ix) => ix.metadata.matching(filter),
            Source::Remote(_) => Vec::new(),
        }
    }

    /// How many live documents `filter` admits.
    pub fn matching(&self, filter: &Filter) -> Result<usize> {
        match &self.source {
            Source::Local(ix) => Ok(ix.metadata.matching(filter).len()),
            Source::Remote(r) => Ok(r.remote.count_where(&self.name, filter)? as usize),
        }
    }

    /// Whether a vector search among `n` admitted documents scores each of them (exact)
    /// rather than searching the graph.
    pub fn scans_exactly(&self, n: usize) -> bool {
        match &self.source {
            Source::Local(_) => n <= crate::index::hnsw::EXACT_SCAN_MAX,
            // Milvus decides for itself; its filtered HNSW search is approximate.
            Source::Remote(_) => false,
        }
    }

    /// TF-IDF cosine of `text` with each of `docs` ((internal id, text)). From the terms the
    /// lexical index holds for each (0 for one not indexed), but on the Milvus backend's
    /// full-text layout, where this node's index is a sample, from each text's terms with the
    /// index's IDF.
    pub fn lexical_similarities(&self, text: &str, docs: &[(u64, &str)]) -> Vec<f32> {
        let index = self.lexical_index();
        match &self.source {
            Source::Remote(r) if r.layout == remote::Layout::FullText => {
                let query = crate::text::terms(text);
                index.with_idf(|idf| {
                    docs.iter()
                        .map(|(_, t)| {
                            crate::score::features::lexical_similarity(
                                &query,
                                &crate::text::terms(t),
                                idf,
                            )
                        })
                        .collect()
                })
            }
            _ => {
                let ids: Vec<u64> = docs.iter().map(|&(id, _)| id).collect();
                index.similarities(text, &ids)
            }
        }
    }

    /// The lexical index (for IDF weights). On the Milvus backend, this node's.
    pub fn lexical_index(&self) -> &LexicalIndex {
        match &self.source {
            Source::Local(ix) => &ix.lexical,
            Source::Remote(r) => &r.lexical,
        }
    }

    /// Loads documents by internal id ahead of [`View::get_internal`], in one call to a
    /// remote backend (nothing to do on the embedded one).
    pub fn prefetch(&self, internals: &[u64]) -> Result<()> {
        if let Source::Remote(r) = &self.source {
            let missing: Vec<u64> = {
                let loaded = r.loaded.locked();
                internals
                    .iter()
                    .copied()
                    .filter(|i| !loaded.contains_key(i))
                    .collect()
            };
            if !missing.is_empty() {
                let got = r.remote.get_many(&self.name, &missing)?;
                r.loaded.locked().extend(got);
            }
        }
        Ok(())
    }

    /// A live document by internal id.
    pub fn get_internal(&self, internal: u64) -> Result<Option<StoredDoc>> {
        match &self.source {
            Source::Local(_) => self.db.store.get_internal(&self.name, internal),
            Source::Remote(r) => {
                if let Some(d) = r.loaded.locked().get(&internal) {
                    return Ok(Some(d.clone()));
                }
                Ok(r.remote
                    .get_many(&self.name, &[internal])?
                    .remove(&internal))
            }
        }
    }

    /// A live document by external id.
    pub fn get(&self, id: &str) -> Result<Option<StoredDoc>> {
        self.db.get(&self.name, id)
    }

    /// The collection's calibrator: its own if fitted (`kindred calibrate --collection`), else
    /// the shipped default; decoded once and kept. A stored calibration that does not decode
    /// (damaged) is logged and replaced by the default, so searches go on; calibrating again
    /// replaces it. On the Milvus backend it is read from the server for each view, so every
    /// node uses the latest.
    pub fn calibrator(&self) -> Result<Arc<Calibrator>> {
        let ix = match &self.source {
            Source::Local(ix) => ix,
            Source::Remote(r) => return Ok(Arc::new(remote_calibrator(&r.remote, &self.name)?)),
        };
        let mut cached = ix.calibrator.locked();
        if let Some(c) = cached.as_ref() {
            return Ok(c.clone());
        }
        let stored = self.db.store.meta(&self.name, CALIBRATION_KEY)?;
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

    /// The context vectors of `internals` that have one, when the collection has a set made
    /// with its current model (None: it has none, or only a stale one).
    pub fn context_vectors(&self, internals: &[u64]) -> Result<Option<HashMap<u64, Vec<f32>>>> {
        self.db
            .embedded_only("rerank: context", CONTEXT_ON_MILVUS)?;
        if !self
            .db
            .has_context_vectors(&self.name, &self.settings().model.fingerprint)?
        {
            return Ok(None);
        }
        let stored = self.db.store.context_vectors(&self.name, internals)?;
        Ok(Some(
            stored
                .into_iter()
                .filter_map(|(id, b)| Some((id, crate::score::context::decode_vector(&b)?)))
                .collect(),
        ))
    }

    /// The collection's search defaults, stale or not (None: it has none); read from the store
    /// once and kept. Whether they apply is the search layer's call (`search::resolve`).
    pub fn search_defaults(&self) -> Result<Option<Arc<SearchDefaults>>> {
        match &self.source {
            Source::Local(ix) => cached_defaults(self.db, &self.name, ix),
            Source::Remote(r) => remote_defaults(&r.remote, &self.name),
        }
    }

    /// Refuses a query `what` vector (sentence or intent) of another dimension than the
    /// indexes' `expected` (a query encoded by the old model just as a reindex switched).
    fn same_dim(&self, what: &str, expected: usize, dim: usize) -> Result<()> {
        if dim == expected {
            return Ok(());
        }
        Err(UserError::ModelMismatch {
            collection: self.name.clone(),
            expected: format!(
                "{} ({expected}-dimensional {what} vectors)",
                self.settings().model.id
            ),
            found: format!("a query {what} vector of {dim} dimensions"),
        }
        .into())
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Err(e) = self.checkpoint() {
            tracing::warn!(error = %e, "could not save the indexes; they will be rebuilt on open");
        }
    }
}

/// Refuses search defaults that do not validate or were chosen for another model than the
/// collection's.
fn check_defaults(
    name: &str,
    settings: &CollectionSettings,
    defaults: Option<&SearchDefaults>,
) -> Result<()> {
    let Some(d) = defaults else { return Ok(()) };
    d.validate()?;
    let model = &settings.model;
    if d.is_stale(&model.fingerprint) {
        return Err(UserError::InvalidArgument {
            name: "model_fingerprint",
            reason: format!(
                "the defaults were chosen for model {}, but collection {name:?}'s vectors come from {} ({}); choose them again with this model",
                d.model_fingerprint, model.id, model.fingerprint
            ),
        }
        .into());
    }
    Ok(())
}

/// Collection `name`'s info on the Milvus backend (index sizes are the server's business:
/// its graphs hold the live documents; the lexical count is this node's BM25 index, 0 until
/// it is built: a stats call does not scan the collection; sizes are extrapolated from a
/// sample, [`remote::Remote::stats`]).
fn remote_info(r: &remote::Remote, name: &str) -> Result<CollectionInfo> {
    let settings = r.require(name)?;
    let documents = r.count(name)?;
    let search_defaults = remote_defaults(r, name)?.map(|d| SearchDefaultsInfo {
        stale: d.is_stale(&settings.model.fingerprint),
        defaults: (*d).clone(),
    });
    Ok(CollectionInfo {
        name: name.into(),
        index: IndexInfo {
            cosine_points: documents as usize,
            w2_points: documents as usize,
            tombstones: 0,
            w2_tombstones: 0,
            lexical_documents: r.lexical_len(name),
            opened: None,
        },
        settings,
        format_version: 0,
        stats: r.stats(name, documents)?,
        search_defaults,
        context_vectors: None,
    })
}

/// Collection `name`'s search defaults from the Milvus backend's shared metadata (damaged:
/// logged and treated as none).
fn remote_defaults(r: &remote::Remote, name: &str) -> Result<Option<Arc<SearchDefaults>>> {
    let stored = r.meta(&remote::meta_key(name, SEARCH_DEFAULTS_KEY))?;
    Ok(
        match stored.map(|s| serde_json::from_str::<SearchDefaults>(&s)) {
            Some(Ok(d)) => Some(Arc::new(d)),
            Some(Err(e)) => {
                tracing::warn!(collection = %name, error = %e, "the stored search defaults are damaged; searches use the server's until they are set or cleared again");
                None
            }
            None => None,
        },
    )
}

/// Collection `name`'s calibrator from the Milvus backend's shared metadata (absent or
/// damaged: the default).
fn remote_calibrator(r: &remote::Remote, name: &str) -> Result<Calibrator> {
    let stored = r.meta(&remote::meta_key(name, CALIBRATION_KEY))?;
    Ok(
        match stored.map(|s| serde_json::from_str::<Calibrator>(&s)) {
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                tracing::warn!(collection = %name, error = %e, "the stored calibration is damaged; using the default until `kindred calibrate` replaces it");
                Calibrator::default_for_minilm()
            }
            None => Calibrator::default_for_minilm(),
        },
    )
}

/// Refuses `model` unless it is the one `settings` says the collection's vectors come from.
fn check_model(name: &str, settings: &CollectionSettings, model: &ModelIdentity) -> Result<()> {
    if settings.model.fingerprint != model.fingerprint
        || settings.model.dim != model.dim
        || settings.model.intent_dim() != model.intent_dim()
    {
        return Err(UserError::ModelMismatch {
            collection: name.into(),
            expected: format!("{} ({})", settings.model.id, settings.model.fingerprint),
            found: format!("{} ({})", model.id, model.fingerprint),
        }
        .into());
    }
    Ok(())
}

/// Refuses vectors the indexes cannot hold: of another size than `model`'s, or not finite.
fn sound_vectors(d: &NewDocument, e: &Encoded, model: &ModelIdentity) -> Result<()> {
    let sizes = e.sentence.len() == model.dim
        && e.intent.mu.len() == model.intent_dim()
        && e.intent.sigma.len() == model.intent_dim();
    let finite = e
        .sentence
        .iter()
        .chain(&e.intent.mu)
        .chain(&e.intent.sigma)
        .all(|x| x.is_finite());
    if sizes && finite {
        return Ok(());
    }
    Err(UserError::InvalidDocument {
        id: d.id.chars().take(40).collect(),
        reason: format!(
            "its vectors are {}; encode it with {} ({}-dimensional)",
            if sizes {
                "not finite"
            } else {
                "of the wrong size"
            },
            model.id,
            model.dim
        ),
    }
    .into())
}

/// Checks a document as an upsert would: id length, non-empty text, object metadata, context
/// within [`MAX_CONTEXT_TEXTS`] and [`MAX_CONTEXT_BYTES`].
pub fn validate(d: &NewDocument) -> Result<()> {
    validate_id(&d.id)?;
    let reject = |reason: &str| -> Result<()> {
        Err(UserError::InvalidDocument {
            id: d.id.chars().take(40).collect(),
            reason: reason.into(),
        }
        .into())
    };
    if d.text.trim().is_empty() {
        return reject("the text is empty; give the question's text");
    }
    if !matches!(
        d.metadata,
        serde_json::Value::Object(_) | serde_json::Value::Null
    ) {
        return reject("metadata must be a JSON object, like {\"source\": \"faq\"}");
    }
    let context = d.context.iter().filter(|c| !c.trim().is_empty());
    let (texts, bytes) = context.fold((0, 0), |(n, b), c| (n + 1, b + c.len()));
    if texts > MAX_CONTEXT_TEXTS {
        return reject(&format!(
            "its context has {texts} texts; the limit is {MAX_CONTEXT_TEXTS}: keep the most useful ones or join short ones"
        ));
    }
    if bytes > MAX_CONTEXT_BYTES {
        return reject(&format!(
            "its context is {bytes} bytes; the limit is {MAX_CONTEXT_BYTES} (64 KiB) in all: shorten or drop some of its texts"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Gaussian, Precision, Token};

    fn model() -> ModelIdentity {
        ModelIdentity {
            id: "test".into(),
            fingerprint: "sha256:test".into(),
            dim: 4,
            max_len: 16,
            intent_dim: None,
            precision: Precision::Fp32,
        }
    }

    fn doc(i: usize) -> (NewDocument, Encoded) {
        let mut v = [0.1f32; 4];
        v[i % 4] = 1.0;
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        let v: Vec<f32> = v.iter().map(|x| x / n).collect();
        let text = format!("question {i}");
        let e = Encoded {
            tokens: vec![Token {
                text: "question".into(),
                id: 3160,
                start: 0,
                end: 8,
            }],
            truncated: false,
            token_vectors: v.clone(),
            sentence: v.clone(),
            intent: Gaussian {
                mu: v,
                sigma: vec![0.1; 4],
            },
        };
        let d = NewDocument {
            id: format!("d{i}"),
            text,
            metadata: serde_json::Value::Null,
            context: Vec::new(),
        };
        (d, e)
    }

    /// A panic while a collection's locks are held (a bug) used to poison them: every later
    /// write, search and checkpoint of the collection then failed with a PoisonError panic
    /// until a restart.
    #[test]
    fn a_panic_under_a_collections_locks_does_not_take_the_collection_down() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Database::open(dir.path(), Durability::Flush).expect("open");
        db.create_collection("c", &CollectionSettings::for_model(model()))
            .expect("create");
        db.upsert_encoded("c", &model(), (0..3).map(doc).collect())
            .expect("upsert");
        let ix = db.indexes("c").expect("indexes");
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _writer = ix.writer.lock().expect("fresh lock");
            let _cosine = ix.cosine.write().expect("fresh lock");
            let _calibrator = ix.calibrator.lock().expect("fresh lock");
            panic!("a bug while the collection's locks are held");
        }));
        assert!(ix.writer.is_poisoned() && ix.cosine.is_poisoned());

        db.upsert_encoded("c", &model(), vec![doc(3)])
            .expect("writes go on");
        assert!(db.delete("c", "d0").expect("deletes go on"));
        let view = db.view("c").expect("view");
        let hits = view
            .cosine(&doc(3).1.sentence, 2, None)
            .expect("searches go on");
        assert_eq!(hits.len(), 2);
        assert_eq!(
            db.get("c", "d3").expect("get").map(|d| d.text),
            Some("question 3".into())
        );
        assert_eq!(db.checkpoint().expect("checkpoints go on"), 1);
        assert!(crate::sync::recovered() >= 2);
    }

    fn filled(dir: &Path, n: usize) -> Database {
        let db = Database::open(dir, Durability::Flush).expect("open");
        db.create_collection("c", &CollectionSettings::for_model(model()))
            .expect("create");
        db.upsert_encoded("c", &model(), (0..n).map(doc).collect())
            .expect("upsert");
        db
    }

    /// A reindex onto the same weights is refused where the collection already finds them,
    /// and is how it records their new place when the model directory moved.
    #[test]
    fn the_same_model_at_another_path_is_a_move_not_a_no_op() {
        let mut settings = CollectionSettings::for_model(model());
        let other = ModelIdentity {
            fingerprint: "sha256:other".into(),
            ..model()
        };
        let here = Path::new("/models/adapted");
        assert!(already_uses(&settings, &model(), Some(here)));
        assert!(already_uses(&settings, &model(), None));
        assert!(!already_uses(&settings, &other, Some(here)));
        settings.model_path = Some(here.display().to_string());
        assert!(already_uses(&settings, &model(), Some(here)));
        assert!(!already_uses(
            &settings,
            &model(),
            Some(Path::new("/srv/models/adapted"))
        ));
        assert!(!already_uses(&settings, &other, Some(here)));
    }

    fn refusal(r: Result<impl std::fmt::Debug>) -> String {
        match r {
            Err(e @ crate::Error::User(UserError::IncompatibleStore { .. })) => e.to_string(),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// A store file emptied under its index files used to open as a new, empty store: every
    /// document gone without a word.
    #[test]
    fn a_store_emptied_under_its_indexes_is_refused_until_they_are_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = filled(dir.path(), 3);
        assert_eq!(db.checkpoint().expect("checkpoint"), 1);
        drop(db);
        std::fs::remove_dir_all(dir.path().join("store")).expect("empty the store");
        let e = refusal(Database::open(dir.path(), Durability::Flush));
        assert!(
            e.contains("emptied, replaced or damaged") && e.contains("indexes"),
            "{e}"
        );
        // Still refused at the next try: nothing was changed by the refusal.
        refusal(Database::open(dir.path(), Durability::Flush));
        // The fix the message names.
        std::fs::remove_dir_all(dir.path().join("indexes")).expect("remove the indexes");
        let db = Database::open(dir.path(), Durability::Flush).expect("opens as told");
        assert!(db.collections().expect("collections").is_empty());
    }

    /// A store rolled back under its indexes (a damaged log, or a store-only backup restored)
    /// used to be opened at its old state and its indexes silently rebuilt from it.
    #[test]
    fn a_store_behind_its_indexes_is_refused_until_they_are_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = filled(dir.path(), 1);
        drop(db);
        let old = tempfile::tempdir().expect("tempdir");
        let copy = |from: &Path, to: &Path| {
            for e in std::fs::read_dir(from).expect("read") {
                let e = e.expect("entry");
                if e.path().is_file() {
                    std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
                }
            }
        };
        let store = dir.path().join("store");
        for sub in walk_dirs(&store) {
            let rel = sub.strip_prefix(&store).expect("under");
            std::fs::create_dir_all(old.path().join(rel)).expect("mkdir");
            copy(&sub, &old.path().join(rel));
        }
        let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
        db.upsert_encoded("c", &model(), (1..4).map(doc).collect())
            .expect("upsert");
        assert_eq!(db.checkpoint().expect("checkpoint"), 1);
        drop(db);
        std::fs::remove_dir_all(&store).expect("remove");
        for sub in walk_dirs(old.path()) {
            let rel = sub.strip_prefix(old.path()).expect("under");
            std::fs::create_dir_all(store.join(rel)).expect("mkdir");
            copy(&sub, &store.join(rel));
        }
        let db = Database::open(dir.path(), Durability::Flush).expect("same store: opens");
        let e = refusal(db.view("c").map(|_| ()).and_then(|()| db.warm_up()));
        assert!(
            e.contains("lost acknowledged writes") && e.contains("at write 1"),
            "{e}"
        );
        let e = refusal(db.upsert_encoded("c", &model(), vec![doc(9)]));
        assert!(e.contains("lost acknowledged writes"), "{e}");
        drop(db);
        std::fs::remove_dir_all(dir.path().join("indexes").join("c")).expect("as told");
        let db = Database::open(dir.path(), Durability::Flush).expect("open");
        db.warm_up().expect("rebuilt from the store");
        assert_eq!(db.count("c").expect("count"), 1);
    }

    /// A collection created under the name of one whose index folder outlived its drop
    /// starts with its own indexes, not the old ones (nor a refusal).
    #[test]
    fn a_new_collection_does_not_inherit_a_dropped_ones_index_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = filled(dir.path(), 3);
        db.checkpoint().expect("checkpoint");
        let saved = dir.path().join("indexes").join("c");
        let keep = tempfile::tempdir().expect("tempdir");
        copy_files(&saved, keep.path());
        db.drop_collection("c").expect("drop");
        // As if the drop had stopped before removing the folder.
        copy_files(keep.path(), &saved);
        db.create_collection("c", &CollectionSettings::for_model(model()))
            .expect("create");
        db.upsert_encoded("c", &model(), vec![doc(7)])
            .expect("upsert");
        db.warm_up().expect("loads");
        assert_eq!(db.count("c").expect("count"), 1);
    }

    /// A kill between a reindex's switch and the removal of the old generation's index folder
    /// left that folder for good when it had the plain collection name (generation 0): only
    /// `name@G` folders were swept at open. Found by the fault suite.
    #[test]
    fn an_old_generations_index_folder_left_by_a_kill_is_removed_at_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = filled(dir.path(), 3);
        db.checkpoint().expect("checkpoint");
        let old = dir.path().join("indexes").join("c");
        let keep = tempfile::tempdir().expect("tempdir");
        copy_files(&old, keep.path());
        let other = ModelIdentity {
            fingerprint: "sha256:other".into(),
            ..model()
        };
        let encode = |texts: &[&str]| Ok((0..texts.len()).map(|i| doc(i).1).collect());
        db.reindex("c", &other, &encode, None, &|_, _| {})
            .expect("reindex");
        assert!(!old.exists());
        // As if the kill had come between the switch and the folder's removal.
        copy_files(keep.path(), &old);
        drop(db);
        let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
        assert!(!old.exists(), "the old generation's folder is removed");
        assert!(dir.path().join("indexes").join("c@1").is_dir());
        db.warm_up().expect("loads");
        assert_eq!(db.count("c").expect("count"), 3);
    }

    /// Graph files saved before the last writes (a kill after writes the last checkpoint
    /// missed) used to be thrown away and both graphs rebuilt from every stored document:
    /// minutes at a million documents. They are now read and caught up with the store.
    #[test]
    fn graphs_saved_before_the_last_writes_are_loaded_and_caught_up() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = filled(dir.path(), 20);
        assert_eq!(db.checkpoint().expect("checkpoint"), 1);
        let saved_at = db.store.seq("c").expect("seq");
        let saved = dir.path().join("indexes").join("c");
        let keep = tempfile::tempdir().expect("tempdir");
        copy_files(&saved, keep.path());
        // After the save: five new documents, one replaced, one old and one new deleted.
        db.upsert_encoded("c", &model(), (20..25).map(doc).collect())
            .expect("upsert");
        let (mut replaced, vectors) = doc(9);
        replaced.id = "d3".into();
        db.upsert_encoded("c", &model(), vec![(replaced, vectors)])
            .expect("replace");
        assert!(db.delete("c", "d0").expect("delete"));
        assert!(db.delete("c", "d21").expect("delete"));
        drop(db);
        // As if the process had been killed before its last save.
        std::fs::remove_dir_all(&saved).expect("remove");
        copy_files(keep.path(), &saved);

        let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
        let ix = db.indexes("c").expect("indexes");
        // Inserted: d20, d22..d24 and the new d3; removed: d0 and the old d3 (d21 came and
        // went after the save).
        // The text indexes were read from their file too: the records read are the 5 added
        // and the 18 saved ones checked (all of them: fewer than the sample size).
        let caught_up = OpenedFrom {
            saved_seq: Some(saved_at),
            inserted: 5,
            removed: 2,
            text_saved_seq: Some(saved_at),
            records_read: 23,
        };
        assert_eq!(ix.opened, caught_up);
        assert_indexes_hold_the_store(&db, &ix);
        // The next checkpoint saves them; the next open reads them with nothing to catch up.
        assert_eq!(db.checkpoint().expect("checkpoint"), 1);
        let seq = db.store.seq("c").expect("seq");
        drop((ix, db));
        let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
        let ix = db.indexes("c").expect("indexes");
        let current = OpenedFrom {
            saved_seq: Some(seq),
            inserted: 0,
            removed: 0,
            text_saved_seq: Some(seq),
            records_read: 23,
        };
        assert_eq!(ix.opened, current);
        assert_eq!(db.info("c").expect("info").index.opened, Some(current));
    }

    /// Graph files of another history of the collection (here: its drop and re-creation, with
    /// the old files put back) hold other documents under the same internal ids. When their
    /// checkpoint matched the store's they used to be served as they were.
    #[test]
    fn graph_files_holding_other_vectors_than_the_store_are_rebuilt() {
        // Internal ids 0..3 again, now for other vectors, at the same write number.
        another_history(|_| {}, &[&[5, 6, 7]]);
    }

    /// The same with the saved vectors equal to the store's but one saved point removed while
    /// the store has its id: inserting it again would fail, so the collection would not load.
    #[test]
    fn graph_files_with_a_removed_point_the_store_has_are_rebuilt() {
        let removed = |db: &Database| assert!(db.delete("c", "d1").expect("delete"));
        another_history(removed, &[&[0, 1, 2], &[9]]);
    }

    /// Saves the graphs of 3 documents (after `prepare`), drops and re-creates the collection
    /// with the documents of `again` (one write each), puts the old files back and reopens:
    /// the graphs must be rebuilt from the store.
    fn another_history(prepare: impl FnOnce(&Database), again: &[&[usize]]) {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = filled(dir.path(), 3);
        prepare(&db);
        assert_eq!(db.checkpoint().expect("checkpoint"), 1);
        let saved = dir.path().join("indexes").join("c");
        let keep = tempfile::tempdir().expect("tempdir");
        copy_files(&saved, keep.path());
        db.drop_collection("c").expect("drop");
        db.create_collection("c", &CollectionSettings::for_model(model()))
            .expect("create");
        for docs in again {
            db.upsert_encoded("c", &model(), docs.iter().copied().map(doc).collect())
                .expect("upsert");
        }
        drop(db);
        std::fs::remove_dir_all(&saved).expect("remove");
        copy_files(keep.path(), &saved);
        let refused = hnsw::refused_files();
        let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
        let ix = db.indexes("c").expect("indexes load");
        let stored = db.count("c").expect("count");
        let rebuilt = OpenedFrom {
            records_read: stored,
            ..OpenedFrom::default()
        };
        assert_eq!(ix.opened, rebuilt);
        assert!(hnsw::refused_files() > refused);
        assert_indexes_hold_the_store(&db, &ix);
    }

    /// Opening used to read every stored record to fill the lexical and metadata indexes (85
    /// of the 89 s an open took at a million documents). With their file saved beside the
    /// graphs, an open reads only the records written since the save and a sample.
    #[test]
    fn an_open_with_every_index_file_reads_only_new_records_and_a_sample() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = filled(dir.path(), 3000);
        assert_eq!(db.checkpoint().expect("checkpoint"), 1);
        let saved_at = db.store.seq("c").expect("seq");
        db.upsert_encoded("c", &model(), (3000..3010).map(doc).collect())
            .expect("upsert");
        assert!(db.delete("c", "d7").expect("delete"));
        assert_eq!(db.checkpoint().expect("checkpoint"), 0, "under 1%");
        drop(db);
        let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
        let ix = db.indexes("c").expect("indexes");
        // 2,999 saved documents held, every third checked; the 10 new ones read.
        let opened = OpenedFrom {
            saved_seq: Some(saved_at),
            inserted: 10,
            removed: 1,
            text_saved_seq: Some(saved_at),
            records_read: 1000 + 10,
        };
        assert_eq!(ix.opened, opened);
        assert_indexes_hold_the_store(&db, &ix);
        let hits = ix.lexical.search("question 3005", 1);
        let d3005 = db.get("c", "d3005").expect("get").expect("present");
        assert_eq!(hits[0].0, d3005.internal);
    }

    /// Saves of an older version have no text index file, and a damaged one cannot be read:
    /// the text indexes are then filled from every record, and the next checkpoint writes
    /// their file even when the graphs' files are current.
    #[test]
    fn text_index_files_missing_or_damaged_are_filled_from_the_store() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = filled(dir.path(), 20);
        assert_eq!(db.checkpoint().expect("checkpoint"), 1);
        let seq = db.store.seq("c").expect("seq");
        drop(db);
        let saved = dir.path().join("indexes").join("c");
        let text_files = || {
            std::fs::read_dir(&saved)
                .expect("read")
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("text"))
                })
                .collect::<Vec<_>>()
        };
        for f in text_files() {
            std::fs::remove_file(f).expect("remove");
        }
        let filled_from_store = OpenedFrom {
            saved_seq: Some(seq),
            inserted: 0,
            removed: 0,
            text_saved_seq: None,
            records_read: 20,
        };
        let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
        let ix = db.indexes("c").expect("indexes");
        assert_eq!(ix.opened, filled_from_store);
        assert_indexes_hold_the_store(&db, &ix);
        assert_eq!(
            db.checkpoint().expect("checkpoint"),
            1,
            "the text file is written"
        );
        assert_eq!(db.checkpoint().expect("checkpoint"), 0);
        drop((ix, db));
        let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
        assert_eq!(
            db.indexes("c").expect("indexes").opened.text_saved_seq,
            Some(seq)
        );
        drop(db);
        let file = text_files()
            .into_iter()
            .find(|p| p.extension().is_some_and(|e| e == "index"))
            .expect("a text index file");
        let mut bytes = std::fs::read(&file).expect("read");
        let at = bytes.len() / 2;
        bytes[at] ^= 1;
        std::fs::write(&file, bytes).expect("write");
        let refused = hnsw::refused_files();
        let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
        let ix = db.indexes("c").expect("indexes");
        assert_eq!(ix.opened, filled_from_store);
        assert!(hnsw::refused_files() > refused, "counted as a damaged file");
        assert_indexes_hold_the_store(&db, &ix);
        drop((ix, db));
        // A text save later than the store means the store lost writes, as for the graphs.
        let meta = saved.join("text.meta.json");
        let later = std::fs::read_to_string(&meta)
            .expect("read")
            .replace(&format!("\"seq\":{seq}"), "\"seq\":1000000");
        std::fs::write(&meta, later).expect("write");
        let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
        assert!(refusal(db.indexes("c").map(|_| ())).contains("saved at write 1000000"));
    }

    /// The same with the saved vectors equal to the store's (the test documents' vectors
    /// repeat every 4) but other texts: only the text indexes' check can tell.
    #[test]
    fn text_index_files_holding_other_terms_than_the_store_are_rebuilt() {
        another_history(|_| {}, &[&[4, 5, 6]]);
    }

    /// Every index of collection `c` holds exactly its stored documents' ids, each with its
    /// record's vectors, terms and metadata values.
    fn assert_indexes_hold_the_store(db: &Database, ix: &Indexes) {
        let docs: Vec<StoredDoc> = db
            .store
            .iter("c")
            .expect("iter")
            .collect::<Result<_>>()
            .expect("docs");
        let mut live: Vec<u64> = docs.iter().map(|d| d.internal).collect();
        live.sort_unstable();
        for graph in [&ix.cosine, &ix.w2] {
            let mut ids = graph.reading().ids();
            ids.sort_unstable();
            assert_eq!(ids, live, "the graph holds exactly the stored documents");
        }
        let mut ids = ix.lexical.ids();
        ids.sort_unstable();
        assert_eq!(
            ids, live,
            "the lexical index holds exactly the stored documents"
        );
        for d in &docs {
            let (cosine, w2) = (ix.cosine.reading(), ix.w2.reading());
            assert_eq!(cosine.holds(d.internal, &d.sentence), Some(true));
            assert_eq!(w2.holds(d.internal, &embed(&d.intent())), Some(true));
            assert!(ix.lexical.holds(d.internal, &d.text));
            assert!(ix.metadata.holds(d.internal, &d.metadata()));
        }
    }

    /// A checkpoint used to rewrite both whole graphs for any change (about 25 s at a million
    /// documents, at every `kindred add` of one question): now only once 1% of the points
    /// changed since the save; fewer changes are caught up at the next open.
    #[test]
    fn a_checkpoint_waits_for_one_percent_of_the_points_to_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = filled(dir.path(), 300);
        assert_eq!(
            db.checkpoint().expect("checkpoint"),
            1,
            "new graphs are saved"
        );
        let saved_at = db.store.seq("c").expect("seq");
        db.upsert_encoded("c", &model(), (300..302).map(doc).collect())
            .expect("upsert");
        assert_eq!(db.checkpoint().expect("checkpoint"), 0, "2 of 302 changed");
        drop(db);
        let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
        let ix = db.indexes("c").expect("indexes");
        let opened = OpenedFrom {
            saved_seq: Some(saved_at),
            inserted: 2,
            removed: 0,
            text_saved_seq: Some(saved_at),
            records_read: 302,
        };
        assert_eq!(ix.opened, opened);
        let d301 = db.get("c", "d301").expect("get").expect("present");
        let held = ix.cosine.reading().holds(d301.internal, &d301.sentence);
        assert_eq!(held, Some(true), "caught up");
        assert!(db.delete("c", "d5").expect("delete"));
        assert_eq!(db.checkpoint().expect("checkpoint"), 0, "3 of 302");
        db.upsert_encoded("c", &model(), vec![doc(302)])
            .expect("upsert");
        assert_eq!(db.checkpoint().expect("checkpoint"), 1, "4 of 303");
        assert_eq!(db.checkpoint().expect("checkpoint"), 0, "saved");
    }

    /// Copies the files of folder `from` into folder `to` (made if missing).
    fn copy_files(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).expect("mkdir");
        for e in std::fs::read_dir(from).expect("read").flatten() {
            std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
        }
    }

    fn walk_dirs(dir: &Path) -> Vec<PathBuf> {
        let mut out = vec![dir.to_path_buf()];
        for e in std::fs::read_dir(dir).expect("read").flatten() {
            if e.path().is_dir() {
                out.extend(walk_dirs(&e.path()));
            }
        }
        out
    }
}
