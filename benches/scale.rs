//! Scale bench (custom harness; prints a markdown table): ingest docs/s and search latency
//! against collection size, on the embedded backend and on the Milvus backend (a Milvus 2.3.5
//! standalone server from PyPI, started here on loopback as the tests do).
//!
//! Documents: `SCALE_REAL` (default 5,000) QQP questions encoded with the real model, then
//! perturbed copies of their vectors (benches/support/synthetic.rs, noise 0.1) up to each size
//! of `SCALE_SIZES` (default 10000,100000). Each backend is filled in one pass; at each size the
//! documents added since the last one are timed (`Database::upsert_encoded`, batches of 1,000,
//! durable: what `kindred ingest` does after encoding), then `SCALE_QUERIES` (default 200)
//! searches run through the full pipeline (hybrid first stages, load, RCMD, P(duplicate),
//! k 10) with queries encoded beforehand (perturbed real vectors, noise 0.3), one at a time;
//! besides the whole search's p50 and p99, the p50 of its two parts as the pipeline times them
//! (candidates: first stages, fusion, loading records; rerank: RCMD, stage scores, P(duplicate)).
//!
//! Each row also gives the memory the collection's graph vectors take (embedded backend) and
//! the process's peak resident memory so far (`VmHWM`: the model, the real documents and
//! every backend filled before included). `SCALE_GRAPH_VECTORS=sq8` makes the collection with
//! int8 graph vectors (`hnsw.vectors`; the embedded backend only, Milvus refuses it).
//!
//! `SCALE_BACKENDS` (default `embedded,milvus`) picks the backends; `SCALE_DIR` where the
//! data goes (default the system's temporary directory); `KINDRED_MILVUS_MMAP_DIR` makes the
//! Milvus server memory-map its loaded fields from that directory (scripts/milvus_server.py),
//! which the 1M point needs on a 24 GB machine. `SCALE_KEEP=DIR` fills the embedded backend
//! in `DIR` (collection `scale`, graphs saved at the end) and keeps it, for measuring what
//! comes after (e.g. opening it: BENCHMARKS.md, "Opening after a crash").
//!
//! Run: `cargo bench --bench scale` (about 15 minutes on 2 cores for the defaults).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use kindred::db::{Database, Location, MilvusSettings, NewDocument};
use kindred::engine::Engine;
use kindred::model;
use kindred::search::SearchParams;
use kindred::store::{CollectionSettings, Durability};
use kindred::{Encoded, Encoder, EncoderOptions};

#[path = "support/synthetic.rs"]
mod synthetic;
use synthetic::{perturb, questions, Noise};
#[path = "support/milvus.rs"]
mod milvus;
#[path = "support/mod.rs"]
mod support;
use support::env_or;

const BATCH: usize = 1000;

/// The i-th synthetic document: real document `i % real.len()`, perturbed unless it is the
/// real one itself.
fn document(real: &[(String, Encoded)], i: usize, noise: &mut Noise) -> (NewDocument, Encoded) {
    let (text, e) = &real[i % real.len()];
    let copy = i / real.len();
    let doc = NewDocument {
        id: format!("d{i}"),
        text: if copy == 0 {
            text.clone()
        } else {
            format!("{text} ({copy})")
        },
        metadata: serde_json::json!({ "copy": copy }),
        context: Vec::new(),
    };
    let e = if copy == 0 {
        e.clone()
    } else {
        perturb(e, noise, 0.1)
    };
    (doc, e)
}

/// `SCALE_GRAPH_VECTORS` (default f32).
fn graph_vectors() -> kindred::types::GraphVectors {
    std::env::var("SCALE_GRAPH_VECTORS")
        .unwrap_or_else(|_| "f32".into())
        .parse()
        .expect("SCALE_GRAPH_VECTORS: f32 or sq8")
}

/// This process's peak resident memory so far, GiB (0 where /proc does not say).
fn peak_rss_gib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    kb / (1 << 20) as f64
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Fills one backend size by size and measures; one table row per size.
fn run(
    label: &str,
    db: Database,
    encoder: &Arc<Encoder>,
    real: &[(String, Encoded)],
    queries: &[(String, Encoded)],
    sizes: &[usize],
) -> Vec<String> {
    let mut settings = CollectionSettings::for_model(encoder.identity().clone());
    if label == "embedded" {
        settings.hnsw.vectors = graph_vectors();
    }
    db.create_collection("scale", &settings).expect("creates");
    let engine = Engine::with_encoder(Arc::new(db), encoder.clone());
    let mut noise = Noise(7);
    let mut rows = Vec::new();
    let mut done = 0;
    for &size in sizes {
        let (t, before) = (Instant::now(), done);
        while done < size {
            let n = BATCH.min(size - done);
            let batch: Vec<(NewDocument, Encoded)> = (done..done + n)
                .map(|i| document(real, i, &mut noise))
                .collect();
            engine
                .db()
                .upsert_encoded("scale", encoder.identity(), batch)
                .expect("upserts");
            done += n;
        }
        let rate = (size - before) as f64 / t.elapsed().as_secs_f64();
        let params = SearchParams {
            k: 10,
            ..SearchParams::default()
        };
        let c = engine.collection("scale").expect("collection");
        // One warm-up search (the Milvus backend builds this node's BM25 index on first use).
        c.search_encoded(&queries[0].0, &queries[0].1, &params)
            .expect("searches");
        let (mut ms, mut candidates, mut rerank) = (Vec::new(), Vec::new(), Vec::new());
        for (text, q) in queries {
            let t = Instant::now();
            let out = c.search_encoded(text, q, &params).expect("searches");
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            candidates.push(out.timings.candidates_ms);
            rerank.push(out.timings.rerank_ms);
        }
        for v in [&mut ms, &mut candidates, &mut rerank] {
            v.sort_by(f64::total_cmp);
        }
        let graph = engine
            .db()
            .info("scale")
            .expect("info")
            .index
            .graph_vector_bytes
            .map_or("—".to_string(), |b| {
                format!("{:.0}", b as f64 / (1 << 20) as f64)
            });
        let vectors = settings.hnsw.vectors.name();
        let row = format!(
            "| {label} | {vectors} | {size} | {rate:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {graph} | {:.2} |",
            percentile(&ms, 0.5),
            percentile(&ms, 0.99),
            percentile(&candidates, 0.5),
            percentile(&rerank, 0.5),
            peak_rss_gib()
        );
        eprintln!("{row}");
        rows.push(row);
    }
    rows
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--no-run") {
        return;
    }
    let sizes: Vec<usize> = std::env::var("SCALE_SIZES")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("SCALE_SIZES: numbers"))
        .collect();
    let explicit = std::env::var_os("KINDRED_MODEL").map(PathBuf::from);
    let home = std::env::var_os("KINDRED_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(model::default_home);
    let dir = model::resolve(explicit.as_deref(), &home, true).expect("model");
    let encoder = Arc::new(Encoder::load(&dir, EncoderOptions::default()).expect("model loads"));

    let mut texts = questions("qqp_bimpm/dev.tsv");
    let mut seen = std::collections::HashSet::new();
    texts.retain(|q| seen.insert(q.clone()));
    texts.truncate(env_or("SCALE_REAL", 5000));
    let encoded = encoder.encode(&texts).expect("encodes");
    let real: Vec<(String, Encoded)> = texts.into_iter().zip(encoded).collect();
    let mut noise = Noise(42);
    let stride = (real.len() / env_or("SCALE_QUERIES", 200)).max(1);
    let queries: Vec<(String, Encoded)> = real
        .iter()
        .step_by(stride)
        .map(|(t, e)| (t.clone(), perturb(e, &mut noise, 0.3)))
        .collect();

    let backends = std::env::var("SCALE_BACKENDS").unwrap_or_else(|_| "embedded,milvus".into());
    let tmp = match std::env::var_os("SCALE_DIR") {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .expect("tempdir");
    let mut rows = Vec::new();
    if backends.split(',').any(|b| b == "embedded") {
        let keep = std::env::var_os("SCALE_KEEP").map(PathBuf::from);
        let dir = keep.clone().unwrap_or_else(|| tmp.path().join("embedded"));
        let embedded = Database::open(&dir, Durability::Flush).expect("opens");
        rows.extend(run("embedded", embedded, &encoder, &real, &queries, &sizes));
        if keep.is_none() {
            std::fs::remove_dir_all(&dir).expect("removes");
        }
    }
    if backends.split(',').any(|b| b == "milvus") {
        let server = milvus::Milvus::start(&tmp.path().join("milvus"));
        let remote = Database::open_backend(
            &tmp.path().join("node"),
            Durability::Flush,
            &Location::Milvus(server.url()),
            &MilvusSettings::default(),
        )
        .expect("connects");
        let mmap = if std::env::var_os("KINDRED_MILVUS_MMAP_DIR").is_some() {
            ", mmap"
        } else {
            ""
        };
        rows.extend(run(
            &format!("milvus 2.3.5 (standalone, same machine{mmap})"),
            remote,
            &encoder,
            &real,
            &queries,
            &sizes,
        ));
    }
    println!("CPU: {}", support::cpu_model());
    println!("| backend | graph vectors | documents | ingest docs/s (encoded) | search p50 ms | search p99 ms | candidates p50 ms | rerank p50 ms | graph vectors MiB | peak RSS GiB |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        println!("{r}");
    }
}
