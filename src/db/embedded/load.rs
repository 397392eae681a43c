//! Opening a collection's indexes: read from their saved files and caught up with the store, or rebuilt from it.

use super::indexes::{self, Indexes};
use super::Embedded;
use crate::db::OpenedFrom;
use crate::error::{InternalError, Result, UserError};
use crate::index::hnsw::{self, Metric, VectorIndex};
use crate::index::{files, text, LexicalIndex, MetadataIndex};
use crate::score::wasserstein::embed;
use crate::store::CollectionSettings;

impl Embedded {
    pub(super) fn load_indexes(&self, name: &str) -> Result<Indexes> {
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
