//! Fault injection over a real socket: `kindred serve` (default durability, `limits.max_batch`
//! 16, an index checkpoint every second) is killed with SIGKILL at a random moment while
//! clients write to it, then restarted on the same data directory, round after round. The
//! writes are JSON-array batches from three client threads, NDJSON streams, upload jobs and
//! deletes, on disjoint ids within a round; in some rounds a reindex onto the other model
//! (`POST /v1/collections/{c}/reindex`, alternating between the test model and
//! `common::other_model`) runs beside the writes, and deletes of 400 documents start
//! background compactions. After every restart:
//!
//! - every acknowledged write is there (a 200 batch or stream: all of it; an upload job: the
//!   first `written` lines it reported; a 200 delete: the document is gone), and every
//!   document found is exactly one that was sent (text and metadata) or the one before it;
//! - unacknowledged writes landed whole or not at all: a JSON batch all or nothing, a killed
//!   stream or job a prefix of its lines cut at a committed batch;
//! - the collection's stats, both graphs (points less their own tombstones, which differ after
//!   a background compaction) and the lexical index count exactly the documents found; a
//!   cosine and a W2 search for a document's own text find it first, and deleted documents are
//!   found by neither;
//! - no `uploads/job-*` file of the killed process is left (the server sweeps them at start);
//! - `index.opened` says how the graphs were opened: graphs saved before the kill are read and
//!   caught up with the writes made after their save (at least one restart must do so, or the
//!   kills did not exercise that path);
//! - the collection is on one of the two models, whole: a reindex the kill cut short left it on
//!   the old one, with the new generation's trees and index folder gone.
//!
//! One round in four kills the server while it saves its indexes (as soon as a save's
//! temporary file appears); some rounds also kill the restarted server again while it loads
//! them. 20 rounds by default (CI, under a minute on 2 cores); a longer run, at least 100
//! trials (about 4.5 minutes on 2 cores):
//!
//! ```text
//! KINDRED_FAULT_ROUNDS=100 cargo test --release --test it faults -- --nocapture
//! ```
//!
//! The seed is printed; `KINDRED_FAULT_SEED=<seed>` replays its choices (not its timings).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::common::{encoder, model_dir, other_model, qqp_questions, Rng};

const COLLECTION: &str = "qqp";
/// Ids `q0`..`q{POOL}`; each id's text is one of `VARIANTS` questions of its own.
const POOL: usize = 2000;
const VARIANTS: usize = 3;
const MAX_BATCH: usize = 16;
const JSON_THREADS: usize = 3;
const PRELOAD: usize = 240;
/// The round number the preload's tags carry (no real round has it).
const PRELOAD_ROUND: usize = 999_999;

/// A document as sent (and as it must come back).
#[derive(Debug, Clone, PartialEq)]
struct Doc {
    text: String,
    meta: Value,
}

/// What an id holds: a document, or nothing.
type State = Option<Doc>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Json,
    Ndjson,
    Upload,
    Delete,
    Reindex,
}

/// A client thread's work: the writes it sent.
type Lane = Box<dyn FnOnce(&Ctx) -> Vec<Op> + Send>;

/// One write as a client sent it.
#[derive(Debug)]
struct Op {
    what: String,
    /// Ids in commit order, and the state each gets if the write lands.
    ids: Vec<usize>,
    new: Vec<State>,
    /// Leading documents acknowledged.
    acked: usize,
    /// Unit of commit: what lands is a prefix of a multiple of it (or everything).
    unit: usize,
}

/// A `kindred serve` child that can be SIGKILLed.
struct Node {
    child: Child,
    base: String,
    agent: ureq::Agent,
}

impl Node {
    /// Starts the server and waits for its listening line (not for readiness).
    fn spawn(data: &Path, config: &Path) -> Node {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kindred"))
            .env("KINDRED_MODEL", &model_dir().path)
            .env("RUST_LOG", "warn")
            .env_remove("KINDRED_ADMIN_KEY")
            .env_remove("KINDRED_READ_KEY")
            .env_remove("KINDRED_RELAXED_DURABILITY")
            .arg("--data")
            .arg(data)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--checkpoint-interval",
                "1",
            ])
            .arg("--config")
            .arg(config)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("kindred serve starts");
        let base = crate::server::listening_base(&mut child);
        Node {
            child,
            base,
            agent: agent(),
        }
    }

    /// Starts the server and waits until it is ready (indexes loaded).
    fn start(data: &Path, config: &Path) -> Node {
        let node = Node::spawn(data, config);
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Reply::Answer(200, _) = send(&node.agent, "GET", &node.url("/readyz"), None) {
                return node;
            }
            assert!(Instant::now() < deadline, "server not ready in 120 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let body = body.map(|b| ("application/json", b.to_string().into_bytes()));
        match send(&self.agent, method, &self.url(path), body) {
            Reply::Answer(s, v) => (s, v),
            Reply::Dead(e) => panic!("{method} {path}: transport error {e}"),
        }
    }

    /// SIGKILL, and reaps the process.
    fn kill(&mut self) {
        // SAFETY: kill(2) with our own child's pid and a valid signal number.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGKILL) };
        assert_eq!(rc, 0, "SIGKILL delivered");
        self.child.wait().expect("reaped");
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(10))
        .timeout_read(Duration::from_secs(120))
        .timeout_write(Duration::from_secs(120))
        .build()
}

/// An answer, or the connection failed (the server is gone).
enum Reply {
    Answer(u16, Value),
    Dead(String),
}

fn send(agent: &ureq::Agent, method: &str, url: &str, body: Option<(&str, Vec<u8>)>) -> Reply {
    let req = agent.request(method, url);
    let result = match body {
        Some((content_type, bytes)) => req.set("Content-Type", content_type).send_bytes(&bytes),
        None => req.call(),
    };
    let resp = match result {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => return Reply::Dead(e.to_string()),
    };
    let status = resp.status();
    match resp.into_string() {
        Ok(text) => Reply::Answer(
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ),
        Err(e) => Reply::Dead(format!("reading the answer: {e}")),
    }
}

/// What every writer thread shares.
struct Ctx {
    base: String,
    /// Set just before the SIGKILL: a transport error before it is a bug.
    dead: Arc<AtomicBool>,
    questions: Arc<Vec<String>>,
    round: usize,
}

impl Ctx {
    fn doc(&self, n: usize, variant: usize, lane: &str, tag: String) -> Doc {
        Doc {
            text: self.questions[n + POOL * variant].clone(),
            meta: json!({ "n": n, "v": tag, "lane": lane, "nested": { "round": self.round, "f": 0.25, "ok": true } }),
        }
    }

    fn wire(n: usize, d: &Doc) -> Value {
        json!({ "id": format!("q{n}"), "text": d.text, "metadata": d.meta })
    }

    /// A transport error: the server must be dead by now.
    fn gone(&self, what: &str, e: &str) {
        assert!(
            self.dead.load(Ordering::SeqCst),
            "round {}: {what}: transport error while the server was alive: {e}",
            self.round
        );
    }
}

/// JSON-array batches of 1..=16 documents, one after another.
fn json_lane(ctx: &Ctx, lane: usize, ids: Vec<(usize, bool)>, mut rng: Rng) -> Vec<Op> {
    let agent = agent();
    let url = format!("{}/v1/collections/{COLLECTION}/documents", ctx.base);
    let mut ops = Vec::new();
    let mut rest = &ids[..];
    while !rest.is_empty() && !ctx.dead.load(Ordering::SeqCst) {
        let size = rng.range(1, MAX_BATCH).min(rest.len());
        let (chunk, r) = rest.split_at(size);
        rest = r;
        let what = format!("json thread {lane} batch {}", ops.len());
        let new: Vec<Doc> = chunk
            .iter()
            .enumerate()
            .map(|(i, &(n, _))| {
                let tag = format!("r{}.j{lane}.{}.{i}", ctx.round, ops.len());
                ctx.doc(n, rng.range(0, VARIANTS - 1), "json", tag)
            })
            .collect();
        let body: Vec<Value> = chunk
            .iter()
            .zip(&new)
            .map(|(&(n, _), d)| Ctx::wire(n, d))
            .collect();
        let mut op = Op {
            what,
            ids: chunk.iter().map(|&(n, _)| n).collect(),
            new: new.into_iter().map(Some).collect(),
            acked: 0,
            unit: size,
        };
        let body = Some((
            "application/json",
            Value::from(body).to_string().into_bytes(),
        ));
        match send(&agent, "POST", &url, body) {
            Reply::Answer(200, v) => {
                let replaced = chunk.iter().filter(|&&(_, present)| present).count();
                assert_eq!(
                    (v["upserted"].as_u64(), v["replaced"].as_u64()),
                    (Some(size as u64), Some(replaced as u64)),
                    "round {}: {}: {v}",
                    ctx.round,
                    op.what
                );
                op.acked = size;
            }
            Reply::Answer(s, v) if s >= 500 => {
                eprintln!("round {}: {}: {s} {v}", ctx.round, op.what)
            }
            Reply::Answer(s, v) => panic!("round {}: {}: {s} {v}", ctx.round, op.what),
            Reply::Dead(e) => {
                ctx.gone(&op.what, &e);
                ops.push(op);
                break;
            }
        }
        ops.push(op);
    }
    ops
}

/// NDJSON streams of 24..=160 documents, one after another.
fn ndjson_lane(ctx: &Ctx, ids: Vec<(usize, bool)>, mut rng: Rng) -> Vec<Op> {
    let agent = agent();
    let url = format!("{}/v1/collections/{COLLECTION}/documents", ctx.base);
    let mut ops = Vec::new();
    let mut rest = &ids[..];
    while !rest.is_empty() && !ctx.dead.load(Ordering::SeqCst) {
        let size = rng.range(24, 160).min(rest.len());
        let (chunk, r) = rest.split_at(size);
        rest = r;
        let what = format!("ndjson stream {}", ops.len());
        let new: Vec<Doc> = chunk
            .iter()
            .enumerate()
            .map(|(i, &(n, _))| {
                let tag = format!("r{}.s{}.{i}", ctx.round, ops.len());
                ctx.doc(n, rng.range(0, VARIANTS - 1), "ndjson", tag)
            })
            .collect();
        let body: String = chunk
            .iter()
            .zip(&new)
            .map(|(&(n, _), d)| format!("{}\n", Ctx::wire(n, d)))
            .collect();
        let mut op = Op {
            what,
            ids: chunk.iter().map(|&(n, _)| n).collect(),
            new: new.into_iter().map(Some).collect(),
            acked: 0,
            unit: MAX_BATCH,
        };
        match send(
            &agent,
            "POST",
            &url,
            Some(("application/x-ndjson", body.into_bytes())),
        ) {
            Reply::Answer(200, v) => {
                let replaced = chunk.iter().filter(|&&(_, present)| present).count();
                let batches = size.div_ceil(MAX_BATCH);
                assert_eq!(
                    (
                        v["upserted"].as_u64(),
                        v["replaced"].as_u64(),
                        v["batches"].as_u64()
                    ),
                    (
                        Some(size as u64),
                        Some(replaced as u64),
                        Some(batches as u64)
                    ),
                    "round {}: {}: {v}",
                    ctx.round,
                    op.what
                );
                op.acked = size;
            }
            Reply::Answer(s, v) if s >= 500 => {
                eprintln!("round {}: {}: {s} {v}", ctx.round, op.what)
            }
            Reply::Answer(s, v) => panic!("round {}: {}: {s} {v}", ctx.round, op.what),
            Reply::Dead(e) => {
                ctx.gone(&op.what, &e);
                ops.push(op);
                break;
            }
        }
        ops.push(op);
    }
    ops
}

/// Uploaded JSON Lines files of 60..=320 lines, loaded by jobs in batches of 4..=16, one
/// after another; what a job reports `written` is acknowledged.
fn upload_lane(ctx: &Ctx, ids: Vec<(usize, bool)>, mut rng: Rng) -> Vec<Op> {
    let agent = agent();
    let mut ops = Vec::new();
    let mut rest = &ids[..];
    while !rest.is_empty() && !ctx.dead.load(Ordering::SeqCst) {
        let size = rng.range(60, 320).min(rest.len());
        let batch = rng.range(4, MAX_BATCH);
        let (chunk, r) = rest.split_at(size);
        rest = r;
        let new: Vec<Doc> = chunk
            .iter()
            .enumerate()
            .map(|(i, &(n, _))| {
                let tag = format!("r{}.u{}.{i}", ctx.round, ops.len());
                ctx.doc(n, rng.range(0, VARIANTS - 1), "upload", tag)
            })
            .collect();
        let file: String = chunk
            .iter()
            .zip(&new)
            .map(|(&(n, _), d)| format!("{}\n", Ctx::wire(n, d)))
            .collect();
        let mut op = Op {
            what: format!("upload {} (batch {batch})", ops.len()),
            ids: chunk.iter().map(|&(n, _)| n).collect(),
            new: new.into_iter().map(Some).collect(),
            acked: 0,
            unit: batch,
        };
        let url = format!(
            "{}/v1/collections/{COLLECTION}/ingest?format=jsonl&batch={batch}&name=r{}-{}.jsonl",
            ctx.base,
            ctx.round,
            ops.len()
        );
        let job = match send(
            &agent,
            "POST",
            &url,
            Some(("application/octet-stream", file.into_bytes())),
        ) {
            Reply::Answer(202, v) => v["id"].as_u64().expect("job id"),
            Reply::Answer(s, v) => panic!("round {}: {}: {s} {v}", ctx.round, op.what),
            Reply::Dead(e) => {
                ctx.gone(&op.what, &e);
                ops.push(op);
                break;
            }
        };
        let status_url = format!("{}/v1/jobs/{job}", ctx.base);
        let alive = loop {
            match send(&agent, "GET", &status_url, None) {
                Reply::Answer(200, v) => {
                    let written = v["written"].as_u64().expect("written") as usize;
                    assert!(
                        written >= op.acked && written <= size,
                        "round {}: {}: written went from {} to {written}",
                        ctx.round,
                        op.what,
                        op.acked
                    );
                    op.acked = written;
                    match v["state"].as_str() {
                        Some("running") => {}
                        Some("done") => {
                            assert_eq!(
                                (written, v["line"].as_u64(), v["rejected"].as_u64()),
                                (size, Some(size as u64), Some(0)),
                                "round {}: {}: {v}",
                                ctx.round,
                                op.what
                            );
                            break true;
                        }
                        _ => panic!("round {}: {}: {v}", ctx.round, op.what),
                    }
                }
                Reply::Answer(s, v) => panic!("round {}: {}: {s} {v}", ctx.round, op.what),
                Reply::Dead(e) => {
                    ctx.gone(&op.what, &e);
                    break false;
                }
            }
            std::thread::sleep(Duration::from_millis(15));
        };
        ops.push(op);
        if !alive {
            break;
        }
    }
    ops
}

/// Deletes of present documents, one after another, a few milliseconds apart.
fn delete_lane(ctx: &Ctx, ids: Vec<usize>, mut rng: Rng) -> Vec<Op> {
    let agent = agent();
    let mut ops = Vec::new();
    for n in ids {
        if ctx.dead.load(Ordering::SeqCst) {
            break;
        }
        std::thread::sleep(Duration::from_millis(rng.range(0, 12) as u64));
        let mut op = Op {
            what: format!("delete of q{n}"),
            ids: vec![n],
            new: vec![None],
            acked: 0,
            unit: 1,
        };
        let url = format!("{}/v1/collections/{COLLECTION}/documents/q{n}", ctx.base);
        match send(&agent, "DELETE", &url, None) {
            Reply::Answer(200, v) => {
                assert_eq!(v["deleted"], format!("q{n}"), "round {}: {v}", ctx.round);
                op.acked = 1;
            }
            Reply::Answer(s, v) if s >= 500 => {
                eprintln!("round {}: {}: {s} {v}", ctx.round, op.what)
            }
            Reply::Answer(s, v) => panic!("round {}: {} (present): {s} {v}", ctx.round, op.what),
            Reply::Dead(e) => {
                ctx.gone(&op.what, &e);
                ops.push(op);
                break;
            }
        }
        ops.push(op);
    }
    ops
}

/// Reindexes finished before a kill, over the whole test.
static REINDEXES_DONE: AtomicUsize = AtomicUsize::new(0);

/// Moves the collection onto the model it is not on, and follows the job until it ends or
/// the server is killed. Writes no documents: the other lanes' writes run beside it and must
/// all survive either way.
fn reindex_lane(ctx: &Ctx) -> Vec<Op> {
    let agent = agent();
    let info = format!("{}/v1/collections/{COLLECTION}", ctx.base);
    let on_test_model = match send(&agent, "GET", &info, None) {
        Reply::Answer(200, v) => {
            v["settings"]["model"]["fingerprint"] == json!(encoder().identity().fingerprint)
        }
        Reply::Answer(s, v) => panic!("round {}: collection info: {s} {v}", ctx.round),
        Reply::Dead(e) => {
            ctx.gone("collection info", &e);
            return Vec::new();
        }
    };
    let target = if on_test_model {
        &other_model().path
    } else {
        &model_dir().path
    };
    let url = format!("{info}/reindex");
    let body = json!({ "model": target }).to_string().into_bytes();
    match send(&agent, "POST", &url, Some(("application/json", body))) {
        Reply::Answer(202, _) => {}
        Reply::Answer(s, v) => panic!("round {}: reindex: {s} {v}", ctx.round),
        Reply::Dead(e) => {
            ctx.gone("reindex", &e);
            return Vec::new();
        }
    }
    loop {
        std::thread::sleep(Duration::from_millis(50));
        match send(&agent, "GET", &url, None) {
            Reply::Answer(200, v) if v["state"] == "running" => {}
            Reply::Answer(200, v) => {
                assert_eq!(v["state"], "done", "round {}: {v}", ctx.round);
                REINDEXES_DONE.fetch_add(1, Ordering::SeqCst);
                return Vec::new();
            }
            Reply::Answer(s, v) => panic!("round {}: reindex status: {s} {v}", ctx.round),
            Reply::Dead(e) => {
                ctx.gone("reindex status", &e);
                return Vec::new();
            }
        }
    }
}

/// Every id's state as the server shows it.
fn observe(node: &Node) -> Vec<State> {
    (0..POOL)
        .map(|n| {
            match node.call(
                "GET",
                &format!("/v1/collections/{COLLECTION}/documents/q{n}"),
                None,
            ) {
                (200, v) => Some(Doc {
                    text: v["text"].as_str().expect("text").to_string(),
                    meta: v["metadata"].clone(),
                }),
                (404, v) if v["error"]["code"] == "document_not_found" => None,
                (s, v) => panic!("GET q{n}: {s} {v}"),
            }
        })
        .collect()
}

/// `uploads/job-*` files in the data directory.
fn upload_files(data: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(data.join("uploads"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("job-"))
        })
        .collect()
}

/// Interrupted index saves (`indexes/<collection>/*.tmp`).
fn index_tmp_files(data: &Path) -> usize {
    std::fs::read_dir(data.join("indexes"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
        .filter(|e| e.path().extension().is_some_and(|e| e == "tmp"))
        .count()
}

/// Interrupted progress writes (`ingest/<collection>/*.tmp`).
fn progress_tmp_files(data: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(data.join("ingest"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "tmp"))
        .collect()
}

/// Ids of a one-stage search (`cosine` or `w2`, no rerank) with that stage's score, best
/// first.
fn search(node: &Node, mode: &str, text: &str, k: usize) -> Vec<(String, f64)> {
    let q = json!({ "text": text, "k": k, "mode": mode, "rerank": "none" });
    let (st, out) = node.call(
        "POST",
        &format!("/v1/collections/{COLLECTION}/search"),
        Some(&q),
    );
    assert_eq!(st, 200, "{out}");
    out["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| {
            (
                h["id"].as_str().expect("id").to_string(),
                h["stages"][mode]["score"].as_f64().expect("score"),
            )
        })
        .collect()
}

fn rounds() -> usize {
    std::env::var("KINDRED_FAULT_ROUNDS")
        .ok()
        .map(|r| r.parse().expect("KINDRED_FAULT_ROUNDS is a number"))
        .unwrap_or(20)
}

#[test]
fn acknowledged_writes_survive_sigkill_of_the_server() {
    let started = Instant::now();
    let questions = qqp_questions("qqp_bimpm/dev.tsv");
    assert!(questions.len() >= POOL * VARIANTS, "enough questions");
    let questions = Arc::new(questions);
    let seed = std::env::var("KINDRED_FAULT_SEED")
        .ok()
        .map(|s| s.parse().expect("KINDRED_FAULT_SEED is a number"))
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("clock")
                .as_nanos() as u64
        });
    eprintln!("fault test seed {seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let config = dir.path().join("kindred.toml");
    std::fs::write(&config, format!("[limits]\nmax_batch = {MAX_BATCH}\n")).expect("config");

    let mut node = Node::start(&data, &config);
    let (st, e) = node.call(
        "POST",
        "/v1/collections",
        Some(&json!({ "name": COLLECTION })),
    );
    assert_eq!(st, 201, "{e}");
    // What each id holds, as last seen after a restart.
    let mut known: Vec<State> = vec![None; POOL];
    let preload = Ctx {
        base: node.base.clone(),
        dead: Arc::new(AtomicBool::new(false)),
        questions: questions.clone(),
        round: PRELOAD_ROUND,
    };
    let mut ids: Vec<usize> = (0..POOL).collect();
    rng.shuffle(&mut ids);
    for op in json_lane(
        &preload,
        0,
        ids[..PRELOAD].iter().map(|&n| (n, false)).collect(),
        Rng(rng.next()),
    ) {
        assert_eq!(op.acked, op.ids.len(), "preload");
        for (n, new) in op.ids.into_iter().zip(op.new) {
            known[n] = new;
        }
    }

    let rounds = rounds();
    let kinds = [
        Kind::Json,
        Kind::Ndjson,
        Kind::Upload,
        Kind::Delete,
        Kind::Reindex,
    ];
    let mut per_kind = [0usize; 5];
    let (mut acked_total, mut landed_unacked, mut swept) = (0, 0, 0);
    let (mut double_kills, mut interrupted_saves) = (0, 0);
    // Restarts whose graphs were read from an older save and caught up with the store.
    let mut caught_up = 0;
    for round in 0..rounds {
        // The round's lanes: one kind in turn, deletes always with JSON writes, reindexes
        // with JSON writes or (every other time) an upload job, sometimes another kind;
        // disjoint ids.
        let primary = kinds[round % kinds.len()];
        let mut lanes = vec![primary];
        match primary {
            Kind::Delete => lanes.push(Kind::Json),
            Kind::Reindex if (round / kinds.len()) % 2 == 1 => lanes.push(Kind::Upload),
            Kind::Reindex => lanes.push(Kind::Json),
            _ => {}
        }
        let mut present: Vec<usize> = (0..POOL).filter(|&n| known[n].is_some()).collect();
        // Deletes too when the pool fills up, so that writes keep inserting as well as replacing.
        let other = if present.len() > POOL * 8 / 10 {
            Some(Kind::Delete)
        } else {
            (rng.range(0, 1) == 1).then(|| kinds[rng.range(0, kinds.len() - 1)])
        };
        if let Some(other) = other.filter(|o| !lanes.contains(o)) {
            lanes.push(other);
        }
        for l in &lanes {
            per_kind[kinds.iter().position(|k| k == l).expect("kind")] += 1;
        }
        rng.shuffle(&mut present);
        let deletes: Vec<usize> = if lanes.contains(&Kind::Delete) {
            present.iter().copied().take(400).collect()
        } else {
            Vec::new()
        };
        let mut free: Vec<usize> = (0..POOL).filter(|n| !deletes.contains(n)).collect();
        rng.shuffle(&mut free);
        let mut free = free
            .into_iter()
            .map(|n| (n, known[n].is_some()))
            .collect::<Vec<_>>()
            .into_iter();
        let mut take = |k: usize| free.by_ref().take(k).collect::<Vec<_>>();

        let dead = Arc::new(AtomicBool::new(false));
        let ctx = Arc::new(Ctx {
            base: node.base.clone(),
            dead: dead.clone(),
            questions: questions.clone(),
            round,
        });
        let mut threads = Vec::new();
        for lane in &lanes {
            let mut spawn = |f: Lane| {
                let ctx = ctx.clone();
                threads.push(std::thread::spawn(move || f(ctx.as_ref())));
            };
            match lane {
                Kind::Json => {
                    for t in 0..JSON_THREADS {
                        let (ids, r) = (take(140), Rng(rng.next()));
                        spawn(Box::new(move |c| json_lane(c, t, ids, r)));
                    }
                }
                Kind::Ndjson => {
                    let (ids, r) = (take(700), Rng(rng.next()));
                    spawn(Box::new(move |c| ndjson_lane(c, ids, r)));
                }
                Kind::Upload => {
                    let (ids, r) = (take(700), Rng(rng.next()));
                    spawn(Box::new(move |c| upload_lane(c, ids, r)));
                }
                Kind::Delete => {
                    let (ids, r) = (deletes.clone(), Rng(rng.next()));
                    spawn(Box::new(move |c| delete_lane(c, ids, r)));
                }
                Kind::Reindex => spawn(Box::new(reindex_lane)),
            }
        }
        // A random moment; in one round of four, the first index save after a while (the
        // checkpoint runs every second).
        let at_save = rng.range(0, 3) == 0;
        let round_start = Instant::now();
        if at_save {
            std::thread::sleep(Duration::from_millis(rng.range(100, 600) as u64));
            while index_tmp_files(&data) == 0 && round_start.elapsed() < Duration::from_secs(3) {
                std::thread::sleep(Duration::from_micros(500));
            }
        } else if lanes.contains(&Kind::Reindex) {
            // A reindex of ~1,500 documents takes seconds: some finish, most are cut.
            std::thread::sleep(Duration::from_millis(rng.range(300, 9000) as u64));
        } else {
            std::thread::sleep(Duration::from_millis(rng.range(150, 1600) as u64));
        }
        let delay = round_start.elapsed().as_millis();
        dead.store(true, Ordering::SeqCst);
        node.kill();
        let killed_pid = node.child.id();
        let ops: Vec<Op> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect();
        let left = upload_files(&data);
        let saves_cut = index_tmp_files(&data);
        interrupted_saves += saves_cut;
        drop(node);

        // Sometimes kill the next server too, while it loads its indexes.
        if rng.range(0, 3) == 0 {
            let mut early = Node::spawn(&data, &config);
            std::thread::sleep(Duration::from_millis(rng.range(0, 400) as u64));
            early.kill();
            double_kills += 1;
        }
        node = Node::start(&data, &config);
        let fail = |msg: String| -> ! {
            panic!(
                "fault test seed {seed}, round {round} ({lanes:?}, killed after {delay} ms): {msg}"
            )
        };
        let remaining = upload_files(&data);
        if !remaining.is_empty() {
            fail(format!(
                "upload files left after the restart: {remaining:?} (killed pid {killed_pid})"
            ));
        }
        let tmp = progress_tmp_files(&data);
        if !tmp.is_empty() {
            fail(format!(
                "progress temp files left after the restart: {tmp:?}"
            ));
        }
        swept += left.len();

        // Every id is as it was, or as a write of this round made it, whole.
        let seen = observe(&node);
        let mut touched = vec![false; POOL];
        let mut round_acked = 0;
        let mut landed: Vec<usize> = Vec::new();
        let mut deleted: Vec<(usize, String)> = Vec::new();
        for op in &ops {
            let mut flags = Vec::with_capacity(op.ids.len());
            for (&n, new) in op.ids.iter().zip(&op.new) {
                touched[n] = true;
                if &seen[n] == new {
                    flags.push(true);
                } else if seen[n] == known[n] {
                    flags.push(false);
                } else {
                    fail(format!(
                        "{}: q{n} holds {:?}; expected {new:?} or the earlier {:?}",
                        op.what, seen[n], known[n]
                    ));
                }
            }
            let k = flags.iter().take_while(|&&f| f).count();
            if k < op.acked {
                fail(format!(
                    "LOST acknowledged writes: {}: {} documents acknowledged, only the first {k} are there (ids {:?})",
                    op.what, op.acked, &op.ids[k..op.acked]
                ));
            }
            if flags[k..].iter().any(|&f| f) {
                fail(format!("{}: not a prefix landed: {flags:?}", op.what));
            }
            if k % op.unit != 0 && k != op.ids.len() {
                fail(format!(
                    "{}: a partial batch landed: {k} of {} documents, batches of {}",
                    op.what,
                    op.ids.len(),
                    op.unit
                ));
            }
            round_acked += op.acked;
            landed_unacked += k - op.acked;
            for (&n, new) in op.ids.iter().zip(&op.new).take(k) {
                match new {
                    Some(_) => landed.push(n),
                    None => deleted.push((n, known[n].as_ref().expect("was present").text.clone())),
                }
            }
        }
        for n in 0..POOL {
            if !touched[n] && seen[n] != known[n] {
                fail(format!(
                    "q{n}, untouched this round, changed from {:?} to {:?}",
                    known[n], seen[n]
                ));
            }
        }
        acked_total += round_acked;
        known = seen;

        // Stats and indexes agree with the store.
        let count = known.iter().filter(|d| d.is_some()).count();
        let (st, info) = node.call("GET", &format!("/v1/collections/{COLLECTION}"), None);
        assert_eq!(st, 200, "{info}");
        // On one model, with no trace of a reindex the kill cut short.
        let generation = info["settings"]["generation"].as_u64();
        let physical = match generation {
            Some(g) => format!("{COLLECTION}@{g}"),
            None => COLLECTION.to_string(),
        };
        let folders: Vec<String> = std::fs::read_dir(data.join("indexes"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        if folders.iter().any(|f| *f != physical) {
            fail(format!(
                "index folders {folders:?}; only {physical:?} should be left"
            ));
        }
        let stat = |v: &Value| v.as_u64().unwrap_or_else(|| fail(format!("{info}"))) as usize;
        let tombstones = stat(&info["index"]["tombstones"]);
        let counts = [
            ("stats.documents", stat(&info["stats"]["documents"])),
            (
                "cosine points",
                stat(&info["index"]["cosine_points"]) - tombstones,
            ),
            (
                "w2 points",
                stat(&info["index"]["w2_points"]) - stat(&info["index"]["w2_tombstones"]),
            ),
            (
                "lexical documents",
                stat(&info["index"]["lexical_documents"]),
            ),
        ];
        for (what, c) in counts {
            if c != count {
                fail(format!(
                    "{what} {c}, but {count} documents are found: {info}"
                ));
            }
        }
        // How the restarted server opened its graphs (the checks above hold either way).
        let opened = &info["index"]["opened"];
        if !opened.is_object() {
            fail(format!("index.opened is missing: {info}"));
        }
        if opened["saved_seq"].is_u64() && stat(&opened["inserted"]) + stat(&opened["removed"]) > 0
        {
            caught_up += 1;
        }
        // A document's own text finds it first; a deleted one is not found.
        rng.shuffle(&mut landed);
        let mut probes: Vec<usize> = landed.iter().copied().take(4).collect();
        let mut all: Vec<usize> = (0..POOL).filter(|&n| known[n].is_some()).collect();
        rng.shuffle(&mut all);
        probes.extend(all.iter().take(2));
        for n in probes {
            let text = &known[n].as_ref().expect("present").text;
            let id = format!("q{n}");
            for mode in ["cosine", "w2"] {
                let hits = search(&node, mode, text, 3);
                let first = hits.first().map(|h| h.1).unwrap_or(f64::NAN);
                if !hits
                    .iter()
                    .any(|(h, s)| *h == id && (s - first).abs() < 1e-5)
                {
                    fail(format!(
                        "{mode}: {id} is not found first by its own text {text:?}: {hits:?}"
                    ));
                }
            }
        }
        rng.shuffle(&mut deleted);
        for (n, text) in deleted.iter().take(2) {
            for mode in ["cosine", "w2"] {
                let hits = search(&node, mode, text, 5);
                if hits.iter().any(|(h, _)| *h == format!("q{n}")) {
                    fail(format!("{mode}: deleted q{n} is still found: {hits:?}"));
                }
            }
        }
        eprintln!(
            "round {round} ({lanes:?}): killed after {delay} ms; {} writes, {round_acked} acknowledged, {} landed; {count} stored; {} upload files swept, {saves_cut} index saves cut; generation {generation:?}",
            ops.len(),
            landed.len() + deleted.len(),
            left.len()
        );
    }
    node.kill();
    eprintln!(
        "fault test seed {seed}: {rounds} rounds (lanes json {}, ndjson {}, upload {}, delete {}, reindex {} of which {} finished before the kill), {double_kills} second kills while loading, {acked_total} acknowledged documents and deletes, {landed_unacked} unacknowledged landed, {swept} upload files swept, {interrupted_saves} index saves cut, {caught_up} restarts caught saved graphs up, {:.1} s",
        per_kind[0],
        per_kind[1],
        per_kind[2],
        per_kind[3],
        per_kind[4],
        REINDEXES_DONE.load(Ordering::SeqCst),
        started.elapsed().as_secs_f64()
    );
    assert!(acked_total > 0, "the clients made progress");
    assert!(
        caught_up > 0,
        "no restart caught saved graphs up with writes made after their save: the kills did not exercise that path"
    );
}
