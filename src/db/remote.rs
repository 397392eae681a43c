//! The Milvus backend: collections kept in a Milvus server or cluster instead of the embedded
//! store and graphs, for collections that outgrow one machine.
//!
//! What it owns: the mapping of a kindred collection onto Milvus collections, the translation
//! of kindred's metadata filters into Milvus expressions, batched upserts and deletes, reads
//! at Session consistency (a write acknowledged by this node is seen by its every later read;
//! other nodes see it within Milvus's graceful time),
//! retries with backoff, and startup checks. What stays above it is everything else:
//! encoding, fusion, RCMD, explanations, calibration math, the API.
//!
//! Layouts, chosen when a collection is created from what the server can do
//! ([`Capabilities`], from its version) and recorded in the shared metadata (`meta/<C>/layout`;
//! a collection without the record has the first layout), so each collection keeps its own
//! after a server upgrade. For collection `C`, with `c` = [`physical`]`(C)`:
//! - **split** (Milvus 2.3: one vector field per collection): `c_docs` has `id` Int64 primary
//!   key (the document's internal id, [`internal_id`]: a stable 63-bit hash of its external id,
//!   so every node agrees without a shared counter), `doc` the external id, `meta` JSON (what
//!   filters read), `text` (the first 8 KiB of the text, what a node builds its BM25 index
//!   from), `rec0..rec3` the kindred record (text, token vectors, intent, context) base64 in up
//!   to four VarChar chunks, and `sentence` FloatVector(dim), HNSW, COSINE; `c_intent` has
//!   `id`, `meta` and `w2` FloatVector(2·k) = [μ; σ], HNSW, L2 (squared L2 on [μ; σ] is the
//!   squared exact 2-Wasserstein distance of diagonal Gaussians);
//! - **one** (Milvus 2.4: several vector fields per collection): `c_docs` alone, with `w2`
//!   beside `sentence`, so a batch is one upsert;
//! - **full-text** (Milvus 2.5 and later, milvus-lite 3): as **one**, plus `lex` — the text's
//!   lexical terms ([`lexical_terms`]: the words and word bigrams kindred's own BM25 index
//!   uses, a bigram joined by `_`) analysed by the server's standard tokenizer — and `bm25`, the
//!   sparse vector Milvus's BM25 function derives from it (SPARSE_INVERTED_INDEX, k1 1.2,
//!   b 0.75: kindred's own BM25). The lexical stage is then a Milvus full-text search with
//!   the filter pushed down, fresh on every node at once.
//!
//! And `kindred_meta` (shared): `key` → `value`, the collection settings, calibration, search
//! defaults, layouts and review verdicts, so every kindred node sees the same.
//!
//! Node-local (documented in docs/scale-out.md): a BM25 index of the `text` field, built when
//! a node first opens the collection, kept current with that node's own writes, and rebuilt
//! in the background every [`LEXICAL_REFRESH`] to take in other nodes' changes. It is the
//! lexical stage on the split and one layouts, and on every layout the source of IDF weights
//! and of the lexical feature of P(duplicate).
//!
//! Milvus has no transaction across collections: on the split layout a batch is written to
//! `c_intent` and then to `c_docs`, each an upsert by primary key, so a batch that fails
//! part-way (the server went away) can be retried as is; it is acknowledged only when both
//! succeeded. On the other layouts a batch of up to [`BATCH_ROWS`] rows is one upsert.

// The SDK's error type is large (176 bytes); results carrying it are the SDK's shape.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use milvus::v2::prelude::*;
use serde_json::json;

use crate::error::{Result, UserError};
use crate::index::{Filter, LexicalIndex};
use crate::store::{CollectionSettings, StoredDoc, Upserted};
use crate::sync::MutexExt;

/// Longest VarChar Milvus stores.
const CHUNK_CHARS: usize = 65_535;
/// Record chunks per document (`rec0..rec3`): a record may be up to 4 × 64 KiB of base64.
const CHUNKS: usize = 4;
/// Rows per upsert call.
const BATCH_ROWS: usize = 256;
/// JSON bytes per upsert call, well under the gRPC message limits of Milvus's proxy (a row
/// may carry 256 KiB of record).
const BATCH_BYTES: usize = 16 << 20;
/// Most rows one query returns (Milvus's limit is 16,384).
const QUERY_ROWS: usize = 16_384;
/// Ids per `id in [..]` query when asking which candidates a filter admits.
const ADMITTED_PER_QUERY: usize = 4_096;
/// Records per read: a gRPC answer must stay under the client's 4 MiB, and a record may be
/// up to [`CHUNKS`] × 64 KiB of base64.
const RECORDS_PER_READ: usize = 12;
/// Bytes of a document's text kept in the `text` field, what a node builds its BM25 index
/// from (pages of 256 stay under 4 MiB).
const TEXT_BYTES: usize = 8192;
/// How old a node's BM25 index may get before a search starts rebuilding it in the background
/// (what brings other nodes' writes and deletes into this node's lexical stage); the
/// environment variable `KINDRED_MILVUS_LEXICAL_REFRESH_SECS` changes it.
const LEXICAL_REFRESH: Duration = Duration::from_secs(60);
/// How many documents [`Remote::stats`] reads to extrapolate a collection's sizes from.
const STATS_SAMPLE: usize = 256;
/// On the full-text layout, about how many documents a node's BM25 index holds (every
/// document with an internal id up to a bound: a uniform sample, ids being hashes): the index
/// then only gives IDF weights and the lexical feature of P(duplicate), for which a sample's
/// document frequencies do; the environment variable `KINDRED_MILVUS_IDF_SAMPLE` changes it.
const IDF_SAMPLE: usize = 100_000;
/// The consistency of every read: Milvus's Session level, which makes a write this node
/// acknowledged visible to its next read without waiting for the cluster's time tick (Strong
/// costs up to the tick interval, about 200 ms, on every read). Writes made through another
/// node become visible within Milvus's graceful time (a few hundred ms by default).
const READS: ConsistencyLevel = ConsistencyLevel::Session;
/// How long a node trusts a shared metadata value it read (settings, calibration, search
/// defaults) before reading it again.
const META_TTL: Duration = Duration::from_secs(1);
/// The shared metadata collection.
const META: &str = "kindred_meta";
/// How long one try of a call may take before it is retried.
const TRY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a call may take with its retries: within the server's request timeout (30 s by
/// default), so a client hears 503 `backend_unavailable` rather than a timeout.
const CALL_BUDGET: Duration = Duration::from_secs(20);

/// A connection to a Milvus server, with the runtime its client runs on.
pub(crate) struct Remote {
    url: String,
    client: Arc<ClientV2>,
    rt: Option<tokio::runtime::Runtime>,
    version: String,
    /// What the server can do, from its version.
    capabilities: Capabilities,
    /// Each open collection's layout (it never changes once created).
    layouts: Mutex<HashMap<String, Layout>>,
    /// Per collection, this node's BM25 index (built on first use, rebuilt in the background
    /// every [`LEXICAL_REFRESH`]).
    lexical: Mutex<HashMap<String, Lexical>>,
    /// Held while a BM25 index is built for the first time, so concurrent first searches wait
    /// for one build instead of each scanning the collection.
    building: Mutex<()>,
    /// Shared metadata values as last read or written here, with when ([`Remote::meta`]).
    meta_cache: Mutex<HashMap<String, (std::time::Instant, Option<String>)>>,
    /// [`LEXICAL_REFRESH`] or as the environment sets it.
    lexical_refresh: Duration,
    /// [`IDF_SAMPLE`] or as the environment sets it.
    idf_sample: usize,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("url", &self.url)
            .field("version", &self.version)
            .finish()
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        // Never blocks, so dropping the database inside an async task is fine.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// What a Milvus server can do that kindred's layouts use ([`capabilities`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Capabilities {
    /// Several vector fields in one collection (Milvus 2.4).
    pub vector_fields: bool,
    /// Full-text search: analysed VarChar fields, the BM25 function and sparse BM25 search
    /// (Milvus 2.5).
    pub full_text: bool,
}

/// How one kindred collection is laid out in Milvus (the module doc describes each); ordered
/// by what the server must offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Layout {
    /// `c_docs` and `c_intent`.
    Split,
    /// `c_docs` with both vector fields.
    One,
    /// `c_docs` with both vector fields and the BM25 field.
    FullText,
}

impl Layout {
    /// The best layout a server with `c` offers.
    fn for_server(c: Capabilities) -> Layout {
        match (c.vector_fields, c.full_text) {
            (true, true) => Layout::FullText,
            (true, false) => Layout::One,
            _ => Layout::Split,
        }
    }

    /// Its name in the shared metadata and the docs.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Split => "split",
            Layout::One => "one",
            Layout::FullText => "full-text",
        }
    }

    fn from_name(name: &str) -> Option<Layout> {
        [Layout::Split, Layout::One, Layout::FullText]
            .into_iter()
            .find(|l| l.name() == name)
    }

    /// The Milvus collection (suffix) holding the intents' `w2` field.
    fn intent_part(self) -> &'static str {
        match self {
            Layout::Split => "intent",
            Layout::One | Layout::FullText => "docs",
        }
    }
}

/// What a server of `version` can do: "v2.3.5-lite" neither, "v2.4.x" several vector fields,
/// "v2.5" and later both; milvus-lite 3 ("milvus_lite-3.2.2", the Python server speaking the
/// Milvus 2.6 API) both. An unknown version gets the split layout, which every server from 2.3
/// serves.
pub(crate) fn capabilities(version: &str) -> Capabilities {
    match version.strip_prefix("milvus_lite-") {
        Some(lite) => {
            let three = major_minor(lite).is_some_and(|v| v >= (3, 0));
            Capabilities {
                vector_fields: three,
                full_text: three,
            }
        }
        None => {
            let v = major_minor(version);
            Capabilities {
                vector_fields: v.is_some_and(|v| v >= (2, 4)),
                full_text: v.is_some_and(|v| v >= (2, 5)),
            }
        }
    }
}

/// The major and minor number of a version string ("v2.3.5-lite" → (2, 3)).
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}

/// `text` as the `lex` field holds it: kindred's lexical terms ([`crate::text::terms`]: the
/// words and word bigrams) separated by spaces, a bigram's words joined by `_` so the
/// server's standard tokenizer keeps it one token (`_` never occurs inside a term: terms split
/// at every character that is not alphanumeric). At most `max` bytes, cut between terms.
pub(crate) fn lexical_terms(text: &str, max: usize) -> String {
    let mut out = String::new();
    for t in crate::text::terms(text) {
        let t = t.replace(' ', "_");
        if out.len() + t.len() + 1 > max {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&t);
    }
    out
}

/// A node's BM25 index of one collection.
struct Lexical {
    index: Arc<LexicalIndex>,
    /// The index holds the documents with internal ids up to this one: all of them
    /// (`u64::MAX`), or on the full-text layout of a large collection about [`IDF_SAMPLE`], a
    /// uniform sample since internal ids are hashes.
    bound: u64,
    built: std::time::Instant,
    /// While a rebuild runs: this node's writes since it started (id, text; None: deleted),
    /// replayed onto the new index before it replaces this one.
    pending: Option<Vec<(u64, Option<String>)>>,
}

impl Lexical {
    fn upsert(&mut self, id: u64, text: &str) {
        if id <= self.bound {
            self.index.upsert(id, text);
        }
        if let Some(p) = &mut self.pending {
            p.push((id, Some(text.to_string())));
        }
    }

    fn remove(&mut self, id: u64) {
        self.index.remove(id);
        if let Some(p) = &mut self.pending {
            p.push((id, None));
        }
    }
}

/// The Milvus collection names of kindred collection `name` (letters, digits and `_` only:
/// `_` becomes `__` and `-` becomes `_h`, so distinct names stay distinct).
pub(crate) fn physical(name: &str) -> String {
    let mut out = String::from("kd_");
    for c in name.chars() {
        match c {
            '_' => out.push_str("__"),
            '-' => out.push_str("_h"),
            c => out.push(c),
        }
    }
    out
}

/// A document's internal id on the Milvus backend: the first 63 bits of SHA-256 of its
/// external id, the same on every node.
pub(crate) fn internal_id(id: &str) -> u64 {
    use sha2::Digest;
    let h = sha2::Sha256::digest(id.as_bytes());
    u64::from_le_bytes(h[..8].try_into().expect("8 bytes")) & (i64::MAX as u64)
}

/// `filter` as a Milvus boolean expression over the JSON field `field` (None: admits all).
/// Equality also matches a metadata array holding the value, as the embedded index does.
pub(crate) fn expression(filter: &Filter, field: &str) -> Option<String> {
    let clauses = filter.clauses_json();
    if clauses.is_empty() {
        return None;
    }
    let parts: Vec<String> = clauses
        .iter()
        .map(|(key, cond)| {
            let at = format!("{field}[{}]", json!(key));
            match cond {
                crate::index::ClauseJson::AnyOf(values) => {
                    // `==` per value rather than `in [..]`: milvus-lite takes `in` only on a
                    // field, not on a JSON path; Milvus takes both.
                    let list = serde_json::Value::Array(values.clone()).to_string();
                    let equal: Vec<String> =
                        values.iter().map(|v| format!("{at} == {v}")).collect();
                    format!(
                        "({} or json_contains_any({at}, {list}))",
                        equal.join(" or ")
                    )
                }
                crate::index::ClauseJson::Range { low, high } => {
                    let mut c = Vec::new();
                    if let Some((b, inc)) = low {
                        c.push(format!(
                            "{at} {} {}",
                            if *inc { ">=" } else { ">" },
                            num(*b)
                        ));
                    }
                    if let Some((b, inc)) = high {
                        c.push(format!(
                            "{at} {} {}",
                            if *inc { "<=" } else { "<" },
                            num(*b)
                        ));
                    }
                    format!("({})", c.join(" and "))
                }
            }
        })
        .collect();
    Some(parts.join(" and "))
}

fn num(x: f64) -> String {
    // Always with a decimal point, so Milvus compares as a float.
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

fn ids_expr(ids: &[u64]) -> String {
    let list: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    format!("id in [{}]", list.join(","))
}

/// `expr` (a translated filter, if any) restricted to the documents `ids`.
fn and_ids(expr: Option<&str>, ids: &[u64]) -> String {
    match expr {
        Some(x) => format!("({x}) and {}", ids_expr(ids)),
        None => ids_expr(ids),
    }
}

fn unavailable(url: &str, what: &str, e: impl std::fmt::Display) -> crate::Error {
    UserError::BackendUnavailable {
        backend: format!("milvus at {url}"),
        reason: format!("{what}: {e}"),
    }
    .into()
}

/// Whether a server's refusal says the collection is not loaded: Milvus's "collection not
/// loaded", milvus-lite's "is in state 'released'; call load() before search/get/query".
fn not_loaded(message: &str) -> bool {
    message.contains("not loaded") || message.contains("call load()")
}

/// Whether a failed call is worth retrying: anything but the server refusing the request or
/// a request or answer kindred could not build or read.
fn transient(e: &Error) -> bool {
    !matches!(
        e,
        Error::Server(_)
            | Error::Validation(_)
            | Error::Conversion(_)
            | Error::MalformedResponse(_)
    )
}

impl Remote {
    /// Connects to the Milvus server at `url` (`milvus://HOST:PORT` or `http://HOST:PORT`),
    /// checks its version and creates the shared metadata collection if missing.
    pub fn connect(url: &str) -> Result<Self> {
        let endpoint = match url.strip_prefix("milvus://") {
            Some(rest) => format!("http://{rest}"),
            None => url.to_string(),
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("kindred-milvus")
            .enable_all()
            .build()
            .map_err(crate::error::io_err("starting the Milvus client runtime"))?;
        let client = {
            let endpoint = endpoint.clone();
            let connect = async move {
                tokio::time::timeout(
                    Duration::from_secs(10),
                    ClientV2::new(
                        &ConnectConfig::new()
                            .uri(endpoint)
                            .connect_timeout(Duration::from_secs(5))
                            // kindred retries itself, within its budget (Remote::call).
                            .retry(RetryConfig::new().max_attempts(1)),
                    ),
                )
                .await
            };
            match rt.block_on(connect) {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => return Err(unavailable(url, "connecting", e)),
                Err(_) => return Err(unavailable(url, "connecting", "no answer in 10 s")),
            }
        };
        let mut remote = Remote {
            url: url.to_string(),
            client: Arc::new(client),
            rt: Some(rt),
            version: String::new(),
            capabilities: capabilities(""),
            layouts: Mutex::new(HashMap::new()),
            lexical: Mutex::new(HashMap::new()),
            building: Mutex::new(()),
            meta_cache: Mutex::new(HashMap::new()),
            lexical_refresh: lexical_refresh(
                std::env::var("KINDRED_MILVUS_LEXICAL_REFRESH_SECS").ok(),
            )?,
            idf_sample: idf_sample(std::env::var("KINDRED_MILVUS_IDF_SAMPLE").ok())?,
        };
        remote.version = remote.call("reading the server version", |c| async move {
            let r = c
                .server_version(GetServerVersionRequest::builder().build()?)
                .await?;
            Ok(r.version().to_string())
        })?;
        remote.capabilities = capabilities(&remote.version);
        tracing::info!(url = %remote.url, version = %remote.version,
            capabilities = ?remote.capabilities, new_collections = remote.new_layout()?.name(),
            "connected to Milvus");
        if !supported(&remote.version) {
            return Err(UserError::NotSupported {
                what: format!("Milvus {}", remote.version),
                backend: "milvus",
                fix: "kindred needs Milvus 2.3 or later (COSINE metric, JSON fields, upsert): upgrade the server".into(),
            }
            .into());
        }
        if !remote.has(META)? {
            let schema = CollectionSchema::new()
                .add_field(pk_varchar("key"))
                .add_field(varchar("value", CHUNK_CHARS))
                .add_field(vector("v", 2));
            remote.create(META, schema, &[("v", MetricType::L2, None)])?;
        }
        remote.load(META)?;
        Ok(remote)
    }

    /// Runs `f` on the client's runtime and waits for it: retried with backoff (0.2, 0.8,
    /// 3.2 s, ...) while it fails in transport or times out, for at most [`CALL_BUDGET`], then
    /// reported as the backend being unavailable.
    fn call<T, F, Fut>(&self, what: &str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(Arc<ClientV2>) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, Error>> + Send + 'static,
    {
        let rt = self
            .rt
            .as_ref()
            .expect("runtime lives as long as the client");
        let deadline = std::time::Instant::now() + CALL_BUDGET;
        let mut delay = Duration::from_millis(200);
        for attempt in 0.. {
            let fut = f(self.client.clone());
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            let limit =
                TRY_TIMEOUT.min(deadline.saturating_duration_since(std::time::Instant::now()));
            rt.spawn(async move {
                let out = match tokio::time::timeout(limit, fut).await {
                    Ok(r) => r,
                    Err(_) => Err(Error::Timeout(format!("no answer in {limit:?}"))),
                };
                let _ = tx.send(out);
            });
            let more = std::time::Instant::now() + delay < deadline;
            match rx.recv() {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if transient(&e) && more => {
                    tracing::warn!(url = %self.url, what, error = %e, attempt, "Milvus call failed; retrying");
                    std::thread::sleep(delay);
                    delay *= 4;
                }
                Ok(Err(e)) if transient(&e) => return Err(unavailable(&self.url, what, e)),
                Ok(Err(e)) => {
                    return Err(crate::error::InternalError::Store(format!(
                        "milvus at {}: {what}: {e}",
                        self.url
                    ))
                    .into())
                }
                Err(_) => return Err(unavailable(&self.url, what, "the client stopped")),
            }
        }
        unreachable!("the loop returns")
    }

    /// The layout new collections get: the best the server offers, or the one the
    /// environment variable `KINDRED_MILVUS_LAYOUT` names (`split`, `one`, `full-text`) if the
    /// server has what it needs.
    fn new_layout(&self) -> Result<Layout> {
        let best = Layout::for_server(self.capabilities);
        let Ok(asked) = std::env::var("KINDRED_MILVUS_LAYOUT") else {
            return Ok(best);
        };
        let bad = |reason: String| -> crate::Error {
            UserError::InvalidArgument {
                name: "KINDRED_MILVUS_LAYOUT",
                reason,
            }
            .into()
        };
        let layout = Layout::from_name(&asked)
            .ok_or_else(|| bad(format!("{asked:?}: use split, one or full-text")))?;
        if layout > best {
            return Err(bad(format!(
                "Milvus {} offers at most the {} layout: unset it or upgrade the server",
                self.version,
                best.name()
            )));
        }
        Ok(layout)
    }

    /// Collection `name`'s layout: recorded in the shared metadata when it was created (no
    /// record: the split layout, all collections created before there were others).
    pub fn layout(&self, name: &str) -> Result<Layout> {
        if let Some(&l) = self.layouts.locked().get(name) {
            return Ok(l);
        }
        let layout = match self.meta(&meta_key(name, "layout"))? {
            Some(n) => Layout::from_name(&n).ok_or_else(|| {
                crate::error::InternalError::Corrupt(format!(
                    "collection {name:?} in Milvus has the unknown layout {n:?} (written by a newer kindred?)"
                ))
            })?,
            // A collection with settings and no record predates layouts (the record is
            // written before the settings); without settings it may be one another node is
            // creating, so that answer is not kept.
            None if self.settings(name)?.is_some() => Layout::Split,
            None => return Ok(Layout::Split),
        };
        self.layouts.locked().insert(name.to_string(), layout);
        Ok(layout)
    }

    fn has(&self, collection: &str) -> Result<bool> {
        let name = collection.to_string();
        self.call("checking a collection", move |c| {
            let name = name.clone();
            async move {
                let r = c
                    .has_collection(
                        HasCollectionRequest::builder()
                            .collection_name(name)
                            .build()?,
                    )
                    .await?;
                Ok(r.exists())
            }
        })
    }

    fn create(
        &self,
        collection: &str,
        schema: CollectionSchema,
        vectors: &[(&str, MetricType, Option<crate::types::HnswParams>)],
    ) -> Result<()> {
        let name = collection.to_string();
        self.call("creating a collection", move |c| {
            let (name, schema) = (name.clone(), schema.clone());
            async move {
                c.create_collection(
                    CreateCollectionRequest::builder()
                        .collection_name(name)
                        .schema(schema)
                        .consistency_level(ConsistencyLevel::Strong)
                        .build()?,
                )
                .await
            }
        })?;
        for (field, metric, hnsw) in vectors {
            let (name, field, metric, hnsw) =
                (collection.to_string(), field.to_string(), *metric, *hnsw);
            self.call("creating an index", move |c| {
                let (name, field) = (name.clone(), field.clone());
                let param = match hnsw {
                    // BM25 as kindred's own index scores (k1 1.2, b 0.75).
                    _ if metric == MetricType::Bm25 => IndexParam::new()
                        .field_name(field)
                        .index_type(IndexType::SparseInvertedIndex)
                        .metric_type(metric)
                        .extra_params(
                            [
                                ("bm25_k1".to_string(), "1.2".to_string()),
                                ("bm25_b".to_string(), "0.75".to_string()),
                            ]
                            .into_iter()
                            .collect(),
                        ),
                    Some(h) => IndexParam::new()
                        .field_name(field)
                        .index_type(IndexType::Hnsw)
                        .metric_type(metric)
                        .extra_params(
                            [
                                ("M".to_string(), h.m.to_string()),
                                ("efConstruction".to_string(), h.ef_construction.to_string()),
                            ]
                            .into_iter()
                            .collect(),
                        ),
                    None => IndexParam::new()
                        .field_name(field)
                        .index_type(IndexType::Flat)
                        .metric_type(metric),
                };
                async move {
                    c.create_index(
                        CreateIndexRequest::builder()
                            .collection_name(name)
                            .index_param(param)
                            .sync(false)
                            .build()?,
                    )
                    .await
                }
            })?;
        }
        Ok(())
    }

    fn load(&self, collection: &str) -> Result<()> {
        let name = collection.to_string();
        self.call("loading a collection", move |c| {
            let name = name.clone();
            async move {
                c.load_collection(
                    LoadCollectionRequest::builder()
                        .collection_name(name)
                        .build()?,
                )
                .await
            }
        })
    }

    fn drop_milvus(&self, collection: &str) -> Result<()> {
        if !self.has(collection)? {
            return Ok(());
        }
        let name = collection.to_string();
        self.call("dropping a collection", move |c| {
            let name = name.clone();
            async move {
                c.drop_collection(
                    DropCollectionRequest::builder()
                        .collection_name(name)
                        .build()?,
                )
                .await
            }
        })
    }

    /// Rows of `collection` matching `filter`, with `fields` (at most [`QUERY_ROWS`]).
    fn query(
        &self,
        collection: &str,
        filter: &str,
        fields: &[&str],
        limit: Option<usize>,
    ) -> Result<Vec<serde_json::Map<String, serde_json::Value>>> {
        let (name, filter) = (collection.to_string(), filter.to_string());
        let fields: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
        self.reloading(collection, || {
            let (name, filter, fields) = (name.clone(), filter.clone(), fields.clone());
            self.query_once(name, filter, fields, limit, READS)
        })
    }

    fn query_once(
        &self,
        name: String,
        filter: String,
        fields: Vec<String>,
        limit: Option<usize>,
        consistency: ConsistencyLevel,
    ) -> Result<Vec<serde_json::Map<String, serde_json::Value>>> {
        self.call("querying", move |c| {
            let (name, filter, fields) = (name.clone(), filter.clone(), fields.clone());
            query_rows(c, name, filter, fields, limit, consistency)
        })
    }

    /// Runs `f`; when Milvus answers that `collection` is not loaded (it restarted, say),
    /// loads it and runs `f` once more.
    fn reloading<T>(&self, collection: &str, f: impl Fn() -> Result<T>) -> Result<T> {
        match f() {
            Err(e) if not_loaded(&e.to_string()) => {
                tracing::info!(url = %self.url, collection, "the collection is not loaded in Milvus; loading it");
                self.load(collection)?;
                f()
            }
            r => r,
        }
    }

    /// Upserts `rows` in calls of at most [`BATCH_ROWS`] rows and [`BATCH_BYTES`] of JSON.
    fn upsert_rows(&self, collection: &str, rows: Vec<serde_json::Value>) -> Result<()> {
        let mut calls: Vec<Vec<serde_json::Value>> = Vec::new();
        let mut bytes = 0;
        for row in rows {
            let size = row.to_string().len();
            match calls.last_mut() {
                Some(last) if last.len() < BATCH_ROWS && bytes + size <= BATCH_BYTES => {
                    bytes += size;
                    last.push(row);
                }
                _ => {
                    bytes = size;
                    calls.push(vec![row]);
                }
            }
        }
        for chunk in calls {
            let name = collection.to_string();
            self.call("writing", move |c| {
                let (name, chunk) = (name.clone(), chunk.clone());
                async move {
                    let mut b = InsertRequest::builder().collection_name(name);
                    for r in chunk {
                        b = b.row(r);
                    }
                    c.upsert(UpsertRequest::builder().insert(b.build()?).build()?)
                        .await
                        .map(|_| ())
                }
            })?;
        }
        Ok(())
    }

    fn delete_where(&self, collection: &str, filter: &str) -> Result<()> {
        let (name, filter) = (collection.to_string(), filter.to_string());
        self.call("deleting", move |c| {
            let (name, filter) = (name.clone(), filter.clone());
            async move {
                c.delete(
                    DeleteRequest::builder()
                        .collection_name(name)
                        .filter(filter)
                        .build()?,
                )
                .await
                .map(|_| ())
            }
        })
    }

    // --- the shared metadata collection -------------------------------------------------

    /// A value of the shared metadata (None: absent).
    /// Read from Milvus at most once per [`META_TTL`] per key (a search reads three: the
    /// collection's settings, calibration and search defaults); this node's own changes are
    /// seen at once, other nodes' within the TTL.
    pub fn meta(&self, key: &str) -> Result<Option<String>> {
        if let Some((at, value)) = self.meta_cache.locked().get(key) {
            if at.elapsed() < META_TTL {
                return Ok(value.clone());
            }
        }
        let rows = self.query(META, &format!("key == {}", json!(key)), &["value"], Some(1))?;
        let value = rows
            .into_iter()
            .next()
            .and_then(|r| r.get("value").and_then(|v| v.as_str()).map(str::to_string));
        self.cache_meta(key, value.clone());
        Ok(value)
    }

    fn cache_meta(&self, key: &str, value: Option<String>) {
        self.meta_cache
            .locked()
            .insert(key.to_string(), (std::time::Instant::now(), value));
    }

    /// Sets a value of the shared metadata.
    pub fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        if value.len() > CHUNK_CHARS {
            return Err(UserError::InvalidArgument {
                name: "metadata value",
                reason: format!(
                    "{} bytes; the Milvus backend keeps at most {CHUNK_CHARS}",
                    value.len()
                ),
            }
            .into());
        }
        self.upsert_rows(
            META,
            vec![json!({"key": key, "value": value, "v": [0.0, 0.0]})],
        )?;
        self.cache_meta(key, Some(value.to_string()));
        Ok(())
    }

    /// Removes a value of the shared metadata; true if it was there.
    pub fn remove_meta(&self, key: &str) -> Result<bool> {
        let had = self.meta(key)?.is_some();
        self.delete_where(META, &format!("key == {}", json!(key)))?;
        self.cache_meta(key, None);
        Ok(had)
    }

    // --- labelled pairs (review verdicts) -------------------------------------------------

    /// Stores labelled pair `key` of collection `name`: shared metadata under
    /// `meta/<name>/pair/<key>` (removed with the collection).
    pub fn put_pair(&self, name: &str, key: &str, value: &[u8]) -> Result<()> {
        // Reading the pairs back walks hex key prefixes (`review::pair_key` makes the keys).
        if key.len() != PAIR_KEY_DIGITS || !key.bytes().all(|b| HEX.contains(&b)) {
            return Err(UserError::InvalidArgument {
                name: "verdict key",
                reason: format!("{key:?} is not {PAIR_KEY_DIGITS} lower-case hex digits"),
            }
            .into());
        }
        let value = std::str::from_utf8(value).map_err(|_| UserError::InvalidArgument {
            name: "verdict",
            reason: "not UTF-8 text".into(),
        })?;
        self.set_meta(&pair_key(name, key), value)
    }

    /// Every labelled pair of collection `name`: (key, value). A query returns at most
    /// [`QUERY_ROWS`] rows, so the pairs are read by key prefix ([`by_key_prefix`]).
    pub fn pairs(&self, name: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let prefix = pair_key(name, "");
        let rows = by_key_prefix(QUERY_ROWS, |head| {
            self.query(
                META,
                &format!("key like {}", json!(format!("{prefix}{head}%"))),
                &["key", "value"],
                Some(QUERY_ROWS),
            )
        })?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let key = r.get("key")?.as_str()?.strip_prefix(&prefix)?;
                let value = r.get("value")?.as_str()?;
                Some((key.to_string(), value.as_bytes().to_vec()))
            })
            .collect())
    }

    /// Labelled pair `key` of collection `name`.
    pub fn pair(&self, name: &str, key: &str) -> Result<Option<Vec<u8>>> {
        if key.len() != PAIR_KEY_DIGITS || !key.bytes().all(|b| HEX.contains(&b)) {
            return Ok(None);
        }
        Ok(self.meta(&pair_key(name, key))?.map(String::into_bytes))
    }

    /// Removes labelled pair `key` of collection `name`; true if it was there.
    pub fn remove_pair(&self, name: &str, key: &str) -> Result<bool> {
        // Keys are 32 hex digits (`review::pair_key`); anything else was never stored.
        if key.is_empty() || key.len() > 64 || !key.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Ok(false);
        }
        self.remove_meta(&pair_key(name, key))
    }

    // --- collections --------------------------------------------------------------------

    /// Creates kindred collection `name` in the layout new collections get
    /// ([`Remote::new_layout`]): its Milvus collections, indexed and loaded, then its layout
    /// record, then its settings (written last: a collection exists once they are).
    pub fn create_collection(&self, name: &str, settings: &CollectionSettings) -> Result<()> {
        crate::store::validate_name(name)?;
        if self.settings(name)?.is_some() {
            return Err(UserError::CollectionExists { name: name.into() }.into());
        }
        let layout = self.new_layout()?;
        let p = physical(name);
        let (dim, k) = (settings.model.dim, settings.model.intent_dim());
        // Leftovers of a create that stopped before writing the settings.
        self.drop_milvus(&format!("{p}_docs"))?;
        self.drop_milvus(&format!("{p}_intent"))?;
        let mut docs = CollectionSchema::new()
            .add_field(pk_int("id"))
            .add_field(varchar("doc", 2048))
            .add_field(varchar("text", TEXT_BYTES))
            .add_field(FieldSchema::new().name("meta").data_type(DataType::Json));
        for field in record_fields() {
            docs = docs.add_field(varchar(&field, CHUNK_CHARS));
        }
        docs = docs.add_field(vector("sentence", dim));
        let hnsw = Some(settings.hnsw);
        let mut indexes = vec![("sentence", MetricType::Cosine, hnsw)];
        if layout != Layout::Split {
            docs = docs.add_field(vector("w2", 2 * k));
            indexes.push(("w2", MetricType::L2, hnsw));
        }
        if layout == Layout::FullText {
            docs = docs
                .add_field(
                    varchar("lex", CHUNK_CHARS)
                        .enable_analyzer(true)
                        .analyzer_params(json!({"tokenizer": "standard"})),
                )
                .add_field(
                    FieldSchema::new()
                        .name("bm25")
                        .data_type(DataType::SparseFloatVector),
                )
                .add_function(
                    Function::new()
                        .name("bm25")
                        .function_type(FunctionType::Bm25)
                        .input_fields(["lex"])
                        .output_fields(["bm25"]),
                );
            indexes.push(("bm25", MetricType::Bm25, None));
        }
        self.create(&format!("{p}_docs"), docs, &indexes)?;
        self.load(&format!("{p}_docs"))?;
        if layout == Layout::Split {
            let intent = CollectionSchema::new()
                .add_field(pk_int("id"))
                .add_field(FieldSchema::new().name("meta").data_type(DataType::Json))
                .add_field(vector("w2", 2 * k));
            self.create(
                &format!("{p}_intent"),
                intent,
                &[("w2", MetricType::L2, hnsw)],
            )?;
            self.load(&format!("{p}_intent"))?;
        }
        self.set_meta(&meta_key(name, "layout"), layout.name())?;
        self.layouts.locked().insert(name.to_string(), layout);
        let json = serde_json::to_string(settings).expect("settings serialise");
        self.set_meta(&settings_key(name), &json)
    }

    /// Drops collection `name`: settings first (so it stops existing at once), then its
    /// Milvus collections and its metadata.
    pub fn drop_collection(&self, name: &str) -> Result<()> {
        if self.settings(name)?.is_none() {
            return Err(UserError::UnknownCollection { name: name.into() }.into());
        }
        self.remove_meta(&settings_key(name))?;
        let p = physical(name);
        self.drop_milvus(&format!("{p}_docs"))?;
        self.drop_milvus(&format!("{p}_intent"))?;
        self.delete_where(
            META,
            &format!("key like {}", json!(format!("meta/{name}/%"))),
        )?;
        self.lexical.locked().remove(name);
        self.layouts.locked().remove(name);
        let prefix = meta_key(name, "");
        self.meta_cache
            .locked()
            .retain(|k, _| !k.starts_with(&prefix));
        Ok(())
    }

    /// Collection `name`'s settings (None: no such collection).
    pub fn settings(&self, name: &str) -> Result<Option<CollectionSettings>> {
        self.meta(&settings_key(name))?
            .map(|s| {
                serde_json::from_str(&s).map_err(|e| {
                    crate::error::InternalError::Corrupt(format!(
                        "the settings of collection {name:?} in Milvus do not decode: {e}"
                    ))
                    .into()
                })
            })
            .transpose()
    }

    /// Collection `name`'s settings, or the error naming it.
    pub fn require(&self, name: &str) -> Result<CollectionSettings> {
        self.settings(name)?
            .ok_or_else(|| UserError::UnknownCollection { name: name.into() }.into())
    }

    /// Every collection's name and settings, by name.
    pub fn collections(&self) -> Result<Vec<(String, CollectionSettings)>> {
        let rows = self.query(
            META,
            "key like \"settings/%\"",
            &["key", "value"],
            Some(QUERY_ROWS),
        )?;
        let mut out: Vec<(String, CollectionSettings)> = rows
            .into_iter()
            .filter_map(|r| {
                let key = r
                    .get("key")?
                    .as_str()?
                    .strip_prefix("settings/")?
                    .to_string();
                let settings = serde_json::from_str(r.get("value")?.as_str()?).ok()?;
                Some((key, settings))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Live documents of collection `name`.
    pub fn count(&self, name: &str) -> Result<u64> {
        self.count_where(name, &Filter::default())
    }

    /// Documents of collection `name` that `filter` admits.
    pub fn count_where(&self, name: &str, filter: &Filter) -> Result<u64> {
        let expr = expression(filter, "meta").unwrap_or_default();
        let rows = self.query(
            &format!("{}_docs", physical(name)),
            &expr,
            &["count(*)"],
            None,
        )?;
        Ok(rows
            .first()
            .and_then(|r| r.get("count(*)"))
            .and_then(|v| v.as_u64())
            .unwrap_or(0))
    }

    /// Which of `ids` (internal ids of collection `name`) `filter` admits.
    pub fn admitted_among(
        &self,
        name: &str,
        filter: &Filter,
        ids: &[u64],
    ) -> Result<std::collections::HashSet<u64>> {
        let expr = expression(filter, "meta");
        let collection = format!("{}_docs", physical(name));
        let mut admitted = std::collections::HashSet::new();
        for group in ids.chunks(ADMITTED_PER_QUERY) {
            let e = and_ids(expr.as_deref(), group);
            let rows = self.query(&collection, &e, &["id"], Some(group.len()))?;
            admitted.extend(
                rows.iter()
                    .filter_map(|r| r.get("id")?.as_i64())
                    .map(|i| i as u64),
            );
        }
        Ok(admitted)
    }

    // --- documents ----------------------------------------------------------------------

    /// Upserts `docs` (validated, with vectors of the collection's model) by external id;
    /// the last of several with one id wins, as in the embedded store.
    pub fn upsert(&self, name: &str, docs: Vec<StoredDoc>) -> Result<Vec<Upserted>> {
        let p = physical(name);
        let layout = self.layout(name)?;
        let mut rows_docs = Vec::with_capacity(docs.len());
        let mut rows_intent = Vec::with_capacity(docs.len());
        let internals: Vec<u64> = docs.iter().map(|d| internal_id(&d.id)).collect();
        // Which ids exist already (and that no two external ids share an internal one).
        let existing: HashMap<u64, String> = internals
            .chunks(1024)
            .map(|ids| self.query(&format!("{p}_docs"), &ids_expr(ids), &["id", "doc"], None))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .flatten()
            .filter_map(|r| Some((r.get("id")?.as_u64()?, r.get("doc")?.as_str()?.to_string())))
            .collect();
        let mut seen: HashMap<u64, &str> = HashMap::new();
        for (d, &internal) in docs.iter().zip(&internals) {
            let clash = existing
                .get(&internal)
                .map(String::as_str)
                .or(seen.get(&internal).copied())
                .filter(|other| *other != d.id);
            if let Some(other) = clash {
                return Err(UserError::InvalidDocument {
                    id: d.id.clone(),
                    reason: format!("its id hashes to the same internal id as document {other:?} (a 1 in 2^63 chance): store it under another id"),
                }
                .into());
            }
            seen.insert(internal, &d.id);
        }
        let mut out = Vec::with_capacity(docs.len());
        let mut last: HashMap<u64, usize> = HashMap::new();
        for (i, &internal) in internals.iter().enumerate() {
            last.insert(internal, i);
        }
        for (i, (d, &internal)) in docs.iter().zip(&internals).enumerate() {
            let replaced = existing.contains_key(&internal) || internals[..i].contains(&internal);
            out.push(Upserted {
                internal,
                replaced: replaced.then_some(internal),
            });
            if last[&internal] != i {
                continue;
            }
            let meta: serde_json::Value =
                serde_json::from_str(&d.metadata_json).unwrap_or_else(|_| json!({}));
            let b64 = base64::engine::general_purpose::STANDARD.encode(d.to_bytes());
            if b64.len() > CHUNK_CHARS * CHUNKS {
                return Err(UserError::InvalidDocument {
                    id: d.id.clone(),
                    reason: format!(
                        "its record is {} bytes encoded; the Milvus backend stores at most {} per document: shorten its context or text",
                        b64.len(),
                        CHUNK_CHARS * CHUNKS
                    ),
                }
                .into());
            }
            let mut cut = d.text.len().min(TEXT_BYTES);
            while !d.text.is_char_boundary(cut) {
                cut -= 1;
            }
            let mut row = json!({
                "id": internal, "doc": d.id, "text": &d.text[..cut], "meta": meta,
                "sentence": d.sentence,
            });
            for c in 0..CHUNKS {
                let part = b64
                    .get(c * CHUNK_CHARS..((c + 1) * CHUNK_CHARS).min(b64.len()))
                    .unwrap_or("");
                row[record_field(c)] = json!(part);
            }
            let w2: Vec<f32> = d.mu.iter().chain(&d.sigma).copied().collect();
            match layout {
                Layout::Split => rows_intent.push(json!({"id": internal, "meta": meta, "w2": w2})),
                Layout::One => row["w2"] = json!(w2),
                Layout::FullText => {
                    row["w2"] = json!(w2);
                    row["lex"] = json!(lexical_terms(&d.text, CHUNK_CHARS));
                }
            }
            rows_docs.push(row);
        }
        if layout == Layout::Split {
            self.upsert_rows(&format!("{p}_intent"), rows_intent)?;
        }
        self.upsert_rows(&format!("{p}_docs"), rows_docs)?;
        if let Some(lex) = self.lexical.locked().get_mut(name) {
            for (d, &internal) in docs.iter().zip(&internals) {
                lex.upsert(internal, &d.text);
            }
        }
        Ok(out)
    }

    /// Deletes a document by external id; its internal id if it existed.
    pub fn delete(&self, name: &str, id: &str) -> Result<Option<u64>> {
        let p = physical(name);
        let internal = internal_id(id);
        let expr = ids_expr(&[internal]);
        let rows = self.query(&format!("{p}_docs"), &expr, &["doc"], None)?;
        if !rows
            .iter()
            .any(|r| r.get("doc").and_then(|d| d.as_str()) == Some(id))
        {
            return Ok(None);
        }
        let parts: &[&str] = match self.layout(name)? {
            Layout::Split => &["docs", "intent"],
            Layout::One | Layout::FullText => &["docs"],
        };
        for part in parts {
            self.delete_where(&format!("{p}_{part}"), &expr)?;
        }
        // Session reads do not see a delete on Milvus 2.3 at once (measured: the next read
        // still found the document); one Strong read waits until the query nodes applied it,
        // so this node's later reads see it. Deletes are rare; this costs a time tick.
        for part in parts {
            self.reloading(&format!("{p}_{part}"), || {
                let c = format!("{p}_{part}");
                self.query_once(
                    c,
                    expr.clone(),
                    vec!["id".into()],
                    None,
                    ConsistencyLevel::Strong,
                )
            })?;
        }
        if let Some(lex) = self.lexical.locked().get_mut(name) {
            lex.remove(internal);
        }
        Ok(Some(internal))
    }

    /// Documents by internal id (absent ones left out), read in groups of
    /// [`RECORDS_PER_READ`] at once.
    pub fn get_many(&self, name: &str, internals: &[u64]) -> Result<HashMap<u64, StoredDoc>> {
        let collection = format!("{}_docs", physical(name));
        let fields: Vec<String> = std::iter::once("id".to_string())
            .chain(record_fields())
            .collect();
        let groups: Vec<Vec<u64>> = internals
            .chunks(RECORDS_PER_READ)
            .map(<[u64]>::to_vec)
            .collect();
        let target = collection.clone();
        let rows = self.reloading(&target, || {
            self.read_groups(collection.clone(), fields.clone(), groups.clone())
        })?;
        rows.iter().map(decode_row).collect()
    }

    /// The rows of `collection` with ids in each of `groups`, the groups read at once.
    fn read_groups(
        &self,
        collection: String,
        fields: Vec<String>,
        groups: Vec<Vec<u64>>,
    ) -> Result<Vec<serde_json::Map<String, serde_json::Value>>> {
        self.call("reading documents", move |c| {
            let (collection, fields, groups) = (collection.clone(), fields.clone(), groups.clone());
            async move {
                let mut set = tokio::task::JoinSet::new();
                for ids in groups {
                    let (c, collection, fields) = (c.clone(), collection.clone(), fields.clone());
                    set.spawn(query_rows(
                        c,
                        collection,
                        ids_expr(&ids),
                        fields,
                        None,
                        READS,
                    ));
                }
                let mut all = Vec::new();
                while let Some(done) = set.join_next().await {
                    let rows =
                        done.map_err(|e| Error::Unexpected(format!("a read task failed: {e}")))??;
                    all.extend(rows);
                }
                Ok(all)
            }
        })
    }

    /// Collection `name`'s size statistics, extrapolated from a sample of up to
    /// [`STATS_SAMPLE`] documents (the first by internal id: a uniform sample, internal ids
    /// being hashes) to its `documents`. Record bytes are the kindred records' as the embedded
    /// store counts them (8-byte key and encoded record), not Milvus's field storage (base64
    /// text, the vector fields, its indexes): docs/scale-out.md has the per-field sizing.
    pub fn stats(&self, name: &str, documents: u64) -> Result<crate::store::CollectionStats> {
        let mut ranges = Ranges::new(name, documents, &["id"], STATS_SAMPLE);
        let mut ids: Vec<u64> = Vec::new();
        while ids.len() < STATS_SAMPLE {
            let Some((_, rows)) = ranges.next(self)? else {
                break;
            };
            ids.extend(rows.iter().filter_map(|r| r.get("id")?.as_u64()));
        }
        ids.truncate(STATS_SAMPLE); // ascending: the smallest ids, still a uniform sample
        let (mut tokens, mut record, mut token_bytes) = (0u64, 0u64, 0u64);
        let sample = self.get_many(name, &ids)?;
        for doc in sample.values() {
            tokens += doc.token_scales.len() as u64;
            record += 8 + doc.to_bytes().len() as u64;
            token_bytes += (doc.token_codes.len() + 4 * doc.token_scales.len()) as u64;
        }
        let n = sample.len() as u64;
        let scale = |x: u64| -> u64 {
            if n == 0 {
                0
            } else {
                (x as f64 * documents as f64 / n as f64).round() as u64
            }
        };
        Ok(crate::store::CollectionStats {
            documents,
            token_vectors: scale(tokens),
            record_bytes: scale(record),
            token_vector_bytes: scale(token_bytes),
            bytes_per_document: record as f64 / n.max(1) as f64,
            bytes_per_token_vector: token_bytes as f64 / tokens.max(1) as f64,
            seq: 0,
            sampled: Some(n),
        })
    }

    /// A document by external id.
    pub fn get(&self, name: &str, id: &str) -> Result<Option<StoredDoc>> {
        let internal = internal_id(id);
        Ok(self
            .get_many(name, &[internal])?
            .remove(&internal)
            .filter(|d| d.id == id))
    }

    /// Every document, by ascending internal id, read as the iterator is advanced (ids 4,096
    /// at a time, [`Ranges`], records 256 at a time), so memory stays flat in the collection's
    /// size.
    pub fn iter(self: &Arc<Self>, name: &str) -> impl Iterator<Item = Result<StoredDoc>> {
        let (remote, name) = (self.clone(), name.to_string());
        let (mut ranges, mut ids, mut docs): (Option<Ranges>, Vec<u64>, Vec<StoredDoc>) =
            (None, Vec::new(), Vec::new());
        let mut finished = false;
        std::iter::from_fn(move || loop {
            if let Some(d) = docs.pop() {
                return Some(Ok(d));
            }
            if ids.is_empty() {
                if finished {
                    return None;
                }
                let walk = match &mut ranges {
                    Some(r) => r,
                    None => match remote.count(&name) {
                        Ok(count) => ranges.insert(Ranges::new(&name, count, &["id"], 4096)),
                        Err(e) => {
                            finished = true;
                            return Some(Err(e));
                        }
                    },
                };
                match walk.next(&remote) {
                    Ok(Some((_, rows))) => {
                        ids = rows.iter().filter_map(|r| r.get("id")?.as_u64()).collect();
                        ids.reverse(); // popped from the end: ascending
                        continue;
                    }
                    Ok(None) => return None,
                    Err(e) => {
                        finished = true;
                        return Some(Err(e));
                    }
                }
            }
            let chunk: Vec<u64> = ids.split_off(ids.len().saturating_sub(256));
            match remote.get_many(&name, &chunk) {
                Ok(mut got) => {
                    // Popped from the end: keep them descending.
                    docs = chunk.iter().rev().filter_map(|id| got.remove(id)).collect();
                }
                Err(e) => {
                    (finished, ids) = (true, Vec::new());
                    return Some(Err(e));
                }
            }
        })
    }

    /// Up to `limit` documents with the highest internal ids below `before` (all when None),
    /// highest first: (internal id, external id). Internal ids are hashes of the external
    /// ids here, so this is a fixed order over the documents, not the order of their writes
    /// (Milvus keeps none); paging with `before` still sees each document once.
    pub fn recent(
        &self,
        name: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, String)>> {
        let page = limit.clamp(16, 1024);
        let mut ranges =
            Ranges::new(name, self.count(name)?, &["id", "doc"], page).descending_below(before);
        let mut out = Vec::with_capacity(limit);
        while out.len() < limit {
            let Some((_, rows)) = ranges.next(self)? else {
                break;
            };
            out.extend(rows.iter().filter_map(|r| {
                Some((r.get("id")?.as_u64()?, r.get("doc")?.as_str()?.to_string()))
            }));
        }
        out.truncate(limit);
        Ok(out)
    }

    /// Each document's internal id and (first 8 KiB of) text, by ascending internal id, until
    /// at least `limit` were given: then the bound of what was given (every document with an
    /// internal id up to it, and none above), None when it gave all.
    fn scan_texts(
        &self,
        name: &str,
        limit: usize,
        mut each: impl FnMut(u64, &str),
    ) -> Result<Option<u64>> {
        let mut ranges = Ranges::new(name, self.count(name)?, &["id", "text"], 256);
        let mut seen = 0;
        while let Some((last, rows)) = ranges.next(self)? {
            for r in &rows {
                if let (Some(id), Some(text)) = (
                    r.get("id").and_then(|v| v.as_u64()),
                    r.get("text").and_then(|v| v.as_str()),
                ) {
                    each(id, text);
                    seen += 1;
                }
            }
            if seen >= limit && !ranges.done() {
                return Ok(Some(last));
            }
        }
        Ok(None)
    }

    /// This node's BM25 index of collection `name`: built from a scan on first use; once
    /// older than [`LEXICAL_REFRESH`], rebuilt in the background (searches go on with the old
    /// one meanwhile), which brings in what other nodes wrote and deleted.
    pub fn lexical(self: &Arc<Self>, name: &str) -> Result<Arc<LexicalIndex>> {
        {
            let mut all = self.lexical.locked();
            if let Some(l) = all.get_mut(name) {
                if l.built.elapsed() > self.lexical_refresh && l.pending.is_none() {
                    l.pending = Some(Vec::new());
                    let (remote, name) = (self.clone(), name.to_string());
                    std::thread::spawn(move || remote.rebuild_lexical(&name));
                }
                return Ok(l.index.clone());
            }
        }
        let _building = self.building.locked();
        if let Some(l) = self.lexical.locked().get(name) {
            return Ok(l.index.clone()); // built while this thread waited
        }
        let (lex, bound) = self.build_lexical(name)?;
        let mut all = self.lexical.locked();
        let entry = all.entry(name.to_string()).or_insert(Lexical {
            index: Arc::new(lex),
            bound,
            built: std::time::Instant::now(),
            pending: None,
        });
        Ok(entry.index.clone())
    }

    /// Documents in this node's BM25 index of collection `name` (0 while not built).
    pub fn lexical_len(&self, name: &str) -> usize {
        self.lexical.locked().get(name).map_or(0, |l| l.index.len())
    }

    /// Collection `name`'s BM25 index as this node keeps it, and its bound ([`Lexical`]): every
    /// document, but on the full-text layout (where Milvus answers the lexical stage and the
    /// index only gives IDF weights) about [`IDF_SAMPLE`] of them, so a node's memory and
    /// rebuild time stay bounded however large the collection grows.
    fn build_lexical(&self, name: &str) -> Result<(LexicalIndex, u64)> {
        let limit = match self.layout(name)? {
            Layout::FullText => self.idf_sample,
            Layout::Split | Layout::One => usize::MAX,
        };
        let lex = LexicalIndex::new();
        let last = self.scan_texts(name, limit, |id, text| lex.upsert(id, text))?;
        Ok((lex, last.unwrap_or(u64::MAX)))
    }

    /// Builds collection `name`'s BM25 index anew and swaps it in, with this node's writes
    /// made meanwhile replayed onto it. On failure the old one stays (and is retried later).
    fn rebuild_lexical(&self, name: &str) {
        let built = self.build_lexical(name);
        let mut all = self.lexical.locked();
        let Some(l) = all.get_mut(name) else { return };
        let pending = l.pending.take().unwrap_or_default();
        match built {
            Ok((index, bound)) => {
                for (id, text) in pending {
                    match text {
                        Some(t) if id <= bound => index.upsert(id, &t),
                        Some(_) => {}
                        None => index.remove(id),
                    }
                }
                l.index = Arc::new(index);
                l.bound = bound;
                l.built = std::time::Instant::now();
            }
            Err(e) => {
                tracing::warn!(collection = name, error = %e, "rebuilding this node's BM25 index from Milvus failed; keeping the old one");
                l.built = std::time::Instant::now();
            }
        }
    }

    /// The `q.k` nearest documents to `q.vector` in collection `name`: (internal id, score
    /// as Milvus gives it).
    pub fn search(&self, name: &str, q: VectorQuery<'_>) -> Result<Vec<(u64, f32)>> {
        let VectorQuery {
            field,
            vector,
            k,
            ef,
            filter,
            among,
        } = q;
        let part = match field {
            VectorField::Sentence => "docs",
            VectorField::W2 => self.layout(name)?.intent_part(),
        };
        let search = Search {
            collection: format!("{}_{part}", physical(name)),
            field: field.name(),
            vectors: SearchVectors::Float(vec![vector]),
            expr: restrict(filter, among),
            k,
            ef: Some(ef),
        };
        self.search_once(search)
    }

    /// The `k` best documents of collection `name` for `text` by Milvus's own BM25 over the
    /// `lex` field (full-text layout only): (internal id, score as Milvus gives it), best first;
    /// only those `filter` admits and among `among` when given. The query is turned into
    /// kindred's lexical terms as the documents were, so the scores are kindred's BM25 (up to
    /// the statistics the server keeps).
    pub fn full_text(
        &self,
        name: &str,
        text: &str,
        k: usize,
        filter: Option<&Filter>,
        among: Option<&[u64]>,
    ) -> Result<Vec<(u64, f32)>> {
        let terms = lexical_terms(text, CHUNK_CHARS);
        if terms.is_empty() || among.is_some_and(<[u64]>::is_empty) {
            return Ok(Vec::new());
        }
        self.search_once(Search {
            collection: format!("{}_docs", physical(name)),
            field: "bm25",
            vectors: SearchVectors::EmbeddedText(vec![terms]),
            expr: restrict(filter, among),
            k,
            ef: None,
        })
    }

    fn search_once(&self, s: Search) -> Result<Vec<(u64, f32)>> {
        if s.k == 0 {
            return Ok(Vec::new());
        }
        let k = s.k.min(QUERY_ROWS);
        let target = s.collection.clone();
        self.reloading(&target, || {
            let s = s.clone();
            self.call("searching", move |c| {
                let s = s.clone();
                async move {
                    let mut b = SearchRequest::builder()
                        .collection_name(s.collection)
                        .vector_field(s.field)
                        .vectors(s.vectors)
                        .limit(k as i64)
                        .consistency_level(READS);
                    if let Some(ef) = s.ef {
                        let ef = ef.max(k).to_string();
                        b = b.extra_params([("ef".to_string(), ef)].into_iter().collect());
                    }
                    if let Some(e) = s.expr {
                        b = b.filter(e);
                    }
                    let r = c.search(b.build()?).await?;
                    let mut out = Vec::new();
                    for one in r.results() {
                        let ids = match one.get_ids() {
                            Ids::Int64(v) => v.iter().map(|&i| i as u64).collect::<Vec<_>>(),
                            _ => Vec::new(),
                        };
                        out.extend(ids.into_iter().zip(one.get_scores().iter().copied()));
                    }
                    Ok(out)
                }
            })
        })
    }
}

/// A walk over a collection's documents by ascending ranges of internal ids that does not
/// rely on the order a server returns a query's rows in (Milvus returns them by primary key,
/// milvus-lite in insertion order, so paging with `id > last` would skip documents there):
/// the id space is cut into ranges of about half a page each (ids are uniform hashes), each
/// range is asked for at most a page, and a range whose answer fills the page is split in two
/// and asked again, so every document is given exactly once.
struct Ranges {
    collection: String,
    fields: Vec<&'static str>,
    page: usize,
    /// Inclusive ranges still to read, the next one last.
    todo: Vec<(u64, u64)>,
    /// Highest ids first ([`Ranges::descending_below`]).
    descending: bool,
}

impl Ranges {
    /// Ranges over collection `name`'s `count` documents (about: it only sizes the ranges).
    fn new(name: &str, count: u64, fields: &[&'static str], page: usize) -> Ranges {
        const TOP: u64 = i64::MAX as u64;
        let n = (count / (page as u64 / 2).max(1)).max(1);
        let width = TOP / n + 1;
        let mut todo = Vec::new();
        let mut lo = 0u64;
        loop {
            let hi = lo.saturating_add(width - 1).min(TOP);
            todo.push((lo, hi));
            if hi == TOP {
                break;
            }
            lo = hi + 1;
        }
        todo.reverse();
        Ranges {
            collection: format!("{}_docs", physical(name)),
            fields: fields.to_vec(),
            page,
            todo,
            descending: false,
        }
    }

    /// These ranges read from the highest id down, and only ids below `before` (all: None).
    fn descending_below(mut self, before: Option<u64>) -> Ranges {
        let before = before.unwrap_or(u64::MAX);
        self.todo.reverse();
        self.todo.retain(|&(lo, _)| lo < before);
        for r in &mut self.todo {
            r.1 = r.1.min(before.saturating_sub(1));
        }
        self.descending = true;
        self
    }

    /// Whether every range was read.
    fn done(&self) -> bool {
        self.todo.is_empty()
    }

    /// The next range's rows by ascending id (descending ones: by descending id), with the
    /// range's last id in that order (None: all read).
    fn next(&mut self, remote: &Remote) -> Result<Option<(u64, Vec<Row>)>> {
        while let Some((lo, hi)) = self.todo.pop() {
            let mut rows = remote.query(
                &self.collection,
                &format!("id >= {lo} and id <= {hi}"),
                &self.fields,
                Some(self.page),
            )?;
            if rows.len() >= self.page && lo < hi {
                let mid = lo + (hi - lo) / 2;
                let (first, second) = ((lo, mid), (mid + 1, hi));
                if self.descending {
                    self.todo.extend([first, second]);
                } else {
                    self.todo.extend([second, first]);
                }
                continue;
            }
            rows.sort_by_key(|r| r.get("id").and_then(|v| v.as_u64()).unwrap_or(0));
            if self.descending {
                rows.reverse();
                return Ok(Some((lo, rows)));
            }
            return Ok(Some((hi, rows)));
        }
        Ok(None)
    }
}

/// One search call of [`Remote::search_once`].
#[derive(Clone)]
struct Search {
    collection: String,
    field: &'static str,
    vectors: SearchVectors,
    expr: Option<String>,
    k: usize,
    /// HNSW search list size (vector fields only).
    ef: Option<usize>,
}

/// The expression admitting what `filter` admits among `among` (None: everything).
fn restrict(filter: Option<&Filter>, among: Option<&[u64]>) -> Option<String> {
    let expr = filter.and_then(|f| expression(f, "meta"));
    match among {
        Some(ids) => Some(and_ids(expr.as_deref(), ids)),
        None => expr,
    }
}

/// Whether a server of `version` ("v2.3.5-lite", "2.6.0") has what kindred uses: 2.3 or
/// later (an unparsable version is given the benefit of the doubt).
fn supported(version: &str) -> bool {
    major_minor(version).is_none_or(|v| v >= (2, 3))
}

/// A vector field of a kindred collection in Milvus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VectorField {
    /// The sentence vectors (COSINE).
    Sentence,
    /// The intents [μ; σ] (L2).
    W2,
}

impl VectorField {
    fn name(self) -> &'static str {
        match self {
            VectorField::Sentence => "sentence",
            VectorField::W2 => "w2",
        }
    }
}

/// One vector search of [`Remote::search`].
pub(crate) struct VectorQuery<'a> {
    /// Which field.
    pub field: VectorField,
    /// The query vector.
    pub vector: Vec<f32>,
    /// Hits wanted.
    pub k: usize,
    /// HNSW search list size (at least k).
    pub ef: usize,
    /// Only documents this filter admits.
    pub filter: Option<&'a Filter>,
    /// Only these internal ids.
    pub among: Option<&'a [u64]>,
}

fn settings_key(name: &str) -> String {
    format!("settings/{name}")
}

/// The key of collection `name`'s metadata value `key`.
pub(crate) fn meta_key(name: &str, key: &str) -> String {
    format!("meta/{name}/{key}")
}

/// The shared-metadata key of labelled pair `key` of collection `name`.
fn pair_key(name: &str, key: &str) -> String {
    meta_key(name, &format!("pair/{key}"))
}

/// The characters of a labelled pair's key ...
const HEX: &[u8; 16] = b"0123456789abcdef";
/// ... and how many (`review::pair_key`: 128 bits).
const PAIR_KEY_DIGITS: usize = 32;

/// Every row under a key prefix followed by [`PAIR_KEY_DIGITS`] hex digits, read with
/// `query(head)` (the rows whose digits start with `head`, at most `page` of them): a full
/// answer is read again as its 16 one-digit-longer heads, so no row is cut off by the page
/// limit (a head of all the digits matches one row).
fn by_key_prefix<R>(page: usize, mut query: impl FnMut(&str) -> Result<Vec<R>>) -> Result<Vec<R>> {
    let mut out = Vec::new();
    let mut heads = vec![String::new()];
    while let Some(head) = heads.pop() {
        let rows = query(&head)?;
        if rows.len() >= page && head.len() < PAIR_KEY_DIGITS {
            heads.extend(HEX.iter().map(|&c| format!("{head}{}", c as char)));
        } else {
            out.extend(rows);
        }
    }
    Ok(out)
}

/// The name of record chunk `c` (`rec0..rec3`).
fn record_field(c: usize) -> String {
    format!("rec{c}")
}

/// Every record chunk's field name.
fn record_fields() -> impl Iterator<Item = String> {
    (0..CHUNKS).map(record_field)
}

/// One row of a query's answer: field name → value.
type Row = serde_json::Map<String, serde_json::Value>;

/// One query: the rows of `collection` matching `filter`, with `fields`.
async fn query_rows(
    c: Arc<ClientV2>,
    collection: String,
    filter: String,
    fields: Vec<String>,
    limit: Option<usize>,
    consistency: ConsistencyLevel,
) -> std::result::Result<Vec<serde_json::Map<String, serde_json::Value>>, Error> {
    let mut b = QueryRequest::builder()
        .collection_name(collection)
        .filter(filter)
        .output_fields(fields)
        .consistency_level(consistency);
    if let Some(l) = limit {
        b = b.limit(l as i64);
    }
    let r = c.query(b.build()?).await?;
    let rows = r.results().rows()?.map(|row| row.to_entity_row()).collect();
    rows
}

fn decode_row(r: &serde_json::Map<String, serde_json::Value>) -> Result<(u64, StoredDoc)> {
    let internal = r.get("id").and_then(|v| v.as_u64()).unwrap_or(0);
    let mut b64 = String::new();
    for c in 0..CHUNKS {
        if let Some(s) = r.get(&record_field(c)).and_then(|v| v.as_str()) {
            b64.push_str(s);
        }
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.as_bytes())
        .map_err(|e| {
            crate::error::InternalError::Corrupt(format!("document {internal} in Milvus: {e}"))
        })?;
    let mut doc = StoredDoc::from_bytes(&bytes)?;
    doc.internal = internal;
    Ok((internal, doc))
}

fn pk_int(name: &str) -> FieldSchema {
    FieldSchema::new()
        .name(name)
        .data_type(DataType::Int64)
        .primary_key(true)
        .auto_id(false)
}

fn pk_varchar(name: &str) -> FieldSchema {
    FieldSchema::new()
        .name(name)
        .data_type(DataType::VarChar)
        .max_length(1024)
        .primary_key(true)
        .auto_id(false)
}

fn varchar(name: &str, max: usize) -> FieldSchema {
    FieldSchema::new()
        .name(name)
        .data_type(DataType::VarChar)
        .max_length(max as _)
}

/// An environment override (pure): `default` when `raw` is unset or blank, its value when
/// `parse` accepts it, else an error naming the variable, the value and what it takes — the
/// value would otherwise be ignored without a word (or, for a negative number of seconds,
/// panic).
fn env_setting<T>(
    name: &'static str,
    raw: Option<String>,
    default: T,
    parse: impl Fn(&str) -> Option<T>,
    takes: &str,
) -> Result<T> {
    match raw.as_deref().map(str::trim) {
        None | Some("") => Ok(default),
        Some(v) => parse(v).ok_or_else(|| {
            UserError::InvalidArgument {
                name,
                reason: format!("{v:?}: give {takes}, or unset it"),
            }
            .into()
        }),
    }
}

/// [`LEXICAL_REFRESH`], or the `KINDRED_MILVUS_LEXICAL_REFRESH_SECS` value `raw` asks for.
fn lexical_refresh(raw: Option<String>) -> Result<Duration> {
    env_setting(
        "KINDRED_MILVUS_LEXICAL_REFRESH_SECS",
        raw,
        LEXICAL_REFRESH,
        |v| {
            v.parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(Duration::from_secs_f64)
        },
        "seconds, 0 or more (60 by default)",
    )
}

/// [`IDF_SAMPLE`], or the `KINDRED_MILVUS_IDF_SAMPLE` value `raw` asks for.
fn idf_sample(raw: Option<String>) -> Result<usize> {
    env_setting(
        "KINDRED_MILVUS_IDF_SAMPLE",
        raw,
        IDF_SAMPLE,
        |v| v.parse::<usize>().ok().filter(|&n| n > 0),
        "a whole number of documents, 1 or more (100000 by default)",
    )
}

fn vector(name: &str, dim: usize) -> FieldSchema {
    FieldSchema::new()
        .name(name)
        .data_type(DataType::FloatVector)
        .dimension(dim as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_overrides_are_used_when_valid_and_refused_by_name_otherwise() {
        let secs = |raw: &str| lexical_refresh(Some(raw.to_string()));
        assert_eq!(lexical_refresh(None).unwrap(), LEXICAL_REFRESH);
        assert_eq!(secs(" ").unwrap(), LEXICAL_REFRESH);
        assert_eq!(secs("2.5").unwrap(), Duration::from_millis(2500));
        assert_eq!(secs("0").unwrap(), Duration::ZERO);
        assert_eq!(idf_sample(Some("400".into())).unwrap(), 400);
        // A negative number of seconds panicked in Duration::from_secs_f64; the other values
        // were ignored without a word.
        for (name, e) in [
            (
                "KINDRED_MILVUS_LEXICAL_REFRESH_SECS",
                secs("-1").unwrap_err(),
            ),
            (
                "KINDRED_MILVUS_LEXICAL_REFRESH_SECS",
                secs("NaN").unwrap_err(),
            ),
            (
                "KINDRED_MILVUS_LEXICAL_REFRESH_SECS",
                secs("sixty").unwrap_err(),
            ),
            (
                "KINDRED_MILVUS_IDF_SAMPLE",
                idf_sample(Some("0".into())).unwrap_err(),
            ),
            (
                "KINDRED_MILVUS_IDF_SAMPLE",
                idf_sample(Some("1e5".into())).unwrap_err(),
            ),
        ] {
            let e = e.to_string();
            assert!(e.contains(name) && e.contains("give"), "{e}");
        }
    }

    #[test]
    fn reading_by_key_prefix_returns_every_row_once_past_the_page_limit() {
        let mut rng = crate::score::stats::SplitMix64(5);
        let mut keys: Vec<String> = (0..2000)
            .map(|_| format!("{:016x}{:016x}", rng.next_u64(), rng.next_u64()))
            .collect();
        // A crowded prefix: splitting goes down to whole keys.
        keys.extend((0..40).map(|i| format!("abcdef{i:026x}")));
        let mut queries = 0;
        for page in [2, 7, 100, 5000] {
            let got = by_key_prefix(page, |head| {
                queries += 1;
                // As Milvus answers a capped `like` query: any `page` of the matching rows.
                Ok(keys
                    .iter()
                    .rev()
                    .filter(|k| k.starts_with(head))
                    .take(page)
                    .cloned()
                    .collect())
            })
            .expect("reads");
            let (mut got, mut want) = (got, keys.clone());
            got.sort();
            want.sort();
            assert_eq!(got, want, "page {page}");
        }
        assert!(queries > 4, "full pages were split");
    }

    #[test]
    fn physical_names_are_distinct_and_milvus_safe() {
        assert_eq!(physical("faq"), "kd_faq");
        assert_ne!(physical("a-b"), physical("a_b"));
        assert_ne!(physical("a_hb"), physical("a-b"));
        assert!(physical("x-_y")
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_'));
    }

    #[test]
    fn internal_ids_are_stable_and_fit_int64() {
        assert_eq!(internal_id("q1"), internal_id("q1"));
        assert_ne!(internal_id("q1"), internal_id("q2"));
        assert!(internal_id("anything") <= i64::MAX as u64);
    }

    #[test]
    fn both_servers_words_for_an_unloaded_collection_are_recognised() {
        assert!(not_loaded("collection not loaded[collection=4]"));
        assert!(not_loaded("Milvus server error (code=101, message=Collection 'kindred_meta' is in state 'released'; call load() before search/get/query)"));
        assert!(!not_loaded("collection not found"));
    }

    #[test]
    fn capabilities_and_layouts_follow_the_server_version() {
        let split = Capabilities {
            vector_fields: false,
            full_text: false,
        };
        assert_eq!(capabilities("v2.3.5-lite"), split);
        assert_eq!(
            capabilities("v2.4.17"),
            Capabilities {
                vector_fields: true,
                full_text: false
            }
        );
        assert_eq!(
            capabilities("v2.5.4"),
            Capabilities {
                vector_fields: true,
                full_text: true
            }
        );
        assert_eq!(
            capabilities("2.6.0"),
            Capabilities {
                vector_fields: true,
                full_text: true
            }
        );
        assert_eq!(
            capabilities("milvus_lite-3.2.2"),
            Capabilities {
                vector_fields: true,
                full_text: true
            }
        );
        assert_eq!(capabilities("milvus_lite-2.4.10"), split);
        assert_eq!(capabilities("unknown"), split);
        assert_eq!(Layout::for_server(capabilities("v2.3.5")), Layout::Split);
        assert_eq!(Layout::for_server(capabilities("v2.4.0")), Layout::One);
        assert_eq!(Layout::for_server(capabilities("v2.6.1")), Layout::FullText);
        for l in [Layout::Split, Layout::One, Layout::FullText] {
            assert_eq!(Layout::from_name(l.name()), Some(l));
        }
    }

    #[test]
    fn lexical_terms_keep_bigrams_one_token_and_stop_between_terms() {
        assert_eq!(lexical_terms("How do I?", 1000), "how do i how_do do_i");
        assert_eq!(lexical_terms("How do I?", 9), "how do i");
        assert_eq!(lexical_terms("  ?! ", 100), "");
    }

    #[test]
    fn versions_before_2_3_are_refused() {
        assert!(supported("v2.3.5-lite"));
        assert!(supported("2.6.1"));
        assert!(supported("v3.2.2"));
        assert!(!supported("v2.2.16"));
        assert!(supported("unknown"));
    }

    #[test]
    fn filters_become_milvus_expressions() {
        let raw = json!({"lang": "en", "year": {"gte": 2020, "lt": 2024.5}, "tag": {"in": ["a", "b\"c"]}});
        let f = Filter::parse(raw.as_object().unwrap()).unwrap();
        let e = expression(&f, "meta").unwrap();
        assert!(
            e.contains(r#"(meta["lang"] == "en" or json_contains_any(meta["lang"], ["en"]))"#),
            "{e}"
        );
        assert!(
            e.contains(r#"(meta["year"] >= 2020.0 and meta["year"] < 2024.5)"#),
            "{e}"
        );
        assert!(e.contains(r#"["a","b\"c"]"#), "{e}");
        assert!(
            e.contains(r#"(meta["tag"] == "a" or meta["tag"] == "b\"c" or json_contains_any("#),
            "{e}"
        );
        assert_eq!(expression(&Filter::default(), "meta"), None);
    }
}
