//! Storage + index bench (custom harness; prints a markdown table):
//! insert throughput through `Database::upsert_encoded` (vectors precomputed: store write +
//! both HNSW graphs + lexical index) and single-thread search QPS with recall@10 against brute
//! force, at 36,737 real questions (qqp_bimpm dev + test, encoded with the real model) and at
//! 200k documents (the real ones plus synthetic perturbations of their vectors: noise of
//! relative size 0.1 added to each sentence vector, then re-normalised; μ and σ perturbed alike).
//!
//! Run: `cargo bench --bench index` (≈ 10 minutes on 2 cores; encodes 36.7k questions first).

use std::time::Instant;

use std::path::PathBuf;

use kindred::db::{Database, NewDocument};
use kindred::model;
use kindred::store::{CollectionSettings, Durability};
use kindred::{Encoded, Encoder, EncoderOptions};

#[path = "support/synthetic.rs"]
mod synthetic;
use synthetic::{perturb, questions, Noise};

const BATCH: usize = 1000;
const QUERIES: usize = 1000;
const RECALL_QUERIES: usize = 200;

fn run(
    label: &str,
    docs: &[(NewDocument, Encoded)],
    encoder: &Encoder,
    durability: Durability,
) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::open(dir.path(), durability).expect("opens");
    db.create_collection(
        "bench",
        &CollectionSettings::for_model(encoder.identity().clone()),
    )
    .expect("creates");
    let t = Instant::now();
    for chunk in docs.chunks(BATCH) {
        db.upsert_encoded("bench", encoder.identity(), chunk.to_vec())
            .expect("upserts");
    }
    db.embedded_store()
        .expect("embedded store")
        .flush()
        .expect("flush");
    let insert_rate = docs.len() as f64 / t.elapsed().as_secs_f64();

    let mut noise = Noise(7);
    let stride = docs.len() / QUERIES;
    let queries: Vec<Encoded> = (0..QUERIES)
        .map(|i| perturb(&docs[i * stride].1, &mut noise, 0.3))
        .collect();
    // Each search resolves its hits to stored documents, as a search does.
    let view = db.view("bench").expect("collection");
    let resolve = |hits: Vec<(u64, f32)>| -> Vec<kindred::store::StoredDoc> {
        hits.into_iter()
            .filter_map(|(i, _)| view.get_internal(i).expect("reads"))
            .collect()
    };
    let t = Instant::now();
    for q in &queries {
        std::hint::black_box(resolve(view.cosine(&q.sentence, 10, None).expect("search")));
    }
    let qps = QUERIES as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    for q in &queries {
        std::hint::black_box(resolve(view.w2(&q.intent, 10, None).expect("search")));
    }
    let qps_w2 = QUERIES as f64 / t.elapsed().as_secs_f64();

    let mut recall = 0.0;
    for q in queries.iter().take(RECALL_QUERIES) {
        let mut exact: Vec<(f32, &str)> = docs
            .iter()
            .map(|(d, e)| {
                (
                    e.sentence
                        .iter()
                        .zip(&q.sentence)
                        .map(|(a, b)| a * b)
                        .sum::<f32>(),
                    d.id.as_str(),
                )
            })
            .collect();
        exact.sort_by(|a, b| b.0.total_cmp(&a.0));
        let got: Vec<String> = resolve(view.cosine(&q.sentence, 10, None).expect("search"))
            .into_iter()
            .map(|d| d.id)
            .collect();
        recall += exact
            .iter()
            .take(10)
            .filter(|(_, id)| got.iter().any(|g| g == id))
            .count() as f64
            / 10.0;
    }
    recall /= RECALL_QUERIES as f64;
    format!(
        "| {label} | {} | {durability:?} | {insert_rate:.0} | {qps:.0} | {qps_w2:.0} | {recall:.4} |",
        docs.len()
    )
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--no-run") {
        return;
    }
    let explicit = std::env::var_os("KINDRED_MODEL").map(PathBuf::from);
    let home = std::env::var_os("KINDRED_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(model::default_home);
    let dir = model::resolve(explicit.as_deref(), &home, true).expect("model");
    let encoder = Encoder::load(&dir, EncoderOptions::default()).expect("model loads");

    let mut texts = questions("qqp_bimpm/dev.tsv");
    texts.extend(questions("qqp_bimpm/test.tsv"));
    let mut seen = std::collections::HashSet::new();
    texts.retain(|q| seen.insert(q.clone()));
    let t = Instant::now();
    let encoded = encoder.encode(&texts).expect("encodes");
    eprintln!(
        "encoded {} questions in {:.0}s",
        texts.len(),
        t.elapsed().as_secs_f64()
    );
    let real: Vec<(NewDocument, Encoded)> = texts
        .iter()
        .zip(encoded)
        .enumerate()
        .map(|(i, (t, e))| {
            (
                NewDocument {
                    id: format!("q{i}"),
                    text: t.clone(),
                    metadata: serde_json::json!({}),
                    context: Vec::new(),
                },
                e,
            )
        })
        .collect();
    let mut big = real.clone();
    let mut noise = Noise(42);
    let mut copy = 1;
    while big.len() < 200_000 {
        for (d, e) in real.iter().take(200_000 - big.len()) {
            let doc = NewDocument {
                id: format!("{}-s{copy}", d.id),
                text: format!("{} ({copy})", d.text),
                metadata: d.metadata.clone(),
                context: Vec::new(),
            };
            big.push((doc, perturb(e, &mut noise, 0.1)));
        }
        copy += 1;
    }
    println!("| data | documents | durability | insert docs/s | cosine search QPS | W2 search QPS | cosine recall@10 |");
    println!("|---|---:|---|---:|---:|---:|---:|");
    println!("{}", run("QQP real", &real, &encoder, Durability::Flush));
    println!("{}", run("QQP real", &real, &encoder, Durability::Relaxed));
    println!(
        "{}",
        run("real + synthetic", &big, &encoder, Durability::Relaxed)
    );
}
