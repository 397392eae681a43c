//! kindred's HNSW graph (`src/index/graph.rs`) against hnswlib and FAISS (`IndexHNSWFlat`, and
//! `IndexHNSWSQ` with 8-bit scalar-quantised vectors), on the same real question vectors, in
//! one run (custom harness; prints markdown tables):
//!
//! - data: up to 51,000 distinct QQP questions (qqp_bimpm + qqp_deep1994 dev and test), encoded
//!   once with the default model and cached in `target/ann-data/` (raw little-endian f32); the
//!   first 50,000 are indexed, the last 1,000 are the queries. Cosine graph over the 384-d
//!   sentence vectors; L2 graph over the 768-d intents [μ; σ] (W2).
//! - build: vectors/s with 2 threads, M 16, ef_construction 200, for every library;
//! - search: one thread, k 10, queries/s (best of 3 passes) and recall@10 against brute force
//!   at ef 16-128 (kindred and hnswlib asked one query per call, FAISS all queries in one
//!   batched call); then each library's QPS at recall@10 0.95 / 0.97 / 0.99, interpolated.
//!
//! The peers run from `benches/ann_peers.py` in the venv `scripts/ann-peers.sh` makes (PyPI
//! hnswlib 0.8.0 and faiss-cpu 1.15.1); without it only kindred's rows print.
//!
//! Run: `scripts/ann-peers.sh && cargo bench --bench ann` (≈ 10 minutes on 2 cores, a third of
//! it encoding on the first run).
//!
//! `ANN_PLAN=1 cargo bench --bench ann` measures instead where the search plan
//! (`src/index/hnsw.rs`) should switch between an exact scan and the graph, on the same
//! vectors: a whole collection of n points (exact scan of all against the graph at the
//! default ef_search 128), and a filter admitting m of the 50,000 (exact scan of the m against
//! the graph walk admitting only them), per query on one thread, k 10.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use kindred::index::graph::{Graph, GraphVectors, Metric, Params};
use kindred::model;
use kindred::score::wasserstein::embed;
use kindred::{Encoder, EncoderOptions};

#[path = "support/mod.rs"]
mod support;

const N: usize = 50_000;
const QUERIES: usize = 1_000;
const K: usize = 10;
const EFS: [usize; 4] = [16, 32, 64, 128];
const THREADS: usize = 2;
/// Search passes per ef, best kept (both libraries): one pass was noisy on a shared machine.
const ROUNDS: usize = 3;
/// Recall levels at which the two libraries' QPS are compared (interpolated between efs).
const AT_RECALL: [f64; 3] = [0.95, 0.97, 0.99];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn distinct_questions() -> Vec<String> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for rel in [
        "qqp_bimpm/dev.tsv",
        "qqp_bimpm/test.tsv",
        "qqp_deep1994_split/dev.tsv",
        "qqp_deep1994_split/test.tsv",
    ] {
        let path = root().join("../shared/data").join(rel);
        let raw = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for line in String::from_utf8_lossy(&raw).lines() {
            for q in line.split('\t').skip(1).take(2).map(str::trim) {
                if !q.is_empty() && seen.insert(q.to_string()) {
                    out.push(q.to_string());
                }
            }
        }
    }
    out
}

fn write_f32(path: &Path, rows: &[Vec<f32>]) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("creates"));
    for r in rows {
        for x in r {
            f.write_all(&x.to_le_bytes()).expect("writes");
        }
    }
}

fn read_f32(path: &Path, dim: usize) -> Option<Vec<Vec<f32>>> {
    let bytes = std::fs::read(path).ok()?;
    let floats: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Some(floats.chunks_exact(dim).map(<[f32]>::to_vec).collect())
}

/// (sentence vectors, intents) of N + QUERIES questions, encoded once and cached.
fn data(dir: &Path) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let (cos, l2) = (dir.join("cosine.f32"), dir.join("l2.f32"));
    if let (Some(c), Some(l)) = (read_f32(&cos, 384), read_f32(&l2, 768)) {
        if c.len() == l.len() && c.len() > QUERIES {
            return (c, l);
        }
    }
    let explicit = std::env::var_os("KINDRED_MODEL").map(PathBuf::from);
    let home = std::env::var_os("KINDRED_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(model::default_home);
    let model_dir = model::resolve(explicit.as_deref(), &home, true).expect("model");
    let encoder = Encoder::load(&model_dir, EncoderOptions::default()).expect("model loads");
    let mut texts = distinct_questions();
    texts.truncate(N + QUERIES);
    let t = Instant::now();
    let encoded = encoder.encode(&texts).expect("encodes");
    eprintln!(
        "encoded {} questions in {:.0}s",
        texts.len(),
        t.elapsed().as_secs_f64()
    );
    let c: Vec<Vec<f32>> = encoded.iter().map(|e| e.sentence.clone()).collect();
    let l: Vec<Vec<f32>> = encoded.iter().map(|e| embed(&e.intent)).collect();
    std::fs::create_dir_all(dir).expect("data dir");
    write_f32(&cos, &c);
    write_f32(&l2, &l);
    (c, l)
}

fn distance(metric: Metric, a: &[f32], b: &[f32]) -> f32 {
    match metric {
        Metric::Cosine => 1.0 - a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>(),
        Metric::L2 => a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f32>(),
    }
}

fn truth(metric: Metric, base: &[Vec<f32>], queries: &[Vec<f32>]) -> Vec<Vec<u64>> {
    use rayon::prelude::*;
    queries
        .par_iter()
        .map(|q| {
            let mut d: Vec<(f32, u64)> = base
                .iter()
                .zip(0..)
                .map(|(v, i)| (distance(metric, q, v), i))
                .collect();
            d.select_nth_unstable_by(K, |a, b| a.0.total_cmp(&b.0));
            d.truncate(K);
            d.into_iter().map(|(_, i)| i).collect()
        })
        .collect()
}

/// One row per (library, metric, ef): build vectors/s, QPS, recall@10.
struct Row {
    library: String,
    metric: String,
    build: f64,
    ef: usize,
    qps: f64,
    recall: f64,
}

fn kindred_rows(
    (metric, vectors): (Metric, GraphVectors),
    name: &str,
    base: &[Vec<f32>],
    queries: &[Vec<f32>],
) -> Vec<Row> {
    let t = Instant::now();
    let graph = build(metric, vectors, base);
    let rate = base.len() as f64 / t.elapsed().as_secs_f64();
    let truth = truth(metric, base, queries);
    EFS.iter()
        .map(|&ef| {
            let mut found = Vec::new();
            let mut qps: f64 = 0.0;
            for _ in 0..ROUNDS {
                let t = Instant::now();
                found = queries
                    .iter()
                    .map(|q| graph.search(q, K, ef).into_iter().map(|h| h.0).collect())
                    .collect::<Vec<Vec<u64>>>();
                qps = qps.max(queries.len() as f64 / t.elapsed().as_secs_f64());
            }
            Row {
                library: match vectors {
                    GraphVectors::F32 => "kindred".into(),
                    GraphVectors::Sq8 => "kindred SQ8".into(),
                },
                metric: name.into(),
                build: rate,
                ef,
                qps,
                recall: recall(&found, &truth),
            }
        })
        .collect()
}

fn recall(found: &[Vec<u64>], truth: &[Vec<u64>]) -> f64 {
    let hits: usize = found
        .iter()
        .zip(truth)
        .map(|(f, t)| f.iter().filter(|id| t.contains(id)).count())
        .sum();
    hits as f64 / (truth.len() * K) as f64
}

/// The peers' rows (hnswlib, FAISS), from `benches/ann_peers.py` (one JSON object per line).
fn peer_rows(dir: &Path) -> Vec<Row> {
    let python = root().join("target/ann-venv/bin/python");
    if !python.exists() {
        eprintln!(
            "no {} (run scripts/ann-peers.sh): kindred only",
            python.display()
        );
        return Vec::new();
    }
    let out = Command::new(&python)
        .arg(root().join("benches/ann_peers.py"))
        .arg(dir)
        .args([
            N.to_string(),
            QUERIES.to_string(),
            THREADS.to_string(),
            ROUNDS.to_string(),
        ])
        .output()
        .expect("runs the peers' bench");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| Row {
            library: v["library"].as_str().unwrap_or("?").into(),
            metric: v["metric"].as_str().unwrap_or("?").into(),
            build: v["build"].as_f64().unwrap_or(0.0),
            ef: v["ef"].as_u64().unwrap_or(0) as usize,
            qps: v["qps"].as_f64().unwrap_or(0.0),
            recall: v["recall"].as_f64().unwrap_or(0.0),
        })
        .collect()
}

fn build(metric: Metric, vectors: GraphVectors, base: &[Vec<f32>]) -> Graph {
    let graph = Graph::new(
        metric,
        base[0].len(),
        Params {
            m: 16,
            ef_construction: 200,
            vectors,
        },
    );
    let refs: Vec<(u64, &[f32])> = base
        .iter()
        .zip(0..)
        .map(|(v, i)| (i, v.as_slice()))
        .collect();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(THREADS)
        .build()
        .expect("pool");
    pool.install(|| graph.insert_many(&refs)).expect("builds");
    graph
}

/// Mean microseconds per query of `f`.
fn per_query(queries: &[Vec<f32>], f: impl Fn(&[f32]) -> usize) -> f64 {
    let t = Instant::now();
    let mut found = 0;
    for q in queries {
        found += f(q);
    }
    assert!(found > 0);
    t.elapsed().as_secs_f64() * 1e6 / queries.len() as f64
}

/// The plan's two crossovers (see the module doc), as markdown tables.
fn plan(name: &str, metric: Metric, base: &[Vec<f32>], queries: &[Vec<f32>]) {
    let queries = &queries[..200];
    const EF: usize = 128;
    println!("\n{name}: a whole collection of n points, µs per query\n");
    println!("| n | exact scan | graph (ef {EF}) | graph recall@10 |");
    println!("|---:|---:|---:|---:|");
    for n in [500, 1_000, 2_000, 3_000, 4_000, 8_000, 16_000] {
        let g = build(metric, GraphVectors::F32, &base[..n]);
        let exact = per_query(queries, |q| g.exact_all(q, K).len());
        let graph = per_query(queries, |q| g.search(q, K, EF).len());
        let truth = truth(metric, &base[..n], queries);
        let found: Vec<Vec<u64>> = queries
            .iter()
            .map(|q| g.search(q, K, EF).into_iter().map(|h| h.0).collect())
            .collect();
        println!(
            "| {n} | {exact:.0} | {graph:.0} | {:.4} |",
            recall(&found, &truth)
        );
    }
    let g = build(metric, GraphVectors::F32, base);
    println!(
        "\n{name}: a filter admitting m of {} points, µs per query\n",
        base.len()
    );
    println!("| m | exact scan of the m | filtered graph walk (ef {EF}) | walk recall@10 |");
    println!("|---:|---:|---:|---:|");
    for m in [500, 1_000, 2_500, 5_000, 7_500, 10_000, 20_000, 40_000] {
        let step = (base.len() / m) as u64;
        let ids: Vec<u64> = (0..base.len() as u64)
            .step_by(step as usize)
            .take(m)
            .collect();
        let last = *ids.last().expect("ids");
        let admit = |id: u64| id.is_multiple_of(step) && id <= last;
        let exact = per_query(queries, |q| g.exact(q, K, &ids).len());
        let walk = per_query(queries, |q| g.search_filtered(q, K, EF, &admit).len());
        let (mut same, mut total) = (0, 0);
        for q in queries {
            let t: Vec<u64> = g.exact(q, K, &ids).into_iter().map(|h| h.0).collect();
            let f = g.search_filtered(q, K, EF, &admit);
            same += f.iter().filter(|h| t.contains(&h.0)).count();
            total += t.len();
        }
        println!(
            "| {m} | {exact:.0} | {walk:.0} | {:.4} |",
            same as f64 / total as f64
        );
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--no-run") {
        return;
    }
    let dir = root().join("target/ann-data");
    let (cos, l2) = data(&dir);
    let n = N.min(cos.len() - QUERIES);
    let split = |v: &[Vec<f32>]| (v[..n].to_vec(), v[v.len() - QUERIES..].to_vec());
    let (cos_base, cos_q) = split(&cos);
    let (l2_base, l2_q) = split(&l2);
    drop((cos, l2));
    if std::env::var_os("ANN_PLAN").is_some() {
        println!(
            "CPU: {}; graphs M 16, ef_construction 200",
            support::cpu_model()
        );
        plan("cosine (384-d)", Metric::Cosine, &cos_base, &cos_q);
        plan("L2 (768-d [μ;σ])", Metric::L2, &l2_base, &l2_q);
        return;
    }
    let mut rows = Vec::new();
    for vectors in [GraphVectors::F32, GraphVectors::Sq8] {
        rows.extend(kindred_rows(
            (Metric::Cosine, vectors),
            "cosine (384-d)",
            &cos_base,
            &cos_q,
        ));
        rows.extend(kindred_rows(
            (Metric::L2, vectors),
            "L2 (768-d [μ;σ])",
            &l2_base,
            &l2_q,
        ));
    }
    rows.extend(peer_rows(&dir));
    let cpu = support::cpu_model();
    println!("{n} vectors, {QUERIES} queries, k {K}, M 16, ef_construction 200, build on {THREADS} threads, search on 1; CPU: {cpu}\n");
    println!("| metric | library | build vectors/s | ef | search QPS | recall@10 |");
    println!("|---|---|---:|---:|---:|---:|");
    rows.sort_by(|a, b| (&a.metric, a.ef, &a.library).cmp(&(&b.metric, b.ef, &b.library)));
    for r in &rows {
        println!(
            "| {} | {} | {:.0} | {} | {:.0} | {:.4} |",
            r.metric, r.library, r.build, r.ef, r.qps, r.recall
        );
    }
    println!("\nSearch QPS at equal recall@10 (linear between the efs above):\n");
    println!("| metric | recall@10 | kindred QPS | kindred SQ8 QPS | hnswlib QPS | FAISS HNSWFlat QPS | FAISS HNSWSQ8 QPS | kindred / FAISS HNSWFlat | kindred SQ8 / FAISS HNSWFlat | kindred SQ8 / FAISS HNSWSQ8 |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut metrics: Vec<&String> = rows.iter().map(|r| &r.metric).collect();
    metrics.dedup();
    for m in metrics {
        for at in AT_RECALL {
            let qps = |lib: &str| {
                let curve: Vec<&Row> = rows
                    .iter()
                    .filter(|r| &r.metric == m && r.library == lib)
                    .collect();
                qps_at(&curve, at)
            };
            let (k, k8, h) = (qps("kindred"), qps("kindred SQ8"), qps("hnswlib 0.8"));
            let (flat, sq) = (qps("FAISS 1.15 HNSWFlat"), qps("FAISS 1.15 HNSWSQ8"));
            let show = |q: Option<f64>| q.map_or("-".to_string(), |q| format!("{q:.0}"));
            let ratio = |ours: Option<f64>, peer: Option<f64>| {
                ours.zip(peer)
                    .map_or("-".to_string(), |(k, p)| format!("{:.2}", k / p))
            };
            println!(
                "| {m} | {at} | {} | {} | {} | {} | {} | {} | {} | {} |",
                show(k),
                show(k8),
                show(h),
                show(flat),
                show(sq),
                ratio(k, flat),
                ratio(k8, flat),
                ratio(k8, sq)
            );
        }
    }
}

/// QPS at `recall`, linear between the two rows (ordered by ef) that bracket it.
fn qps_at(curve: &[&Row], recall: f64) -> Option<f64> {
    if let Some(r) = curve.iter().find(|r| (r.recall - recall).abs() < 1e-12) {
        return Some(r.qps);
    }
    curve.windows(2).find_map(|w| {
        let (a, b) = (w[0], w[1]);
        (a.recall < recall && recall <= b.recall).then(|| {
            let t = (recall - a.recall) / (b.recall - a.recall);
            a.qps + t * (b.qps - a.qps)
        })
    })
}
