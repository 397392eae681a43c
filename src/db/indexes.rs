//! One collection's in-memory state: its two vector graphs, its lexical index, its settings
//! and its cached calibrator, and the one routine that applies a batch of stored changes to
//! them (used by writes, deletes and a reindex's catch-up alike).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::index::hnsw::{Metric, VectorIndex};
use crate::index::LexicalIndex;
use crate::score::calibration::Calibrator;
use crate::score::wasserstein::embed;
use crate::store::CollectionSettings;
use crate::types::Gaussian;

/// A document as the indexes take it: its internal id, text and vectors.
pub(crate) struct Entry<'a> {
    pub internal: u64,
    pub text: &'a str,
    pub sentence: &'a [f32],
    pub intent: &'a Gaussian,
}

/// A collection's indexes (one store generation's).
pub(crate) struct Indexes {
    pub cosine: RwLock<VectorIndex>,
    pub w2: RwLock<VectorIndex>,
    pub lexical: LexicalIndex,
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
}

impl Indexes {
    /// Indexes over `cosine`, `w2` and `lexical` for a collection with `settings`.
    pub fn new(
        settings: CollectionSettings,
        physical: String,
        (cosine, w2, lexical): (VectorIndex, VectorIndex, LexicalIndex),
        saved_seq: Option<u64>,
    ) -> Self {
        Indexes {
            cosine: RwLock::new(cosine),
            w2: RwLock::new(w2),
            lexical,
            settings,
            physical,
            writer: Mutex::new(()),
            retired: AtomicBool::new(false),
            saved_seq: Mutex::new(saved_seq),
            calibrator: Mutex::new(None),
        }
    }

    /// Empty indexes for a collection with `settings`.
    pub fn empty(settings: CollectionSettings, physical: String) -> Self {
        let graphs = graphs(&settings, &[], &[]);
        Self::new(
            settings,
            physical,
            (graphs.0, graphs.1, LexicalIndex::new()),
            None,
        )
    }

    /// Removes `removed` (internal ids of replaced or deleted documents) and adds `added`.
    /// Returns whether the graphs now hold enough tombstones to be rebuilt.
    pub fn apply(&self, removed: &[u64], added: &[Entry<'_>]) -> bool {
        let (cosine, w2) = (
            self.cosine.read().expect("lock"),
            self.w2.read().expect("lock"),
        );
        for &old in removed {
            cosine.remove(old as usize);
            w2.remove(old as usize);
            self.lexical.remove(old);
        }
        let intents: Vec<Vec<f32>> = added.iter().map(|e| embed(e.intent)).collect();
        let sentences: Vec<(usize, &[f32])> = added
            .iter()
            .map(|e| (e.internal as usize, e.sentence))
            .collect();
        let intent_points: Vec<(usize, &[f32])> = added
            .iter()
            .zip(&intents)
            .map(|(e, i)| (e.internal as usize, i.as_slice()))
            .collect();
        cosine.insert_many(&sentences);
        w2.insert_many(&intent_points);
        for e in added {
            self.lexical.upsert(e.internal, e.text);
        }
        cosine.needs_compaction()
    }

    /// Replaces both graphs (after a compaction).
    pub fn replace_graphs(&self, (cosine, w2): (VectorIndex, VectorIndex)) {
        *self.cosine.write().expect("lock") = cosine;
        *self.w2.write().expect("lock") = w2;
    }

    /// True once a reindex replaced these indexes.
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }
}

/// The cosine and W2 graphs of `settings` over `sentences` and embedded `intents`.
pub(crate) fn graphs(
    settings: &CollectionSettings,
    sentences: &[(usize, Vec<f32>)],
    intents: &[(usize, Vec<f32>)],
) -> (VectorIndex, VectorIndex) {
    let (d, k, p) = (
        settings.model.dim,
        settings.model.intent_dim(),
        settings.hnsw,
    );
    (
        VectorIndex::build(Metric::Cosine, d, p, sentences),
        VectorIndex::build(Metric::L2, 2 * k, p, intents),
    )
}
