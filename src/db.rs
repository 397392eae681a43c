//! The database: the store (source of truth) plus each collection's indexes, kept in step.
//!
//! Writes go to the store first — atomically, and acknowledged only once durable — then to the
//! in-memory indexes. Indexes are saved with the store checkpoint (`seq`) they reflect; opening
//! a collection loads them when they match the store and rebuilds them from it otherwise (after
//! a crash, say). Replaced and deleted documents are tombstoned in the vector indexes and a
//! graph is rebuilt when its tombstones pass [`index::hnsw::COMPACTION_RATIO`].
//!
//! Reindexing ([`Database::reindex`]) re-encodes a collection onto another model as a new
//! store generation with its own indexes, built while the old ones serve; writes made
//! meanwhile are caught up, and the switch happens under the collection's writer lock.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::{Result, UserError};
use crate::index::hnsw::{Metric, VectorIndex};
use crate::index::LexicalIndex;
use crate::model::ModelIdentity;
use crate::score::wasserstein::embed;
use crate::store::{
    validate_id, CollectionSettings, CollectionStats, Durability, Generation, Store, StoredDoc,
    Upserted,
};
use crate::types::{Encoded, Gaussian};
use crate::Encoder;

/// A document as a user gives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NewDocument {
    /// External id (1–512 bytes).
    pub id: String,
    /// The question.
    pub text: String,
    /// A JSON object (or absent).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub metadata: serde_json::Value,
}

/// Index health of a collection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct IndexInfo {
    /// Points in the cosine graph (tombstones included).
    pub cosine_points: usize,
    /// Points in the W2 graph (tombstones included).
    pub w2_points: usize,
    /// Tombstoned points (per graph).
    pub tombstones: usize,
    /// Documents in the lexical index.
    pub lexical_documents: usize,
}

/// What `kindred collection stats` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
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
}

/// Progress of a long operation: (what, done, total).
pub type Progress = Arc<dyn Fn(&str, u64, u64) + Send + Sync>;

/// What a reindex did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
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

/// Catch-up passes run while the old generation serves before the final one under the
/// writer lock; a pass that finds at most [`SMALL_CATCH_UP`] changes ends them early.
const CATCH_UP_PASSES: usize = 4;
const SMALL_CATCH_UP: u64 = 64;
/// Documents encoded per reindex batch.
const REINDEX_BATCH: usize = 256;

struct Indexes {
    cosine: RwLock<VectorIndex>,
    w2: RwLock<VectorIndex>,
    lexical: Arc<LexicalIndex>,
    settings: CollectionSettings,
    /// The generation's physical name (its index directory).
    physical: String,
    /// Serialises writers (and checkpoints) of one collection; readers never take it.
    writer: Mutex<()>,
    /// Set (under `writer`) when a reindex replaced these indexes: writers that waited for
    /// the lock start over with the new ones.
    retired: AtomicBool,
    /// The store seq the index files on disk reflect (None: no valid files yet).
    saved_seq: Mutex<Option<u64>>,
}

impl Indexes {
    fn empty(settings: CollectionSettings, physical: String) -> Self {
        let (d, k, p) = (
            settings.model.dim,
            settings.model.intent_dim(),
            settings.hnsw,
        );
        Indexes {
            cosine: RwLock::new(VectorIndex::build(Metric::Cosine, d, p, &[])),
            w2: RwLock::new(VectorIndex::build(Metric::L2, 2 * k, p, &[])),
            lexical: Arc::new(LexicalIndex::new()),
            settings,
            physical,
            writer: Mutex::new(()),
            retired: AtomicBool::new(false),
            saved_seq: Mutex::new(None),
        }
    }
}

/// A collection's indexes once loaded. Loading holds only this slot's lock, so a long rebuild
/// of one collection never blocks the others.
type Slot = Arc<Mutex<Option<Arc<Indexes>>>>;

/// The database.
pub struct Database {
    dir: PathBuf,
    store: Store,
    index_dir: PathBuf,
    open: RwLock<HashMap<String, Slot>>,
    progress: Option<Progress>,
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
        let current = store.physical_names()?;
        if let Ok(entries) = std::fs::read_dir(&index_dir) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.contains('@') && !current.contains(&name) {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        Ok(Database {
            dir: dir.to_path_buf(),
            store,
            index_dir,
            open: RwLock::new(HashMap::new()),
            progress: None,
        })
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

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Creates a collection.
    pub fn create_collection(&self, name: &str, settings: &CollectionSettings) -> Result<()> {
        self.store.create_collection(name, settings)
    }

    /// Drops a collection, its documents and its index files.
    pub fn drop_collection(&self, name: &str) -> Result<()> {
        let physical = self.store.settings(name)?.physical(name);
        self.store.drop_collection(name)?;
        self.open.write().expect("lock").remove(name);
        let dir = self.index_dir.join(physical);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .map_err(crate::error::io_err(format!("removing {}", dir.display())))?;
        }
        Ok(())
    }

    /// Names and settings of all collections.
    pub fn collections(&self) -> Result<Vec<(String, CollectionSettings)>> {
        self.store.collections()
    }

    /// A collection's settings, stats and index health.
    pub fn info(&self, name: &str) -> Result<CollectionInfo> {
        let ix = self.indexes(name)?;
        let index = {
            let (cosine, w2) = (ix.cosine.read().expect("lock"), ix.w2.read().expect("lock"));
            IndexInfo {
                cosine_points: cosine.points(),
                w2_points: w2.points(),
                tombstones: cosine.tombstones(),
                lexical_documents: ix.lexical.len(),
            }
        };
        Ok(CollectionInfo {
            name: name.into(),
            settings: ix.settings.clone(),
            format_version: self.store.format_version(),
            stats: self.store.stats(name)?,
            index,
        })
    }

    /// Encodes and upserts documents: all of them, or (on any error) none.
    pub fn upsert(
        &self,
        name: &str,
        encoder: &Encoder,
        docs: Vec<NewDocument>,
    ) -> Result<Vec<Upserted>> {
        // Checked before encoding, so bad input costs no encoder time.
        self.check_model(name, encoder.identity())?;
        docs.iter().try_for_each(validate)?;
        let texts: Vec<&str> = docs.iter().map(|d| d.text.as_str()).collect();
        let encoded = encoder.encode(&texts)?;
        self.write_checked(
            name,
            encoder.identity(),
            docs.into_iter().zip(encoded).collect(),
        )
    }

    /// Upserts documents whose vectors were computed already (by `model`).
    pub fn upsert_encoded(
        &self,
        name: &str,
        model: &ModelIdentity,
        docs: Vec<(NewDocument, Encoded)>,
    ) -> Result<Vec<Upserted>> {
        self.check_model(name, model)?;
        docs.iter().try_for_each(|(d, _)| validate(d))?;
        self.write_checked(name, model, docs)
    }

    /// The collection's current indexes with their writer lock held, for `f`. A writer that
    /// waited while a reindex switched generations starts over with the new indexes.
    fn with_writer<T>(&self, name: &str, f: impl FnOnce(&Arc<Indexes>) -> Result<T>) -> Result<T> {
        loop {
            let ix = self.indexes(name)?;
            let _writer = ix.writer.lock().expect("lock");
            if !ix.retired.load(Ordering::Acquire) {
                return f(&ix);
            }
        }
    }

    /// Stores validated documents encoded by `model`, then updates the indexes.
    fn write_checked(
        &self,
        name: &str,
        model: &ModelIdentity,
        docs: Vec<(NewDocument, Encoded)>,
    ) -> Result<Vec<Upserted>> {
        let mut records = Vec::with_capacity(docs.len());
        for (d, e) in &docs {
            let metadata = match &d.metadata {
                serde_json::Value::Null => "{}".to_string(),
                m => m.to_string(),
            };
            records.push(StoredDoc::new(d.id.clone(), 0, d.text.clone(), metadata, e));
        }
        self.with_writer(name, |ix| {
            // Checked again under the lock: a reindex may have switched models since.
            check_model(name, &ix.settings, model)?;
            self.write_locked(name, ix, records, &docs)
        })
    }

    fn write_locked(
        &self,
        name: &str,
        ix: &Indexes,
        records: Vec<StoredDoc>,
        docs: &[(NewDocument, Encoded)],
    ) -> Result<Vec<Upserted>> {
        let out = self.store.upsert(name, records)?;
        let (cosine, w2) = (ix.cosine.read().expect("lock"), ix.w2.read().expect("lock"));
        let intents: Vec<Vec<f32>> = docs.iter().map(|(_, e)| embed(&e.intent)).collect();
        let mut sentence_points = Vec::with_capacity(docs.len());
        let mut intent_points = Vec::with_capacity(docs.len());
        for (((d, e), up), intent) in docs.iter().zip(&out).zip(&intents) {
            if let Some(old) = up.replaced {
                cosine.remove(old as usize);
                w2.remove(old as usize);
            }
            sentence_points.push((up.internal as usize, e.sentence.as_slice()));
            intent_points.push((up.internal as usize, intent.as_slice()));
            ix.lexical.upsert(&d.id, &d.text);
        }
        cosine.insert_many(&sentence_points);
        w2.insert_many(&intent_points);
        let compact = cosine.needs_compaction();
        drop((cosine, w2));
        if compact {
            self.compact(name, ix)?;
        }
        Ok(out)
    }

    /// Deletes a document; true if it existed.
    pub fn delete(&self, name: &str, id: &str) -> Result<bool> {
        self.with_writer(name, |ix| {
            let Some(internal) = self.store.delete(name, id)? else {
                return Ok(false);
            };
            ix.cosine.read().expect("lock").remove(internal as usize);
            ix.w2.read().expect("lock").remove(internal as usize);
            ix.lexical.remove(id);
            let compact = ix.cosine.read().expect("lock").needs_compaction();
            if compact {
                self.compact(name, ix)?;
            }
            Ok(true)
        })
    }

    /// Re-encodes collection `name` with `encoder` (another model) as a new generation, with
    /// new vector and lexical indexes, while the current generation keeps serving searches and
    /// writes; writes made meanwhile are caught up, then — under the writer lock, for as long
    /// as the last few changes take — the collection switches to the new generation and the
    /// old one is dropped. `model_path` (the encoder's directory) is recorded so a server
    /// started with another model can load this one. `progress(done, total)` counts documents.
    /// On error the collection is untouched (the unfinished generation is dropped on the next
    /// open or reindex).
    pub fn reindex(
        &self,
        name: &str,
        encoder: &Encoder,
        model_path: Option<&Path>,
        progress: &dyn Fn(u64, u64),
    ) -> Result<ReindexReport> {
        let started = Instant::now();
        let settings = self.store.settings(name)?;
        let model = encoder.identity();
        if settings.model.fingerprint == model.fingerprint {
            return Err(UserError::InvalidArgument {
                name: "model",
                reason: format!(
                    "collection {name:?} already uses {} ({}); give the directory of another model",
                    model.id, model.fingerprint
                ),
            }
            .into());
        }
        self.indexes(name)?;
        let generation = self.store.new_generation(name)?;
        let new_settings = CollectionSettings {
            model: model.clone(),
            generation: Some(generation.number),
            model_path: model_path.map(|p| p.display().to_string()),
            ..settings
        };
        let shadow = Indexes::empty(new_settings.clone(), generation.physical());
        let total = self.store.count(name)?;
        let mut encoded = 0u64;
        let mut count = |n: u64| {
            encoded += n;
            progress(encoded, total.max(encoded));
        };
        for _ in 0..CATCH_UP_PASSES {
            let changed = self.sync_generation(name, &generation, &shadow, encoder, &mut count)?;
            if changed <= SMALL_CATCH_UP {
                break;
            }
        }
        let report = self.with_writer(name, |old| {
            self.sync_generation(name, &generation, &shadow, encoder, &mut count)?;
            let number = generation.number;
            let seq = self.store.switch_generation(generation, new_settings)?;
            let dir = self.index_dir.join(&shadow.physical);
            shadow
                .cosine
                .read()
                .expect("lock")
                .save(&dir, "cosine", seq)?;
            shadow.w2.read().expect("lock").save(&dir, "w2", seq)?;
            *shadow.saved_seq.lock().expect("lock") = Some(seq);
            old.retired.store(true, Ordering::Release);
            let slot = self.open.read().expect("lock").get(name).cloned();
            if let Some(slot) = slot {
                *slot.lock().expect("lock") = Some(Arc::new(shadow));
            }
            let old_dir = self.index_dir.join(&old.physical);
            if old_dir.exists() {
                std::fs::remove_dir_all(&old_dir).map_err(crate::error::io_err(format!(
                    "removing {}",
                    old_dir.display()
                )))?;
            }
            Ok(number)
        })?;
        let documents = self.store.count(name)?;
        tracing::info!(
            collection = name,
            generation = report,
            documents,
            "reindexed"
        );
        Ok(ReindexReport {
            documents,
            encoded,
            generation: report,
            model: model.clone(),
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// Makes `generation` (and its indexes `shadow`) hold exactly the collection's live
    /// documents, re-encoding those it lacks with `encoder`. Returns the changes made.
    fn sync_generation(
        &self,
        name: &str,
        generation: &Generation,
        shadow: &Indexes,
        encoder: &Encoder,
        count: &mut dyn FnMut(u64),
    ) -> Result<u64> {
        let live = self.store.live_ids(name)?;
        let have = self.store.generation_ids(generation)?;
        let mut changed = 0;
        for &internal in have.difference(&live) {
            if let Some(id) = self.store.generation_remove(generation, internal)? {
                shadow
                    .cosine
                    .read()
                    .expect("lock")
                    .remove(internal as usize);
                shadow.w2.read().expect("lock").remove(internal as usize);
                shadow.lexical.remove(&id);
            }
            changed += 1;
        }
        let missing: Vec<u64> = live.difference(&have).copied().collect();
        for chunk in missing.chunks(REINDEX_BATCH) {
            let mut docs = Vec::with_capacity(chunk.len());
            for &internal in chunk {
                // Gone or replaced since listed: the next pass sees what is live then.
                if let Some(doc) = self.store.get_internal(name, internal)? {
                    docs.push(doc);
                }
            }
            let texts: Vec<&str> = docs.iter().map(|d| d.text.as_str()).collect();
            let vectors = encoder.encode(&texts)?;
            let records: Vec<StoredDoc> = docs
                .iter()
                .zip(&vectors)
                .map(|(d, e)| {
                    StoredDoc::new(
                        d.id.clone(),
                        d.internal,
                        d.text.clone(),
                        d.metadata_json.clone(),
                        e,
                    )
                })
                .collect();
            let replaced = self.store.generation_put(generation, &records)?;
            let (cosine, w2) = (
                shadow.cosine.read().expect("lock"),
                shadow.w2.read().expect("lock"),
            );
            for old in replaced {
                cosine.remove(old as usize);
                w2.remove(old as usize);
            }
            let intents: Vec<Vec<f32>> = vectors.iter().map(|e| embed(&e.intent)).collect();
            let sentences: Vec<(usize, &[f32])> = records
                .iter()
                .zip(&vectors)
                .map(|(r, e)| (r.internal as usize, e.sentence.as_slice()))
                .collect();
            let intent_points: Vec<(usize, &[f32])> = records
                .iter()
                .zip(&intents)
                .map(|(r, i)| (r.internal as usize, i.as_slice()))
                .collect();
            cosine.insert_many(&sentences);
            w2.insert_many(&intent_points);
            for r in &records {
                shadow.lexical.upsert(&r.id, &r.text);
            }
            changed += chunk.len() as u64;
            count(chunk.len() as u64);
        }
        Ok(changed)
    }

    /// A stored document.
    pub fn get(&self, name: &str, id: &str) -> Result<Option<StoredDoc>> {
        self.store.get(name, id)
    }

    /// The k nearest documents by cosine of sentence vectors: (doc, cosine), best first.
    pub fn search_cosine(
        &self,
        name: &str,
        sentence: &[f32],
        k: usize,
    ) -> Result<Vec<(StoredDoc, f32)>> {
        let ix = self.indexes(name)?;
        let hits = ix.cosine.read().expect("lock").search(sentence, k);
        self.resolve(name, hits, |d| 1.0 - d)
    }

    /// The k nearest documents by W2 of intents: (doc, W2), nearest first.
    pub fn search_w2(
        &self,
        name: &str,
        intent: &Gaussian,
        k: usize,
    ) -> Result<Vec<(StoredDoc, f32)>> {
        let ix = self.indexes(name)?;
        let hits = ix.w2.read().expect("lock").search(&embed(intent), k);
        self.resolve(name, hits, |d| d)
    }

    /// The k best documents by lexical BM25: (doc, score), best first.
    pub fn search_lexical(
        &self,
        name: &str,
        text: &str,
        k: usize,
    ) -> Result<Vec<(StoredDoc, f32)>> {
        let ix = self.indexes(name)?;
        let mut out = Vec::new();
        for (id, score) in ix.lexical.search(text, k) {
            if let Some(doc) = self.store.get(name, &id)? {
                out.push((doc, score));
            }
        }
        Ok(out)
    }

    /// IDF of a lexical term in a collection.
    pub fn idf(&self, name: &str, term: &str) -> Result<f32> {
        Ok(self.indexes(name)?.lexical.idf(term))
    }

    /// Saves the vector indexes of every open collection that changed since they were last
    /// saved, with the checkpoint (store seq) they reflect. Returns how many were saved.
    pub fn checkpoint(&self) -> Result<usize> {
        let open: Vec<(String, Arc<Indexes>)> = {
            let slots: Vec<(String, Slot)> = self
                .open
                .read()
                .expect("lock")
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            slots
                .into_iter()
                .filter_map(|(k, slot)| slot.lock().expect("lock").clone().map(|ix| (k, ix)))
                .collect()
        };
        let mut saved = 0;
        for (name, ix) in open {
            let _writer = ix.writer.lock().expect("lock");
            let seq = match self.store.seq(&name) {
                Ok(seq) => seq,
                // Dropped since we listed it.
                Err(crate::Error::User(UserError::UnknownCollection { .. })) => continue,
                Err(e) => return Err(e),
            };
            let mut saved_seq = ix.saved_seq.lock().expect("lock");
            if *saved_seq == Some(seq) {
                continue;
            }
            if ix.retired.load(Ordering::Acquire) {
                continue;
            }
            let dir = self.index_dir.join(&ix.physical);
            ix.cosine.read().expect("lock").save(&dir, "cosine", seq)?;
            ix.w2.read().expect("lock").save(&dir, "w2", seq)?;
            *saved_seq = Some(seq);
            saved += 1;
        }
        Ok(saved)
    }

    /// Loads (or rebuilds) every collection's indexes now rather than on first use.
    pub fn warm_up(&self) -> Result<()> {
        for (name, _) in self.collections()? {
            self.indexes(&name)?;
        }
        Ok(())
    }

    /// External ids of the k nearest documents by cosine of sentence vectors, best first.
    pub fn cosine_ids(&self, name: &str, sentence: &[f32], k: usize) -> Result<Vec<String>> {
        let ix = self.indexes(name)?;
        same_dim(name, &ix, "sentence", ix.settings.model.dim, sentence.len())?;
        let hits = ix.cosine.read().expect("lock").search(sentence, k);
        self.external_ids(name, hits)
    }

    /// External ids of the k nearest documents by W2 of intents, nearest first.
    pub fn w2_ids(&self, name: &str, intent: &Gaussian, k: usize) -> Result<Vec<String>> {
        let ix = self.indexes(name)?;
        same_dim(
            name,
            &ix,
            "intent",
            ix.settings.model.intent_dim(),
            intent.mu.len(),
        )?;
        let hits = ix.w2.read().expect("lock").search(&embed(intent), k);
        self.external_ids(name, hits)
    }

    /// External ids of the k best documents by lexical BM25, best first.
    pub fn lexical_ids(&self, name: &str, text: &str, k: usize) -> Result<Vec<String>> {
        let ix = self.indexes(name)?;
        Ok(ix
            .lexical
            .search(text, k)
            .into_iter()
            .map(|(id, _)| id)
            .collect())
    }

    /// The collection's lexical index (for IDF weights).
    pub fn lexical_index(&self, name: &str) -> Result<Arc<LexicalIndex>> {
        Ok(self.indexes(name)?.lexical.clone())
    }

    fn external_ids(&self, name: &str, hits: Vec<(usize, f32)>) -> Result<Vec<String>> {
        let mut out = Vec::with_capacity(hits.len());
        for (internal, _) in hits {
            // A hit replaced between search and lookup is skipped.
            if let Some(id) = self.store.external_id(name, internal as u64)? {
                out.push(id);
            }
        }
        Ok(out)
    }

    fn resolve(
        &self,
        name: &str,
        hits: Vec<(usize, f32)>,
        score: impl Fn(f32) -> f32,
    ) -> Result<Vec<(StoredDoc, f32)>> {
        let mut out = Vec::with_capacity(hits.len());
        for (internal, dist) in hits {
            // A hit whose document was replaced between search and lookup is skipped.
            if let Some(doc) = self.store.get_internal(name, internal as u64)? {
                out.push((doc, score(dist)));
            }
        }
        Ok(out)
    }

    /// Refuses `model` unless it is the model the collection's vectors come from.
    pub fn check_model(&self, name: &str, model: &ModelIdentity) -> Result<()> {
        check_model(name, &self.store.settings(name)?, model)
    }

    /// The collection's indexes, loading or rebuilding them on first use.
    fn indexes(&self, name: &str) -> Result<Arc<Indexes>> {
        let existing = self.open.read().expect("lock").get(name).cloned();
        let slot = match existing {
            Some(slot) => slot,
            None => {
                // Unknown collections get no slot.
                self.store.settings(name)?;
                self.open
                    .write()
                    .expect("lock")
                    .entry(name.to_string())
                    .or_default()
                    .clone()
            }
        };
        let mut guard = slot.lock().expect("lock");
        if let Some(ix) = guard.as_ref() {
            return Ok(ix.clone());
        }
        let ix = Arc::new(self.load_indexes(name)?);
        *guard = Some(ix.clone());
        Ok(ix)
    }

    fn load_indexes(&self, name: &str) -> Result<Indexes> {
        let settings = self.store.settings(name)?;
        let seq = self.store.seq(name)?;
        let physical = settings.physical(name);
        let dir = self.index_dir.join(&physical);
        let (d, k, p) = (
            settings.model.dim,
            settings.model.intent_dim(),
            settings.hnsw,
        );
        let loaded = (
            VectorIndex::load(&dir, "cosine", Metric::Cosine, d, p, seq)?,
            VectorIndex::load(&dir, "w2", Metric::L2, 2 * k, p, seq)?,
        );
        let lexical = LexicalIndex::new();
        let saved_seq = loaded.0.is_some() && loaded.1.is_some();
        let (cosine, w2) = match loaded {
            (Some(c), Some(w)) => {
                tracing::info!(collection = name, seq, "vector indexes loaded");
                for doc in self.store.iter(name)? {
                    let doc = doc?;
                    lexical.upsert(&doc.id, &doc.text);
                }
                (c, w)
            }
            _ => {
                tracing::info!(collection = name, seq, "rebuilding indexes from the store");
                self.rebuild(name, &settings, &lexical)?
            }
        };
        Ok(Indexes {
            cosine: RwLock::new(cosine),
            w2: RwLock::new(w2),
            lexical: Arc::new(lexical),
            settings,
            physical,
            writer: Mutex::new(()),
            retired: AtomicBool::new(false),
            saved_seq: Mutex::new(saved_seq.then_some(seq)),
        })
    }

    fn rebuild(
        &self,
        name: &str,
        settings: &CollectionSettings,
        lexical: &LexicalIndex,
    ) -> Result<(VectorIndex, VectorIndex)> {
        let total = self.store.count(name)?;
        let (mut sentences, mut intents) = (Vec::new(), Vec::new());
        for (n, doc) in self.store.iter(name)?.enumerate() {
            let doc = doc?;
            lexical.upsert(&doc.id, &doc.text);
            sentences.push((doc.internal as usize, doc.sentence.clone()));
            intents.push((doc.internal as usize, embed(&doc.intent())));
            if let Some(p) = &self.progress {
                if n % 1024 == 0 {
                    p("reading store", n as u64, total);
                }
            }
        }
        if let Some(p) = &self.progress {
            p("building indexes", 0, total);
        }
        let (d, k) = (settings.model.dim, settings.model.intent_dim());
        let cosine = VectorIndex::build(Metric::Cosine, d, settings.hnsw, &sentences);
        let w2 = VectorIndex::build(Metric::L2, 2 * k, settings.hnsw, &intents);
        if let Some(p) = &self.progress {
            p("building indexes", total, total);
        }
        Ok((cosine, w2))
    }

    fn compact(&self, name: &str, ix: &Indexes) -> Result<()> {
        tracing::info!(collection = name, "compacting vector indexes");
        let scratch = LexicalIndex::new();
        let (c, w) = self.rebuild(name, &ix.settings, &scratch)?;
        *ix.cosine.write().expect("lock") = c;
        *ix.w2.write().expect("lock") = w;
        Ok(())
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Err(e) = self.checkpoint() {
            tracing::warn!(error = %e, "could not save the indexes; they will be rebuilt on open");
        }
    }
}

/// Refuses a query `what` vector (sentence or intent) of another dimension than the indexes'
/// `expected` (a query encoded by the old model just as a reindex switched).
fn same_dim(name: &str, ix: &Indexes, what: &str, expected: usize, dim: usize) -> Result<()> {
    if dim == expected {
        return Ok(());
    }
    Err(UserError::ModelMismatch {
        collection: name.into(),
        expected: format!(
            "{} ({expected}-dimensional {what} vectors)",
            ix.settings.model.id
        ),
        found: format!("a query {what} vector of {dim} dimensions"),
    }
    .into())
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

/// Checks a document as an upsert would: id length, non-empty text, object metadata.
pub(crate) fn validate(d: &NewDocument) -> Result<()> {
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
    match d.metadata {
        serde_json::Value::Object(_) | serde_json::Value::Null => Ok(()),
        _ => reject("metadata must be a JSON object, like {\"source\": \"faq\"}"),
    }
}
