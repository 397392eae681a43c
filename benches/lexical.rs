//! Lexical first stage bench (custom harness; prints a markdown table): `LexicalIndex::search`
//! latency against index size, with its exhaustive ranking as the peer.
//!
//! Documents: the distinct QQP questions of `../shared/data` (qqp_bimpm and qqp_deep1994_split,
//! dev and test: about 73,000), less 1,000 held out as queries, then copies of them with the
//! copy number appended (" (3)") up to each size of `LEXICAL_SIZES` (default
//! 10000,100000,1000000). At each size `LEXICAL_QUERIES` (default 200) held-out questions are
//! searched one at a time at k 10 and k 100 (the default lexical depth of a search) with the
//! pruned search (MaxScore), and at k 100 with the peer, `search_exhaustive` (every posting of
//! the query's terms scored into an accumulator: kindred's search before MaxScore), whose
//! answers the pruned ones must equal (id for id, or a tie within 1e-4 of the score).
//!
//! Run: `cargo bench --bench lexical` (about 2 minutes on 2 cores; 1.5 GB of memory at 1M).

use std::time::Instant;

use kindred::index::LexicalIndex;

#[path = "support/synthetic.rs"]
mod synthetic;
use synthetic::questions;
#[path = "support/mod.rs"]
mod support;
use support::env_or;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Milliseconds of each call of `f` over the queries, sorted, and the answers.
fn timed<T>(queries: &[String], mut f: impl FnMut(&str) -> T) -> (Vec<f64>, Vec<T>) {
    let mut ms = Vec::with_capacity(queries.len());
    let mut out = Vec::with_capacity(queries.len());
    for q in queries {
        let t = Instant::now();
        out.push(f(q));
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    (ms, out)
}

/// Whether `got` is `want` up to the order of ties.
fn same(got: &[(u64, f32)], want: &[(u64, f32)]) -> bool {
    let close = |a: f32, b: f32| (a - b).abs() <= 1e-4 * a.abs().max(1.0);
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| g.0 == w.0 || close(g.1, w.1))
}

fn main() {
    let sizes: Vec<usize> = std::env::var("LEXICAL_SIZES")
        .unwrap_or_else(|_| "10000,100000,1000000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("LEXICAL_SIZES: numbers"))
        .collect();
    let mut seen = std::collections::HashSet::new();
    let mut texts: Vec<String> = [
        "qqp_bimpm/dev.tsv",
        "qqp_bimpm/test.tsv",
        "qqp_deep1994_split/dev.tsv",
        "qqp_deep1994_split/test.tsv",
    ]
    .iter()
    .flat_map(|f| questions(f))
    .filter(|q| seen.insert(q.clone()))
    .collect();
    let held: Vec<String> = texts.split_off(texts.len() - 1000);
    let n_queries = env_or("LEXICAL_QUERIES", 200).min(held.len());
    let queries: Vec<String> = held.into_iter().take(n_queries).collect();
    eprintln!(
        "{} distinct questions indexed (copied up to each size), {} queries",
        texts.len(),
        queries.len()
    );

    let index = LexicalIndex::new();
    let mut rows = Vec::new();
    let mut done = 0usize;
    for &size in &sizes {
        let t = Instant::now();
        while done < size {
            let (copy, i) = (done / texts.len(), done % texts.len());
            let text = match copy {
                0 => texts[i].clone(),
                c => format!("{} ({c})", texts[i]),
            };
            index.upsert(done as u64, &text);
            done += 1;
        }
        let fill = t.elapsed().as_secs_f64();
        let (k10, _) = timed(&queries, |q| index.search(q, 10));
        let (k100, pruned) = timed(&queries, |q| index.search(q, 100));
        let (full, exhaustive) = timed(&queries, |q| index.search_exhaustive(q, 100));
        let agree = pruned
            .iter()
            .zip(&exhaustive)
            .filter(|(p, e)| same(p, e))
            .count();
        let row = format!(
            "| {size} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.1}× | {agree}/{} | {:.1} |",
            percentile(&k10, 0.5),
            percentile(&k100, 0.5),
            percentile(&k100, 0.99),
            percentile(&full, 0.5),
            percentile(&full, 0.99),
            percentile(&full, 0.5) / percentile(&k100, 0.5),
            queries.len(),
            fill,
        );
        eprintln!("{row}");
        rows.push(row);
    }
    println!("\n| documents | k 10 p50 ms | k 100 p50 ms | k 100 p99 ms | exhaustive k 100 p50 ms | exhaustive k 100 p99 ms | speed-up (p50) | top 100 equal | fill s |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        println!("{r}");
    }
}
