//! Saving the indexes at store checkpoints, and reopening the store after an I/O fault.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::indexes::Indexes;
use super::{Embedded, Slot};
use crate::error::{Result, UserError};
use crate::store::Durability;
use crate::sync::{MutexExt, RwLockExt};

impl Embedded {
    /// Saves the vector indexes of every open collection that changed since they were last
    /// saved, with the checkpoint (store seq) they reflect. Returns how many were saved.
    #[tracing::instrument(level = "debug", skip(self))]
    pub(super) fn checkpoint_all(&self) -> Result<usize> {
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

    /// Reopens the store after sled met an I/O error (a full disk: sled then fails every
    /// write until reopened), once the disk has room again, so writes resume without a
    /// restart. Returns whether it reopened. With flush durability the indexes stay: they only
    /// ever took writes sled had flushed. With relaxed durability sled may have lost writes it
    /// acknowledged from memory, so every open collection's indexes load again from the store.
    pub(super) fn recover_store(&self) -> Result<bool> {
        if !crate::error::storage_engine_io_failed() {
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
}
