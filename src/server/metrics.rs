//! Prometheus metrics: requests and latency per route, search pipeline stage latency,
//! documents per collection (read from the store at scrape time), and faults survived (damaged
//! index files rebuilt, poisoned locks taken over: read from the library's counters).

use prometheus::{
    Encoder as _, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::db::Database;
use crate::search::Timings;

/// Latency buckets in seconds: 0.5 ms to 10 s.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.04, 0.06, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// The server's metrics.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    stages: HistogramVec,
    documents: IntGaugeVec,
    ingested: IntCounterVec,
    damaged_index_files: IntCounter,
    poisoned_locks: IntCounter,
    store_reopens: IntCounter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "kindred_http_requests_total",
                "HTTP requests by route and status",
            ),
            &["method", "route", "status"],
        )
        .expect("metric");
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "kindred_http_request_duration_seconds",
                "HTTP request latency by route",
            )
            .buckets(BUCKETS.to_vec()),
            &["method", "route"],
        )
        .expect("metric");
        let stages = HistogramVec::new(
            HistogramOpts::new(
                "kindred_search_stage_duration_seconds",
                "Search pipeline latency by stage (encode, candidates, rerank, total)",
            )
            .buckets(BUCKETS.to_vec()),
            &["stage"],
        )
        .expect("metric");
        let documents = IntGaugeVec::new(
            Opts::new("kindred_collection_documents", "Documents per collection"),
            &["collection"],
        )
        .expect("metric");
        let ingested = IntCounterVec::new(
            Opts::new(
                "kindred_documents_upserted_total",
                "Documents upserted per collection",
            ),
            &["collection"],
        )
        .expect("metric");
        let damaged_index_files = IntCounter::new(
            "kindred_damaged_index_files_total",
            "Index files found damaged and rebuilt from the store",
        )
        .expect("metric");
        let store_reopens = IntCounter::new(
            "kindred_store_reopens_total",
            "Times the store was reopened after an I/O error (a full disk) without a restart",
        )
        .expect("metric");
        let poisoned_locks = IntCounter::new(
            "kindred_poisoned_locks_recovered_total",
            "Locks a panicking thread left poisoned, taken over (each a bug: see the log)",
        )
        .expect("metric");
        for c in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(latency.clone()),
            Box::new(stages.clone()),
            Box::new(documents.clone()),
            Box::new(ingested.clone()),
            Box::new(damaged_index_files.clone()),
            Box::new(poisoned_locks.clone()),
            Box::new(store_reopens.clone()),
        ] {
            registry.register(c).expect("unique metric names");
        }
        Metrics {
            registry,
            requests,
            latency,
            stages,
            documents,
            ingested,
            damaged_index_files,
            poisoned_locks,
            store_reopens,
        }
    }

    /// Records one finished request.
    pub fn request(&self, method: &str, route: &str, status: u16, seconds: f64) {
        self.requests
            .with_label_values(&[method, route, &status.to_string()])
            .inc();
        self.latency
            .with_label_values(&[method, route])
            .observe(seconds);
    }

    /// Records a search's stage timings.
    pub fn search(&self, t: &Timings) {
        for (stage, ms) in [
            ("encode", t.encode_ms),
            ("candidates", t.candidates_ms),
            ("rerank", t.rerank_ms),
            ("total", t.total_ms),
        ] {
            self.stages.with_label_values(&[stage]).observe(ms / 1e3);
        }
    }

    /// Counts upserted documents.
    pub fn upserted(&self, collection: &str, n: usize) {
        self.ingested
            .with_label_values(&[collection])
            .inc_by(n as u64);
    }

    /// The exposition text, with document counts refreshed from the store.
    pub fn render(&self, db: &Database) -> String {
        self.documents.reset();
        if let Ok(collections) = db.collections() {
            for (name, _) in collections {
                if let Ok(n) = db.count(&name) {
                    self.documents.with_label_values(&[&name]).set(n as i64);
                }
            }
        }
        for (counter, now) in [
            (
                &self.damaged_index_files,
                crate::index::hnsw::refused_files(),
            ),
            (&self.poisoned_locks, crate::sync::recovered()),
            (&self.store_reopens, crate::store::reopens()),
        ] {
            counter.inc_by(now.saturating_sub(counter.get()));
        }
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding");
        String::from_utf8(out).expect("prometheus text is UTF-8")
    }
}
