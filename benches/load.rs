//! Load test of `kindred serve` (custom harness; loopback only; bounded in time and requests).
//!
//! 1. Preloads collection `load` with LOAD_DOCS (default 50,000) distinct real questions
//!    (QQP: qqp_bimpm and qqp_deep1994_split, dev + test) through the API (NDJSON stream), into
//!    `target/load-data` (kept between runs; the preload is skipped when the collection is
//!    already that large).
//! 2. Restarts the server, then runs a closed-loop search client (hybrid retrieval, RCMD rerank
//!    of 100 candidates, k = 10) for LOAD_SECONDS (default 60) or LOAD_REQUESTS (default 5,000)
//!    requests, whichever comes first:
//!    a. alone, then
//!    b. while a second client upserts batches of 100 other questions in a loop.
//! 3. Prints a markdown table (QPS, p50, p90, p99, max, failures) and writes
//!    `target/load-report.json`.
//!
//! Run: `cargo bench --bench load` (preload ≈ 4-5 min on 2 cores, then 2 × LOAD_SECONDS).

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kindred::eval::retrieval::percentile;
use serde_json::{json, Value};

#[path = "support/mod.rs"]
mod support;
use support::{env_or, Client, Server};

fn distinct_questions() -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for rel in [
        "qqp_bimpm/dev.tsv",
        "qqp_bimpm/test.tsv",
        "qqp_deep1994_split/dev.tsv",
        "qqp_deep1994_split/test.tsv",
    ] {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/data")
            .join(rel);
        let raw = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for line in String::from_utf8_lossy(&raw).lines() {
            for q in line.split('\t').skip(1).take(2).map(str::trim) {
                if !q.is_empty() && q.chars().count() <= 2000 && seen.insert(q.to_string()) {
                    out.push(q.to_string());
                }
            }
        }
    }
    out
}

#[derive(Debug, Default)]
struct Run {
    latencies_ms: Vec<f64>,
    /// The server's own timings of each answered search: encode, candidates, rerank, total.
    stages_ms: [Vec<f64>; 4],
    failures: usize,
    seconds: f64,
}

/// A minimal keep-alive HTTP/1.1 client: one write per request and TCP_NODELAY, so the
/// numbers are the server's and not Nagle's algorithm meeting delayed ACKs (which adds
/// ~40 ms per request to clients that write headers and body separately).
fn search_loop(
    base: &str,
    queries: &[String],
    seconds: u64,
    max: usize,
    stop: Option<&AtomicBool>,
) -> Run {
    let mut client = Client::connect(base);
    let start = Instant::now();
    let mut run = Run::default();
    for (i, q) in queries.iter().cycle().enumerate() {
        if i >= max || start.elapsed() >= Duration::from_secs(seconds) {
            break;
        }
        let t = Instant::now();
        let answer = client
            .post(
                "/v1/collections/load/search",
                &json!({ "text": q, "k": 10, "rerank_depth": 100 }),
            )
            .ok()
            .filter(|(status, _)| *status == 200)
            .and_then(|(_, body)| serde_json::from_slice::<Value>(&body).ok());
        run.latencies_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let ok = answer
            .as_ref()
            .is_some_and(|v| v["hits"].as_array().is_some_and(|h| !h.is_empty()));
        if let Some(v) = &answer {
            let names = ["encode_ms", "candidates_ms", "rerank_ms", "total_ms"];
            for (stage, name) in run.stages_ms.iter_mut().zip(names) {
                stage.push(v["timings"][name].as_f64().unwrap_or(f64::NAN));
            }
        }
        if !ok {
            run.failures += 1;
        }
    }
    run.seconds = start.elapsed().as_secs_f64();
    if let Some(s) = stop {
        s.store(true, Ordering::Release);
    }
    run
}

fn summarize(name: &str, mut run: Run, mut extra: Value) -> Value {
    run.latencies_ms.sort_by(f64::total_cmp);
    let l = &run.latencies_ms;
    let names = ["encode", "candidates", "rerank", "server_total"];
    for (stage, name) in run.stages_ms.iter_mut().zip(names) {
        stage.sort_by(f64::total_cmp);
        extra[format!("{name}_p50_ms")] = json!(percentile(stage, 50.0));
    }
    json!({
        "scenario": name,
        "requests": l.len(),
        "failures": run.failures,
        "qps": l.len() as f64 / run.seconds,
        "p50_ms": percentile(l, 50.0),
        "p90_ms": percentile(l, 90.0),
        "p99_ms": percentile(l, 99.0),
        "max_ms": l.last().copied().unwrap_or(0.0),
        "extra": extra,
    })
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` would pass nothing useful: only run
    // when asked for as a bench.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let docs = env_or("LOAD_DOCS", 50_000);
    let seconds = env_or("LOAD_SECONDS", 60) as u64;
    let max_requests = env_or("LOAD_REQUESTS", 5_000);
    let home = std::env::var_os("KINDRED_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(kindred::model::default_home);
    let explicit = std::env::var_os("KINDRED_MODEL").map(PathBuf::from);
    let model = kindred::model::resolve(explicit.as_deref(), &home, true)
        .expect("model")
        .path;
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/load-data");
    let questions = distinct_questions();
    assert!(
        questions.len() > docs + 5_000,
        "only {} questions",
        questions.len()
    );
    let (stored, rest) = questions.split_at(docs);

    let server = Server::start(&data, &model);
    let (_, info) = call(&server.url("/v1/collections/load"), None);
    let have = info["stats"]["documents"].as_u64().unwrap_or(0) as usize;
    if have < docs {
        eprintln!("preloading {docs} questions (have {have})");
        if have == 0 {
            call(
                &server.url("/v1/collections"),
                Some(json!({ "name": "load" })),
            );
        }
        let body: String = stored
            .iter()
            .enumerate()
            .map(|(i, q)| format!("{}\n", json!({ "id": format!("q{i}"), "text": q })))
            .collect();
        let t = Instant::now();
        let r = ureq::post(&server.url("/v1/collections/load/documents"))
            .set("Content-Type", "application/x-ndjson")
            .send_bytes(body.as_bytes())
            .expect("preload");
        let secs = t.elapsed().as_secs_f64();
        eprintln!(
            "preload: {} in {secs:.0} s = {:.0} docs/s",
            r.into_string().unwrap(),
            docs as f64 / secs
        );
    }
    server.stop();

    let server = Server::start(&data, &model);
    let (_, info) = call(&server.url("/v1/collections/load"), None);
    let at_start = info["stats"]["documents"].as_u64().unwrap_or(0);
    // Replaced documents leave tombstones in the graphs until a compaction (at 20 % of the live
    // points); the ingest client replaces the same ids every run, so runs start with different
    // counts.
    let tombstones = |server: &Server| {
        let (_, info) = call(&server.url("/v1/collections/load"), None);
        info["index"]["tombstones"].as_u64().unwrap_or(0)
    };
    // Queries: questions that are not stored (QQP paraphrases of stored ones among them).
    let queries: Vec<String> = rest.iter().rev().take(5_000).cloned().collect();
    // Warm-up.
    search_loop(&server.base, &queries[..50], 60, 50, None);

    let alone = search_loop(&server.base, &queries, seconds, max_requests, None);
    let mut report = vec![summarize(
        "search alone",
        alone,
        json!({ "documents": at_start, "tombstones": tombstones(&server) }),
    )];

    let stop = Arc::new(AtomicBool::new(false));
    let ingested = Arc::new(AtomicUsize::new(0));
    let ingest_failures = Arc::new(AtomicUsize::new(0));
    let tombstones_before = tombstones(&server);
    let writer = {
        let (stop, ingested, failures) = (stop.clone(), ingested.clone(), ingest_failures.clone());
        let url = server.url("/v1/collections/load/documents");
        let batches: Vec<Value> = rest[..rest.len() - 5_000]
            .chunks(100)
            .enumerate()
            .map(|(b, chunk)| {
                json!(chunk
                    .iter()
                    .enumerate()
                    .map(|(i, q)| json!({ "id": format!("w{b}-{i}"), "text": q }))
                    .collect::<Vec<_>>())
            })
            .collect();
        std::thread::spawn(move || {
            let agent = ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(120))
                .build();
            for batch in batches.iter().cycle() {
                if stop.load(Ordering::Acquire) {
                    break;
                }
                match agent.post(&url).send_json(batch.clone()) {
                    Ok(_) => ingested.fetch_add(batch.as_array().unwrap().len(), Ordering::Relaxed),
                    Err(_) => failures.fetch_add(1, Ordering::Relaxed),
                };
            }
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    let busy = search_loop(&server.base, &queries, seconds, max_requests, Some(&stop));
    writer.join().unwrap();
    let ingest_secs = t.elapsed().as_secs_f64();
    report.push(summarize(
        "search while another client ingests",
        busy,
        json!({
            "documents": at_start,
            "tombstones": tombstones_before,
            "ingested_docs": ingested.load(Ordering::Relaxed),
            "ingest_docs_per_s": ingested.load(Ordering::Relaxed) as f64 / ingest_secs,
            "ingest_failures": ingest_failures.load(Ordering::Relaxed),
        }),
    ));
    server.stop();

    println!("| scenario | documents | tombstones | requests | failures | QPS | p50 ms | p90 ms | p99 ms | max ms | ingest docs/s |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &report {
        println!(
            "| {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            r["scenario"].as_str().unwrap(),
            r["extra"]["documents"],
            r["extra"]["tombstones"],
            r["requests"],
            r["failures"],
            r["qps"].as_f64().unwrap(),
            r["p50_ms"].as_f64().unwrap(),
            r["p90_ms"].as_f64().unwrap(),
            r["p99_ms"].as_f64().unwrap(),
            r["max_ms"].as_f64().unwrap(),
            r["extra"]["ingest_docs_per_s"]
                .as_f64()
                .map_or("-".into(), |v| format!("{v:.0}")),
        );
    }
    println!();
    println!("| scenario | server p50 ms: encode | candidates | rerank | total |");
    println!("|---|---|---|---|---|");
    for r in &report {
        let p = |name: &str| {
            r["extra"][format!("{name}_p50_ms")]
                .as_f64()
                .unwrap_or(f64::NAN)
        };
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} |",
            r["scenario"].as_str().unwrap(),
            p("encode"),
            p("candidates"),
            p("rerank"),
            p("server_total"),
        );
    }
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/load-report.json");
    let mut f = std::fs::File::create(&out).unwrap();
    writeln!(f, "{}", serde_json::to_string_pretty(&report).unwrap()).unwrap();
    eprintln!("wrote {}", out.display());
}

fn call(url: &str, body: Option<Value>) -> (u16, Value) {
    let r = match body {
        Some(b) => ureq::post(url).send_json(b),
        None => ureq::get(url).call(),
    };
    match r {
        Ok(r) => (r.status(), r.into_json().unwrap_or(Value::Null)),
        Err(ureq::Error::Status(s, r)) => (s, r.into_json().unwrap_or(Value::Null)),
        Err(e) => panic!("{e}"),
    }
}
