//! Reindexing: re-encoding a collection onto another model as a new store generation with its
//! own indexes, built while the current ones serve. Writes made meanwhile are caught up in a
//! few passes, and the switch happens under the collection's writer lock. The database never
//! encodes: the caller passes the encoding function and the model it belongs to.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::indexes::{Entry, Indexes};
use super::Embedded;
use crate::db::ReindexReport;
use crate::error::{Result, UserError};
use crate::model::ModelIdentity;
use crate::store::{CollectionSettings, Generation, StoredDoc};
use crate::sync::{MutexExt, RwLockExt};
use crate::types::Encoded;

/// Catch-up passes run while the old generation serves before the final one under the
/// writer lock; a pass that finds at most [`SMALL_CATCH_UP`] changes ends them early.
const CATCH_UP_PASSES: usize = 4;
const SMALL_CATCH_UP: u64 = 64;
/// Documents encoded per reindex batch.
const REINDEX_BATCH: usize = 256;

/// Encodes a batch of texts with the new model.
pub type EncodeFn<'a> = &'a (dyn Fn(&[&str]) -> Result<Vec<Encoded>> + Sync);

/// Whether a reindex of a collection with `settings` onto `model` at `path` would change
/// nothing, and is refused: the same weights where the collection already finds them (or no
/// recorded place, as for a collection on the default model). The same weights at another
/// path are a model directory moved or copied: that reindex records the new place (encoding
/// the same vectors again), which is how a collection follows its model.
pub fn already_uses(
    settings: &CollectionSettings,
    model: &ModelIdentity,
    path: Option<&Path>,
) -> bool {
    settings.model.fingerprint == model.fingerprint
        && match (path, settings.model_path.as_deref()) {
            (Some(new), Some(old)) => Path::new(old) == new,
            _ => true,
        }
}

impl Embedded {
    /// Re-encodes collection `name` with `encode` (the texts' vectors under `model`, another
    /// model) as a new generation with new vector and lexical indexes, while the current
    /// generation keeps serving searches and writes; writes made meanwhile are caught up,
    /// then — under the writer lock, for as long as the last few changes take — the collection
    /// switches to the new generation and the old one is dropped. `model_path` (the model's
    /// directory) is recorded so a server started with another model can load this one.
    /// `progress(done, total)` counts documents. On error the collection is untouched (the
    /// unfinished generation is dropped on the next open or reindex).
    pub(super) fn reindex_onto(
        &self,
        name: &str,
        model: &ModelIdentity,
        encode: EncodeFn<'_>,
        model_path: Option<&Path>,
        progress: &dyn Fn(u64, u64),
    ) -> Result<ReindexReport> {
        let started = Instant::now();
        let settings = self.store.settings(name)?;
        if already_uses(&settings, model, model_path) {
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
        let shadow = Arc::new(Indexes::empty(new_settings.clone(), generation.physical()));
        let total = self.store.count(name)?;
        let mut encoded = 0u64;
        let mut count = |n: u64| {
            encoded += n;
            progress(encoded, total.max(encoded));
        };
        for _ in 0..CATCH_UP_PASSES {
            let changed = self.sync_generation(name, &generation, &shadow, encode, &mut count)?;
            if changed <= SMALL_CATCH_UP {
                break;
            }
        }
        let number = generation.number;
        self.with_writer(name, |old| {
            self.sync_generation(name, &generation, &shadow, encode, &mut count)?;
            let seq = self.store.switch_generation(generation, new_settings)?;
            shadow.save_files(&self.index_folder(&shadow.physical)?, seq, true)?;
            old.retired.store(true, Ordering::Release);
            let slot = self.open.reading().get(name).cloned();
            if let Some(slot) = slot {
                *slot.locked() = Some(shadow);
            }
            let old_dir = self.index_folder(&old.physical)?;
            if old_dir.exists() {
                std::fs::remove_dir_all(&old_dir).map_err(crate::error::io_err(format!(
                    "removing {}",
                    old_dir.display()
                )))?;
            }
            Ok(())
        })?;
        let documents = self.store.count(name)?;
        tracing::info!(
            collection = name,
            generation = number,
            documents,
            "reindexed"
        );
        Ok(ReindexReport {
            documents,
            encoded,
            generation: number,
            model: model.clone(),
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// Makes `generation` (and its indexes `shadow`) hold exactly the collection's live
    /// documents, re-encoding those it lacks with `encode`. Returns the changes made.
    fn sync_generation(
        &self,
        name: &str,
        generation: &Generation,
        shadow: &Arc<Indexes>,
        encode: EncodeFn<'_>,
        count: &mut dyn FnMut(u64),
    ) -> Result<u64> {
        let live = self.store.live_ids(name)?;
        let have = self.store.generation_ids(generation)?;
        let mut gone = Vec::new();
        for &internal in have.difference(&live) {
            if self
                .store
                .generation_remove(generation, internal)?
                .is_some()
            {
                gone.push(internal);
            }
        }
        // Under the shadow's own writer lock, like every apply: a background compaction of the
        // shadow swaps its graphs under that lock and must not miss these changes.
        shadow.locked_apply(&gone, &[])?;
        let mut changed = have.difference(&live).count() as u64;
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
            let vectors = encode(&texts)?;
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
                    .with_context(d.context.clone())
                })
                .collect();
            let replaced = self.store.generation_put(generation, &records)?;
            let added: Vec<Entry<'_>> = records
                .iter()
                .zip(&vectors)
                .map(|(r, e)| Entry {
                    internal: r.internal,
                    text: &r.text,
                    sentence: &e.sentence,
                    intent: &e.intent,
                    metadata: r.metadata(),
                })
                .collect();
            shadow.locked_apply(&replaced, &added)?;
            changed += chunk.len() as u64;
            count(chunk.len() as u64);
        }
        Ok(changed)
    }
}
