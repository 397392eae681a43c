//! `kindred eval retrieval`: duplicate-question retrieval on labelled pair files. Every distinct
//! question goes into a temporary collection; each duplicate pair's first question is a query
//! whose relevant documents are its duplicates (the query itself excluded from its results);
//! each first stage is measured alone and with RCMD rerank through the real search pipeline.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::LabelledPair;
use crate::db::NewDocument;
use crate::db::View;
use crate::error::Result;
use crate::ingest::source::qqp_id;
use crate::score::stats::{ranked_quality, RankedQuality};
use crate::search::{self, Depths, Mode, Rerank, SearchParams, Weighting};
use crate::{Encoded, Encoder};

/// Options.
#[derive(Debug, Clone)]
pub struct RetrievalOptions {
    /// Evaluate at most this many queries (the first ones, in file order); all if None.
    pub max_queries: Option<usize>,
    /// Fused candidates reranked.
    pub rerank_depth: usize,
    /// Per-stage candidate depths.
    pub depths: Depths,
    /// Worker threads for the queries.
    pub threads: usize,
    /// RCMD's token weights in the rerank.
    pub weights: Weighting,
}

/// One configuration's quality and latency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrievalRow {
    /// First stage(s).
    pub mode: Mode,
    /// Rerank.
    pub rerank: Rerank,
    /// Mean quality over the queries.
    pub quality: RankedQuality,
    /// Median search latency (encoded query; ms).
    pub p50_ms: f64,
    /// 99th percentile search latency (ms).
    pub p99_ms: f64,
}

/// The report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrievalReport {
    /// Documents in the collection.
    pub documents: usize,
    /// Queries evaluated.
    pub queries: usize,
    /// Seconds to encode and index the documents.
    pub index_seconds: f64,
    /// Median query encoding time (ms).
    pub encode_p50_ms: f64,
    /// One row per (mode, rerank).
    pub rows: Vec<RetrievalRow>,
}

/// Every distinct question of the pairs, first-seen order, as a document with its QQP id.
fn distinct_questions(pairs: &[LabelledPair]) -> Vec<NewDocument> {
    let mut seen = HashSet::new();
    pairs
        .iter()
        .flat_map(|p| [&p.a, &p.b])
        .filter(|q| seen.insert(q.as_str()))
        .map(|q| NewDocument {
            id: qqp_id(q),
            text: q.clone(),
            metadata: serde_json::Value::Null,
            context: Vec::new(),
        })
        .collect()
}

/// The queries (each duplicate pair's first question, first-seen order) and, per query, the
/// ids of its duplicates.
fn queries_and_relevant(pairs: &[LabelledPair]) -> (Vec<&str>, HashMap<&str, HashSet<String>>) {
    let mut relevant: HashMap<&str, HashSet<String>> = HashMap::new();
    let mut order: Vec<&str> = Vec::new();
    for p in pairs.iter().filter(|p| p.duplicate && p.a != p.b) {
        relevant
            .entry(p.a.as_str())
            .or_insert_with(|| {
                order.push(p.a.as_str());
                HashSet::new()
            })
            .insert(qqp_id(&p.b));
    }
    (order, relevant)
}

/// Runs the evaluation in a temporary directory. `progress(what, done, total)`.
pub fn eval_retrieval(
    encoder: &Encoder,
    pairs: &[LabelledPair],
    opts: &RetrievalOptions,
    progress: &(dyn Fn(&str, u64, u64) + Sync),
) -> Result<RetrievalReport> {
    let docs = distinct_questions(pairs);
    let (mut order, relevant) = queries_and_relevant(pairs);
    if let Some(m) = opts.max_queries {
        order.truncate(m);
    }

    let name = "eval";
    let start = Instant::now();
    let (_dir, db) =
        super::temporary_collection(encoder, name, &docs, (1024, "indexing questions"), progress)?;
    let view = db.view(name)?;
    let judge = search::Judge::Calibrated(view.calibrator()?);
    let index_seconds = start.elapsed().as_secs_f64();

    let mut encode_ms = Vec::with_capacity(order.len());
    let mut queries = Vec::with_capacity(order.len());
    for (i, q) in order.iter().enumerate() {
        let t = Instant::now();
        queries.push(encoder.encode_one(q)?);
        encode_ms.push(t.elapsed().as_secs_f64() * 1e3);
        if i % 256 == 0 {
            progress("encoding queries", i as u64, order.len() as u64);
        }
    }

    let configs: Vec<(Mode, Rerank)> = [Mode::Cosine, Mode::W2, Mode::Lexical, Mode::Hybrid]
        .into_iter()
        .flat_map(|m| [(m, Rerank::None), (m, Rerank::Rcmd)])
        .collect();
    let mut rows = Vec::new();
    for (c, &(mode, rerank)) in configs.iter().enumerate() {
        let params = SearchParams {
            k: 11,
            mode,
            rerank,
            rerank_depth: opts.rerank_depth,
            depths: opts.depths,
            weights: opts.weights,
            ..SearchParams::default()
        };
        let queried = Queried {
            view: &view,
            judge: &judge,
            encoder,
            order: &order,
            queries: &queries,
            relevant: &relevant,
        };
        let all = queried.run(&params, opts.threads.max(1))?;
        progress("searching", c as u64 + 1, configs.len() as u64);
        rows.push(RetrievalRow::of(mode, rerank, &all));
    }
    encode_ms.sort_by(f64::total_cmp);
    drop(view);
    drop(db);
    Ok(RetrievalReport {
        documents: docs.len(),
        queries: order.len(),
        index_seconds,
        encode_p50_ms: percentile(&encode_ms, 50.0),
        rows,
    })
}

/// The queries of one evaluation, over its collection.
struct Queried<'a> {
    view: &'a View<'a>,
    judge: &'a search::Judge<'a>,
    encoder: &'a Encoder,
    order: &'a [&'a str],
    queries: &'a [Encoded],
    relevant: &'a HashMap<&'a str, HashSet<String>>,
}

impl Queried<'_> {
    /// Every query searched with `params` on `threads` threads: its quality (its own id left
    /// out of the top 10) and its latency in ms, in no particular order.
    fn run(&self, params: &SearchParams, threads: usize) -> Result<Vec<(RankedQuality, f64)>> {
        let per: Vec<Result<Vec<(RankedQuality, f64)>>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| s.spawn(move || self.every(t, threads, params)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("query worker"))
                .collect()
        });
        let mut all = Vec::new();
        for p in per {
            all.extend(p?);
        }
        Ok(all)
    }

    /// Queries `t`, `t + step`, … searched one after another.
    fn every(
        &self,
        t: usize,
        step: usize,
        params: &SearchParams,
    ) -> Result<Vec<(RankedQuality, f64)>> {
        let mut out = Vec::new();
        for i in (t..self.order.len()).step_by(step) {
            let q = self.order[i];
            let t0 = Instant::now();
            let outcome = search::search_encoded(
                self.view,
                self.judge,
                (q, &self.queries[i]),
                params,
                self.encoder,
            )?;
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            let own = qqp_id(q);
            let ranked: Vec<&str> = outcome
                .hits
                .iter()
                .map(|h| h.id.as_str())
                .filter(|id| *id != own)
                .take(10)
                .collect();
            out.push((ranked_quality(&ranked, &self.relevant[q]), ms));
        }
        Ok(out)
    }
}

impl RetrievalRow {
    /// The row of one configuration: mean quality and latency percentiles over its queries.
    fn of(mode: Mode, rerank: Rerank, all: &[(RankedQuality, f64)]) -> RetrievalRow {
        let n = all.len().max(1) as f64;
        let mean = |f: fn(&RankedQuality) -> f64| all.iter().map(|(q, _)| f(q)).sum::<f64>() / n;
        let mut lat: Vec<f64> = all.iter().map(|(_, ms)| *ms).collect();
        lat.sort_by(f64::total_cmp);
        RetrievalRow {
            mode,
            rerank,
            quality: RankedQuality {
                recall_at_1: mean(|q| q.recall_at_1),
                recall_at_10: mean(|q| q.recall_at_10),
                mrr_at_10: mean(|q| q.mrr_at_10),
                ndcg_at_10: mean(|q| q.ndcg_at_10),
            },
            p50_ms: percentile(&lat, 50.0),
            p99_ms: percentile(&lat, 99.0),
        }
    }
}

/// The p-th percentile of sorted values (nearest rank); 0 when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i]
}
