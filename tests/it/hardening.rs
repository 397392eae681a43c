//! The third hardening pass (issue 59), over a real socket and the real binary: hostile
//! collection names touch nothing outside what they name (canaries beside and above the data
//! directory), a store whose files vanish is reported as such and shutdown still ends, writes
//! go on through a reindex and a write answered `timeout` is never stored, and the protocol
//! and validation gaps the probe found. Each case failed before its fix.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use serde_json::{json, Value};

use kindred::store::CollectionSettings;
use kindred::{Database, Durability, NewDocument};

use crate::common::{encoder, model_dir, other_model};
use crate::server::{call, call_raw, collection_with, Server};

/// Every file under `root` with its bytes (folders as empty entries), skipping `skip`.
fn snapshot(root: &Path, skip: &[PathBuf]) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(dir: &Path, skip: &[PathBuf], out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            if skip.iter().any(|s| path.starts_with(s)) {
                continue;
            }
            if path.is_dir() {
                out.insert(path.clone(), Vec::new());
                walk(&path, skip, out);
            } else {
                out.insert(path.clone(), std::fs::read(&path).unwrap_or_default());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, skip, &mut out);
    out
}

/// Names a hostile client would try: dot names, absolute and relative paths, separators,
/// encodings, the reserved entry, control bytes, long and non-ASCII names.
fn hostile_names(abs: &Path) -> Vec<String> {
    let mut names: Vec<String> = [
        "",
        ".",
        "..",
        "../..",
        "../canary-beside",
        "../../canary-above",
        "./faq",
        "faq/..",
        "faq/../..",
        "a/b",
        "a\\b",
        "..\\..",
        "%2e%2e",
        "..%2f..",
        " ",
        " faq",
        "faq ",
        "a\u{0}b",
        "a\nb",
        "é",
        "faq@1",
        "@1",
        "STORE",
        "store",
        "~",
        "$HOME",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    names.push(abs.display().to_string());
    names.push(format!("{}/", abs.display()));
    names.push("x".repeat(65));
    names
}

/// `s` percent-encoded as one path segment.
fn segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `kindred serve` over `dir/data` with `[limits]` lines `limits` in a config file of its own.
fn server_with_limits(dir: &Path, limits: &str) -> Server {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let config = dir.join(format!("limits-{n}.toml"));
    std::fs::write(&config, format!("[limits]\n{limits}\n")).expect("config");
    Server::start(
        &dir.join("data"),
        &["--config", config.to_str().unwrap()],
        &[],
    )
}

fn kindred_cli(data: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kindred"));
    cmd.env("KINDRED_MODEL", &model_dir().path)
        .env("RUST_LOG", "warn")
        .arg("--data")
        .arg(data);
    cmd
}

/// Before the fix, `{"name": ".."}` removed the whole data directory (store included) and an
/// absolute name removed that directory wherever it was; `kindred collection create /path`
/// did the same. Now every hostile name, through the API and the CLI, is refused before any
/// filesystem call: the canaries beside and above the data directory, the one an absolute
/// name points at, the store and the other collection are untouched.
#[test]
fn hostile_collection_names_touch_nothing_outside_what_they_name() {
    let root = tempfile::tempdir().expect("tempdir");
    let work = root.path().join("work");
    let data = work.join("data");
    let canaries = [
        root.path().join("canary-above"),
        work.join("canary-beside"),
        root.path().join("absolute-target"),
    ];
    for c in &canaries {
        std::fs::create_dir_all(c.join("inner")).expect("canary");
        std::fs::write(c.join("keep.txt"), b"must survive").expect("canary");
        std::fs::write(c.join("inner/keep.txt"), b"must survive too").expect("canary");
    }
    let names = hostile_names(&canaries[2]);

    let s = Server::start(&data, &["--checkpoint-interval", "0"], &[]);
    collection_with(&s, "faq", &[]);
    let docs = json!([
        { "id": "pw", "text": "How do I reset my password?" },
        { "id": "ship", "text": "How long does shipping take?" },
        { "id": "refund", "text": "Can I get a refund for my order?" },
    ]);
    let (st, e) = call(
        "POST",
        &s.url("/v1/collections/faq/documents"),
        None,
        Some(&docs),
    );
    assert_eq!(st, 200, "{e}");
    // Index files on disk, so that the data directory holds everything it can.
    s.stop();
    let s = Server::start(&data, &["--checkpoint-interval", "0"], &[]);
    // The store changes inside sled as it runs (its log and snapshots); everything else in
    // the tree must stay byte for byte.
    let skip = [data.join("store")];
    let before = snapshot(root.path(), &skip);
    assert!(data.join("indexes/STORE").is_file() && data.join("store/db").is_file());

    let mut refused = 0;
    for name in &names {
        // Creation through the JSON body: refused with 422 naming the rule.
        let (st, e) = call(
            "POST",
            &s.url("/v1/collections"),
            None,
            Some(&json!({ "name": name })),
        );
        assert_eq!(st, 422, "create {name:?}: {e}");
        assert_eq!(e["error"]["code"], "invalid_request", "{name:?}: {e}");
        refused += 1;
        // Every route that takes a collection in its path: a clear 4xx, nothing touched.
        let c = segment(name);
        for (method, path, body) in [
            ("DELETE", format!("/v1/collections/{c}"), None),
            ("GET", format!("/v1/collections/{c}"), None),
            (
                "POST",
                format!("/v1/collections/{c}/documents"),
                Some(json!([{ "id": "x", "text": "a question?" }])),
            ),
            (
                "POST",
                format!("/v1/collections/{c}/search"),
                Some(json!({ "text": "password" })),
            ),
            (
                "POST",
                format!("/v1/collections/{c}/reindex"),
                Some(json!({ "model": other_model().path })),
            ),
            (
                "PUT",
                format!("/v1/collections/{c}/search-defaults"),
                Some(json!({ "mode": "cosine", "rerank": "none" })),
            ),
            ("GET", format!("/v1/collections/{c}/export"), None),
            ("GET", format!("/v1/collections/{c}/review"), None),
        ] {
            let (st, e) = call(method, &s.url(&path), None, body.as_ref());
            assert!(
                (400..500).contains(&st),
                "{method} {path} answered {st}: {e}"
            );
        }
        let upload = s.url(&format!("/v1/collections/{c}/ingest?format=jsonl"));
        let (st, e) = call_raw(
            &upload,
            None,
            "application/octet-stream",
            b"{\"id\": \"u\", \"text\": \"an uploaded question?\"}\n",
        );
        assert!((400..500).contains(&st), "upload to {name:?}: {st} {e}");
    }
    assert_eq!(
        snapshot(root.path(), &skip),
        before,
        "a hostile name through the API changed files outside the store"
    );
    let (st, list) = call("GET", &s.url("/v1/collections"), None, None);
    assert_eq!(st, 200);
    let listed: Vec<&str> = list["collections"]
        .as_array()
        .expect("collections")
        .iter()
        .map(|c| c["name"].as_str().expect("name"))
        .collect();
    assert_eq!(listed, ["faq"], "{list}");
    s.stop();

    // The CLI, on the same data directory (the server has let go of it).
    let file = work.join("docs.jsonl");
    std::fs::write(
        &file,
        "{\"id\": \"c\", \"text\": \"a question from a file?\"}\n",
    )
    .unwrap();
    let before = snapshot(root.path(), &skip);
    for name in &names {
        if name.contains('\0') {
            continue; // not passable as an argument
        }
        for args in [
            vec!["collection", "create", name.as_str()],
            vec!["collection", "drop", name.as_str()],
            vec![
                "ingest",
                "--create",
                "-c",
                name.as_str(),
                file.to_str().unwrap(),
            ],
            vec!["add", "-c", name.as_str(), file.to_str().unwrap()],
            vec!["delete", "-c", name.as_str(), "pw"],
        ] {
            let out = kindred_cli(&data).args(&args).output().expect("runs");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{args:?} succeeded: {stderr}");
            assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
            refused += 1;
        }
    }
    let after = snapshot(root.path(), &skip);
    assert_eq!(
        after, before,
        "a hostile name through the CLI changed files"
    );
    for c in &canaries {
        assert_eq!(std::fs::read(c.join("keep.txt")).unwrap(), b"must survive");
        assert_eq!(
            std::fs::read(c.join("inner/keep.txt")).unwrap(),
            b"must survive too"
        );
    }
    // The store and the other collection, as they were: every document still found.
    let s = Server::start(&data, &[], &[]);
    for id in ["pw", "ship", "refund"] {
        let (st, e) = call(
            "GET",
            &s.url(&format!("/v1/collections/faq/documents/{id}")),
            None,
            None,
        );
        assert_eq!(st, 200, "{id}: {e}");
    }
    let (st, found) = call(
        "POST",
        &s.url("/v1/collections/faq/search"),
        None,
        Some(&json!({ "text": "forgot my password", "k": 1 })),
    );
    assert_eq!(st, 200, "{found}");
    assert_eq!(found["hits"][0]["id"], "pw");
    eprintln!(
        "{} hostile names, {refused} requests and commands refused, 0 files touched",
        names.len()
    );
    s.stop();
}

/// The library's own property: for any name and id, create, write, delete and drop either
/// refuse or act on that collection alone (nothing else on disk changes, the other
/// collection keeps its documents). Bounded: 96 cases (about 20 s here), `PROPTEST_CASES` for
/// more.
#[test]
fn any_name_or_id_changes_nothing_outside_the_collection_it_names() {
    let root = tempfile::tempdir().expect("tempdir");
    let data = root.path().join("data");
    std::fs::create_dir_all(root.path().join("canary")).unwrap();
    std::fs::write(root.path().join("canary/keep.txt"), b"keep").unwrap();
    let db = Database::open(&data, Durability::Flush).expect("open");
    let settings = CollectionSettings::for_model(encoder().identity().clone());
    db.create_collection("faq", &settings).expect("create");
    let encoded = encoder()
        .encode(&["How do I reset my password?"])
        .expect("encode")
        .remove(0);
    let doc = |id: &str| {
        (
            NewDocument {
                id: id.into(),
                text: "How do I reset my password?".into(),
                metadata: Value::Null,
                context: Vec::new(),
            },
            encoded.clone(),
        )
    };
    db.upsert_encoded("faq", encoder().identity(), vec![doc("pw")])
        .expect("upsert");
    db.checkpoint().expect("checkpoint");
    let indexes = data.join("indexes");
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(96);
    let name = prop_oneof![
        "[a-zA-Z0-9_.@/\\\\ -]{0,10}",
        Just("..".to_string()),
        Just(String::new()),
        Just(root.path().join("canary").display().to_string()),
        Just("STORE".to_string()),
        any::<String>(),
    ];
    let id = prop_oneof!["[a-z./]{0,6}", any::<String>(), Just("x".repeat(600))];
    proptest!(ProptestConfig::with_cases(cases), |(name in name, id in id)| {
        // What this name may touch: its own index folder, and the store's own files.
        let own = kindred::store::names::child(&indexes, &name).ok();
        let skip: Vec<PathBuf> = [Some(data.join("store")), own.clone()].into_iter().flatten().collect();
        let before = snapshot(root.path(), &skip);
        let created = db.create_collection(&name, &settings).is_ok();
        prop_assert!(!created || own.is_some(), "{name:?} was created without a valid path");
        let _ = db.upsert_encoded(&name, encoder().identity(), vec![doc(&id)]);
        let _ = db.checkpoint();
        let _ = db.delete(&name, &id);
        let _ = db.drop_collection(&name);
        prop_assert_eq!(snapshot(root.path(), &skip), before, "{:?} / {:?} changed files outside its collection", name, id);
        prop_assert_eq!(db.count("faq").expect("count"), 1);
        prop_assert!(db.get("faq", "pw").expect("get").is_some());
    });
}

/// Sends raw bytes; the whole answer (read until the server closes or `wait` passes).
fn raw(base: &str, request: &[u8], wait: Duration) -> String {
    let addr = base.trim_start_matches("http://");
    let mut tcp = TcpStream::connect(addr).expect("connects");
    tcp.set_read_timeout(Some(wait)).unwrap();
    tcp.write_all(request).expect("sends");
    let mut out = Vec::new();
    let _ = tcp.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn status_of(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Items 4-7, 10 of the probe: one validation for fusion weights, bounded evidence, unknown
/// HNSW fields, the 405's method list, and the protocol (Expect with an oversized body, two
/// Host headers, the content-type allowlist, a slow body).
#[test]
fn validation_and_protocol_gaps_are_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = server_with_limits(dir.path(), "request_timeout_ms = 1500");
    collection_with(&s, "faq", &[]);
    let (st, e) = call(
        "POST",
        &s.url("/v1/collections/faq/documents"),
        None,
        Some(&json!([{ "id": "pw", "text": "How do I reset my password?" }])),
    );
    assert_eq!(st, 200, "{e}");
    let search = s.url("/v1/collections/faq/search");

    // 6: search refuses what the defaults PUT refuses.
    for (fusion, field) in [
        (json!({ "k0": 0 }), "fusion.k0"),
        (
            json!({ "cosine": 0, "w2": 0, "lexical": 0 }),
            "positive weight",
        ),
        (json!({ "w2": -1 }), "fusion.w2"),
    ] {
        let body = json!({ "text": "password", "mode": "hybrid", "fusion": fusion });
        let (st, e) = call("POST", &search, None, Some(&body));
        assert_eq!(st, 422, "{fusion}: {e}");
        assert!(
            e["error"]["message"].as_str().unwrap().contains(field),
            "{e}"
        );
        let put = json!({ "mode": "hybrid", "rerank": "none", "fusion": fusion });
        let (st, e) = call(
            "PUT",
            &s.url("/v1/collections/faq/search-defaults"),
            None,
            Some(&put),
        );
        assert_eq!(st, 422, "{fusion}: {e}");
    }

    // 4: evidence is bounded like the reason (before: 15 MB stored and sent with every GET).
    let big =
        json!({ "mode": "cosine", "rerank": "none", "evidence": { "blob": "x".repeat(70_000) } });
    let (st, e) = call(
        "PUT",
        &s.url("/v1/collections/faq/search-defaults"),
        None,
        Some(&big),
    );
    assert_eq!(st, 422, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("evidence"),
        "{e}"
    );
    let (_, info) = call("GET", &s.url("/v1/collections/faq"), None, None);
    assert!(info["search_defaults"].is_null(), "{info}");

    // 7: unknown HNSW fields are refused like every other body's.
    let (st, e) = call(
        "POST",
        &s.url("/v1/collections"),
        None,
        Some(
            &json!({ "name": "h", "hnsw": { "m": 16, "ef_construction": 200, "ef_search": 64, "mmax": 3 } }),
        ),
    );
    assert_eq!(st, 422, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("mmax"),
        "{e}"
    );

    // 5: the 405 names the methods the Allow header lists.
    let (st, e) = call("PUT", &s.url("/v1/collections"), None, None);
    assert_eq!(st, 405, "{e}");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("GET") && !message.contains("(allowed: )"),
        "{e}"
    );

    // 10a: a declared body over the limit is 413 before any of it is sent, not 100 Continue.
    let host = s.base.trim_start_matches("http://").to_string();
    let answer = raw(
        &s.base,
        format!("POST /v1/collections/faq/documents HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: 2147483648\r\nExpect: 100-continue\r\n\r\n").as_bytes(),
        Duration::from_secs(5),
    );
    assert!(!answer.contains("100 Continue"), "{answer}");
    assert_eq!(status_of(&answer), 413, "{answer}");
    // 10b: two Host headers are a bad request (RFC 9112).
    let answer = raw(
        &s.base,
        format!("GET /v1/collections HTTP/1.1\r\nHost: {host}\r\nHost: evil.example\r\nConnection: close\r\n\r\n").as_bytes(),
        Duration::from_secs(5),
    );
    assert_eq!(status_of(&answer), 400, "{answer}");
    // 10c: the content type is an allowlist.
    for ty in [
        "application/jsonx",
        "text/plain, application/json",
        "application/xml",
    ] {
        let (st, e) = call_raw(&search, None, ty, br#"{"text": "password"}"#);
        assert_eq!(st, 415, "{ty}: {e}");
    }
    let (st, e) = call_raw(
        &search,
        None,
        "application/json; charset=utf-8",
        br#"{"text": "password"}"#,
    );
    assert_eq!(st, 200, "{e}");
    // 10d: a body that never finishes arriving is 408 (the client's doing), not 503.
    let answer = raw(
        &s.base,
        format!("POST /v1/collections/faq/search HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: 100\r\nConnection: close\r\n\r\n{{\"text\": ").as_bytes(),
        Duration::from_secs(10),
    );
    assert_eq!(status_of(&answer), 408, "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
    s.stop();
}

/// Item 3: a reindex no longer holds writes. Before, batches written during an HTTP reindex
/// waited on the write pool it occupied, got 503 after 30 s, and one was stored anyway. Now
/// every batch is answered 200 while the reindex runs, and what was acknowledged is exactly
/// what is stored after it.
#[test]
fn writes_go_on_during_a_reindex_and_a_timed_out_write_is_never_stored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = server_with_limits(dir.path(), "request_timeout_ms = 20000");
    collection_with(&s, "c", &[]);
    let questions = crate::common::qqp_questions("qqp_bimpm/dev.tsv");
    let docs: Vec<Value> = questions
        .iter()
        .take(1500)
        .enumerate()
        .map(|(i, q)| json!({ "id": format!("d{i}"), "text": q }))
        .collect();
    for chunk in docs.chunks(250) {
        let (st, e) = call(
            "POST",
            &s.url("/v1/collections/c/documents"),
            None,
            Some(&json!(chunk)),
        );
        assert_eq!(st, 200, "{e}");
    }
    let url = s.url("/v1/collections/c/reindex");
    let (st, e) = call(
        "POST",
        &url,
        None,
        Some(&json!({ "model": other_model().path })),
    );
    assert_eq!(st, 202, "{e}");
    let mut acknowledged = 0usize;
    let mut during = 0usize;
    let mut slowest = Duration::ZERO;
    let mut batch = 0;
    loop {
        let (_, status) = call("GET", &url, None, None);
        let running = status["state"] == "running";
        let docs: Vec<Value> = (0..10)
            .map(|i| json!({ "id": format!("w{batch}-{i}"), "text": format!("Written while reindexing, batch {batch} item {i}?") }))
            .collect();
        batch += 1;
        let started = Instant::now();
        let (st, e) = call(
            "POST",
            &s.url("/v1/collections/c/documents"),
            None,
            Some(&json!(docs)),
        );
        slowest = slowest.max(started.elapsed());
        assert_eq!(st, 200, "a write during the reindex: {e}");
        acknowledged += 10;
        if running {
            during += 1;
        } else {
            assert_eq!(status["state"], "done", "{status}");
            break;
        }
    }
    assert!(during >= 2, "only {during} batches ran during the reindex");
    let (_, info) = call("GET", &s.url("/v1/collections/c"), None, None);
    assert_eq!(
        info["stats"]["documents"].as_u64(),
        Some((1500 + acknowledged) as u64),
        "{info}"
    );
    eprintln!("{during} write batches during the reindex, the slowest answered in {slowest:?}");
    s.stop();

    // A write that cannot finish in time is answered 503 with Retry-After and is not stored
    // (before: "a write may still complete").
    let s = server_with_limits(dir.path(), "request_timeout_ms = 1");
    let docs: Vec<Value> = questions
        .iter()
        .skip(2000)
        .take(200)
        .enumerate()
        .map(|(i, q)| json!({ "id": format!("late{i}"), "text": q }))
        .collect();
    let resp = ureq::post(&s.url("/v1/collections/c/documents")).send_json(json!(docs));
    let resp = match resp {
        Err(ureq::Error::Status(_, r)) => r,
        other => panic!("expected a timeout, got {other:?}"),
    };
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.header("retry-after"), Some("1"));
    let body: Value = resp.into_json().expect("json");
    assert_eq!(body["error"]["code"], "timeout", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not stored"),
        "{body}"
    );
    std::thread::sleep(Duration::from_secs(2));
    s.stop();
    let s = Server::start(&dir.path().join("data"), &[], &[]);
    let (_, info) = call("GET", &s.url("/v1/collections/c"), None, None);
    assert_eq!(
        info["stats"]["documents"].as_u64(),
        Some((1500 + acknowledged) as u64),
        "the timed-out batch was stored: {info}"
    );
    let (st, _) = call(
        "GET",
        &s.url("/v1/collections/c/documents/late0"),
        None,
        None,
    );
    assert_eq!(st, 404);
    s.stop();
}

/// Item 2: the data directory removed under a running server. Before: writes went on being
/// acknowledged into sled's unlinked files (lost), a checkpoint made a new `indexes/` without
/// a store, writes later answered 507 "disk is full" with the disk nearly empty, and SIGTERM
/// could hang. Now the first write after it answers 503 `store_failed` saying the files are
/// gone and what to do, `/readyz` says the same, nothing is recreated, and SIGTERM ends the
/// process.
#[test]
fn a_store_removed_under_the_server_is_reported_as_such_and_shutdown_ends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut s = Server::start(&data, &["--checkpoint-interval", "1"], &[]);
    collection_with(&s, "faq", &[]);
    let write = |s: &Server, i: usize| {
        call(
            "POST",
            &s.url("/v1/collections/faq/documents"),
            None,
            Some(&json!([{ "id": format!("d{i}"), "text": format!("Question number {i}?") }])),
        )
    };
    let (st, e) = write(&s, 0);
    assert_eq!(st, 200, "{e}");
    std::fs::remove_dir_all(&data).expect("remove the data directory");
    for i in 1..4 {
        let (st, e) = write(&s, i);
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (503, Some("store_failed")),
            "{e}"
        );
        let message = e["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("removed") && message.contains("restore"),
            "{e}"
        );
        assert!(!message.contains("disk"), "{e}");
    }
    let (st, ready) = call("GET", &s.url("/readyz"), None, None);
    assert_eq!(
        (st, ready["error"]["code"].as_str()),
        (503, Some("store_failed")),
        "{ready}"
    );
    let message = ready["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("not a full disk") && message.contains("restor"),
        "{ready}"
    );
    // Reads of what the indexes hold go on.
    let (st, e) = call("GET", &s.url("/healthz"), None, None);
    assert_eq!(st, 200, "{e}");
    // Neither the checkpoints (every second here) nor the store's reopen loop make files in
    // its place.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !data.exists(),
        "files were made where the data directory was"
    );
    let started = Instant::now();
    // SAFETY: kill(2) with our own child's pid and a valid signal number.
    let rc = unsafe { libc::kill(s.pid() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let exited = s.wait_for_exit(Duration::from_secs(30));
    assert!(exited.is_some(), "SIGTERM did not end the server in 30 s");
    assert!(
        !data.exists(),
        "shutdown made files where the data directory was"
    );
    eprintln!(
        "shutdown after the data directory was removed: {:?}",
        started.elapsed()
    );
}
