//! One collection's in-memory state: its two vector graphs, its lexical and metadata indexes,
//! its settings, its cached calibrator and search defaults, the one routine that applies a
//! batch of stored changes to them (used by writes, deletes and a reindex's catch-up alike),
//! saving them at a checkpoint, and the catch-up of a graph read from an older save with the
//! store.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::error::Result;
use crate::index::hnsw::{Metric, VectorIndex};
use crate::index::{text, LexicalIndex, MetadataIndex};
use crate::score::calibration::Calibrator;
use crate::score::wasserstein::embed;
use crate::store::{CollectionSettings, SearchDefaults};
use crate::sync::{MutexExt, RwLockExt};
use crate::types::Gaussian;

use crate::db::OpenedFrom;

/// A document as the indexes take it: its internal id, text and vectors.
pub(crate) struct Entry<'a> {
    pub internal: u64,
    pub text: &'a str,
    pub sentence: &'a [f32],
    pub intent: &'a Gaussian,
    /// Its metadata object.
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// A collection's indexes (one store generation's).
pub(crate) struct Indexes {
    pub cosine: RwLock<VectorIndex>,
    pub w2: RwLock<VectorIndex>,
    pub lexical: LexicalIndex,
    pub metadata: MetadataIndex,
    pub settings: CollectionSettings,
    /// The generation's physical name (its index directory).
    pub physical: String,
    /// Serialises writers (and checkpoints) of one collection; readers never take it.
    pub writer: Mutex<()>,
    /// Set (under `writer`) when a reindex replaced these indexes: writers that waited for
    /// the lock start over with the new ones, and readers holding them may retry.
    pub retired: AtomicBool,
    /// The store seq the index files on disk reflect (None: no valid files yet).
    pub saved_seq: Mutex<Option<u64>>,
    /// The collection's calibrator, decoded from the store on first use.
    pub calibrator: Mutex<Option<Arc<Calibrator>>>,
    /// The collection's search defaults, decoded from the store on first use (outer None:
    /// not read yet; inner None: it has none).
    pub search_defaults: Mutex<Option<Option<Arc<SearchDefaults>>>>,
    /// How the graphs came to be in this process.
    pub opened: OpenedFrom,
    /// Documents added and points removed since the graph files were saved (what a catch-up
    /// at the next open would redo).
    pub unsaved: AtomicUsize,
    /// The text indexes have a file on disk to catch up from (else the next checkpoint writes
    /// one, whatever the graphs' state).
    pub text_saved: AtomicBool,
    /// Set while a background compaction runs.
    compacting: AtomicBool,
}

impl Indexes {
    /// Indexes over `cosine`, `w2` and `lexical` for a collection with `settings`.
    pub fn new(
        settings: CollectionSettings,
        physical: String,
        (cosine, w2, lexical, metadata): (VectorIndex, VectorIndex, LexicalIndex, MetadataIndex),
        opened: OpenedFrom,
    ) -> Self {
        Indexes {
            cosine: RwLock::new(cosine),
            w2: RwLock::new(w2),
            lexical,
            metadata,
            settings,
            physical,
            writer: Mutex::new(()),
            retired: AtomicBool::new(false),
            saved_seq: Mutex::new(opened.saved_seq),
            calibrator: Mutex::new(None),
            search_defaults: Mutex::new(None),
            unsaved: AtomicUsize::new(opened.inserted + opened.removed),
            text_saved: AtomicBool::new(opened.text_saved_seq.is_some()),
            opened,
            compacting: AtomicBool::new(false),
        }
    }

    /// Empty indexes for a collection with `settings`.
    pub fn empty(settings: CollectionSettings, physical: String) -> Self {
        let (d, k, p) = (
            settings.model.dim,
            settings.model.intent_dim(),
            settings.hnsw,
        );
        let graphs = (
            VectorIndex::new(Metric::Cosine, d, p),
            VectorIndex::new(Metric::L2, 2 * k, p),
        );
        Self::new(
            settings,
            physical,
            (
                graphs.0,
                graphs.1,
                LexicalIndex::new(),
                MetadataIndex::new(),
            ),
            OpenedFrom::default(),
        )
    }

    /// Saves the index files into `dir` at store checkpoint `seq`: both graphs when `graphs`,
    /// the text indexes always. The caller holds the writer lock and has flushed the store up
    /// to `seq` (files are never ahead of the store on disk).
    pub fn save_files(&self, dir: &Path, seq: u64, graphs: bool) -> Result<()> {
        if graphs {
            self.cosine.reading().save(dir, "cosine", seq)?;
            self.w2.reading().save(dir, "w2", seq)?;
            *self.saved_seq.locked() = Some(seq);
            self.unsaved.store(0, Ordering::Relaxed);
        }
        text::save(dir, seq, &self.lexical, &self.metadata)?;
        self.text_saved.store(true, Ordering::Release);
        Ok(())
    }

    /// [`Self::apply`] taking the writer lock itself (for indexes no writer serialises yet:
    /// a reindex's shadow).
    pub fn locked_apply(self: &Arc<Self>, removed: &[u64], added: &[Entry<'_>]) -> Result<()> {
        let _writer = self.writer.locked();
        self.apply(removed, added)
    }

    /// Removes `removed` (internal ids of replaced or deleted documents) and adds `added`
    /// (whose vectors the caller checked); starts a background compaction when the graphs
    /// hold enough tombstones. The caller holds the writer lock: a background compaction
    /// swaps its graphs under it and must see every change.
    pub fn apply(self: &Arc<Self>, removed: &[u64], added: &[Entry<'_>]) -> Result<()> {
        let compact = {
            let (cosine, w2) = (self.cosine.reading(), self.w2.reading());
            for &old in removed {
                cosine.remove(old);
                w2.remove(old);
                self.lexical.remove(old);
                self.metadata.remove(old);
            }
            let intents: Vec<Vec<f32>> = added.iter().map(|e| embed(e.intent)).collect();
            let sentences: Vec<(u64, &[f32])> =
                added.iter().map(|e| (e.internal, e.sentence)).collect();
            let intent_points: Vec<(u64, &[f32])> = added
                .iter()
                .zip(&intents)
                .map(|(e, i)| (e.internal, i.as_slice()))
                .collect();
            cosine.insert_many(&sentences)?;
            w2.insert_many(&intent_points)?;
            for e in added {
                self.lexical.upsert(e.internal, e.text);
                self.metadata.upsert(e.internal, &e.metadata);
            }
            self.unsaved
                .fetch_add(removed.len() + added.len(), Ordering::Relaxed);
            cosine.needs_compaction()
        };
        if compact {
            self.compact_in_background();
        }
        Ok(())
    }

    /// Rebuilds both graphs without their tombstones on a background thread, unless one is
    /// under way: searches and writes go on against the current graphs; writes made meanwhile
    /// are caught up, and the new graphs swapped in, under the writer lock.
    pub fn compact_in_background(self: &Arc<Self>) {
        if self.compacting.swap(true, Ordering::AcqRel) {
            return;
        }
        let ix = self.clone();
        let spawned = std::thread::Builder::new()
            .name("kindred-compact".into())
            .spawn(move || {
                let started = std::time::Instant::now();
                match ix.compact() {
                    Ok(()) => tracing::info!(
                        seconds = started.elapsed().as_secs_f64(),
                        "compacted the vector indexes"
                    ),
                    Err(e) => tracing::warn!(error = %e, "compaction failed; will retry"),
                }
                ix.compacting.store(false, Ordering::Release);
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "could not start a compaction");
            self.compacting.store(false, Ordering::Release);
        }
    }

    fn compact(&self) -> Result<()> {
        let fresh = (
            self.cosine.reading().compacted(),
            self.w2.reading().compacted(),
        );
        // Most of the catching up happens before writers are stopped.
        catch_up(&self.cosine.reading(), &fresh.0)?;
        catch_up(&self.w2.reading(), &fresh.1)?;
        let _writer = self.writer.locked();
        if self.is_retired() {
            return Ok(());
        }
        catch_up(&self.cosine.reading(), &fresh.0)?;
        catch_up(&self.w2.reading(), &fresh.1)?;
        *self.cosine.writing() = fresh.0;
        *self.w2.writing() = fresh.1;
        Ok(())
    }

    /// True once a reindex replaced these indexes.
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }
}

/// Makes `new` hold exactly `old`'s live points: removes what `old` no longer has, inserts
/// what it gained.
fn catch_up(old: &VectorIndex, new: &VectorIndex) -> Result<()> {
    let live: HashSet<u64> = old.ids().into_iter().collect();
    let mut have = HashSet::with_capacity(live.len());
    for id in new.ids() {
        if live.contains(&id) {
            have.insert(id);
        } else {
            new.remove(id);
        }
    }
    let missing: Vec<(u64, Vec<f32>)> = live
        .iter()
        .filter(|id| !have.contains(id))
        .filter_map(|&id| old.vector(id).map(|v| (id, v)))
        .collect();
    let refs: Vec<(u64, &[f32])> = missing.iter().map(|(id, v)| (*id, v.as_slice())).collect();
    new.insert_many(&refs)
}

/// Catches a graph read from an older save up with the store: tombstones its points that are
/// not among `live` (the store's internal ids, ascending: documents replaced or deleted
/// since the save) and inserts `missing` (documents written since, ids the graph never had).
/// Internal ids are never reused, so a point the save holds is the store's document of that
/// id (the caller has checked its vectors). Returns (inserted, removed).
pub(crate) fn catch_up_with_store(
    graph: &VectorIndex,
    live: &[u64],
    missing: &[(u64, Vec<f32>)],
) -> Result<(usize, usize)> {
    debug_assert!(live.windows(2).all(|w| w[0] < w[1]), "live ids ascend");
    let stale: Vec<u64> = graph
        .ids()
        .into_iter()
        .filter(|id| live.binary_search(id).is_err())
        .collect();
    for &id in &stale {
        graph.remove(id);
    }
    let refs: Vec<(u64, &[f32])> = missing.iter().map(|(id, v)| (*id, v.as_slice())).collect();
    graph.insert_many(&refs)?;
    Ok((missing.len(), stale.len()))
}

/// The cosine and W2 graphs of `settings` over `sentences` and embedded `intents`.
pub(crate) fn graphs(
    settings: &CollectionSettings,
    sentences: &[(u64, Vec<f32>)],
    intents: &[(u64, Vec<f32>)],
) -> Result<(VectorIndex, VectorIndex)> {
    let (d, k, p) = (
        settings.model.dim,
        settings.model.intent_dim(),
        settings.hnsw,
    );
    Ok((
        VectorIndex::build(Metric::Cosine, d, p, sentences)?,
        VectorIndex::build(Metric::L2, 2 * k, p, intents)?,
    ))
}
