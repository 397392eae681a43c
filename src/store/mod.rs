//! The store: sled on disk, the source of truth every index is rebuilt from.
//!
//! Owns collections (settings, documents, internal ids, the write sequence), the record format
//! and its versioning (`migrate`). Knows nothing of burn, HNSW or HTTP: it stores what the
//! encoder produced and hands it back.
//!
//! Layout (format 1): sled's default tree holds `format_version` (and, within format 4,
//! `store_id`: see [`Store::id`]); tree `collections` maps a name
//! to its settings; per collection `c`, tree `docs/c` maps external id → [`StoredDoc`], `ids/c`
//! maps internal id (u64 BE) → external id, and `state/c` holds `next` (next internal id) and
//! `seq` (bumped by every write: the checkpoint index files are saved against), and `meta/c`
//! holds collection-level values such as a fitted calibration, and `pairs/c` holds labelled
//! question pairs from duplicate review (both added within format 1: older binaries ignore
//! them).
//!
//! Format 2 adds generations: a reindexed collection's `docs`, `ids` and `state` trees (and its
//! index directory) are named by its *physical* name `c@G` ([`CollectionSettings::generation`]),
//! so a new generation can be built beside the serving one and switched to in one write of the
//! settings ([`Store::switch_generation`]). A collection never reindexed keeps the plain name.
//!
//! Format 4 appends each document's context (texts stored with it, never indexed) to its
//! record; opening a store of format 1–3 rewrites its records (`migrate`, migrations/0004).
//! A collection's search defaults ([`SearchDefaults`], issue 23) went into `meta/c` within
//! format 4, beside its calibration: older binaries ignore them.

pub mod compat;
mod defaults;
mod flush;
pub(crate) mod migrate;
pub mod names;
mod record;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};
use sled::transaction::{ConflictableTransactionError, TransactionError, Transactional};

use crate::error::{io_err, Error, InternalError, Result, UserError};
use crate::model::ModelIdentity;
use crate::sync::RwLockExt;

pub use crate::types::HnswParams;
pub use defaults::{
    now_rfc3339, rfc3339_utc, DefaultsSource, SearchDefaults, MAX_EVIDENCE_BYTES, MAX_REASON_BYTES,
    SEARCH_DEFAULTS_KEY,
};
pub use names::{validate_name, MAX_NAME_BYTES};
pub use record::StoredDoc;

/// Longest accepted external id, in bytes.
pub const MAX_ID_BYTES: usize = 512;

/// When a write is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// After sled has flushed it to disk (fsync): survives a crash or power loss. The default.
    #[default]
    Flush,
    /// After it is in sled's memory; sled flushes in the background every 500 ms. Faster
    /// bulk loads; a crash can lose the last half second of acknowledged writes.
    Relaxed,
}

/// A collection's settings, fixed at creation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectionSettings {
    /// The model its vectors come from.
    pub model: ModelIdentity,
    /// Token-vector codec: `int8` (per-vector scale).
    pub codec: String,
    /// Vector index parameters.
    pub hnsw: HnswParams,
    /// The generation its documents live in (set by reindexing; absent: never reindexed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// The model directory the vectors were made with, when a reindex named one: a server
    /// started with another model loads this one for the collection's queries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_path: Option<String>,
}

impl CollectionSettings {
    /// Settings for vectors of `model` with default codec and index parameters.
    pub fn for_model(model: ModelIdentity) -> Self {
        CollectionSettings {
            model,
            codec: "int8".into(),
            hnsw: HnswParams::default(),
            generation: None,
            model_path: None,
        }
    }

    /// The name the collection's document trees and index directory carry: `name` before any
    /// reindex, `name@G` for generation G.
    pub fn physical(&self, name: &str) -> String {
        physical_name(name, self.generation)
    }
}

fn physical_name(name: &str, generation: Option<u64>) -> String {
    match generation {
        None => name.to_string(),
        Some(g) => format!("{name}@{g}"),
    }
}

/// A generation of a collection being built beside the serving one (by a reindex): its own
/// `docs`, `ids` and `state` trees. Documents keep their internal ids, so ids from either
/// generation's vector indexes resolve in both.
pub struct Generation {
    /// The collection.
    pub name: String,
    /// Its number.
    pub number: u64,
    trees: Trees,
    /// The sled handles its trees belong to (a reopened store cannot switch to it).
    handles: Arc<Handles>,
}

impl Generation {
    /// The physical name (`name@number`).
    pub fn physical(&self) -> String {
        physical_name(&self.name, Some(self.number))
    }
}

/// Size statistics of a collection.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CollectionStats {
    /// Documents.
    pub documents: u64,
    /// Content token vectors.
    pub token_vectors: u64,
    /// Bytes of all document records (text, metadata, tokens, vectors).
    pub record_bytes: u64,
    /// Bytes of the compressed token vectors alone.
    pub token_vector_bytes: u64,
    /// record_bytes / documents.
    pub bytes_per_document: f64,
    /// token_vector_bytes / token_vectors.
    pub bytes_per_token_vector: f64,
    /// The write sequence number.
    pub seq: u64,
    /// On the Milvus backend: the byte and token-vector figures are extrapolated to every
    /// document from this many (a uniform sample: the first by hashed internal id). Absent:
    /// counted over every document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled: Option<u64>,
}

/// The result of upserting one document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upserted {
    /// Its new internal id.
    pub internal: u64,
    /// The internal id of the version it replaced, if any.
    pub replaced: Option<u64>,
}

/// The sled store.
pub struct Store {
    /// sled's handles; `None` while [`Store::reopen`] replaces them.
    handles: RwLock<Option<Arc<Handles>>>,
    path: PathBuf,
    durability: Durability,
    /// Writes are refused while the disk has less free (see [`Store::ensure_room`]).
    min_free: std::sync::atomic::AtomicU64,
    id: String,
}

/// sled's handles on the store's files, replaced together when the store is reopened. Each
/// store call takes them once ([`Store::handles`]) and holds them until it returns, so a reopen
/// knows when the old ones are no longer in use (sled's lock on its files goes with the last).
struct Handles {
    db: sled::Db,
    collections: sled::Tree,
    /// Per collection name: its current generation's trees.
    open_trees: RwLock<std::collections::HashMap<String, Trees>>,
    flusher: flush::Flusher,
}

/// Times the store was reopened after an I/O error, in this process.
static REOPENS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many times a store was reopened after an I/O error in this process (a metric).
pub fn reopens() -> u64 {
    REOPENS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Free disk space below which writes are refused by default: 64 MiB.
pub const DEFAULT_MIN_FREE_BYTES: u64 = 64 << 20;

/// A collection's `docs`, `ids` and `state` trees.
type Trees = (sled::Tree, sled::Tree, sled::Tree);

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

const VERSION_KEY: &[u8] = b"format_version";
const ID_KEY: &[u8] = b"store_id";

/// A new store id: the creation time in ns and the process id, in hex (unique enough to tell
/// one store from another on one machine; it is never used as a secret).
fn new_store_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{nanos:x}-{:x}", std::process::id())
}

fn tree_name(kind: &str, collection: &str) -> String {
    format!("{kind}/{collection}")
}

/// Checks an external document id: 1–512 bytes.
pub fn validate_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > MAX_ID_BYTES {
        let shown: String = id.chars().take(40).collect();
        return Err(UserError::InvalidDocument {
            id: shown,
            reason: format!(
                "the id is {} bytes; ids must be 1-{MAX_ID_BYTES} bytes",
                id.len()
            ),
        }
        .into());
    }
    Ok(())
}

thread_local! {
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, catching a panic in it without the default hook printing it (its message is in
/// the error the caller makes of it). Panics elsewhere, and on other threads, print as
/// before.
fn catch_quietly<T>(f: impl FnOnce() -> T + std::panic::UnwindSafe) -> std::thread::Result<T> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(std::cell::Cell::get) {
                previous(info);
            }
        }));
    });
    let was = QUIET.with(|q| q.replace(true));
    let out = std::panic::catch_unwind(f);
    QUIET.with(|q| q.set(was));
    out
}

/// How long an open waits for a store's lock before it says another process holds it.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Opens sled on the store at `path` (refusing damaged files and a store another process
/// holds, with the fix in the message).
fn open_sled(path: &Path) -> Result<sled::Db> {
    let damaged = |detail: &dyn std::fmt::Display| {
        Error::User(UserError::IncompatibleStore {
                path: path.to_path_buf(),
                reason: format!("its files are damaged ({detail}); restore the data directory from a backup (index files are rebuilt from the store, but the store itself cannot be rebuilt)"),
            })
    };
    // sled panics on some damaged files (a log cut in its second half): caught, that is
    // the same refusal as sled's own corruption error, never a crash (and without the
    // panic's message and backtrace on stderr before it).
    let open = || {
        catch_quietly(|| sled::Config::new().path(path).open()).map_err(|panic| {
            let what = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("the storage engine panicked while reading it");
            damaged(&what)
        })
    };
    // sled wraps the failed file lock as ErrorKind::Other with this message.
    let locked = |e: &sled::Error| {
        matches!(e, sled::Error::Io(io)
            if io.kind() == std::io::ErrorKind::WouldBlock
                || io.to_string().contains("could not acquire lock"))
    };
    // A store this process has just dropped can hold its lock a moment longer: sled's
    // background writes finish after the last handle is gone. Wait that out, briefly.
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    let mut opened = open()?;
    while opened.as_ref().is_err_and(locked) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        opened = open()?;
    }
    let db = opened.map_err(|e| match e {
        e if locked(&e) => Error::User(UserError::IncompatibleStore {
            path: path.to_path_buf(),
            reason: "another kindred process has it open; stop it or use another --data directory"
                .into(),
        }),
        // A file shorter than its own records say.
        sled::Error::Io(ref io) if io.kind() == std::io::ErrorKind::UnexpectedEof => damaged(&e),
        sled::Error::Corruption { .. } => damaged(&e),
        other => other.into(),
    })?;
    Ok(db)
}

impl Handles {
    fn new(db: sled::Db) -> Result<Self> {
        let collections = db.open_tree("collections")?;
        Ok(Handles {
            flusher: flush::Flusher::start(db.clone())?,
            db,
            collections,
            open_trees: Default::default(),
        })
    }

    /// Everything written so far, on disk (or an error after [`flush::FLUSH_TIMEOUT`]).
    fn flush(&self) -> Result<()> {
        self.flusher.flush(flush::FLUSH_TIMEOUT)
    }

    fn settings(&self, name: &str) -> Result<CollectionSettings> {
        match self.collections.get(name)? {
            Some(v) => decode_settings(&v),
            None => Err(UserError::UnknownCollection { name: name.into() }.into()),
        }
    }

    /// A collection's trees, opened once and cached (every search resolves its hits here).
    fn trees(&self, name: &str) -> Result<Trees> {
        if let Some(t) = self.open_trees.reading().get(name) {
            return Ok(t.clone());
        }
        let mut cache = self.open_trees.writing();
        // Unknown collections fail here. Read under the cache lock, so a generation switch cannot interleave.
        let physical = self.settings(name)?.physical(name);
        let trees = self.open_physical(&physical)?;
        cache.insert(name.to_string(), trees.clone());
        Ok(trees)
    }

    fn open_physical(&self, physical: &str) -> Result<Trees> {
        Ok((
            self.db.open_tree(tree_name("docs", physical))?,
            self.db.open_tree(tree_name("ids", physical))?,
            self.db.open_tree(tree_name("state", physical))?,
        ))
    }

    fn drop_physical(&self, physical: &str) -> Result<()> {
        for kind in ["docs", "ids", "state"] {
            self.db.drop_tree(tree_name(kind, physical))?;
        }
        Ok(())
    }

    /// A collection-level tree (`meta`, `pairs`, `context`) of a collection that exists.
    fn side_tree(&self, kind: &str, name: &str) -> Result<sled::Tree> {
        self.trees(name)?;
        Ok(self.db.open_tree(tree_name(kind, name))?)
    }
}

impl Store {
    /// Opens (or creates) the store at `path`, checking and migrating its format.
    pub fn open(path: &Path, durability: Durability) -> Result<Self> {
        std::fs::create_dir_all(path).map_err(io_err(format!("creating {}", path.display())))?;
        let db = open_sled(path)?;
        match db.get(VERSION_KEY)? {
            None if db.tree_names().len() <= 1 && db.is_empty() => {
                db.insert(VERSION_KEY, &migrate::FORMAT_VERSION.to_be_bytes())?;
                db.flush()?;
            }
            None => {
                return Err(UserError::IncompatibleStore {
                    path: path.to_path_buf(),
                    reason:
                        "it holds data but no kindred format version; it is not a kindred store"
                            .into(),
                }
                .into())
            }
            Some(v) => {
                let found =
                    u32::from_be_bytes(v.as_ref().try_into().map_err(|_| {
                        InternalError::Corrupt("format_version is not 4 bytes".into())
                    })?);
                if migrate::check_and_migrate(&db, found, path)? > 0 {
                    db.insert(VERSION_KEY, &migrate::FORMAT_VERSION.to_be_bytes())?;
                    db.flush()?;
                }
            }
        }
        let id = match db.get(ID_KEY)? {
            Some(v) => String::from_utf8_lossy(&v).into_owned(),
            None => {
                let id = new_store_id();
                db.insert(ID_KEY, id.as_bytes())?;
                db.flush()?;
                id
            }
        };
        Ok(Store {
            handles: RwLock::new(Some(Arc::new(Handles::new(db)?))),
            path: path.to_path_buf(),
            durability,
            min_free: std::sync::atomic::AtomicU64::new(DEFAULT_MIN_FREE_BYTES),
            id,
        })
    }

    /// sled's handles, for the length of one store call.
    fn handles(&self) -> Result<Arc<Handles>> {
        self.handles.reading().clone().ok_or_else(|| {
            UserError::BackendUnavailable {
                backend: "embedded store".into(),
                reason: "it is being reopened after an I/O error".into(),
            }
            .into()
        })
    }

    /// Reopens sled on the same files. sled fails every write after its first I/O error (a
    /// full disk) until it is reopened; this does that in place, without a restart. Calls
    /// that still hold the old handles get up to `wait` to finish (new ones meanwhile fail
    /// with "being reopened"); what was acknowledged is on disk and stays. Fails, keeping the
    /// old handles, while sled is stuck in a flush (see `flush`); fails without handles when
    /// the files cannot be opened (still locked by a call that outlived `wait`, or damaged):
    /// the store then answers "being reopened" until a later reopen succeeds.
    pub fn reopen(&self, wait: std::time::Duration) -> Result<()> {
        let current = self.handles.reading().clone();
        if let Some(current) = current {
            // sled's files stay locked while its flush thread waits in sled: never open them
            // twice. Until that flush ends, if it ever does, the old handles stay (reads go on;
            // flushes, and so writes, fail at once).
            if !current.flusher.close(wait) {
                return Err(InternalError::Store(
                    "the storage engine is stuck in a flush since an I/O error and cannot be reopened in place; restart the server (acknowledged writes are on disk)".into(),
                )
                .into());
            }
        }
        let old = self.handles.writing().take();
        if let Some(old) = old {
            let deadline = std::time::Instant::now() + wait;
            while Arc::strong_count(&old) > 1 && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            drop(old);
        }
        let db = open_sled(&self.path)?;
        let id = db
            .get(ID_KEY)?
            .map(|v| String::from_utf8_lossy(&v).into_owned());
        if id.as_deref() != Some(self.id.as_str()) {
            return Err(UserError::IncompatibleStore {
                path: self.path.clone(),
                reason: format!(
                    "it was replaced while the server ran (store {:?}, expected {}); restart the server",
                    id, self.id
                ),
            }
            .into());
        }
        *self.handles.writing() = Some(Arc::new(Handles::new(db)?));
        crate::error::storage_engine_reopened();
        REOPENS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!(path = %self.path.display(), "the store was reopened after an I/O error");
        Ok(())
    }

    /// Whether sled's files are still where the store was opened (a data directory removed
    /// under a running server is not).
    pub fn files_present(&self) -> bool {
        self.path.join("conf").is_file() && self.path.join("db").is_file()
    }

    /// Why the store refuses writes after an I/O error that is not a full disk, and what to
    /// do (no server paths: clients see it).
    pub fn failure(&self) -> String {
        if self.files_present() {
            "the store met an I/O error that is not a full disk and refuses writes: restart the server (acknowledged writes are on disk); the server log has the error".into()
        } else {
            "the store's files were removed or moved while the server ran, so it cannot take writes: nothing of this write was stored; restore the data directory from a backup and restart the server".into()
        }
    }

    /// This store's identity, made the first time it is opened (by a kindred that records
    /// one). Files kept beside the store (the index files) record it, so a store that was
    /// emptied or swapped under them is noticed instead of silently starting over.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Refuse writes while the disk holding the store has fewer than `bytes` free.
    pub fn set_min_free_bytes(&self, bytes: u64) {
        self.min_free
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// Refuses a write of about `incoming` bytes (an I/O error of kind `StorageFull`, which
    /// the API answers 507) when it would leave less than the configured free space, or while
    /// sled is failed after a full disk; and ([`InternalError::StoreFailed`], 503) while sled
    /// is failed after another I/O error, or once the store's files are gone. sled fails every write after its first I/O error
    /// until it is reopened ([`Store::reopen`]), so kindred keeps it off a full disk: reads go
    /// on, and writes resume by themselves once space is freed.
    pub fn ensure_room(&self, incoming: u64) -> Result<()> {
        let full = |reason: String| -> Result<()> {
            Err(crate::InternalError::io(
                format!("writing to the store in {}", self.path.display()),
                std::io::Error::new(std::io::ErrorKind::StorageFull, reason),
            )
            .into())
        };
        // sled writes on into files removed under it (the data directory deleted while the
        // server runs): such writes would be acknowledged and lost. Two stats a batch say so.
        if !self.files_present() {
            crate::error::storage_engine_io_error(false);
            return Err(InternalError::StoreFailed(self.failure()).into());
        }
        if crate::error::storage_engine_io_failed() {
            if !crate::error::storage_engine_disk_full() {
                return Err(InternalError::StoreFailed(self.failure()).into());
            }
            return full("the store met a full disk and refuses writes until it is reopened, which the server does within a second of the disk having room again: free space and retry".into());
        }
        match self.free_below(incoming) {
            None => Ok(()),
            Some(free) => full(format!(
                "{} MiB free on its disk; kindred refuses writes below {} MiB (min_free_disk_bytes) so that reads never stop: free space and retry",
                free >> 20,
                self.min_free.load(std::sync::atomic::Ordering::Relaxed) >> 20
            )),
        }
    }

    /// The bytes free on the store's disk when a write of about `incoming` bytes would leave
    /// less than the configured free space (`None`: there is room, or the space is unknown).
    pub fn free_below(&self, incoming: u64) -> Option<u64> {
        let free = free_bytes(&self.path)?;
        let min = self.min_free.load(std::sync::atomic::Ordering::Relaxed);
        // sled writes a record to its log and later to its pages: count it twice.
        (free < min.saturating_add(incoming.saturating_mul(2))).then_some(free)
    }

    /// When writes are acknowledged.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The store directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The format version on disk.
    pub fn format_version(&self) -> u32 {
        migrate::FORMAT_VERSION
    }

    fn durable(&self, h: &Handles) -> Result<()> {
        if self.durability == Durability::Flush {
            h.flush()?;
        }
        Ok(())
    }

    /// A collection's trees.
    fn trees(&self, name: &str) -> Result<Trees> {
        self.handles()?.trees(name)
    }

    /// The physical names of every collection's current generation.
    pub fn physical_names(&self) -> Result<std::collections::HashSet<String>> {
        Ok(self
            .collections()?
            .into_iter()
            .map(|(name, s)| s.physical(&name))
            .collect())
    }

    /// Drops the document trees of generations no collection points at: a reindex that
    /// stopped before switching (crash, error), or the old generation of one that crashed
    /// between switching and cleaning up. Call when no reindex runs. Returns how many went.
    pub fn drop_orphan_generations(&self) -> Result<usize> {
        let current = self.physical_names()?;
        let h = self.handles()?;
        let mut orphans = std::collections::BTreeSet::new();
        for raw in h.db.tree_names() {
            let tree = String::from_utf8_lossy(&raw).into_owned();
            let Some((kind, physical)) = tree.split_once('/') else {
                continue;
            };
            if ["docs", "ids", "state"].contains(&kind)
                && physical.contains('@')
                && !current.contains(physical)
            {
                orphans.insert(physical.to_string());
            }
        }
        for physical in &orphans {
            tracing::info!(
                generation = physical,
                "dropping an unfinished or replaced generation"
            );
            h.drop_physical(physical)?;
        }
        Ok(orphans.len())
    }

    /// Starts the next generation of `name`: empty trees (left over ones of that number are
    /// dropped first).
    pub fn new_generation(&self, name: &str) -> Result<Generation> {
        self.ensure_room(4096)?;
        let h = self.handles()?;
        let number = h.settings(name)?.generation.unwrap_or(0) + 1;
        let physical = physical_name(name, Some(number));
        h.drop_physical(&physical)?;
        Ok(Generation {
            name: name.to_string(),
            number,
            trees: h.open_physical(&physical)?,
            handles: h,
        })
    }

    /// Writes documents into a generation being built, each under the internal id it carries
    /// (replacing a version of the same external id). Returns the internal ids of the
    /// versions replaced.
    pub fn generation_put(&self, generation: &Generation, docs: &[StoredDoc]) -> Result<Vec<u64>> {
        self.ensure_room(docs.iter().map(StoredDoc::approx_bytes).sum())?;
        let (docs_t, ids_t, _) = &generation.trees;
        let result = (docs_t, ids_t).transaction(|(dt, it)| {
            let mut replaced = Vec::new();
            for doc in docs {
                if let Some(old) = dt.insert(doc.id.as_bytes(), doc.to_bytes())? {
                    let old =
                        StoredDoc::from_bytes(&old).map_err(ConflictableTransactionError::Abort)?;
                    if old.internal != doc.internal {
                        it.remove(&old.internal.to_be_bytes())?;
                        replaced.push(old.internal);
                    }
                }
                it.insert(&doc.internal.to_be_bytes(), doc.id.as_bytes())?;
            }
            Ok(replaced)
        });
        unwrap_tx(result)
    }

    /// Removes the document with internal id `internal` from a generation being built;
    /// returns its external id if it was there.
    pub fn generation_remove(
        &self,
        generation: &Generation,
        internal: u64,
    ) -> Result<Option<String>> {
        let (docs_t, ids_t, _) = &generation.trees;
        let result = (docs_t, ids_t).transaction(|(dt, it)| {
            let Some(id) = it.remove(&internal.to_be_bytes())? else {
                return Ok(None);
            };
            if let Some(doc) = dt.get(&id)? {
                let doc =
                    StoredDoc::from_bytes(&doc).map_err(ConflictableTransactionError::Abort)?;
                if doc.internal == internal {
                    dt.remove(&id)?;
                }
            }
            Ok(Some(String::from_utf8_lossy(&id).into_owned()))
        });
        unwrap_tx(result)
    }

    /// The internal ids of the live documents of the collection's current generation.
    pub fn live_ids(&self, name: &str) -> Result<std::collections::BTreeSet<u64>> {
        internal_ids(&self.trees(name)?.1)
    }

    /// The internal ids of the documents of a generation being built.
    pub fn generation_ids(
        &self,
        generation: &Generation,
    ) -> Result<std::collections::BTreeSet<u64>> {
        internal_ids(&generation.trees.1)
    }

    /// Makes `generation` the collection's current one, with `settings` (its model): the
    /// write sequence moves on from the old generation's (so index files of either never
    /// match the other), settings and state change in one transaction, and the old
    /// generation's trees are dropped. The caller holds the collection's writer lock and has
    /// made the generation hold exactly the live documents. Returns the new seq.
    pub fn switch_generation(
        &self,
        generation: Generation,
        mut settings: CollectionSettings,
    ) -> Result<u64> {
        let name = generation.name.clone();
        let h = self.handles()?;
        if !Arc::ptr_eq(&h, &generation.handles) {
            return Err(UserError::BackendUnavailable {
                backend: "embedded store".into(),
                reason: format!(
                    "it was reopened after an I/O error while collection {name:?} was reindexed; run the reindex again"
                ),
            }
            .into());
        }
        let old = h.settings(&name)?;
        let (_, _, old_state) = h.trees(&name)?;
        let next = read_u64(old_state.get(b"next")?);
        let seq = read_u64(old_state.get(b"seq")?) + 1;
        settings.generation = Some(generation.number);
        let bytes = serde_json::to_vec(&settings).expect("settings serialise");
        let mut cache = h.open_trees.writing();
        let (_, _, new_state) = &generation.trees;
        let result = (&h.collections, new_state).transaction(|(ct, st)| {
            st.insert(b"next", &next.to_be_bytes())?;
            st.insert(b"seq", &seq.to_be_bytes())?;
            ct.insert(name.as_bytes(), bytes.as_slice())?;
            Ok(())
        });
        unwrap_tx::<()>(result)?;
        h.flush()?;
        cache.insert(name.clone(), generation.trees.clone());
        drop(cache);
        h.drop_physical(&old.physical(&name))?;
        self.durable(&h)?;
        Ok(seq)
    }

    /// Creates a collection.
    pub fn create_collection(&self, name: &str, settings: &CollectionSettings) -> Result<()> {
        self.ensure_room(4096)?;
        validate_name(name)?;
        settings.hnsw.validate()?;
        let bytes = serde_json::to_vec(settings).expect("settings serialise");
        let h = self.handles()?;
        match h
            .collections
            .compare_and_swap(name, None as Option<&[u8]>, Some(bytes))?
        {
            Ok(()) => self.durable(&h),
            Err(_) => Err(UserError::CollectionExists { name: name.into() }.into()),
        }
    }

    /// All collections with their settings, by name.
    pub fn collections(&self) -> Result<Vec<(String, CollectionSettings)>> {
        self.handles()?
            .collections
            .iter()
            .map(|kv| {
                let (k, v) = kv?;
                Ok((
                    String::from_utf8_lossy(&k).into_owned(),
                    decode_settings(&v)?,
                ))
            })
            .collect()
    }

    /// One collection's settings.
    pub fn settings(&self, name: &str) -> Result<CollectionSettings> {
        self.handles()?.settings(name)
    }

    /// Drops a collection and all its documents.
    pub fn drop_collection(&self, name: &str) -> Result<()> {
        let h = self.handles()?;
        let mut cache = h.open_trees.writing();
        let Some(old) = h.collections.remove(name)? else {
            return Err(UserError::UnknownCollection { name: name.into() }.into());
        };
        cache.remove(name);
        drop(cache);
        h.drop_physical(&decode_settings(&old)?.physical(name))?;
        for kind in ["meta", "pairs", "context"] {
            h.db.drop_tree(tree_name(kind, name))?;
        }
        self.durable(&h)
    }

    /// Upserts documents atomically: all are stored, or none. `docs` carry no internal id yet
    /// (it is assigned here); ids repeated within the batch keep the last version.
    pub fn upsert(&self, name: &str, docs: Vec<StoredDoc>) -> Result<Vec<Upserted>> {
        self.ensure_room(docs.iter().map(StoredDoc::approx_bytes).sum())?;
        for d in &docs {
            validate_id(&d.id)?;
        }
        let h = self.handles()?;
        let (docs_t, ids_t, state_t) = h.trees(name)?;
        let result = (&docs_t, &ids_t, &state_t).transaction(|(dt, it, st)| {
            let mut next = read_u64(st.get(b"next")?);
            let mut out = Vec::with_capacity(docs.len());
            for doc in &docs {
                let replaced = match dt.get(doc.id.as_bytes())? {
                    Some(old) => {
                        let old = StoredDoc::from_bytes(&old)
                            .map_err(ConflictableTransactionError::Abort)?;
                        it.remove(&old.internal.to_be_bytes())?;
                        Some(old.internal)
                    }
                    None => None,
                };
                let mut doc = doc.clone();
                doc.internal = next;
                next += 1;
                dt.insert(doc.id.as_bytes(), doc.to_bytes())?;
                it.insert(&doc.internal.to_be_bytes(), doc.id.as_bytes())?;
                out.push(Upserted {
                    internal: doc.internal,
                    replaced,
                });
            }
            st.insert(b"next", &next.to_be_bytes())?;
            let seq = read_u64(st.get(b"seq")?) + 1;
            st.insert(b"seq", &seq.to_be_bytes())?;
            Ok(out)
        });
        let out = unwrap_tx(result)?;
        self.durable(&h)?;
        Ok(out)
    }

    /// Deletes a document; returns its internal id, or `None` if it was not there.
    pub fn delete(&self, name: &str, id: &str) -> Result<Option<u64>> {
        self.ensure_room(4096)?;
        let h = self.handles()?;
        let (docs_t, ids_t, state_t) = h.trees(name)?;
        let result = (&docs_t, &ids_t, &state_t).transaction(|(dt, it, st)| {
            let Some(old) = dt.remove(id.as_bytes())? else {
                return Ok(None);
            };
            let old = StoredDoc::from_bytes(&old).map_err(ConflictableTransactionError::Abort)?;
            it.remove(&old.internal.to_be_bytes())?;
            let seq = read_u64(st.get(b"seq")?) + 1;
            st.insert(b"seq", &seq.to_be_bytes())?;
            Ok(Some(old.internal))
        });
        let out = unwrap_tx(result)?;
        self.durable(&h)?;
        Ok(out)
    }

    /// A document by external id.
    pub fn get(&self, name: &str, id: &str) -> Result<Option<StoredDoc>> {
        let (docs_t, _, _) = self.trees(name)?;
        docs_t
            .get(id.as_bytes())?
            .map(|v| StoredDoc::from_bytes(&v))
            .transpose()
    }

    /// A document by internal id (what the vector indexes return).
    pub fn get_internal(&self, name: &str, internal: u64) -> Result<Option<StoredDoc>> {
        let (docs_t, ids_t, _) = self.trees(name)?;
        let Some(id) = ids_t.get(internal.to_be_bytes())? else {
            return Ok(None);
        };
        docs_t
            .get(id)?
            .map(|v| StoredDoc::from_bytes(&v))
            .transpose()
    }

    /// The external id of an internal id, if it is live.
    pub fn external_id(&self, name: &str, internal: u64) -> Result<Option<String>> {
        let (_, ids_t, _) = self.trees(name)?;
        Ok(ids_t
            .get(internal.to_be_bytes())?
            .map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// A collection-level value (for example its calibration) stored under `key`.
    pub fn meta(&self, name: &str, key: &str) -> Result<Option<Vec<u8>>> {
        let t = self.handles()?.side_tree("meta", name)?;
        Ok(t.get(key)?.map(|v| v.to_vec()))
    }

    /// Stores a collection-level value durably.
    pub fn set_meta(&self, name: &str, key: &str, value: &[u8]) -> Result<()> {
        self.ensure_room(value.len() as u64 + 4096)?;
        let h = self.handles()?;
        h.side_tree("meta", name)?.insert(key, value)?;
        self.durable(&h)
    }

    /// Removes a collection-level value durably; true if it was there.
    pub fn remove_meta(&self, name: &str, key: &str) -> Result<bool> {
        self.ensure_room(4096)?;
        let h = self.handles()?;
        let had = h.side_tree("meta", name)?.remove(key)?.is_some();
        self.durable(&h)?;
        Ok(had)
    }

    /// Stores a labelled pair under `key` durably (replacing one with the same key).
    pub fn put_pair(&self, name: &str, key: &[u8], value: &[u8]) -> Result<()> {
        self.ensure_room(value.len() as u64 + 4096)?;
        let h = self.handles()?;
        h.side_tree("pairs", name)?.insert(key, value)?;
        self.durable(&h)
    }

    /// Removes a labelled pair; true if it was there.
    pub fn remove_pair(&self, name: &str, key: &[u8]) -> Result<bool> {
        self.ensure_room(4096)?;
        let h = self.handles()?;
        let had = h.side_tree("pairs", name)?.remove(key)?.is_some();
        self.durable(&h)?;
        Ok(had)
    }

    /// One labelled pair by key.
    pub fn pair(&self, name: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let t = self.handles()?.side_tree("pairs", name)?;
        Ok(t.get(key)?.map(|v| v.to_vec()))
    }

    /// Every labelled pair, in key order.
    pub fn pairs(&self, name: &str) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let t = self.handles()?.side_tree("pairs", name)?;
        t.iter()
            .map(|kv| {
                let (k, v) = kv?;
                Ok((k.to_vec(), v.to_vec()))
            })
            .collect()
    }

    /// Stores context vectors (encoded by the caller) under their documents' internal ids, in
    /// one atomic batch, durably; with `replace`, every vector stored before is removed in the
    /// same batch. Derived data ([`crate::db::Database::set_context_vectors`]): the documents
    /// are not touched.
    pub fn put_context_vectors(
        &self,
        name: &str,
        vectors: &[(u64, Vec<u8>)],
        replace: bool,
    ) -> Result<()> {
        self.ensure_room(
            vectors
                .iter()
                .map(|(_, v)| v.len() as u64 + 16)
                .sum::<u64>()
                + 4096,
        )?;
        let h = self.handles()?;
        let t = h.side_tree("context", name)?;
        let mut batch = sled::Batch::default();
        if replace {
            for k in t.iter().keys() {
                batch.remove(k?);
            }
        }
        for (internal, v) in vectors {
            batch.insert(&internal.to_be_bytes(), v.as_slice());
        }
        t.apply_batch(batch)?;
        self.durable(&h)
    }

    /// The stored context vectors of `ids` (those that have one).
    pub fn context_vectors(
        &self,
        name: &str,
        ids: &[u64],
    ) -> Result<std::collections::HashMap<u64, Vec<u8>>> {
        let t = self.handles()?.side_tree("context", name)?;
        let mut out = std::collections::HashMap::with_capacity(ids.len());
        for &id in ids {
            if let Some(v) = t.get(id.to_be_bytes())? {
                out.insert(id, v.to_vec());
            }
        }
        Ok(out)
    }

    /// The most recently written live documents, newest first: up to `limit` (internal id,
    /// external id) with internal id below `before` (all when `None`). Internal ids grow with
    /// every write, so this is write order.
    pub fn recent(
        &self,
        name: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, String)>> {
        let (_, ids_t, _) = self.trees(name)?;
        let end = before.unwrap_or(u64::MAX).to_be_bytes();
        ids_t
            .range(..end)
            .rev()
            .take(limit)
            .map(|kv| {
                let (k, v) = kv?;
                let mut b = [0u8; 8];
                b.copy_from_slice(&k);
                Ok((
                    u64::from_be_bytes(b),
                    String::from_utf8_lossy(&v).into_owned(),
                ))
            })
            .collect()
    }

    /// Number of documents.
    pub fn count(&self, name: &str) -> Result<u64> {
        // Not sled's `Tree::len`: it counts an iterator that, on a damaged page, yields the
        // same error forever (a store cut at 95 % hung `kindred collection list`).
        let mut n = 0;
        for kv in self.trees(name)?.0.iter() {
            kv?;
            n += 1;
        }
        Ok(n)
    }

    /// The write sequence number: bumped by every upsert or delete.
    pub fn seq(&self, name: &str) -> Result<u64> {
        Ok(read_u64(self.trees(name)?.2.get(b"seq")?))
    }

    /// Every document, in external-id order.
    pub fn iter(&self, name: &str) -> Result<impl Iterator<Item = Result<StoredDoc>>> {
        let h = self.handles()?;
        let (docs_t, _, _) = h.trees(name)?;
        // The iterator holds the handles: a reopen waits for it like for any call.
        Ok(docs_t.iter().map(move |kv| {
            let _held = &h;
            let (_, v) = kv?;
            StoredDoc::from_bytes(&v)
        }))
    }

    /// Size statistics.
    pub fn stats(&self, name: &str) -> Result<CollectionStats> {
        let (docs_t, _, state_t) = self.trees(name)?;
        let (mut documents, mut token_vectors, mut record_bytes, mut tv_bytes) =
            (0u64, 0u64, 0u64, 0u64);
        for kv in docs_t.iter() {
            let (k, v) = kv?;
            let doc = StoredDoc::from_bytes(&v)?;
            documents += 1;
            token_vectors += doc.token_scales.len() as u64;
            record_bytes += (k.len() + v.len()) as u64;
            tv_bytes += (doc.token_codes.len() + 4 * doc.token_scales.len()) as u64;
        }
        Ok(CollectionStats {
            documents,
            token_vectors,
            record_bytes,
            token_vector_bytes: tv_bytes,
            bytes_per_document: record_bytes as f64 / documents.max(1) as f64,
            bytes_per_token_vector: tv_bytes as f64 / token_vectors.max(1) as f64,
            seq: read_u64(state_t.get(b"seq")?),
            sampled: None,
        })
    }

    /// Flushes everything to disk.
    pub fn flush(&self) -> Result<()> {
        self.handles()?.flush()
    }

    /// Test hook: stamps another format version (to test the refusal of newer stores).
    #[cfg(any(test, feature = "test-support"))]
    pub fn stamp_format_version_for_tests(path: &Path, version: u32) -> Result<()> {
        let db = sled::open(path)?;
        db.insert(VERSION_KEY, &version.to_be_bytes())?;
        db.flush()?;
        Ok(())
    }
}

fn internal_ids(ids: &sled::Tree) -> Result<std::collections::BTreeSet<u64>> {
    ids.iter()
        .keys()
        .map(|k| {
            let k = k?;
            let bytes: [u8; 8] = k
                .as_ref()
                .try_into()
                .map_err(|_| InternalError::Corrupt("an internal id is not 8 bytes".into()))?;
            Ok(u64::from_be_bytes(bytes))
        })
        .collect()
}

fn read_u64(v: Option<sled::IVec>) -> u64 {
    v.and_then(|v| v.as_ref().try_into().ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0)
}

fn decode_settings(v: &[u8]) -> Result<CollectionSettings> {
    serde_json::from_slice(v)
        .map_err(|e| InternalError::Corrupt(format!("collection settings: {e}")).into())
}

fn unwrap_tx<T>(r: std::result::Result<T, TransactionError<Error>>) -> Result<T> {
    match r {
        Ok(v) => Ok(v),
        Err(TransactionError::Abort(e)) => Err(e),
        Err(TransactionError::Storage(e)) => Err(e.into()),
    }
}

/// Bytes free to an unprivileged writer on the disk holding `path` (`None` where unknown).
fn free_bytes(path: &Path) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
        let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        // SAFETY: `c` is a valid NUL-terminated path and `st` is written by statvfs on success.
        let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
        if rc != 0 {
            return None;
        }
        // SAFETY: statvfs returned 0, so it filled `st`.
        let st = unsafe { st.assume_init() };
        // The field widths differ between platforms (u32 on some 32-bit ones).
        #[allow(clippy::useless_conversion)]
        let (blocks, size) = (u64::from(st.f_bavail), u64::from(st.f_frsize));
        Some(blocks.saturating_mul(size))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        None
    }
}
