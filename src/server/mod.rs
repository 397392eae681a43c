//! `kindred serve`: the REST API (axum on tokio), versioned under `/v1`.
//!
//! Owns the HTTP surface only: routing, keys, limits, timeouts, metrics, OpenAPI and the
//! server's lifecycle (index warm-up, periodic checkpoints, graceful shutdown). Every handler
//! is a thin call into [`crate::engine`] (or [`crate::db`] for plain reads) on tokio's
//! blocking pool, so encoding and reranking never stall the async threads.

pub(crate) mod api;
pub(crate) mod auth;
pub(crate) mod collections;
pub mod config;
pub(crate) mod documents;
pub(crate) mod error;
pub(crate) mod extract;
pub(crate) mod guard;
pub(crate) mod jobs;
pub(crate) mod listen;
pub(crate) mod metrics;
pub(crate) mod openapi;
pub(crate) mod reindex;
pub(crate) mod review;
pub(crate) mod routes;
pub(crate) mod search;
pub(crate) mod ui;
pub(crate) mod uploads;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::db::Database;
use crate::engine::Engine;
use crate::Encoder;
use auth::{Keys, Role};
use config::ServeConfig;
use error::ApiError;
use metrics::Metrics;

/// What every handler shares.
pub struct AppState {
    /// The database and the encoders: the server's model, and those of reindexed collections.
    pub engine: Engine,
    /// The configuration in force.
    pub config: ServeConfig,
    /// API keys.
    pub keys: Keys,
    /// Metrics.
    pub metrics: Metrics,
    /// Set once every collection's indexes are loaded.
    pub ready: AtomicBool,
    /// One encoding writer at a time (a write's permit lives as long as its blocking work,
    /// even when the request that started it has timed out).
    pub writers: Arc<Semaphore>,
    /// The threads writes run on (`ingest_threads`), so searches keep the other cores.
    pub write_pool: Arc<rayon::ThreadPool>,
    /// File ingest jobs.
    pub jobs: jobs::Jobs,
    /// Reindex jobs, by collection.
    pub reindexes: reindex::Reindexes,
}

impl AppState {
    /// The database.
    pub fn db(&self) -> &Arc<Database> {
        self.engine.db()
    }

    /// The server's own model's encoder.
    pub fn encoder(&self) -> &Arc<Encoder> {
        self.engine.encoder()
    }
}

/// Builds the router over shared state.
pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.config.limits.max_body_bytes;
    let routes = open_routes()
        .merge(read_routes(&state))
        .merge(admin_routes(&state))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), browser_guard))
        .layer(middleware::from_fn_with_state(state.clone(), timeout))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            declared_length,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .layer(axum::extract::DefaultBodyLimit::max(limit))
        .with_state(state);
    // Around the whole router, not each route: a route's 405 gets its `Allow` header only
    // as it leaves the route, and the JSON error names the methods from it.
    Router::new()
        .fallback_service(routes)
        .layer(middleware::from_fn(error::json_errors))
}

/// The routes that read: they need the read key (or the admin key) when one is set.
fn read_routes(state: &Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/collections", get(collections::list_collections))
        .route(
            "/v1/collections/{collection}",
            get(collections::get_collection),
        )
        .route(
            "/v1/collections/{collection}/documents/{id}",
            get(documents::get_document),
        )
        .route(
            "/v1/collections/{collection}/search",
            post(search::search_collection),
        )
        .route(
            "/v1/collections/{collection}/duplicates",
            post(search::duplicates),
        )
        .route("/v1/explain", post(search::explain))
        .route(
            "/v1/collections/{collection}/operations",
            post(search::operations),
        )
        .route(
            "/v1/collections/{collection}/review",
            get(review::review_queue),
        )
        .route(
            "/v1/collections/{collection}/verdicts",
            get(review::list_verdicts),
        )
        // Metrics name collections and their sizes: with a read key, scrapers send it.
        .route("/metrics", get(routes::metrics))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_read))
}

/// The routes that write, export or run jobs: they need the admin key.
fn admin_routes(state: &Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/collections", post(collections::create_collection))
        .route(
            "/v1/collections/{collection}",
            delete(collections::drop_collection),
        )
        .route(
            "/v1/collections/{collection}/search-defaults",
            put(collections::put_search_defaults).delete(collections::delete_search_defaults),
        )
        .route(
            "/v1/collections/{collection}/documents",
            post(documents::upsert_documents),
        )
        .route(
            "/v1/collections/{collection}/documents/{id}",
            delete(documents::delete_document),
        )
        .route(
            "/v1/collections/{collection}/verdicts",
            post(review::put_verdict),
        )
        .route(
            "/v1/collections/{collection}/verdicts/{key}",
            delete(review::delete_verdict),
        )
        .route("/v1/collections/{collection}/ingest", post(uploads::upload))
        .route(
            "/v1/collections/{collection}/export",
            get(documents::export_documents),
        )
        .route(
            "/v1/collections/{collection}/reindex",
            post(reindex::start).get(reindex::status),
        )
        .route("/v1/jobs", get(uploads::list_jobs))
        .route("/v1/jobs/{id}", get(uploads::get_job))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_admin))
}

/// The routes open to anyone: health, readiness, the API description and the UI.
fn open_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/healthz", get(routes::healthz))
        .route("/readyz", get(routes::readyz))
        .route("/openapi.json", get(openapi::serve))
        .route("/", get(ui::redirect))
        .route("/ui", get(ui::redirect))
        .route("/ui/", get(ui::index))
        .route("/ui/{file}", get(ui::file))
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "route_not_found",
        "no such route; see GET /openapi.json for the API",
    )
}

/// Refuses what a hostile web page could make a browser send (see [`guard`]).
async fn browser_guard(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let authority = req.uri().authority().map(|a| a.as_str().to_string());
    match guard::check(
        (req.method(), req.uri().path()),
        req.headers(),
        authority.as_deref(),
        s.config.listen.ip().is_loopback(),
        &s.config.allowed_hosts,
    ) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

async fn require_read(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    match s.keys.check(req.headers(), Role::Read) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

async fn require_admin(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    match s.keys.check(req.headers(), Role::Admin) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// What a request's body is, for its time and size limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyKind {
    /// A file upload (`POST …/ingest`): as long as the file, up to `max_upload_bytes`.
    Upload,
    /// An NDJSON document stream (`POST …/documents`): as long as the stream, bounded per
    /// line.
    Stream,
    /// Anything else: one JSON body, up to `max_body_bytes`, within the request timeout.
    Json,
}

/// The one place that tells an upload or a document stream from a plain request (and only
/// on their routes: an NDJSON content type elsewhere gets no pass).
fn body_kind(req: &Request) -> BodyKind {
    let path = req.uri().path();
    if req.method() != axum::http::Method::POST {
        BodyKind::Json
    } else if path.ends_with("/ingest") {
        BodyKind::Upload
    } else if extract::is_ndjson(req.headers()) && path.ends_with("/documents") {
        BodyKind::Stream
    } else {
        BodyKind::Json
    }
}

/// Answers 503 `timeout` when a request takes longer than `limits.request_timeout_ms`, or 408
/// `request_timeout` when that time ran out while its body was still arriving (a slow
/// client, not a slow server). NDJSON document streams and file uploads are exempt: they are
/// as long as the file (and only there: an NDJSON content type on another route gets no
/// pass). The request and a document write share a [`extract::WriteTicket`]: a write that
/// has not begun to commit is cancelled (503, `Retry-After`, not stored), one that has is
/// waited for, so a write is never answered `timeout` and then stored.
async fn timeout(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let ms = s.config.limits.request_timeout_ms;
    if body_kind(&req) != BodyKind::Json || ms == 0 {
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    let (body, arrived) = extract::watch_body(body);
    let ticket = extract::WriteTicket::default();
    parts.extensions.insert(ticket.clone());
    let answer = next.run(Request::from_parts(parts, body));
    tokio::pin!(answer);
    tokio::select! {
        r = &mut answer => return r,
        () = tokio::time::sleep(Duration::from_millis(ms)) => {}
    }
    if !arrived.load(Ordering::Acquire) {
        return ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!("the request body did not arrive within {ms} ms (limits.request_timeout_ms); nothing was done: send it faster or in smaller parts"),
        )
        .into_response();
    }
    if !ticket.cancel() {
        // A write that has begun to commit: its answer (soon) is the truth.
        return answer.await;
    }
    let mut r = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "timeout",
        format!("the request took longer than {ms} ms (limits.request_timeout_ms); a document write answered so was not stored: retry it"),
    )
    .into_response();
    r.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("1"),
    );
    r
}

/// 413 at once for a request that sent `Expect: 100-continue` with a declared length
/// (`Content-Length`) over the route's limit, before any of the body is read: the client is
/// told not to send it instead of being invited to (`limits.max_upload_bytes` for a file
/// upload, `limits.max_body_bytes` for a JSON body; an NDJSON stream is limited per line).
/// Without `Expect`, the body is already on its way: it is read up to the limit as before,
/// so the client is still reading when the 413 comes.
async fn declared_length(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let expects = req
        .headers()
        .get(axum::http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if !expects {
        return next.run(req).await;
    }
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let limits = &s.config.limits;
    let kind = body_kind(&req);
    let upload = kind == BodyKind::Upload;
    let limit = match kind {
        BodyKind::Upload => limits.max_upload_bytes,
        BodyKind::Stream => u64::MAX,
        BodyKind::Json => limits.max_body_bytes as u64,
    };
    match declared {
        Some(n) if n > limit && upload => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "upload_too_large",
            format!("the file is {n} bytes, over limits.max_upload_bytes ({limit}); split it or load it with `kindred ingest` on the server"),
        )
        .into_response(),
        Some(n) if n > limit => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the request body is {n} bytes, over limits.max_body_bytes ({limit}); send fewer documents per request or stream NDJSON (application/x-ndjson)"),
        )
        .into_response(),
        _ => next.run(req).await,
    }
}

/// Counts and times every request by matched route; logs it.
async fn observe(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    // Only the methods HTTP defines become labels: an invented method must not grow the
    // metrics (each distinct label set is kept for the life of the process).
    let method = match req.method().as_str() {
        m @ ("GET" | "POST" | "PUT" | "DELETE" | "HEAD" | "OPTIONS" | "PATCH" | "CONNECT"
        | "TRACE") => m,
        _ => "other",
    }
    .to_string();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched".to_string(), |p| p.as_str().to_string());
    let response = next.run(req).await;
    let seconds = start.elapsed().as_secs_f64();
    let status = response.status().as_u16();
    s.metrics.request(&method, &route, status, seconds);
    tracing::info!(%method, %route, status, ms = seconds * 1e3, "request");
    response
}

/// What `serve` tells its caller once the socket is bound.
pub struct Running {
    /// The bound address.
    pub addr: std::net::SocketAddr,
}

/// Serves until Ctrl-C / SIGTERM, then stops accepting, finishes in-flight requests and
/// saves the indexes. Calls `on_listening` once the socket is bound.
pub async fn serve(
    config: ServeConfig,
    engine: Engine,
    on_listening: impl FnOnce(&Running),
) -> crate::Result<()> {
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(crate::error::io_err(format!(
            "binding {} (is another server on that port? use --listen ADDR:PORT)",
            config.listen
        )))?;
    let addr = listener
        .local_addr()
        .map_err(crate::error::io_err("reading the bound address"))?;
    if config.admin_key.is_none() {
        tracing::warn!(
            "no admin key: anyone who can reach {addr} can write; set KINDRED_ADMIN_KEY"
        );
    }
    let db = engine.db().clone();
    db.set_min_free_bytes(config.limits.min_free_disk_bytes);
    let swept = jobs::sweep(db.dir());
    if swept > 0 {
        tracing::info!(
            files = swept,
            "removed files left by an earlier server's upload jobs"
        );
    }
    let state = Arc::new(AppState {
        keys: Keys::new(config.admin_key.as_deref(), config.read_key.as_deref()),
        engine,
        metrics: Metrics::new(),
        ready: AtomicBool::new(false),
        writers: Arc::new(Semaphore::new(1)),
        write_pool: Arc::new(
            rayon::ThreadPoolBuilder::new()
                .num_threads(config.writer_threads())
                .thread_name(|i| format!("kindred-write-{i}"))
                .start_handler({
                    let nice = config.ingest_nice;
                    move |_| lower_thread_priority(nice)
                })
                .build()
                .map_err(|e| {
                    crate::InternalError::Backend(format!("starting the write pool: {e}"))
                })?,
        ),
        jobs: jobs::Jobs::default(),
        reindexes: reindex::Reindexes::default(),
        config,
    });
    spawn_background(&state);
    on_listening(&Running { addr });
    tracing::info!(%addr, "listening");
    let limits = listen::ConnectionLimits {
        max_connections: state.config.limits.max_connections,
        header_timeout: Duration::from_millis(state.config.limits.header_timeout_ms),
    };
    listen::serve(listener, router(state.clone()), limits, shutdown_signal()).await;
    // Upload jobs stop after their current batch (nothing acknowledged is lost; their files
    // are removed), before the final checkpoint.
    let jobs = state.clone();
    if let Ok(n) = tokio::task::spawn_blocking(move || jobs.jobs.stop_all()).await {
        if n > 0 {
            tracing::info!(
                jobs = n,
                "upload jobs stopped; load their files again to finish"
            );
        }
    }
    tracing::info!("shutting down: saving indexes");
    let saved = tokio::task::spawn_blocking(move || db.checkpoint())
        .await
        .map_err(|e| crate::InternalError::Backend(format!("checkpoint task: {e}")))??;
    tracing::info!(
        collections = saved,
        "indexes saved (a collection with fewer than 1% of its points changed since its last save is caught up at the next start instead)"
    );
    Ok(())
}

/// The server's background work: loading every collection's indexes (then `/readyz` turns
/// 200), the periodic index checkpoint, and reopening the store once the disk has room again
/// after sled met an I/O error (writes resume without a restart).
fn spawn_background(state: &Arc<AppState>) {
    let s = state.clone();
    tokio::task::spawn_blocking(move || {
        match s.db().warm_up() {
            Ok(()) => tracing::info!("indexes loaded; ready"),
            Err(e) => {
                tracing::error!(error = %e, "loading indexes failed; they load on first use")
            }
        }
        s.ready.store(true, Ordering::Release);
    });
    let db = state.db().clone();
    let interval = state.config.checkpoint_interval_secs;
    if interval > 0 {
        every(Duration::from_secs(interval), db.clone(), |db| {
            match db.checkpoint() {
                Ok(n) if n > 0 => tracing::info!(collections = n, "indexes checkpointed"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "checkpoint failed"),
            }
        });
    }
    every(Duration::from_secs(1), db, |db| match db.recover_store() {
        Ok(true) => tracing::info!("writes resume: the store was reopened"),
        Ok(false) => {}
        Err(e) => tracing::warn!(error = %e, "reopening the store failed; retrying"),
    });
}

/// Runs `f` on a blocking thread every `period` (the first time after one period), for as long
/// as the runtime runs.
fn every(period: Duration, db: Arc<Database>, f: fn(&Database)) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.tick().await;
        loop {
            tick.tick().await;
            let db = db.clone();
            let _ = tokio::task::spawn_blocking(move || f(&db)).await;
        }
    });
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// Raises the calling thread's niceness to `nice` (Linux: niceness is per thread), so a write
/// thread yields the core to a search thread that wants it. 0 leaves it alone; failure is
/// logged, never fatal.
pub(crate) fn lower_thread_priority(nice: i32) {
    if nice == 0 {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid and setpriority take plain integers and touch only this thread.
        let done = unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, nice)
        };
        if done != 0 {
            tracing::warn!(
                nice,
                error = %std::io::Error::last_os_error(),
                "could not lower a write thread's priority"
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    tracing::debug!(nice, "write thread priority is left alone on this platform");
}
