//! Handlers for documents: upsert (a JSON array, or an NDJSON stream committed in batches),
//! get, delete and export (the whole collection, streamed as NDJSON); and the upsert's
//! request type, a document with the format of its text.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{blocking, check_collection, check_text, is_ndjson, parse, WriteTicket};
use super::AppState;
use crate::ingest::lines::{Line, LineSplitter};
use crate::{db, text};

// The stored document's fields (`super::api::NewDocument`, the library's `db::NewDocument`)
// and the format its text is written in; its schema keeps the name `NewDocument`.
/// A document as a user gives it: an id, its text (written as `format` says) and optional
/// metadata.
#[derive(Debug, Clone, PartialEq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = NewDocument)]
pub struct DocumentUpsert {
    /// External id (1–512 bytes).
    pub id: String,
    /// The question, written as `format` says.
    pub text: String,
    /// A JSON object (or absent).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub metadata: serde_json::Value,
    /// How `text` and `context` are written: `text` (the default: stored as given) or `html`
    /// (HTML fragments: their visible text is stored).
    #[serde(default)]
    pub format: TextFormat,
    /// Texts that go with the question (answers, comments, the FAQ entry it was filed under):
    /// one string or a list of strings, stored verbatim and returned with the document, never
    /// encoded or searched. Absent, `""` or `[]`: none; empty texts are dropped. At most 64
    /// texts and 64 KiB in all.
    #[serde(default, deserialize_with = "db::one_or_many")]
    #[schema(schema_with = super::api::collections::context_schema)]
    pub context: Vec<String>,
}

/// How a document's text is written. Either way, HTML character references (`&eacute;`,
/// `&#39;`) are decoded and whitespace is collapsed when the text is tokenized, so offsets
/// (tokens, explanation words) point into the stored text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TextFormat {
    /// Plain text: stored as given.
    #[default]
    Text,
    /// An HTML fragment: its visible text is what is stored, searched and shown (tags removed,
    /// `<br>`, paragraphs, list items and headings as line breaks, `<script>`, `<style>` and
    /// comments dropped; character references kept as written).
    Html,
}

impl From<TextFormat> for text::TextFormat {
    fn from(f: TextFormat) -> Self {
        match f {
            TextFormat::Text => text::TextFormat::Text,
            TextFormat::Html => text::TextFormat::Html,
        }
    }
}

impl From<DocumentUpsert> for db::NewDocument {
    /// The document as stored: for `html`, its text and context texts are the fragments'
    /// visible text.
    fn from(d: DocumentUpsert) -> Self {
        db::NewDocument {
            id: d.id,
            text: d.text,
            metadata: d.metadata,
            context: d.context,
        }
        .in_format(d.format.into())
    }
}

/// Result of an upsert.
#[derive(Debug, Serialize, ToSchema)]
pub struct UpsertResult {
    /// Documents written (all acknowledged: durable unless the server runs relaxed).
    pub upserted: usize,
    /// Of those, how many replaced an existing id.
    pub replaced: usize,
    /// Batches committed (each all-or-nothing).
    pub batches: usize,
}

/// `POST /v1/collections/{c}/documents`: upserts a JSON array of documents (all or nothing),
/// or, with `Content-Type: application/x-ndjson`, a stream of one document per line committed
/// in batches of `limits.max_batch`. An error in a stream answers with how many documents were
/// committed before it; nothing after the bad line is written. A document with
/// `"format": "html"` is stored as its visible text (its context too). A document's `context`
/// is stored with it and never encoded.
#[utoipa::path(post, tag = "documents", path = "/v1/collections/{collection}/documents", params(("collection" = String, Path)),
    request_body(content = Vec<DocumentUpsert>, description = "JSON array, or NDJSON with Content-Type application/x-ndjson"),
    responses(
        (status = 200, body = UpsertResult),
        (status = 413, description = "Too many documents or too large a body", body = ErrorBody),
        (status = 422, description = "A document is invalid", body = ErrorBody),
    ))]
pub async fn upsert_documents(
    State(state): State<Arc<AppState>>,
    Path(collection): Path<String>,
    ticket: Option<Extension<WriteTicket>>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<UpsertResult>> {
    if is_ndjson(&headers) {
        return upsert_stream(state, collection, body).await.map(Json);
    }
    let limit = state.config.limits.max_body_bytes;
    let bytes = axum::body::to_bytes(body, limit).await;
    let bytes = bytes.map_err(|_| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the request body exceeds limits.max_body_bytes ({limit}); send fewer documents per request or stream NDJSON"),
        )
    });
    let docs: Vec<DocumentUpsert> = parse(Ok(bytes?))?;
    let docs: Vec<db::NewDocument> = docs.into_iter().map(Into::into).collect();
    let max = state.config.limits.max_batch;
    if docs.len() > max {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "batch_too_large",
            format!("{} documents in one request; the limit is {max} (limits.max_batch): split the batch or stream NDJSON", docs.len()),
        ));
    }
    let ticket = ticket.map(|Extension(t)| t).unwrap_or_default();
    let (upserted, replaced) = write_batch(&state, &collection, docs, ticket).await?;
    Ok(Json(UpsertResult {
        upserted,
        replaced,
        batches: usize::from(upserted > 0),
    }))
}

/// Writes one batch (all or nothing). `ticket` is asked just before the commit: a request
/// answered `timeout` while it waited or encoded writes nothing.
async fn write_batch(
    state: &Arc<AppState>,
    collection: &str,
    docs: Vec<db::NewDocument>,
    ticket: WriteTicket,
) -> ApiResult<(usize, usize)> {
    if docs.is_empty() {
        // Nothing to write, but an unknown collection is still a 404.
        check_collection(state, collection).await?;
        return Ok((0, 0));
    }
    for d in &docs {
        check_text(
            state,
            &format!("document {:?}", d.id.chars().take(40).collect::<String>()),
            &d.text,
        )?;
    }
    // One writer at a time: a large ingest leaves the other core to searches.
    let permit = state
        .writers
        .clone()
        .acquire_owned()
        .await
        .expect("semaphore open");
    let (c, s) = (collection.to_string(), state.clone());
    let out = blocking(move || {
        // Held until the write ends, even if the request is answered `timeout` first.
        let _permit = permit;
        s.engine.write_with(&c, |col| {
            s.write_pool
                .install(|| col.upsert_if(docs.clone(), || ticket.begin_commit()))
        })
    })
    .await?;
    let Some(out) = out else {
        // Cancelled by the timeout, which has answered the client already.
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "timeout",
            "the write was not stored: the request timed out first",
        ));
    };
    state.metrics.upserted(collection, out.len());
    Ok((
        out.len(),
        out.iter().filter(|u| u.replaced.is_some()).count(),
    ))
}

async fn upsert_stream(
    state: Arc<AppState>,
    collection: String,
    body: Body,
) -> ApiResult<UpsertResult> {
    // Fail fast on an unknown collection or another model, before reading the stream.
    check_collection(&state, &collection).await?;
    let max_line = state.config.limits.max_body_bytes;
    let batch_size = state.config.limits.max_batch;
    let mut stream = body.into_data_stream();
    let mut splitter = LineSplitter::new(max_line);
    let mut batch: Vec<db::NewDocument> = Vec::new();
    let mut result = UpsertResult {
        upserted: 0,
        replaced: 0,
        batches: 0,
    };
    let mut line_no = 0u64;
    let mut done = false;
    while !done {
        let mut lines = Vec::new();
        match stream.next().await {
            Some(Ok(chunk)) => splitter.push(&chunk, &mut lines),
            Some(Err(e)) => {
                return Err(stream_error(
                    &result,
                    format!("reading the body failed: {e}"),
                    StatusCode::BAD_REQUEST,
                    "bad_body",
                ))
            }
            None => {
                done = true;
                splitter.finish(&mut lines);
            }
        }
        for line in lines {
            let line = match line {
                Line::Text(n, text) => {
                    line_no = n;
                    text
                }
                Line::TooLong(n) => {
                    return Err(stream_error(
                        &result,
                        format!("line {n} is longer than limits.max_body_bytes ({max_line})"),
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "line_too_long",
                    ))
                }
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let doc: DocumentUpsert = parse(Ok(Bytes::from(line))).map_err(|e| {
                stream_error(
                    &result,
                    format!("line {line_no}: {}", e.message),
                    e.status,
                    e.code,
                )
            })?;
            batch.push(doc.into());
            if batch.len() == batch_size {
                commit(&state, &collection, &mut batch, &mut result, line_no).await?;
            }
        }
    }
    commit(&state, &collection, &mut batch, &mut result, line_no).await?;
    Ok(result)
}

async fn commit(
    state: &Arc<AppState>,
    collection: &str,
    batch: &mut Vec<db::NewDocument>,
    result: &mut UpsertResult,
    line_no: u64,
) -> ApiResult<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let docs = std::mem::take(batch);
    match write_batch(state, collection, docs, WriteTicket::default()).await {
        Ok((n, r)) => {
            result.upserted += n;
            result.replaced += r;
            result.batches += 1;
            Ok(())
        }
        Err(e) => Err(stream_error(
            result,
            format!("batch ending at line {line_no}: {}", e.message),
            e.status,
            e.code,
        )),
    }
}

fn stream_error(
    done: &UpsertResult,
    message: String,
    status: StatusCode,
    code: &'static str,
) -> ApiError {
    ApiError::new(
        status,
        code,
        format!(
            "{message}. {} documents in {} batches were committed before it; nothing after it was written",
            done.upserted, done.batches
        ),
    )
}

/// A stored document.
#[derive(Debug, Serialize, ToSchema)]
pub struct DocumentView {
    /// External id.
    pub id: String,
    /// The question.
    pub text: String,
    /// Metadata.
    #[schema(value_type = Object)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// Content wordpieces.
    pub tokens: usize,
    /// Truncated at the model's maximum length.
    pub truncated: bool,
    /// The document's context texts, as stored (always present: `[]` when it has none).
    pub context: Vec<String>,
}

/// `GET /v1/collections/{c}/documents/{id}`: the document as stored, with its context.
#[utoipa::path(get, tag = "documents", path = "/v1/collections/{collection}/documents/{id}",
    params(("collection" = String, Path), ("id" = String, Path)),
    responses((status = 200, body = DocumentView), (status = 404, body = ErrorBody)))]
pub async fn get_document(
    State(state): State<Arc<AppState>>,
    Path((collection, id)): Path<(String, String)>,
) -> ApiResult<Json<DocumentView>> {
    let db = state.db().clone();
    let (c, i) = (collection.clone(), id.clone());
    match blocking(move || db.get(&c, &i)).await? {
        Some(d) => Ok(Json(DocumentView {
            metadata: d.metadata(),
            tokens: d.tokens.len(),
            truncated: d.truncated,
            id: d.id,
            text: d.text,
            context: d.context,
        })),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "document_not_found",
            format!("no document {id:?} in collection {collection:?}"),
        )),
    }
}

/// `DELETE /v1/collections/{c}/documents/{id}`.
#[utoipa::path(delete, tag = "documents", path = "/v1/collections/{collection}/documents/{id}",
    params(("collection" = String, Path), ("id" = String, Path)),
    responses((status = 200, description = "Deleted"), (status = 404, body = ErrorBody)))]
pub async fn delete_document(
    State(state): State<Arc<AppState>>,
    Path((collection, id)): Path<(String, String)>,
) -> ApiResult<Json<serde_json::Value>> {
    let _permit = state.writers.acquire().await.expect("semaphore open");
    let (db, s) = (state.db().clone(), state.clone());
    let (c, i) = (collection.clone(), id.clone());
    // A delete can trigger a graph compaction: keep it on the write threads too.
    if blocking(move || s.write_pool.install(|| db.delete(&c, &i))).await? {
        Ok(Json(serde_json::json!({ "deleted": id })))
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "document_not_found",
            format!("no document {id:?} in collection {collection:?}"),
        ))
    }
}

/// Bytes of an export buffered before they are sent (one chunk of the response).
const EXPORT_CHUNK_BYTES: usize = 64 << 10;

/// `GET /v1/collections/{c}/export`: every document as NDJSON, one `{"id", "text",
/// "metadata", "context"}` object per line (context left out when empty), the format the
/// NDJSON upsert, `kindred add` and `kindred ingest` read ([`db::write_export`]); streamed as
/// it is read (memory stays flat in the collection's size). Not a snapshot: documents written
/// while it runs may or may not be in it. A store error part-way ends the response early
/// without its last chunk, so a client sees a broken transfer, never a silently short export.
#[utoipa::path(get, tag = "documents", path = "/v1/collections/{collection}/export",
    params(("collection" = String, Path)),
    responses(
        (status = 200, description = "The documents, one JSON object per line", content_type = "application/x-ndjson", body = String),
        (status = 404, body = ErrorBody),
    ))]
pub async fn export_documents(
    State(state): State<Arc<AppState>>,
    Path(collection): Path<String>,
) -> ApiResult<axum::response::Response> {
    check_collection(&state, &collection).await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
    let db = state.db().clone();
    tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        let mut out = ChunkSender {
            tx: tx.clone(),
            chunk: Vec::with_capacity(EXPORT_CHUNK_BYTES),
        };
        let exported =
            (db.documents(&collection)).and_then(|docs| db::write_export(docs, &mut out, |_| {}));
        match exported {
            Ok(n) => {
                let seconds = started.elapsed().as_secs_f64();
                tracing::info!(collection, documents = n, seconds, "exported");
            }
            Err(_) if tx.is_closed() => {
                tracing::info!(collection, "export: the client went away");
            }
            Err(e) => {
                tracing::error!(collection, error = %e, "export stopped");
                let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
            }
        }
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(body),
    )
        .into_response())
}

/// What an export writes into: sends the response body down `tx` in chunks of
/// [`EXPORT_CHUNK_BYTES`]; a write fails once the body is gone (the client left).
struct ChunkSender {
    tx: tokio::sync::mpsc::Sender<std::io::Result<Bytes>>,
    chunk: Vec<u8>,
}

impl ChunkSender {
    fn send(&mut self) -> std::io::Result<()> {
        let full = std::mem::replace(&mut self.chunk, Vec::with_capacity(EXPORT_CHUNK_BYTES));
        (self.tx.blocking_send(Ok(full.into()))).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client went away")
        })
    }
}

impl std::io::Write for ChunkSender {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.chunk.extend_from_slice(bytes);
        if self.chunk.len() >= EXPORT_CHUNK_BYTES {
            self.send()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.chunk.is_empty() {
            return Ok(());
        }
        self.send()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::server::api::collections::NewDocument;

    fn read(body: serde_json::Value) -> ApiResult<Vec<db::NewDocument>> {
        let docs: Vec<DocumentUpsert> = parse(Ok(Bytes::from(body.to_string())))?;
        Ok(docs.into_iter().map(Into::into).collect())
    }

    #[test]
    fn without_a_format_a_document_reads_as_before() {
        for body in [
            json!([{ "id": "a", "text": "<b>t</b> &amp;" }]),
            json!([{ "id": "a", "text": "t", "metadata": { "x": 1 } }]),
            json!([{ "id": "a", "text": "t", "extra": true }]),
            json!([{ "id": "a" }]),
        ] {
            let old: ApiResult<Vec<NewDocument>> = parse(Ok(Bytes::from(body.to_string())));
            let old: Option<Vec<db::NewDocument>> =
                old.ok().map(|d| d.into_iter().map(Into::into).collect());
            assert_eq!(read(body.clone()).ok(), old, "{body}");
        }
        let text = read(json!([{ "id": "a", "text": " <b>x</b> ", "format": "text" }]));
        assert_eq!(text.expect("reads")[0].text, " <b>x</b> ");
    }

    #[test]
    fn an_html_document_is_stored_as_its_visible_text() {
        let docs = read(json!([{
            "id": "a",
            "text": "<p>What&#39;s the best <b>caf&eacute;</b> in Doha?</p><script>x()</script>",
            "format": "html"
        }]))
        .expect("reads");
        assert_eq!(docs[0].text, "What&#39;s the best caf&eacute; in Doha?");
    }

    #[test]
    fn context_is_a_string_or_a_list_and_html_strips_it_too() {
        let docs = read(json!([
            { "id": "a", "text": "t", "context": "an answer" },
            { "id": "b", "text": "t", "context": ["one", "two"] },
            { "id": "c", "text": "t", "context": "" },
            { "id": "d", "text": "t", "context": [] },
            { "id": "e", "text": "t", "context": null },
            { "id": "f", "text": "t" },
            { "id": "g", "text": "<b>t</b>", "context": ["<p>A &amp; <i>B</i></p>", "x"], "format": "html" },
        ]))
        .expect("reads");
        let contexts: Vec<Vec<String>> = docs.iter().map(|d| d.context.clone()).collect();
        assert_eq!(contexts[0], ["an answer"]);
        assert_eq!(contexts[1], ["one", "two"]);
        // An empty string is kept here and dropped when stored (db::validate ignores it too).
        assert_eq!(contexts[2], [""]);
        assert!(contexts[3..6].iter().all(Vec::is_empty));
        assert_eq!(
            (docs[6].text.as_str(), &contexts[6][..]),
            ("t", &["A &amp; B".to_string(), "x".into()][..])
        );
        for bad in [json!(3), json!({ "a": 1 }), json!(["ok", 2])] {
            let e = read(json!([{ "id": "a", "text": "t", "context": bad }])).expect_err("refused");
            assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
            assert!(
                e.message.contains("a string or a list of strings")
                    || e.message.contains("expected a string"),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn an_unknown_format_is_a_422_naming_the_accepted_values() {
        let e =
            read(json!([{ "id": "a", "text": "t", "format": "markdown" }])).expect_err("refused");
        assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(
            e.message
                .contains("unknown variant `markdown`, expected `text` or `html`"),
            "{}",
            e.message
        );
    }
}
