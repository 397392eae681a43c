//! The connection to a Milvus server: connecting and checking its version, every call with its retries and budget, and the primitive queries, upserts and deletes the rest is built from.

use super::*;

/// How long one try of a call may take before it is retried.
pub(super) const TRY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a call may take with its retries: within the server's request timeout (30 s by
/// default), so a client hears 503 `backend_unavailable` rather than a timeout.
pub(super) const CALL_BUDGET: Duration = Duration::from_secs(20);

/// The consistency of every read: Milvus's Session level, which makes a write this node
/// acknowledged visible to its next read without waiting for the cluster's time tick (Strong
/// costs up to the tick interval, about 200 ms, on every read). Writes made through another
/// node become visible within Milvus's graceful time (a few hundred ms by default).
pub(super) const READS: ConsistencyLevel = ConsistencyLevel::Session;

/// Most rows one query returns (Milvus's limit is 16,384).
pub(super) const QUERY_ROWS: usize = 16_384;

/// A connection to a Milvus server, with the runtime its client runs on.
pub(crate) struct Remote {
    pub(super) url: String,
    pub(super) client: Arc<ClientV2>,
    pub(super) rt: Option<tokio::runtime::Runtime>,
    pub(super) version: String,
    /// What the server can do, from its version.
    pub(super) capabilities: Capabilities,
    /// Each open collection's layout (it never changes once created).
    pub(super) layouts: Mutex<HashMap<String, Layout>>,
    /// Per collection, this node's BM25 index (built on first use, rebuilt in the background
    /// every `lexical_refresh`).
    pub(super) lexical: Mutex<HashMap<String, Lexical>>,
    /// Held while a BM25 index is built for the first time, so concurrent first searches wait
    /// for one build instead of each scanning the collection.
    pub(super) building: Mutex<()>,
    /// Shared metadata values as last read or written here, with when ([`Remote::meta`]).
    pub(super) meta_cache: Mutex<HashMap<String, (std::time::Instant, Option<String>)>>,
    /// [`crate::db::MilvusSettings::lexical_refresh`].
    pub(super) lexical_refresh: Duration,
    /// [`crate::db::MilvusSettings::idf_sample`].
    pub(super) idf_sample: usize,
    /// [`crate::db::MilvusSettings::layout`].
    pub(super) layout_asked: Option<String>,
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

pub(super) fn unavailable(url: &str, what: &str, e: impl std::fmt::Display) -> crate::Error {
    UserError::BackendUnavailable {
        backend: format!("milvus at {url}"),
        reason: format!("{what}: {e}"),
    }
    .into()
}

/// Whether a server's refusal says the collection is not loaded: Milvus's "collection not
/// loaded", milvus-lite's "is in state 'released'; call load() before search/get/query".
pub(super) fn not_loaded(message: &str) -> bool {
    message.contains("not loaded") || message.contains("call load()")
}

/// Whether a failed call is worth retrying: anything but the server refusing the request or
/// a request or answer kindred could not build or read.
pub(super) fn transient(e: &Error) -> bool {
    !matches!(
        e,
        Error::Server(_)
            | Error::Validation(_)
            | Error::Conversion(_)
            | Error::MalformedResponse(_)
    )
}

/// Whether a server of `version` ("v2.3.5-lite", "2.6.0") has what kindred uses: 2.3 or
/// later (an unparsable version is given the benefit of the doubt).
pub(super) fn supported(version: &str) -> bool {
    major_minor(version).is_none_or(|v| v >= (2, 3))
}

/// One row of a query's answer: field name → value.
pub(super) type Row = serde_json::Map<String, serde_json::Value>;

/// One query: the rows of `collection` matching `filter`, with `fields`.
pub(super) async fn query_rows(
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

impl Remote {
    /// Connects to the Milvus server at `url` (`milvus://HOST:PORT` or `http://HOST:PORT`),
    /// checks its version and creates the shared metadata collection if missing.
    pub fn connect(url: &str, settings: &crate::db::MilvusSettings) -> Result<Self> {
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
            lexical_refresh: settings.lexical_refresh,
            idf_sample: settings.idf_sample,
            layout_asked: settings.layout.clone(),
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
                backend: crate::db::backend::MILVUS,
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
    pub(super) fn call<T, F, Fut>(&self, what: &str, f: F) -> Result<T>
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

    pub(super) fn has(&self, collection: &str) -> Result<bool> {
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

    pub(super) fn create(
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

    pub(super) fn load(&self, collection: &str) -> Result<()> {
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

    pub(super) fn drop_milvus(&self, collection: &str) -> Result<()> {
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
    pub(super) fn query(
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

    pub(super) fn query_once(
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
    pub(super) fn reloading<T>(&self, collection: &str, f: impl Fn() -> Result<T>) -> Result<T> {
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
    pub(super) fn upsert_rows(&self, collection: &str, rows: Vec<serde_json::Value>) -> Result<()> {
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

    pub(super) fn delete_where(&self, collection: &str, filter: &str) -> Result<()> {
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
}
