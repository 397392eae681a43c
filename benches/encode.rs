//! Criterion bench for the encoder: realistic short questions (demo/faq.txt), batch 1 (a query,
//! on one thread as `encode_one` runs) and 32, at both precisions; and the phrase chunks an
//! explained search computes (the query and 10 hits: the first layers' states, then the
//! contextual chunker).
//! Needs the model (KINDRED_MODEL or the cached default; fetched on first use).
//! The peer comparison (torch, ONNX Runtime fp32/int8) is benches/encode_peers.py.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kindred::model;
use kindred::score::explain::ChunkSource;
use kindred::{Encoder, EncoderOptions, Precision};

fn encoder(batch_size: usize, precision: Precision) -> Encoder {
    let explicit = std::env::var_os("KINDRED_MODEL").map(PathBuf::from);
    let home = std::env::var_os("KINDRED_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(model::default_home);
    let dir = model::resolve(explicit.as_deref(), &home, true).expect("model resolves");
    Encoder::load(
        &dir,
        EncoderOptions {
            batch_size,
            precision,
            ..EncoderOptions::default()
        },
    )
    .expect("model loads")
}

fn bench_encode(c: &mut Criterion) {
    let faq: Vec<&str> = include_str!("../demo/faq.txt").lines().collect();
    let mut group = c.benchmark_group("encode");
    group.sample_size(10);

    for precision in [Precision::Int8, Precision::Fp32] {
        let one = encoder(1, precision);
        group.throughput(Throughput::Elements(1));
        group.bench_function(format!("{precision}_batch1_one_question"), |b| {
            b.iter(|| {
                one.encode_one(black_box("How do I reset my password?"))
                    .expect("encodes")
            })
        });

        let batched = encoder(32, precision);
        let texts = &faq[..32];
        group.throughput(Throughput::Elements(texts.len() as u64));
        group.bench_function(format!("{precision}_batch32_32_questions"), |b| {
            b.iter(|| batched.encode(black_box(texts)).expect("encodes"))
        });
    }
    group.finish();
}

fn bench_chunks(c: &mut Criterion) {
    let faq: Vec<&str> = include_str!("../demo/faq.txt").lines().collect();
    let texts = &faq[..11];
    let enc = encoder(32, Precision::Int8);
    let mut group = c.benchmark_group("chunks");
    group.sample_size(20);
    group.throughput(Throughput::Elements(texts.len() as u64));
    group.bench_function("int8_query_and_10_hits", |b| {
        b.iter(|| enc.chunks(black_box(texts)))
    });
    group.finish();
}

criterion_group!(benches, bench_encode, bench_chunks);
criterion_main!(benches);
