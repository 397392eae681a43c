//! Soak test of `kindred serve` (custom harness; loopback only; not run in CI, which only builds
//! the benches).
//!
//! 1. Starts the server on a fresh temporary data folder, creates collection `soak` and preloads
//!    SOAK_DOCS (default 2,000) distinct QQP questions (`../shared/data/qqp_bimpm/dev.tsv`)
//!    through the API (NDJSON stream).
//! 2. For SOAK_SECONDS (default 1800) runs closed-loop clients concurrently, each a thread with
//!    its own keep-alive connection and a 30 s client timeout per request: 2 × search (k = 10),
//!    duplicate checks with explanations (k = 3), pair explanations, a writer (JSON batches of
//!    20 new or replaced documents, then deletes of ids it wrote, keeping ≈ 400 of its own live)
//!    and, every ≈ 30 s on a fresh connection, a JSONL upload of 200 lines (the same 200 ids,
//!    replaced each time) whose job it polls at `GET /v1/jobs/{id}` until done.
//! 3. Every 10 s samples the server's resident memory (VmRSS) and the request counts.
//! 4. Prints a markdown table per operation (requests, errors, p50, p99), the RSS over time and
//!    the CPU model, and writes `target/soak-report.json`.
//!
//! Fails (panics, after the report) when any request failed (a non-2xx answer, a transport
//! error or a timeout; a failed upload job) or when memory grows once warm: the mean RSS of the
//! run's last sixth exceeds the mean of its second sixth (the plateau after warm-up) by more
//! than max(10 %, 64 MiB). (Measured against the sample taken right after the preload, the
//! bound would measure warm-up: a 30-minute run went 316 → 482 MiB in its first 10 minutes,
//! then stayed flat.)
//!
//! Run: `cargo bench --bench soak` (SOAK_SECONDS=1800 and SOAK_DOCS=2000 by default; e.g.
//! `SOAK_SECONDS=60 SOAK_DOCS=1000 cargo bench --bench soak` for a quick check).

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kindred::eval::retrieval::percentile;
use serde_json::{json, Value};

#[path = "support/mod.rs"]
mod support;
use support::{env_or, Client, Server};

/// Distinct questions and the (q1, q2) pairs of the QQP dev file.
fn qqp() -> (Vec<String>, Vec<(String, String)>) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/qqp_bimpm/dev.tsv");
    let raw = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "the soak bench needs the QQP dev file {} (label, q1, q2, id; tab-separated): {e}",
            path.display()
        )
    });
    let mut seen = HashSet::new();
    let (mut questions, mut pairs) = (Vec::new(), Vec::new());
    for line in String::from_utf8_lossy(&raw).lines() {
        let cols: Vec<&str> = line.split('\t').map(str::trim).collect();
        if cols.len() < 3 {
            continue;
        }
        let ok = |q: &str| !q.is_empty() && q.chars().count() <= 2000;
        for q in &cols[1..3] {
            if ok(q) && seen.insert(q.to_string()) {
                questions.push(q.to_string());
            }
        }
        if ok(cols[1]) && ok(cols[2]) {
            pairs.push((cols[1].to_string(), cols[2].to_string()));
        }
    }
    (questions, pairs)
}

#[derive(Default)]
struct Op {
    latencies_ms: Vec<f64>,
    errors: usize,
    /// The first few failures, for the report.
    samples: Vec<String>,
}

type Stats = Arc<Mutex<BTreeMap<&'static str, Op>>>;

fn record(stats: &Stats, kind: &'static str, t: Instant, ok: Result<(), String>) {
    let mut s = stats.lock().unwrap();
    let op = s.entry(kind).or_default();
    op.latencies_ms.push(t.elapsed().as_secs_f64() * 1e3);
    if let Err(e) = ok {
        op.errors += 1;
        if op.samples.len() < 5 {
            op.samples.push(e);
        }
    }
}

/// Sends and checks for a 2xx; returns the parsed body.
fn checked(
    client: &mut Client,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Value, String> {
    match client.send(method, path, content_type, body) {
        Ok((s, b)) if (200..300).contains(&s) => {
            Ok(serde_json::from_slice(&b).unwrap_or(Value::Null))
        }
        Ok((s, b)) => Err(format!(
            "{method} {path}: {s} {}",
            String::from_utf8_lossy(&b[..b.len().min(300)])
        )),
        Err(e) => Err(format!("{method} {path}: {e}")),
    }
}

fn post_json(client: &mut Client, path: &str, body: &Value) -> Result<Value, String> {
    let body = serde_json::to_vec(body).expect("json");
    checked(client, "POST", path, Some("application/json"), &body)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` would pass nothing useful: only run
    // when asked for as a bench.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let docs = env_or("SOAK_DOCS", 2_000);
    let seconds = env_or("SOAK_SECONDS", 1800) as u64;
    let home = std::env::var_os("KINDRED_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(kindred::model::default_home);
    let explicit = std::env::var_os("KINDRED_MODEL").map(PathBuf::from);
    let model = kindred::model::resolve(explicit.as_deref(), &home, true)
        .expect("model")
        .path;
    let (questions, pairs) = qqp();
    assert!(
        questions.len() > docs + 1_000,
        "only {} distinct questions for SOAK_DOCS = {docs}",
        questions.len()
    );
    let (stored, rest) = questions.split_at(docs);
    let rest: Arc<Vec<String>> = Arc::new(rest.to_vec());
    let pairs = Arc::new(pairs);

    let data = tempfile::Builder::new()
        .prefix("kindred-soak-")
        .tempdir()
        .expect("temp dir");
    let server = Server::start(data.path(), &model);
    let pid = server.child.id();
    let mut setup = Client::connect(&server.base);
    post_json(&mut setup, "/v1/collections", &json!({ "name": "soak" })).expect("create soak");
    let body: String = stored
        .iter()
        .enumerate()
        .map(|(i, q)| format!("{}\n", json!({ "id": format!("q{i}"), "text": q })))
        .collect();
    let t = Instant::now();
    let r = ureq::post(&server.url("/v1/collections/soak/documents"))
        .set("Content-Type", "application/x-ndjson")
        .send_bytes(body.as_bytes())
        .expect("preload");
    eprintln!(
        "preload: {} in {:.0} s",
        r.into_string().unwrap(),
        t.elapsed().as_secs_f64()
    );

    let stats: Stats = Arc::default();
    let start = Instant::now();
    let end = start + Duration::from_secs(seconds);
    let mut threads = Vec::new();

    // Searches and duplicate checks: questions that are not stored.
    for (kind, path, k, offset) in [
        ("search", "/v1/collections/soak/search", 10, 0usize),
        ("search", "/v1/collections/soak/search", 10, 5_000),
        ("duplicates", "/v1/collections/soak/duplicates", 3, 2_500),
    ] {
        let (base, stats, rest) = (server.base.clone(), stats.clone(), rest.clone());
        threads.push(std::thread::spawn(move || {
            let mut c = Client::connect(&base);
            let mut i = offset;
            while Instant::now() < end {
                let q = &rest[i % rest.len()];
                i += 1;
                let t = Instant::now();
                let r = post_json(&mut c, path, &json!({ "text": q, "k": k })).map(|_| ());
                record(&stats, kind, t, r);
            }
        }));
    }
    {
        let (base, stats, pairs) = (server.base.clone(), stats.clone(), pairs.clone());
        threads.push(std::thread::spawn(move || {
            let mut c = Client::connect(&base);
            let mut i = 0;
            while Instant::now() < end {
                let (a, b) = &pairs[i % pairs.len()];
                i += 1;
                let t = Instant::now();
                let r = post_json(&mut c, "/v1/explain", &json!({ "a": a, "b": b })).map(|_| ());
                record(&stats, "explain", t, r);
            }
        }));
    }
    // Writes (10 new + 10 replaced per batch) and deletes of ids this loop wrote.
    {
        let (base, stats, rest) = (server.base.clone(), stats.clone(), rest.clone());
        threads.push(std::thread::spawn(move || {
            let mut c = Client::connect(&base);
            let mut live: VecDeque<String> = VecDeque::new();
            let (mut next_id, mut text) = (0usize, 0usize);
            while Instant::now() < end {
                let mut ids: Vec<String> = live.iter().rev().take(10).cloned().collect();
                while ids.len() < 20 {
                    ids.push(format!("w{next_id}"));
                    next_id += 1;
                }
                let batch: Vec<Value> = ids
                    .iter()
                    .map(|id| {
                        text += 1;
                        json!({ "id": id, "text": rest[(text * 7919) % rest.len()] })
                    })
                    .collect();
                let t = Instant::now();
                let r = post_json(&mut c, "/v1/collections/soak/documents", &json!(batch));
                let ok = r.is_ok();
                record(&stats, "write", t, r.map(|_| ()));
                if ok {
                    let fresh: HashSet<&String> = live.iter().collect();
                    let new: Vec<String> = ids.into_iter().filter(|i| !fresh.contains(i)).collect();
                    live.extend(new);
                }
                for _ in 0..10 {
                    if live.len() <= 400 || Instant::now() >= end {
                        break;
                    }
                    let id = live.pop_front().unwrap();
                    let t = Instant::now();
                    let path = format!("/v1/collections/soak/documents/{id}");
                    let r = checked(&mut c, "DELETE", &path, None, b"").map(|_| ());
                    record(&stats, "delete", t, r);
                }
            }
        }));
    }
    // Uploads every ~30 s, each polled until its job is done.
    {
        let (base, stats, rest) = (server.base.clone(), stats.clone(), rest.clone());
        threads.push(std::thread::spawn(move || {
            let mut n = 0usize;
            while Instant::now() < end {
                let slot = start + Duration::from_secs(30 * n as u64);
                if slot > Instant::now() {
                    std::thread::sleep(slot - Instant::now());
                }
                if Instant::now() >= end {
                    break;
                }
                let body: String = (0..200)
                    .map(|i| {
                        let q = &rest[(n * 200 + i + 7_000) % rest.len()];
                        format!("{}\n", json!({ "id": format!("u{i}"), "text": q }))
                    })
                    .collect();
                n += 1;
                // A fresh connection: the server closes keep-alive connections idle longer
                // than limits.header_timeout, and this loop idles between uploads.
                let mut c = Client::connect(&base);
                let t = Instant::now();
                let r = checked(
                    &mut c,
                    "POST",
                    "/v1/collections/soak/ingest?format=jsonl&batch=64",
                    Some("application/octet-stream"),
                    body.as_bytes(),
                );
                record(
                    &stats,
                    "upload",
                    t,
                    r.as_ref().map(|_| ()).map_err(Clone::clone),
                );
                let job = match r {
                    Ok(v) => v["id"].as_u64(),
                    Err(_) => continue,
                };
                let Some(job) = job else {
                    record(&stats, "upload", t, Err("no job id".into()));
                    continue;
                };
                let outcome = loop {
                    std::thread::sleep(Duration::from_millis(250));
                    let tp = Instant::now();
                    let r = checked(&mut c, "GET", &format!("/v1/jobs/{job}"), None, b"");
                    record(
                        &stats,
                        "job poll",
                        tp,
                        r.as_ref().map(|_| ()).map_err(Clone::clone),
                    );
                    match r {
                        Ok(v) if v["state"] == "running" => {}
                        Ok(v) if v["state"] == "done" && v["rejected"] == 0 => break Ok(()),
                        Ok(v) => break Err(format!("job {job}: {v}")),
                        Err(e) if t.elapsed() > Duration::from_secs(600) => break Err(e),
                        Err(_) => {}
                    }
                };
                record(&stats, "upload (to done)", t, outcome);
            }
        }));
    }

    // Samples every 10 s: RSS and request counts.
    let mut samples: Vec<Value> = Vec::new();
    let sample = |samples: &mut Vec<Value>| {
        let counts: BTreeMap<&str, usize> = stats
            .lock()
            .unwrap()
            .iter()
            .map(|(k, op)| (*k, op.latencies_ms.len()))
            .collect();
        let s = json!({
            "seconds": start.elapsed().as_secs_f64().round(),
            "rss_mib": rss_kib(pid) as f64 / 1024.0,
            "requests": counts,
        });
        eprintln!("{s}");
        samples.push(s);
    };
    sample(&mut samples);
    let mut tick = 1u64;
    loop {
        let next = start + Duration::from_secs(10 * tick);
        if next > end {
            break;
        }
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        sample(&mut samples);
        tick += 1;
    }
    for t in threads {
        t.join().expect("client thread");
    }
    sample(&mut samples);
    let runtime = start.elapsed().as_secs_f64();
    server.stop();

    let cpu = support::cpu_model();
    let mut ops = Vec::new();
    let mut errors = 0;
    println!("| operation | requests | errors | p50 ms | p99 ms |");
    println!("|---|---|---|---|---|");
    for (kind, op) in stats.lock().unwrap().iter_mut() {
        op.latencies_ms.sort_by(f64::total_cmp);
        let l = &op.latencies_ms;
        let (p50, p99) = (percentile(l, 50.0), percentile(l, 99.0));
        println!(
            "| {kind} | {} | {} | {p50:.1} | {p99:.1} |",
            l.len(),
            op.errors
        );
        errors += op.errors;
        ops.push(json!({
            "operation": kind, "requests": l.len(), "errors": op.errors,
            "p50_ms": p50, "p99_ms": p99, "error_samples": op.samples,
        }));
    }
    let rss: Vec<f64> = samples
        .iter()
        .map(|s| s["rss_mib"].as_f64().unwrap())
        .collect();
    let (first, last) = (rss[0], *rss.last().unwrap());
    let max = rss.iter().copied().fold(0.0, f64::max);
    let (warm, end) = warm_and_end(&rss[1..]).unwrap_or((first, last));
    let bound = warm + (warm * 0.10).max(64.0);
    println!();
    println!(
        "| RSS MiB: after preload | warm (2nd sixth) | end (last sixth) | max | bound on end |"
    );
    println!("|---|---|---|---|---|");
    println!("| {first:.0} | {warm:.0} | {end:.0} | {max:.0} | {bound:.0} |");
    println!();
    println!("{docs} preloaded documents; {runtime:.0} s; CPU: {cpu}");
    let report = json!({
        "documents": docs, "seconds": runtime, "cpu": cpu, "operations": ops,
        "rss_mib": { "first": first, "warm": warm, "end": end, "max": max, "last": last, "bound": bound },
        "samples": samples,
    });
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/soak-report.json");
    let mut f = std::fs::File::create(&out).unwrap();
    writeln!(f, "{}", serde_json::to_string_pretty(&report).unwrap()).unwrap();
    eprintln!("wrote {}", out.display());
    for op in &ops {
        for e in op["error_samples"].as_array().unwrap() {
            eprintln!("{}: {e}", op["operation"]);
        }
    }
    assert_eq!(errors, 0, "{errors} requests failed");
    assert!(
        end <= bound,
        "RSS grew once warm: {warm:.0} MiB (second sixth) to {end:.0} MiB (last sixth; bound \
         {bound:.0} MiB)"
    );
}

/// The mean of the second sixth and of the last sixth of the samples taken under load, or
/// None for fewer than six.
fn warm_and_end(rss: &[f64]) -> Option<(f64, f64)> {
    let sixth = rss.len() / 6;
    if sixth == 0 {
        return None;
    }
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
    Some((
        mean(&rss[sixth..2 * sixth]),
        mean(&rss[rss.len() - sixth..]),
    ))
}
