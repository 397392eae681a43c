//! What a database reports about a collection: settings, sizes, index health, search defaults, context vectors, and what a reindex did.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Result, UserError};
use crate::model::ModelIdentity;
use crate::store::{CollectionSettings, CollectionStats, SearchDefaults};

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
    /// Bytes of memory the two graphs' point vectors take (tombstones included; embedded
    /// backend only): 4 a dimension with `hnsw.vectors` f32, 1 (and 4 a point) with sq8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_vector_bytes: Option<u64>,
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

/// Refuses search defaults that do not validate or were chosen for another model than the
/// collection's.
pub(super) fn check_defaults(
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

/// The store key of a collection's own calibrator.
pub(crate) const CALIBRATION_KEY: &str = "calibration";

/// Meta key of a collection's [`ContextVectorsStamp`].
pub(crate) const CONTEXT_VECTORS_KEY: &str = "context_vectors";
