//! Hostile input and bad luck over a real socket (the hardening issue's reproductions): each
//! case failed before its fix. Raw TCP where a client library would tidy the request up.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::server::{call, call_raw, collection_with, Server};

fn addr(s: &Server) -> String {
    s.base.trim_start_matches("http://").to_string()
}

/// Sends raw bytes on a fresh connection; the whole answer (the server closes after it).
fn raw(s: &Server, request: &str) -> String {
    let mut tcp = TcpStream::connect(addr(s)).expect("connects");
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    tcp.write_all(request.as_bytes()).expect("sends");
    let mut out = Vec::new();
    let _ = tcp.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn status_and_json(answer: &str) -> (u16, Value) {
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

#[test]
fn hostile_requests_get_clear_errors_and_the_server_stays_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("kindred.toml");
    std::fs::write(
        &config,
        "[limits]\nmax_explain_cells = 3000\nheader_timeout_ms = 700\nmax_connections = 8\n",
    )
    .unwrap();
    let s = Server::start(dir.path(), &["--config", config.to_str().unwrap()], &[]);
    collection_with(
        &s,
        "faq",
        &[
            ("pw", "How do I reset my password?"),
            ("pw2", "I forgot my password, what now?"),
            ("ship", "How long does shipping take?"),
            ("refund", "Can I get a refund for my order?"),
        ],
    );

    // HNSW parameters that would crash or silently break a graph are refused (item 1).
    for hnsw in [
        json!({ "m": 257 }),
        json!({ "m": 0 }),
        json!({ "ef_construction": 0 }),
    ] {
        let (st, e) = call(
            "POST",
            &s.url("/v1/collections"),
            None,
            Some(&json!({ "name": "bad", "hnsw": hnsw })),
        );
        assert_eq!((st, code(&e)), (422, "invalid_request"), "{hnsw}: {e}");
    }

    // A web page cannot write to a key-less server on loopback (item 6).
    let search = s.url("/v1/collections/faq/search");
    let (st, e) = call_raw(&search, None, "text/plain", b"{\"text\": \"password\"}");
    assert_eq!((st, code(&e)), (415, "unsupported_media_type"), "{e}");
    let body = r#"{"id": "evil", "text": "written by a web page"}"#;
    let (st, e) = status_and_json(&raw(
        &s,
        &format!(
            "POST /v1/collections/faq/documents HTTP/1.1\r\nHost: {}\r\nOrigin: http://evil.example\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n[{body}]",
            addr(&s),
            body.len() + 2
        ),
    ));
    assert_eq!((st, code(&e)), (403, "cross_origin"), "{e}");
    let (st, e) = status_and_json(&raw(
        &s,
        "GET /v1/collections HTTP/1.1\r\nHost: rebound.evil.example:7700\r\nConnection: close\r\n\r\n",
    ));
    assert_eq!((st, code(&e)), (403, "unexpected_host"), "{e}");
    let (st, _) = call(
        "GET",
        &s.url("/v1/collections/faq/documents/evil"),
        None,
        None,
    );
    assert_eq!(st, 404, "nothing was written");

    // Unknown fields are errors, not silently dropped metadata (item 14).
    let (st, e) = call(
        "POST",
        &s.url("/v1/collections/faq/documents"),
        None,
        Some(&json!([{ "id": "t", "text": "typo", "metdata": { "a": 1 } }])),
    );
    assert_eq!(st, 422, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("metdata"),
        "{e}"
    );
    // Verdicts: a probability, existing ids, bounded text.
    let verdicts = s.url("/v1/collections/faq/verdicts");
    for (v, want) in [
        (
            json!({ "a": { "id": "pw", "text": "x" }, "b": { "id": "pw2", "text": "y" }, "duplicate": true, "probability": 1.5 }),
            "between 0 and 1",
        ),
        (
            json!({ "a": { "id": "nope", "text": "x" }, "b": { "id": "pw2", "text": "y" }, "duplicate": true }),
            "no document",
        ),
        (
            json!({ "a": { "text": "x".repeat(2001) }, "b": { "id": "pw2", "text": "y" }, "duplicate": true }),
            "limits.max_text_chars",
        ),
    ] {
        let (st, e) = call("POST", &verdicts, None, Some(&v));
        assert_eq!(st, 422, "{e}");
        assert!(
            e["error"]["message"].as_str().unwrap().contains(want),
            "{e}"
        );
    }

    // Errors axum answers by itself have the API's JSON shape (item 15).
    let (st, e) = call("DELETE", &s.url("/v1/explain"), None, None);
    assert_eq!((st, code(&e)), (405, "method_not_allowed"), "{e}");
    let (st, e) = status_and_json(&raw(
        &s,
        "GET /v1/collections/%FF%FE/documents/x HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    ));
    assert_eq!((st, code(&e)), (400, "bad_request"), "{e}");

    // Invented methods do not become metrics labels (item 7).
    for i in 0..50 {
        raw(
            &s,
            &format!("BOGUS{i} /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"),
        );
    }
    let metrics = ureq::get(&s.url("/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(
        !metrics.contains("BOGUS"),
        "an invented method became a label"
    );
    assert!(metrics.contains("method=\"other\""), "counted as other");

    // Explanations are bounded (item 5): the best hits are explained, the rest counted.
    let long =
        "Why does my password reset email never arrive and what should I do next? ".repeat(6);
    let (st, out) = call(
        "POST",
        &s.url("/v1/collections/faq/duplicates"),
        None,
        Some(&json!({ "text": long, "k": 4 })),
    );
    assert_eq!(st, 200, "{out}");
    let matches = out["matches"].as_array().unwrap();
    let explained = matches
        .iter()
        .filter(|m| !m["explanation"].is_null())
        .count();
    let unexplained = out["unexplained"].as_u64().unwrap_or(0) as usize;
    assert!(
        unexplained > 0,
        "a 3,000-cell bound leaves some unexplained: {out}"
    );
    assert_eq!(explained + unexplained, matches.len());
    assert!(
        matches
            .iter()
            .take(explained)
            .all(|m| !m["explanation"].is_null()),
        "the explained ones are the best ones"
    );

    // Half-open and trickling connections are closed after header_timeout_ms; the connection
    // cap (8) does not lock other clients out for longer than that (item 9).
    let idle: Vec<TcpStream> = (0..8)
        .map(|_| TcpStream::connect(addr(&s)).expect("connects"))
        .collect();
    let mut trickle = TcpStream::connect(addr(&s)).expect("connects");
    trickle.write_all(b"GET /healthz HTTP/1.1\r\nHo").unwrap();
    let start = Instant::now();
    let (st, _) = call("GET", &s.url("/healthz"), None, None);
    assert_eq!(st, 200);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "waited {:?} behind idle connections",
        start.elapsed()
    );
    for mut c in idle {
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 64];
        assert!(
            c.read(&mut buf).is_ok(),
            "closed by the server, not left open"
        );
    }
    trickle
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut rest = Vec::new();
    let _ = trickle.read_to_end(&mut rest);

    // Still serving.
    let (st, top, out) = top_hit(&search, &json!({ "text": "reset password", "k": 2 }));
    assert_eq!((st, top.as_deref()), (200, Some("pw")), "{out}");
    s.stop();
}

#[test]
fn damaged_index_files_are_rebuilt_and_empty_collections_do_not_stop_checkpoints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(dir.path(), &["--checkpoint-interval", "1"], &[]);
    for e in ["e0", "e1"] {
        collection_with(&s, e, &[]);
    }
    collection_with(
        &s,
        "f",
        &[
            ("pw", "How do I reset my password?"),
            ("ship", "How long does shipping take?"),
        ],
    );
    // Every collection is saved, the empty ones too (item 3).
    let indexes = dir.path().join("indexes");
    let deadline = Instant::now() + Duration::from_secs(20);
    let graphs = || -> Vec<std::path::PathBuf> {
        walk(&indexes)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "graph"))
            .collect()
    };
    while graphs().len() < 6 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        graphs().len(),
        6,
        "two graphs for each of 3 collections: {:?}",
        graphs()
    );
    s.stop();

    // Truncate one graph and flip a byte in another (item 2): the server starts, warns,
    // rebuilds from the store and answers.
    let files = graphs();
    let big: Vec<_> = files
        .iter()
        .filter(|p| std::fs::metadata(p).unwrap().len() > 200)
        .collect();
    assert!(big.len() >= 2, "{files:?}");
    let bytes = std::fs::read(big[0]).unwrap();
    std::fs::write(big[0], &bytes[..bytes.len() / 2]).unwrap();
    let mut bytes = std::fs::read(big[1]).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x5a;
    std::fs::write(big[1], &bytes).unwrap();
    let s = Server::start(dir.path(), &[], &[]);
    for mode in ["cosine", "w2"] {
        let (st, top, out) = top_hit(
            &s.url("/v1/collections/f/search"),
            &json!({ "text": "forgot my password", "mode": mode, "rerank": "none", "k": 1 }),
        );
        assert_eq!((st, top.as_deref()), (200, Some("pw")), "{mode}: {out}");
    }
    let (st, _) = call("GET", &s.url("/readyz"), None, None);
    assert_eq!(st, 200);
    // Each refused file is counted for monitoring.
    let metrics = ureq::get(&s.url("/metrics"))
        .call()
        .expect("metrics")
        .into_string()
        .expect("text");
    assert!(
        metrics.contains("kindred_damaged_index_files_total 2")
            && metrics.contains("kindred_poisoned_locks_recovered_total 0"),
        "{metrics}"
    );
    s.stop();
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `mib` MiB; `None` (with the reason printed) where mounting is not
    /// permitted, which CI (root) must never be.
    fn mount(mib: u32) -> Option<(tempfile::TempDir, Tmpfs)> {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => {
                let path = dir.path().to_path_buf();
                Some((dir, Tmpfs(path)))
            }
            other => {
                // SAFETY: geteuid has no preconditions.
                let root = unsafe { libc::geteuid() } == 0;
                assert!(
                    !(root && std::env::var("CI").as_deref() == Ok("true")),
                    "CI runs as root and must be able to mount a tmpfs: {other:?}"
                );
                eprintln!("SKIPPED the disk-full test: mounting a tmpfs is not permitted here ({other:?}); run as root to test it");
                None
            }
        }
    }
}

/// A search at `url`: its status, its first hit's id and the whole answer.
fn top_hit(url: &str, body: &Value) -> (u16, Option<String>, Value) {
    let (st, out) = call("POST", url, None, Some(body));
    let top = out["hits"][0]["id"].as_str().map(String::from);
    (st, top, out)
}

impl Tmpfs {
    /// A data directory on this tmpfs and a config file beside it that sets
    /// `limits.min_free_disk_bytes`.
    fn kindred_dirs(&self, min_free_disk_bytes: u64) -> (std::path::PathBuf, std::path::PathBuf) {
        let config = self.0.join("kindred.toml");
        std::fs::write(
            &config,
            format!("[limits]\nmin_free_disk_bytes = {min_free_disk_bytes}\n"),
        )
        .unwrap();
        (self.0.join("data"), config)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn a_full_disk_answers_507_reads_go_on_and_nothing_acknowledged_is_lost() {
    let Some((_dir, fs)) = Tmpfs::mount(40) else {
        return;
    };
    let (data, config) = fs.kindred_dirs(8 << 20);
    let s = Server::start(
        &data,
        &[
            "--config",
            config.to_str().unwrap(),
            "--checkpoint-interval",
            "1",
        ],
        &[],
    );
    let docs = |from: usize, to: usize| -> Value {
        json!((from..to)
            .map(|i| json!({ "id": format!("d{i}"), "text": format!("How do I fix problem number {i} with my laptop?") }))
            .collect::<Vec<_>>())
    };
    collection_with(&s, "c", &[]);
    let url = s.url("/v1/collections/c/documents");
    assert_eq!(call("POST", &url, None, Some(&docs(0, 40))).0, 200);
    // Another process fills the disk, once sled's background flusher (every 500 ms) is idle:
    // a disk that fills while sled is writing stops sled until a restart, which /readyz then
    // reports (RELIABILITY.md); kindred's own writes never take it there.
    std::thread::sleep(Duration::from_millis(1500));
    let filler = fs.0.join("filler");
    {
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 1 << 20];
        while f.write_all(&block).is_ok() {}
    }
    let search = s.url("/v1/collections/c/search");
    let q = json!({ "text": "laptop problem number 7", "k": 1 });
    for round in 0..3 {
        let (st, e) = call(
            "POST",
            &url,
            None,
            Some(&docs(100 + round * 10, 110 + round * 10)),
        );
        assert_eq!((st, code(&e)), (507, "insufficient_storage"), "{e}");
        let (st, top, out) = top_hit(&search, &q);
        assert_eq!(
            (st, top.as_deref()),
            (200, Some("d7")),
            "reads go on: {out}"
        );
        std::thread::sleep(Duration::from_millis(600)); // a checkpoint or two meanwhile
    }
    assert_eq!(call("GET", &s.url("/readyz"), None, None).0, 200);
    assert_eq!(
        call(
            "GET",
            &s.url("/v1/collections/c/documents/d100"),
            None,
            None
        )
        .0,
        404
    );
    // Space returns: writes resume without a restart (when sled itself met the full disk,
    // its page consolidations write even while kindred refuses writes, after the store is
    // reopened in place: see the next test). Nothing acknowledged is lost.
    std::fs::remove_file(&filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (st, e) = call("POST", &url, None, Some(&docs(200, 210)));
        if st == 200 {
            break;
        }
        assert_eq!((st, code(&e)), (507, "insufficient_storage"), "{e}");
        assert!(Instant::now() < deadline, "writes never resumed: {e}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(call("GET", &s.url("/readyz"), None, None).0, 200);
    s.stop();
    let expected = 50;
    let s = Server::start(&data, &["--config", config.to_str().unwrap()], &[]);
    let (st, out) = call("GET", &s.url("/v1/collections/c"), None, None);
    assert_eq!(
        (st, out["stats"]["documents"].as_u64()),
        (200, Some(expected)),
        "{out}"
    );
    assert_eq!(
        call(
            "POST",
            &s.url("/v1/collections/c/documents"),
            None,
            Some(&docs(300, 310))
        )
        .0,
        200,
        "writes resume"
    );
    s.stop();
}

#[test]
fn sigterm_stops_upload_jobs_after_their_batch_and_leaves_no_files_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(dir.path(), &[], &[]);
    collection_with(&s, "c", &[]);
    let body: String = (0..4000)
        .map(|i| format!("{}\n", json!({ "id": format!("d{i}"), "text": format!("How do I fix problem number {i} with my laptop?") })))
        .collect();
    let (st, job) = call_raw(
        &s.url("/v1/collections/c/ingest?format=jsonl&batch=32"),
        None,
        "application/octet-stream",
        body.as_bytes(),
    );
    assert_eq!(st, 202, "{job}");
    // Wait for the job to commit something, then stop the server mid-job.
    let job_url = s.url(&format!("/v1/jobs/{}", job["id"]));
    let deadline = Instant::now() + Duration::from_secs(60);
    while call("GET", &job_url, None, None).1["written"].as_u64() == Some(0) {
        assert!(Instant::now() < deadline, "the job never wrote");
        std::thread::sleep(Duration::from_millis(20));
    }
    let start = Instant::now();
    s.stop();
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "shutdown waited {:?}",
        start.elapsed()
    );
    let uploads: Vec<_> = std::fs::read_dir(dir.path().join("uploads"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(uploads.is_empty(), "left behind: {uploads:?}");
    // What the job committed is there and in order: a prefix of the file.
    let s = Server::start(dir.path(), &[], &[]);
    let (_, info) = call("GET", &s.url("/v1/collections/c"), None, None);
    let n = info["stats"]["documents"].as_u64().unwrap();
    assert!(n > 0 && n < 4000, "stopped mid-file: {n} documents");
    for i in [0, n - 1] {
        let (st, d) = call(
            "GET",
            &s.url(&format!("/v1/collections/c/documents/d{i}")),
            None,
            None,
        );
        assert_eq!(st, 200, "d{i}: {d}");
    }
    assert_eq!(
        call(
            "GET",
            &s.url(&format!("/v1/collections/c/documents/d{n}")),
            None,
            None
        )
        .0,
        404
    );
    s.stop();
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 300, ..Default::default() })]

    /// Fuzzing text normalisation and tokenisation with the real tokenizer: any Unicode (control
    /// characters, combining marks, emoji, joiners, long runs) is an error naming the problem
    /// or wordpieces within the model's length whose offsets lie inside the text; the lexical
    /// terms never panic either.
    #[test]
    fn any_text_tokenizes_or_is_refused_cleanly(
        text in "(\\PC|\\p{M}|\\p{Cc}|\u{200d}|\u{fe0f}|[a-z ]){0,300}",
        repeat in 1usize..40,
    ) {
        let tokenizer = crate::common::encoder().tokenizer();
        for t in [text.clone(), text.repeat(repeat)] {
            let _ = kindred::text::terms(&t);
            match tokenizer.tokenize(&t, 0) {
                Ok(tok) => {
                    proptest::prop_assert!(tok.ids.len() <= tokenizer.max_len());
                    let chars = t.chars().count();
                    for w in &tok.tokens {
                        proptest::prop_assert!(w.start <= w.end && w.end <= chars, "{w:?} in {chars} chars");
                    }
                }
                Err(e) => {
                    proptest::prop_assert!(matches!(e, kindred::Error::User(_)), "{e}");
                }
            }
        }
    }
}

/// One bad request: method, path, content type, body.
type Bad = (&'static str, String, &'static str, Vec<u8>);

fn send(s: &Server, (method, path, ty, body): &Bad) -> (u16, Value) {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !ty.is_empty() {
        head.push_str(&format!("Content-Type: {ty}\r\n"));
    }
    let mut tcp = TcpStream::connect(addr(s)).expect("connects");
    tcp.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    tcp.write_all(head.as_bytes()).unwrap();
    tcp.write_all(b"\r\n").unwrap();
    let _ = tcp.write_all(body);
    let mut out = Vec::new();
    let _ = tcp.read_to_end(&mut out);
    status_and_json(&String::from_utf8_lossy(&out))
}

/// The bad-input table of RELIABILITY.md: every request here is wrong in one way, and each
/// must get a 4xx in the API's JSON shape with a code and a message, and change nothing.
#[test]
fn every_bad_input_gets_a_clear_4xx_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("kindred.toml");
    std::fs::write(
        &config,
        "[limits]\nmax_body_bytes = 20000\nmax_batch = 3\nmax_k = 20\nmax_text_chars = 200\n",
    )
    .unwrap();
    let s = Server::start(dir.path(), &["--config", config.to_str().unwrap()], &[]);
    collection_with(&s, "faq", &[("pw", "How do I reset my password?")]);
    let j = |v: Value| v.to_string().into_bytes();
    let json = "application/json";
    let nd = "application/x-ndjson";
    let bin = "application/octet-stream";
    let search = "/v1/collections/faq/search".to_string();
    let docs = "/v1/collections/faq/documents".to_string();
    let dups = "/v1/collections/faq/duplicates".to_string();
    let verdicts = "/v1/collections/faq/verdicts".to_string();
    let upload = |q: &str| format!("/v1/collections/faq/ingest?{q}");
    let long = "word ".repeat(60);
    let cases: Vec<Bad> = vec![
        // Bodies that are not JSON, or not UTF-8, or of a type a web page can send.
        ("POST", search.clone(), json, b"{\"text\": ".to_vec()),
        (
            "POST",
            search.clone(),
            json,
            b"{\"text\": \"caf\xe9\"}".to_vec(),
        ),
        ("POST", search.clone(), json, b"".to_vec()),
        ("POST", search.clone(), json, b"[1, 2".to_vec()),
        ("POST", search.clone(), json, b"\xff\xfe\x00".to_vec()),
        (
            "POST",
            search.clone(),
            "text/plain",
            j(json!({ "text": "x" })),
        ),
        (
            "POST",
            search.clone(),
            "application/x-www-form-urlencoded",
            b"text=x".to_vec(),
        ),
        ("POST", search.clone(), "", j(json!({ "text": "x" }))),
        ("POST", search.clone(), json, vec![b' '; 30_000]),
        // Search requests of the wrong shape or out of range.
        ("POST", search.clone(), json, j(json!({ "text": 5 }))),
        ("POST", search.clone(), json, j(json!({}))),
        (
            "POST",
            search.clone(),
            json,
            j(json!({ "text": "x", "k": 0 })),
        ),
        (
            "POST",
            search.clone(),
            json,
            j(json!({ "text": "x", "k": 21 })),
        ),
        (
            "POST",
            search.clone(),
            json,
            j(json!({ "text": "x", "k": -1 })),
        ),
        (
            "POST",
            search.clone(),
            json,
            j(json!({ "text": "x", "k": 1e30 })),
        ),
        (
            "POST",
            search.clone(),
            json,
            j(json!({ "text": "x", "mode": "fuzzy" })),
        ),
        (
            "POST",
            search.clone(),
            json,
            j(json!({ "text": "x", "rerank": "magic" })),
        ),
        (
            "POST",
            search.clone(),
            json,
            j(json!({ "text": "x", "depths": { "cosine": 100000 } })),
        ),
        (
            "POST",
            search.clone(),
            json,
            j(json!({ "text": "x", "depths": { "bm25": 10 } })),
        ),
        (
            "POST",
            search.clone(),
            json,
            j(json!({ "text": "x", "rerank_depth": 0 })),
        ),
        (
            "POST",
            search.clone(),
            json,
            j(json!({ "text": "x", "fusion": { "k0": -5 } })),
        ),
        (
            "POST",
            search.clone(),
            json,
            j(json!({ "text": "x", "explian": true })),
        ),
        ("POST", search.clone(), json, j(json!({ "text": "" }))),
        (
            "POST",
            search.clone(),
            json,
            j(json!({ "text": "   \n\t" })),
        ),
        ("POST", search.clone(), json, j(json!({ "text": long }))),
        (
            "POST",
            search.clone(),
            json,
            j(json!({ "text": "x", "filter": { "g": { "near": 1 } } })),
        ),
        (
            "POST",
            search.clone(),
            json,
            j(json!({ "text": "x", "filter": { "y": { "gte": "a" } } })),
        ),
        (
            "POST",
            search.clone(),
            json,
            j(json!({ "text": "x", "filter": { "g": { "in": 5 } } })),
        ),
        (
            "POST",
            search.clone(),
            json,
            j(json!({ "text": "x", "filter": { "g": null } })),
        ),
        (
            "POST",
            search.clone(),
            json,
            j(json!({ "text": "x", "filter": [1] })),
        ),
        (
            "POST",
            "/v1/collections/nope/search".into(),
            json,
            j(json!({ "text": "x" })),
        ),
        (
            "POST",
            "/v1/collections/%FF/search".into(),
            json,
            j(json!({ "text": "x" })),
        ),
        // Duplicates and explain.
        (
            "POST",
            dups.clone(),
            json,
            j(json!({ "text": "x", "threshold": 2 })),
        ),
        (
            "POST",
            dups.clone(),
            json,
            j(json!({ "text": "x", "threshold": -0.5 })),
        ),
        (
            "POST",
            dups.clone(),
            json,
            j(json!({ "text": "x", "k": 1000 })),
        ),
        ("POST", dups.clone(), json, j(json!({ "txt": "x" }))),
        ("POST", "/v1/explain".into(), json, j(json!({ "a": "x" }))),
        (
            "POST",
            "/v1/explain".into(),
            json,
            j(json!({ "a": "x", "b": long })),
        ),
        (
            "POST",
            "/v1/explain".into(),
            json,
            j(json!({ "a": "", "b": "y" })),
        ),
        // Documents.
        (
            "POST",
            docs.clone(),
            json,
            j(json!({ "id": "a", "text": "not an array" })),
        ),
        ("POST", docs.clone(), json, j(json!([{ "id": "a" }]))),
        ("POST", docs.clone(), json, j(json!([{ "text": "no id" }]))),
        (
            "POST",
            docs.clone(),
            json,
            j(json!([{ "id": "", "text": "empty id" }])),
        ),
        (
            "POST",
            docs.clone(),
            json,
            j(json!([{ "id": "x".repeat(600), "text": "long id" }])),
        ),
        (
            "POST",
            docs.clone(),
            json,
            j(json!([{ "id": 5, "text": "number id" }])),
        ),
        (
            "POST",
            docs.clone(),
            json,
            j(json!([{ "id": "a", "text": "" }])),
        ),
        (
            "POST",
            docs.clone(),
            json,
            j(json!([{ "id": "a", "text": long }])),
        ),
        (
            "POST",
            docs.clone(),
            json,
            j(json!([{ "id": "a", "text": "t", "metadata": [1] }])),
        ),
        (
            "POST",
            docs.clone(),
            json,
            j(json!([{ "id": "a", "text": "t", "metdata": {} }])),
        ),
        (
            "POST",
            docs.clone(),
            json,
            j(
                json!([{ "id": "a", "text": "t" }, { "id": "b", "text": "t" }, { "id": "c", "text": "t" }, { "id": "d", "text": "t" }]),
            ),
        ),
        (
            "POST",
            docs.clone(),
            nd,
            b"{\"id\": \"a\", \"text\": \"ok\"}\nnot json\n".to_vec(),
        ),
        (
            "POST",
            docs.clone(),
            nd,
            format!("{{\"id\": \"b\", \"text\": \"{}\"}}\n", "y".repeat(25_000)).into_bytes(),
        ),
        (
            "POST",
            "/v1/collections/nope/documents".into(),
            json,
            j(json!([{ "id": "a", "text": "t" }])),
        ),
        (
            "GET",
            "/v1/collections/faq/documents/missing".into(),
            "",
            vec![],
        ),
        (
            "DELETE",
            "/v1/collections/faq/documents/missing".into(),
            "",
            vec![],
        ),
        // Collections.
        (
            "POST",
            "/v1/collections".into(),
            json,
            j(json!({ "name": "faq" })),
        ),
        (
            "POST",
            "/v1/collections".into(),
            json,
            j(json!({ "name": "has space" })),
        ),
        (
            "POST",
            "/v1/collections".into(),
            json,
            j(json!({ "name": "" })),
        ),
        (
            "POST",
            "/v1/collections".into(),
            json,
            j(json!({ "name": "x".repeat(300) })),
        ),
        (
            "POST",
            "/v1/collections".into(),
            json,
            j(json!({ "name": "h", "hnsw": { "m": 257 } })),
        ),
        (
            "POST",
            "/v1/collections".into(),
            json,
            j(json!({ "name": "h", "hnsw": { "ef_construction": 0 } })),
        ),
        (
            "POST",
            "/v1/collections".into(),
            json,
            j(json!({ "name": "h", "precision": "fp8" })),
        ),
        ("DELETE", "/v1/collections/nope".into(), "", vec![]),
        ("GET", "/v1/collections/nope".into(), "", vec![]),
        // Verdicts and the review queue.
        (
            "POST",
            verdicts.clone(),
            json,
            j(
                json!({ "a": { "text": "x" }, "b": { "id": "pw", "text": "y" }, "duplicate": true, "probability": 7 }),
            ),
        ),
        (
            "POST",
            verdicts.clone(),
            json,
            j(
                json!({ "a": { "id": "ghost", "text": "x" }, "b": { "id": "pw", "text": "y" }, "duplicate": true }),
            ),
        ),
        (
            "POST",
            verdicts.clone(),
            json,
            j(json!({ "a": { "text": "x" }, "b": { "text": "x" }, "duplicate": true })),
        ),
        (
            "POST",
            verdicts.clone(),
            json,
            j(json!({ "a": { "text": "" }, "b": { "id": "pw", "text": "y" }, "duplicate": true })),
        ),
        (
            "POST",
            verdicts.clone(),
            json,
            j(
                json!({ "a": { "text": "x", "extra": 1 }, "b": { "id": "pw", "text": "y" }, "duplicate": true }),
            ),
        ),
        ("DELETE", format!("{verdicts}/0123"), "", vec![]),
        (
            "GET",
            "/v1/collections/faq/review?scan=0".into(),
            "",
            vec![],
        ),
        (
            "GET",
            "/v1/collections/faq/review?scan=5000".into(),
            "",
            vec![],
        ),
        (
            "GET",
            "/v1/collections/faq/review?threshold=2".into(),
            "",
            vec![],
        ),
        (
            "GET",
            "/v1/collections/faq/review?scan=abc".into(),
            "",
            vec![],
        ),
        (
            "GET",
            "/v1/collections/faq/review?bogus=1".into(),
            "",
            vec![],
        ),
        // Uploads and jobs.
        ("POST", upload("format=xml"), bin, b"a".to_vec()),
        ("POST", upload("name=data.bin"), bin, b"a".to_vec()),
        ("POST", upload("format=jsonl"), bin, vec![]),
        ("POST", upload("format=jsonl&batch=0"), bin, b"a".to_vec()),
        (
            "POST",
            upload("format=jsonl&batch=99999"),
            bin,
            b"a".to_vec(),
        ),
        (
            "POST",
            "/v1/collections/nope/ingest?format=jsonl".into(),
            bin,
            b"a".to_vec(),
        ),
        ("GET", "/v1/jobs/999".into(), "", vec![]),
        ("GET", "/v1/jobs/abc".into(), "", vec![]),
        // Reindex.
        (
            "POST",
            "/v1/collections/faq/reindex".into(),
            json,
            j(json!({ "model": "/no/such/model" })),
        ),
        (
            "POST",
            "/v1/collections/faq/reindex".into(),
            json,
            j(json!({ "modle": "x" })),
        ),
        // Routes and methods.
        ("GET", "/v1/nothing".into(), "", vec![]),
        ("DELETE", "/v1/explain".into(), "", vec![]),
        ("PUT", search.clone(), json, j(json!({ "text": "x" }))),
        ("GET", search.clone(), "", vec![]),
        ("BREW", "/v1/collections".into(), "", vec![]),
        ("GET", "/ui/../../etc/passwd".into(), "", vec![]),
        ("GET", "/ui/nope.js".into(), "", vec![]),
    ];
    let mut clear = 0;
    for case in &cases {
        let (st, e) = send(&s, case);
        let ok = (400..500).contains(&st)
            && !code(&e).is_empty()
            && e["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty());
        if ok {
            clear += 1;
        } else {
            let body = String::from_utf8_lossy(&case.3[..case.3.len().min(120)]).into_owned();
            eprintln!("NOT CLEAR: {} {} {body} -> {st} {e}", case.0, case.1);
        }
    }
    eprintln!(
        "bad inputs: {} tried, {clear} answered with a clear 4xx",
        cases.len()
    );
    assert_eq!(clear, cases.len(), "every bad input gets a clear 4xx");
    // Nothing changed: one collection, one document, still found.
    let (_, list) = call("GET", &s.url("/v1/collections"), None, None);
    assert_eq!(
        list["collections"].as_array().map(Vec::len),
        Some(1),
        "{list}"
    );
    let (_, info) = call("GET", &s.url("/v1/collections/faq"), None, None);
    assert_eq!(info["stats"]["documents"], 1, "{info}");
    s.stop();
}

#[test]
fn a_damaged_calibration_falls_back_to_the_default_and_searches_go_on() {
    use kindred::db::{Database, NewDocument};
    use kindred::store::{CollectionSettings, Durability};
    let dir = tempfile::tempdir().expect("tempdir");
    let db = std::sync::Arc::new(Database::open(dir.path(), Durability::Flush).expect("opens"));
    let enc = crate::common::encoder();
    db.create_collection("c", &CollectionSettings::for_model(enc.identity().clone()))
        .expect("creates");
    let doc = |id: &str, text: &str| NewDocument {
        id: id.into(),
        text: text.into(),
        metadata: Value::Null,
        context: Vec::new(),
    };
    crate::common::upsert(
        &db,
        "c",
        enc,
        vec![
            doc("pw", "How do I reset my password?"),
            doc("ship", "How long does shipping take?"),
        ],
    )
    .expect("upserts");
    db.embedded_store()
        .expect("embedded store")
        .set_meta("c", "calibration", b"{\"kind\": \"garbage")
        .expect("writes");
    let out = crate::common::search(&db, enc, "c", "forgot my password", &Default::default())
        .expect("searches despite the damaged calibration");
    assert_eq!(out.hits[0].id, "pw");
}

/// A collection whose indexes cannot load (its saved index is from a later write than the
/// store holds, which is refused) makes `/readyz` answer 503 `collection_failed` naming it,
/// while the other collections are served; once the fix the log names is applied (its index
/// folder removed) it loads on the next request and the server is ready again. Before,
/// `/readyz` said 200 throughout.
#[test]
fn readyz_names_a_collection_whose_indexes_cannot_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(dir.path(), &[], &[]);
    for c in ["good", "bad"] {
        collection_with(&s, c, &[]);
        let docs = json!([{ "id": "pw", "text": "How do I reset my password?" }]);
        let (st, out) = call(
            "POST",
            &s.url(&format!("/v1/collections/{c}/documents")),
            None,
            Some(&docs),
        );
        assert_eq!(st, 200, "{out}");
    }
    s.stop();
    let meta = dir.path().join("indexes/bad/w2.meta.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&meta).unwrap()).unwrap();
    v["seq"] = json!(1_000_000);
    std::fs::write(&meta, v.to_string()).unwrap();

    let s = Server::spawn(dir.path(), &[], &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let (st, e) = loop {
        let (st, e) = call("GET", &s.url("/readyz"), None, None);
        if code(&e) != "not_ready" {
            break (st, e);
        }
        assert!(Instant::now() < deadline, "never loaded: {e}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!((st, code(&e)), (503, "collection_failed"), "{e}");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"bad\"") && !message.contains("\"good\""),
        "{e}"
    );
    assert!(
        !message.contains(dir.path().to_str().unwrap()),
        "no server paths: {e}"
    );
    let search = |c: &str| {
        top_hit(
            &s.url(&format!("/v1/collections/{c}/search")),
            &json!({ "text": "forgot my password", "k": 1 }),
        )
    };
    let (st, top, out) = search("good");
    assert_eq!((st, top.as_deref()), (200, Some("pw")), "{out}");
    let (st, _, out) = search("bad");
    assert_ne!(st, 200, "{out}");
    // The fix the log names: remove the collection's index folder (rebuilt from the store).
    std::fs::remove_dir_all(dir.path().join("indexes/bad")).unwrap();
    let (st, top, out) = search("bad");
    assert_eq!((st, top.as_deref()), (200, Some("pw")), "{out}");
    assert_eq!(call("GET", &s.url("/readyz"), None, None).0, 200);
    s.stop();
}

/// sled itself meets the full disk: kindred's free-space check is off (0 bytes) and the disk
/// is held at 20 KiB free while documents are written one by one, until one of sled's log
/// writes fails. That write answers 507, `/readyz` 503 `store_failed`, reads go on, and once
/// space is freed the store is reopened in place and writes resume without a restart; nothing
/// acknowledged is lost. Before, every write failed until the server was restarted.
#[test]
fn a_store_that_met_a_full_disk_is_reopened_in_place_once_space_returns() {
    let Some((_dir, fs)) = Tmpfs::mount(40) else {
        return;
    };
    let (data, config) = fs.kindred_dirs(0);
    let s = Server::start(&data, &["--config", config.to_str().unwrap()], &[]);
    let doc = |i: usize| json!([{ "id": format!("d{i}"), "text": format!("How do I fix laptop number {i}?") }]);
    collection_with(&s, "c", &[]);
    let url = s.url("/v1/collections/c/documents");
    let mut acked = Vec::new();
    for i in 0..40 {
        assert_eq!(call("POST", &url, None, Some(&doc(i))).0, 200);
        acked.push(i);
    }
    let filler = fs.0.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let mut failed = None;
    for i in 100..400 {
        hold_free_at(&mut f, &fs.0, 20 << 10);
        let (st, e) = call("POST", &url, None, Some(&doc(i)));
        if st == 200 {
            acked.push(i);
            continue;
        }
        assert_eq!((st, code(&e)), (507, "insufficient_storage"), "{e}");
        eprintln!("sled met the full disk at write {} at 20 KiB free", i - 99);
        failed = Some(i);
        break;
    }
    let failed = failed.expect("sled met the full disk within 300 writes");
    let (st, e) = call("GET", &s.url("/readyz"), None, None);
    assert_eq!((st, code(&e)), (503, "store_failed"), "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("reopened"),
        "{e}"
    );
    // Reads go on; writes are refused (at once, without touching sled) until the reopen.
    let (st, top, out) = top_hit(
        &s.url("/v1/collections/c/search"),
        &json!({ "text": "How do I fix laptop number 7?", "k": 1 }),
    );
    assert_eq!((st, top.as_deref()), (200, Some("d7")), "{out}");
    let (st, e) = call("POST", &url, None, Some(&doc(failed + 1)));
    assert_eq!((st, code(&e)), (507, "insufficient_storage"), "{e}");
    drop(f);
    std::fs::remove_file(&filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while call("GET", &s.url("/readyz"), None, None).0 != 200 {
        assert!(Instant::now() < deadline, "the store was never reopened");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        call("POST", &url, None, Some(&doc(1000))).0,
        200,
        "writes resume"
    );
    acked.push(1000);
    let metrics = ureq::get(&s.url("/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(
        metrics.contains("kindred_store_reopens_total 1"),
        "{metrics}"
    );
    s.stop();
    let s = Server::start(&data, &["--config", config.to_str().unwrap()], &[]);
    for i in &acked {
        let (st, d) = call(
            "GET",
            &s.url(&format!("/v1/collections/c/documents/d{i}")),
            None,
            None,
        );
        assert_eq!(st, 200, "acknowledged d{i} is there: {d}");
    }
    s.stop();
}

/// Grows or shrinks `filler` so that the disk holding `dir` has about `target` bytes free.
fn hold_free_at(filler: &mut std::fs::File, dir: &std::path::Path, target: u64) {
    use std::io::Seek;
    let free = free_bytes(dir);
    let len = filler.metadata().unwrap().len();
    if free > target {
        filler.seek(std::io::SeekFrom::End(0)).unwrap();
        let _ = filler.write_all(&vec![0u8; (free - target) as usize]);
    } else {
        filler.set_len(len.saturating_sub(target - free)).unwrap();
    }
}

/// Bytes free on the disk holding `dir`.
fn free_bytes(dir: &std::path::Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and statvfs fills `st` when it returns 0.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) }, 0);
    // SAFETY: statvfs returned 0.
    let st = unsafe { st.assume_init() };
    st.f_bavail * st.f_frsize
}
