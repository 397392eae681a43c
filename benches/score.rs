//! Criterion bench for the rerank fast path: one 16-token query against 100 candidates of 16
//! tokens (d = 384), single thread, scores only — f32 token vectors and the store's int8 form.
//! Target: under 1 ms per query on one core.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kindred::score::quant::I8Tokens;
use kindred::score::rerank::Reranker;
use kindred::score::{rcmd, Tokens, Weights};

const D: usize = 384;
const TOKENS: usize = 16;
const CANDIDATES: usize = 100;

/// Deterministic unit rows (xorshift), so runs compare.
fn unit_rows(seed: u32, n: usize) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    let mut v: Vec<f32> = (0..n * D)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as f32 / u32::MAX as f32 - 0.5
        })
        .collect();
    for row in v.chunks_mut(D) {
        let n = row.iter().map(|a| a * a).sum::<f32>().sqrt();
        row.iter_mut().for_each(|a| *a /= n);
    }
    v
}

fn bench_rerank(c: &mut Criterion) {
    let query = unit_rows(1, TOKENS);
    let cands: Vec<Vec<f32>> = (0..CANDIDATES as u32)
        .map(|s| unit_rows(s + 2, TOKENS))
        .collect();
    let views: Vec<Tokens<'_>> = cands.iter().map(|v| Tokens::new(v, D)).collect();
    let int8: Vec<I8Tokens> = views.iter().map(|&t| I8Tokens::encode(t)).collect();
    let q = Tokens::new(&query, D);

    let mut group = c.benchmark_group("rerank_100x16_d384");
    group.throughput(Throughput::Elements(CANDIDATES as u64));
    let mut r = Reranker::new();
    group.bench_function("f32", |b| {
        b.iter(|| views.iter().map(|&v| r.score(black_box(q), v)).sum::<f32>())
    });
    group.bench_function("int8", |b| {
        b.iter(|| {
            int8.iter()
                .map(|v| r.score_i8(black_box(q), v))
                .sum::<f32>()
        })
    });
    group.finish();

    c.bench_function("rcmd_with_plans_16x16_d384", |b| {
        b.iter(|| rcmd(black_box(q), views[0], Weights::Uniform))
    });
}

criterion_group!(benches, bench_rerank);
criterion_main!(benches);
