//! Collections and documents: a document as written, a collection's settings, sizes, index
//! health and search defaults, the model its vectors come from, what a reindex did.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::search::{FusionWeights, Mode, Rerank, Weighting};
use crate::{db, model, store, types};

/// A document as a user gives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewDocument {
    /// External id (1–512 bytes).
    pub id: String,
    /// The question.
    pub text: String,
    /// A JSON object (or absent).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub metadata: serde_json::Value,
    /// Texts that go with the question: a string or a list of strings (absent: none).
    #[serde(
        default,
        deserialize_with = "db::one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schema(schema_with = context_schema)]
    pub context: Vec<String>,
}

impl From<NewDocument> for db::NewDocument {
    fn from(d: NewDocument) -> Self {
        db::NewDocument {
            id: d.id,
            text: d.text,
            metadata: d.metadata,
            context: d.context,
        }
    }
}

impl From<db::NewDocument> for NewDocument {
    fn from(d: db::NewDocument) -> Self {
        NewDocument {
            id: d.id,
            text: d.text,
            metadata: d.metadata,
            context: d.context,
        }
    }
}

/// Encoder arithmetic: `fp32` or `int8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// f32 weights and activations.
    Fp32,
    /// Weights quantised to int8 per output channel, activations per row.
    Int8,
}

impl Precision {
    /// fp32 (a function, for serde defaults).
    pub fn fp32() -> Self {
        Precision::Fp32
    }
}

fn is_fp32(p: &Precision) -> bool {
    *p == Precision::Fp32
}

impl From<types::Precision> for Precision {
    fn from(p: types::Precision) -> Self {
        match p {
            types::Precision::Fp32 => Precision::Fp32,
            types::Precision::Int8 => Precision::Int8,
        }
    }
}

impl From<Precision> for types::Precision {
    fn from(p: Precision) -> Self {
        match p {
            Precision::Fp32 => types::Precision::Fp32,
            Precision::Int8 => types::Precision::Int8,
        }
    }
}

/// Who a model is: what a store records so it can refuse vectors from another model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ModelIdentity {
    /// Model id.
    pub id: String,
    /// `sha256:` + hex digest of model.safetensors (of it and kindred-heads.safetensors when
    /// the model carries learned heads).
    pub fingerprint: String,
    /// Vector dimension.
    pub dim: usize,
    /// Maximum sequence length in wordpieces.
    pub max_len: usize,
    /// Intent dimension k when a learned intent head makes it differ from `dim` (absent: the
    /// intents have `dim` dimensions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent_dim: Option<usize>,
    /// Arithmetic the vectors were made with (absent in stores older than int8: fp32). An
    /// int8 identity's fingerprint ends in `+int8`, so every check by fingerprint keeps the two
    /// precisions apart.
    #[serde(default = "Precision::fp32", skip_serializing_if = "is_fp32")]
    pub precision: Precision,
}

impl From<model::ModelIdentity> for ModelIdentity {
    fn from(m: model::ModelIdentity) -> Self {
        ModelIdentity {
            id: m.id,
            fingerprint: m.fingerprint,
            dim: m.dim,
            max_len: m.max_len,
            intent_dim: m.intent_dim,
            precision: m.precision.into(),
        }
    }
}

/// HNSW parameters of a collection's vector indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HnswParams {
    /// Links per node (M).
    pub m: usize,
    /// Candidate list size while building.
    pub ef_construction: usize,
    /// Candidate list size while searching (at least k).
    pub ef_search: usize,
    /// How the graphs keep vectors in memory: `f32` (default) or `sq8` (int8 codes, 4× smaller;
    /// candidates are still scored from their exact stored vectors). Embedded backend only.
    #[serde(default, skip_serializing_if = "GraphVectors::is_f32")]
    pub vectors: GraphVectors,
}

/// How a vector index keeps vectors: `f32` or `sq8`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum GraphVectors {
    /// 4 bytes a dimension.
    #[default]
    F32,
    /// 1 byte a dimension and one scale a vector.
    Sq8,
}

impl GraphVectors {
    fn is_f32(&self) -> bool {
        *self == GraphVectors::F32
    }
}

impl From<types::HnswParams> for HnswParams {
    fn from(h: types::HnswParams) -> Self {
        HnswParams {
            m: h.m,
            ef_construction: h.ef_construction,
            ef_search: h.ef_search,
            vectors: match h.vectors {
                types::GraphVectors::F32 => GraphVectors::F32,
                types::GraphVectors::Sq8 => GraphVectors::Sq8,
            },
        }
    }
}

impl From<HnswParams> for types::HnswParams {
    fn from(h: HnswParams) -> Self {
        types::HnswParams {
            m: h.m,
            ef_construction: h.ef_construction,
            ef_search: h.ef_search,
            vectors: match h.vectors {
                GraphVectors::F32 => types::GraphVectors::F32,
                GraphVectors::Sq8 => types::GraphVectors::Sq8,
            },
        }
    }
}

/// A collection's settings, fixed at creation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
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

impl From<store::CollectionSettings> for CollectionSettings {
    fn from(s: store::CollectionSettings) -> Self {
        CollectionSettings {
            model: s.model.into(),
            codec: s.codec,
            hnsw: s.hnsw.into(),
            generation: s.generation,
            model_path: s.model_path,
        }
    }
}

/// Size statistics of a collection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
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
    /// document from this many (a uniform sample). Absent: counted over every document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled: Option<u64>,
}

impl From<store::CollectionStats> for CollectionStats {
    fn from(s: store::CollectionStats) -> Self {
        CollectionStats {
            documents: s.documents,
            token_vectors: s.token_vectors,
            record_bytes: s.record_bytes,
            token_vector_bytes: s.token_vector_bytes,
            bytes_per_document: s.bytes_per_document,
            bytes_per_token_vector: s.bytes_per_token_vector,
            seq: s.seq,
            sampled: s.sampled,
        }
    }
}

/// Index health of a collection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
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
    /// Bytes of memory the two graphs' point vectors take, tombstones included (embedded
    /// backend only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_vector_bytes: Option<u64>,
    /// How this server's graphs of the collection came to be when it opened them (embedded
    /// backend only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened: Option<OpenedFrom>,
}

impl From<db::IndexInfo> for IndexInfo {
    fn from(i: db::IndexInfo) -> Self {
        IndexInfo {
            cosine_points: i.cosine_points,
            w2_points: i.w2_points,
            tombstones: i.tombstones,
            w2_tombstones: i.w2_tombstones,
            lexical_documents: i.lexical_documents,
            graph_vector_bytes: i.graph_vector_bytes,
            opened: i.opened.map(OpenedFrom::from),
        }
    }
}

/// How a server's graphs of a collection came to be: read from their saved files and caught
/// up with the writes made after that save (after a crash, those since the last checkpoint),
/// or built from every stored document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OpenedFrom {
    /// The store write (`stats.seq`) the saved files reflected, when the graphs were read from
    /// them; null: made empty (a new collection) or built from the store (no usable save).
    pub saved_seq: Option<u64>,
    /// Documents written after that save, added to the graphs when they were read.
    pub inserted: usize,
    /// Documents replaced or deleted after that save, tombstoned when the graphs were read.
    pub removed: usize,
    /// The store write the saved lexical and metadata indexes reflected, when they were read
    /// from their file; null: filled from every stored record.
    pub text_saved_seq: Option<u64>,
    /// Stored records the open read: every one when it built an index from the store; with
    /// every index file read, only the documents written since the save and a sample checked
    /// against the files.
    pub records_read: u64,
}

impl From<db::OpenedFrom> for OpenedFrom {
    fn from(o: db::OpenedFrom) -> Self {
        OpenedFrom {
            saved_seq: o.saved_seq,
            inserted: o.inserted,
            removed: o.removed,
            text_saved_seq: o.text_saved_seq,
            records_read: o.records_read,
        }
    }
}

/// Who chose a collection's search defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DefaultsSource {
    /// Measured on the collection's own data (`kindred tune`).
    Learned,
    /// Set by an operator (`PUT /v1/collections/{c}/search-defaults`).
    Set,
}

impl From<store::DefaultsSource> for DefaultsSource {
    fn from(s: store::DefaultsSource) -> Self {
        match s {
            store::DefaultsSource::Learned => DefaultsSource::Learned,
            store::DefaultsSource::Set => DefaultsSource::Set,
        }
    }
}

/// A collection's search defaults: the settings its searches use where a request does not
/// say, and why they were chosen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SearchDefaults {
    /// Where candidates come from.
    pub mode: Mode,
    /// How candidates are ordered.
    pub rerank: Rerank,
    /// RCMD's token weights.
    pub weights: Weighting,
    /// Reciprocal-rank fusion weights (used by `mode: hybrid`).
    pub fusion: FusionWeights,
    /// `learned` (measured on the collection's data) or `set` (by an operator).
    pub source: DefaultsSource,
    /// Why these: one sentence for people, with the measured numbers when learned.
    pub reason: String,
    /// The fingerprint of the model they were chosen for.
    pub model_fingerprint: String,
    /// When they were chosen: RFC 3339, UTC.
    pub chosen_at: String,
    /// What was compared (free-form, e.g. a table of configurations and their scores); null
    /// when nothing was.
    #[serde(default)]
    pub evidence: serde_json::Value,
}

impl From<store::SearchDefaults> for SearchDefaults {
    fn from(d: store::SearchDefaults) -> Self {
        SearchDefaults {
            mode: d.mode.into(),
            rerank: d.rerank.into(),
            weights: d.weights.into(),
            fusion: d.fusion.into(),
            source: d.source.into(),
            reason: d.reason,
            model_fingerprint: d.model_fingerprint,
            chosen_at: d.chosen_at,
            evidence: d.evidence,
        }
    }
}

/// A collection's search defaults as its info reports them, with whether they are stale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SearchDefaultsInfo {
    /// The defaults, as stored.
    #[serde(flatten)]
    pub defaults: SearchDefaults,
    /// True when they were chosen for another model than the collection's vectors now come
    /// from (after a reindex): kept and shown, never applied. Tune or set them again.
    pub stale: bool,
}

impl From<db::SearchDefaultsInfo> for SearchDefaultsInfo {
    fn from(i: db::SearchDefaultsInfo) -> Self {
        SearchDefaultsInfo {
            defaults: i.defaults.into(),
            stale: i.stale,
        }
    }
}

/// What `kindred collection stats` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
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
    /// The search defaults its searches use where a request does not say (absent: none; the
    /// server's apply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_defaults: Option<SearchDefaultsInfo>,
    /// The context vectors `rerank: context` reads (absent: none, or the Milvus backend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_vectors: Option<ContextVectorsInfo>,
}

/// A collection's context vectors: which model made the set, for how many documents, and
/// whether a reindex since made it stale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ContextVectorsInfo {
    /// The fingerprint of the model that encoded them.
    pub model: String,
    /// Documents with a context vector when the set was made (documents written since add
    /// theirs).
    pub documents: u64,
    /// True when `model` is not the collection's model (a reindex since): `rerank: context`
    /// is refused until `kindred tune` or a reindex with `context_vectors` makes them again.
    pub stale: bool,
}

impl From<db::ContextVectorsInfo> for ContextVectorsInfo {
    fn from(i: db::ContextVectorsInfo) -> Self {
        ContextVectorsInfo {
            model: i.stamp.model,
            documents: i.stamp.documents,
            stale: i.stale,
        }
    }
}

impl From<db::CollectionInfo> for CollectionInfo {
    fn from(c: db::CollectionInfo) -> Self {
        CollectionInfo {
            name: c.name,
            settings: c.settings.into(),
            format_version: c.format_version,
            stats: c.stats.into(),
            index: c.index.into(),
            search_defaults: c.search_defaults.map(Into::into),
            context_vectors: c.context_vectors.map(Into::into),
        }
    }
}

/// What a reindex did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
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

impl From<db::ReindexReport> for ReindexReport {
    fn from(r: db::ReindexReport) -> Self {
        ReindexReport {
            documents: r.documents,
            encoded: r.encoded,
            generation: r.generation,
            model: r.model.into(),
            seconds: r.seconds,
        }
    }
}

/// The schema of a document's `context` as written: a string or a list of strings.
pub(crate) fn context_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Type};
    let text = || ObjectBuilder::new().schema_type(Type::String);
    OneOfBuilder::new()
        .item(text())
        .item(ArrayBuilder::new().items(text()))
        .description(Some(
            "Texts that go with the question (answers, comments, the FAQ entry it was filed \
             under): one string or a list of strings, stored and returned with the document, \
             never encoded or searched. At most 64 texts and 64 KiB in all.",
        ))
        .build()
        .into()
}
