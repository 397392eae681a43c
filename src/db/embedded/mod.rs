//! The embedded backend: collections in the data directory — the sled store (source of
//! truth) plus each collection's indexes, kept in step.
//!
//! Writes go to the store first — atomically, and acknowledged only once durable — then to the
//! in-memory indexes. Indexes are saved with the store checkpoint (`seq`) they reflect
//! (`checkpoint.rs`); opening a collection loads them when they match the store and rebuilds
//! them from it otherwise (`load.rs`: after a crash, say, or a damaged index file). Replaced
//! and deleted documents are tombstoned in the vector indexes, and both graphs are rebuilt in
//! the background when their tombstones pass [`crate::index::hnsw::COMPACTION_RATIO`].
//! Reindexing (`reindex.rs`) builds a new generation beside the serving one.

mod checkpoint;
mod indexes;
mod load;
mod reindex;
#[cfg(test)]
mod tests;
mod view;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use super::backend::{Backend, Capability, CollectionView};
use super::info::{CALIBRATION_KEY, CONTEXT_VECTORS_KEY};
use super::{
    check_model, CollectionInfo, ContextVectorsInfo, ContextVectorsStamp, IndexInfo, NewDocument,
    Progress, ReindexReport, SearchDefaultsInfo,
};
use crate::error::{Result, UserError};
use crate::index::hnsw;
use crate::model::ModelIdentity;
use crate::score::calibration::Calibrator;
use crate::store::{
    CollectionSettings, Durability, SearchDefaults, Store, StoredDoc, Upserted, SEARCH_DEFAULTS_KEY,
};
use crate::sync::{MutexExt, RwLockExt};
use crate::types::{Encoded, Rerank};
use indexes::{Entry, Indexes};
pub use reindex::{already_uses, EncodeFn};

/// A collection's indexes once loaded. Loading holds only this slot's lock, so a long rebuild
/// of one collection never blocks the others.
type Slot = Arc<Mutex<Option<Arc<Indexes>>>>;

/// The embedded backend.
pub(super) struct Embedded {
    store: Store,
    index_dir: PathBuf,
    open: RwLock<HashMap<String, Slot>>,
    /// Collections whose indexes failed to load at their last try, with why (a later load that
    /// succeeds clears its entry).
    load_failures: Mutex<std::collections::BTreeMap<String, String>>,
    progress: Option<Progress>,
}

impl std::fmt::Debug for Embedded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedded")
            .field("store", &self.store)
            .finish()
    }
}

impl Embedded {
    /// Opens the store in `dir/store` and claims `dir/indexes` for its index files.
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
        Ok(Embedded {
            store,
            index_dir,
            open: RwLock::new(HashMap::new()),
            load_failures: Mutex::default(),
            progress: None,
        })
    }

    /// The index folder of physical name `physical` (`name` or `name@G`), checked to be one
    /// entry of `indexes/` ([`crate::store::names::child`]): the one way a path is made from
    /// a collection's name here.
    fn index_folder(&self, physical: &str) -> Result<PathBuf> {
        crate::store::names::child(&self.index_dir, physical)
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
}

impl Backend for Embedded {
    fn name(&self) -> &'static str {
        crate::db::backend::EMBEDDED
    }

    fn supports(&self, capability: Capability) -> bool {
        crate::db::backend::embedded_offers(capability)
    }

    fn settings(&self, name: &str) -> Result<CollectionSettings> {
        self.store.settings(name)
    }

    fn count(&self, name: &str) -> Result<u64> {
        self.store.count(name)
    }

    fn collections(&self) -> Result<Vec<(String, CollectionSettings)>> {
        self.store.collections()
    }

    fn create_collection(&self, name: &str, settings: &CollectionSettings) -> Result<()> {
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

    fn drop_collection(&self, name: &str) -> Result<()> {
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

    fn info(&self, name: &str) -> Result<CollectionInfo> {
        let ix = self.indexes(name)?;
        let index = {
            let (cosine, w2) = (ix.cosine.reading(), ix.w2.reading());
            IndexInfo {
                cosine_points: cosine.points(),
                w2_points: w2.points(),
                tombstones: cosine.tombstones(),
                w2_tombstones: w2.tombstones(),
                lexical_documents: ix.lexical.len(),
                graph_vector_bytes: Some(cosine.vector_bytes() + w2.vector_bytes()),
                opened: Some(ix.opened),
            }
        };
        let search_defaults =
            cached_defaults(&self.store, name, &ix)?.map(|d| SearchDefaultsInfo {
                stale: d.is_stale(&ix.settings.model.fingerprint),
                defaults: (*d).clone(),
            });
        let context_vectors = context_stamp(&self.store, name)?.map(|stamp| ContextVectorsInfo {
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

    fn set_search_defaults(&self, name: &str, defaults: Option<SearchDefaults>) -> Result<()> {
        let ix = self.indexes(name)?;
        let model = &ix.settings.model.fingerprint;
        let context = defaults
            .as_ref()
            .is_some_and(|d| d.rerank == Rerank::Context);
        let has_vectors = context_stamp(&self.store, name)?.is_some_and(|s| &s.model == model);
        if context && !has_vectors {
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

    fn search_defaults(&self, name: &str) -> Result<Option<SearchDefaults>> {
        let ix = self.indexes(name)?;
        Ok(cached_defaults(&self.store, name, &ix)?.map(|d| (*d).clone()))
    }

    fn set_calibrator(&self, name: &str, calibrator: &Calibrator) -> Result<()> {
        let bytes = serde_json::to_vec(calibrator).expect("calibrator serialises");
        self.store.set_meta(name, CALIBRATION_KEY, &bytes)?;
        *self.indexes(name)?.calibrator.locked() = Some(Arc::new(calibrator.clone()));
        Ok(())
    }

    fn upsert(
        &self,
        name: &str,
        model: &ModelIdentity,
        docs: &[(NewDocument, Encoded)],
        records: Vec<StoredDoc>,
    ) -> Result<Vec<Upserted>> {
        self.with_writer(name, |ix| {
            // Again under the writer lock: a reindex may have switched the model meanwhile.
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

    fn delete(&self, name: &str, id: &str) -> Result<bool> {
        self.with_writer(name, |ix| {
            let Some(internal) = self.store.delete(name, id)? else {
                return Ok(false);
            };
            ix.apply(&[internal], &[])?;
            Ok(true)
        })
    }

    fn get(&self, name: &str, id: &str) -> Result<Option<StoredDoc>> {
        self.store.get(name, id)
    }

    fn documents<'a>(
        &'a self,
        name: &str,
    ) -> Result<Box<dyn Iterator<Item = Result<StoredDoc>> + 'a>> {
        Ok(Box::new(self.store.iter(name)?))
    }

    fn recent(&self, name: &str, before: Option<u64>, limit: usize) -> Result<Vec<(u64, String)>> {
        self.store.recent(name, before, limit)
    }

    fn put_pair(&self, name: &str, key: &str, value: &[u8]) -> Result<()> {
        self.store.put_pair(name, key.as_bytes(), value)
    }

    fn pairs(&self, name: &str) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(self
            .store
            .pairs(name)?
            .into_iter()
            .map(|(k, v)| (String::from_utf8_lossy(&k).into_owned(), v))
            .collect())
    }

    fn pair(&self, name: &str, key: &str) -> Result<Option<Vec<u8>>> {
        self.store.pair(name, key.as_bytes())
    }

    fn remove_pair(&self, name: &str, key: &str) -> Result<bool> {
        self.store.remove_pair(name, key.as_bytes())
    }

    fn view<'a>(&'a self, name: &str) -> Result<Box<dyn CollectionView + 'a>> {
        Ok(Box::new(view::LocalView {
            store: &self.store,
            name: name.to_string(),
            ix: self.indexes(name)?,
        }))
    }

    fn warm_up(&self) -> Result<()> {
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

    fn checkpoint(&self) -> Result<usize> {
        self.checkpoint_all()
    }

    fn recover(&self) -> Result<bool> {
        self.recover_store()
    }

    fn load_failures(&self) -> Vec<(String, String)> {
        self.load_failures
            .locked()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn set_min_free_bytes(&self, bytes: u64) {
        self.store.set_min_free_bytes(bytes)
    }

    fn set_progress(&mut self, progress: Progress) {
        self.progress = Some(progress);
    }

    fn context_vectors_stamp(&self, name: &str) -> Result<Option<ContextVectorsStamp>> {
        context_stamp(&self.store, name)
    }

    fn set_context_vectors(
        &self,
        name: &str,
        model: &ModelIdentity,
        vectors: &[(u64, Vec<f32>)],
        replace: bool,
    ) -> Result<()> {
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

    fn reindex(
        &self,
        name: &str,
        model: &ModelIdentity,
        encode: EncodeFn<'_>,
        model_path: Option<&Path>,
        progress: &dyn Fn(u64, u64),
    ) -> Result<ReindexReport> {
        self.reindex_onto(name, model, encode, model_path, progress)
    }

    #[cfg(feature = "test-support")]
    fn embedded_store(&self) -> Option<&Store> {
        Some(&self.store)
    }
}

impl Drop for Embedded {
    fn drop(&mut self) {
        if let Err(e) = self.checkpoint_all() {
            tracing::warn!(error = %e, "could not save the indexes; they will be rebuilt on open");
        }
    }
}

/// The collection's search defaults from `ix`'s cache, read from the store on first use. A
/// stored value that does not decode (damaged) is logged and treated as none, so searches go
/// on; setting or clearing the defaults replaces it.
fn cached_defaults(store: &Store, name: &str, ix: &Indexes) -> Result<Option<Arc<SearchDefaults>>> {
    let mut cached = ix.search_defaults.locked();
    if let Some(d) = cached.as_ref() {
        return Ok(d.clone());
    }
    let stored = store.meta(name, SEARCH_DEFAULTS_KEY)?;
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

/// What collection `name`'s stored context vectors were made with (None: it has none).
fn context_stamp(store: &Store, name: &str) -> Result<Option<ContextVectorsStamp>> {
    Ok(store
        .meta(name, CONTEXT_VECTORS_KEY)?
        .and_then(|b| serde_json::from_slice(&b).ok()))
}
