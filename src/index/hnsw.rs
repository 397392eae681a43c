//! Approximate nearest neighbours with hnsw_rs: cosine over unit sentence vectors (`DistDot`,
//! distance 1 − cos) and L2 over intents [μ; σ] (`DistL2`, which is exactly W2; design.md §3).
//!
//! hnsw_rs has no deletion: deleted and replaced documents become tombstones, filtered out of
//! each query's results (they still route the graph search); [`VectorIndex::needs_compaction`]
//! tells the owner when to rebuild. Saved with `file_dump` plus a small JSON file recording the
//! store checkpoint (`seq`) the dump reflects and the tombstones.

use std::collections::HashSet;
use std::path::Path;
use std::sync::RwLock;

use hnsw_rs::api::AnnT;
use hnsw_rs::hnswio::HnswIo;
use hnsw_rs::prelude::{DistDot, DistL2, Hnsw};
use serde::{Deserialize, Serialize};

use crate::error::{io_err, InternalError, Result};
use crate::types::HnswParams;

/// Tombstones over live points beyond which a rebuild pays off.
pub const COMPACTION_RATIO: f64 = 0.2;
const MAX_LAYERS: usize = 16;

/// Which distance an index answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// 1 − dot on unit vectors (cosine distance).
    Cosine,
    /// Euclidean distance (W2 on [μ; σ]).
    L2,
}

enum Graph {
    Cosine(Hnsw<'static, f32, DistDot>),
    L2(Hnsw<'static, f32, DistL2>),
}

#[derive(Serialize, Deserialize)]
struct Meta {
    metric: Metric,
    seq: u64,
    params: HnswParams,
    dim: usize,
    tombstones: Vec<usize>,
    points: usize,
    /// Folder of this save, under the index directory.
    folder: String,
    /// Basename hnsw_rs dumped under.
    dump: String,
}

fn read_meta(path: &Path) -> Option<Meta> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// One HNSW graph with tombstones.
pub struct VectorIndex {
    graph: Graph,
    metric: Metric,
    params: HnswParams,
    dim: usize,
    tombstones: RwLock<HashSet<usize>>,
}

impl std::fmt::Debug for VectorIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VectorIndex")
            .field("metric", &self.metric)
            .field("points", &self.points())
            .finish()
    }
}

impl VectorIndex {
    /// An empty index sized for about `capacity` points.
    pub fn new(metric: Metric, dim: usize, params: HnswParams, capacity: usize) -> Self {
        let cap = capacity.max(1024);
        let graph = match metric {
            Metric::Cosine => Graph::Cosine(Hnsw::new(
                params.m,
                cap,
                MAX_LAYERS,
                params.ef_construction,
                DistDot {},
            )),
            Metric::L2 => Graph::L2(Hnsw::new(
                params.m,
                cap,
                MAX_LAYERS,
                params.ef_construction,
                DistL2 {},
            )),
        };
        VectorIndex {
            graph,
            metric,
            params,
            dim,
            tombstones: RwLock::new(HashSet::new()),
        }
    }

    /// Builds an index over `points` (id, vector) in parallel.
    pub fn build(
        metric: Metric,
        dim: usize,
        params: HnswParams,
        points: &[(usize, Vec<f32>)],
    ) -> Self {
        let index = Self::new(metric, dim, params, points.len());
        let refs: Vec<(&Vec<f32>, usize)> = points.iter().map(|(id, v)| (v, *id)).collect();
        match &index.graph {
            Graph::Cosine(h) => h.parallel_insert(&refs),
            Graph::L2(h) => h.parallel_insert(&refs),
        }
        index
    }

    /// The metric.
    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// Points in the graph, tombstoned ones included.
    pub fn points(&self) -> usize {
        match &self.graph {
            Graph::Cosine(h) => h.get_nb_point(),
            Graph::L2(h) => h.get_nb_point(),
        }
    }

    /// Tombstoned points.
    pub fn tombstones(&self) -> usize {
        self.tombstones.read().expect("lock").len()
    }

    /// True when tombstones exceed [`COMPACTION_RATIO`] of the live points.
    pub fn needs_compaction(&self) -> bool {
        let dead = self.tombstones();
        dead > 0 && dead as f64 > COMPACTION_RATIO * (self.points() - dead).max(1) as f64
    }

    /// Inserts many points, in parallel.
    pub fn insert_many(&self, points: &[(usize, &[f32])]) {
        let refs: Vec<(&[f32], usize)> = points.iter().map(|&(id, v)| (v, id)).collect();
        match &self.graph {
            Graph::Cosine(h) => h.parallel_insert_slice(&refs),
            Graph::L2(h) => h.parallel_insert_slice(&refs),
        }
    }

    /// Marks a point deleted.
    pub fn remove(&self, id: usize) {
        self.tombstones.write().expect("lock").insert(id);
    }

    /// The k nearest live points: (id, distance), nearest first.
    ///
    /// Tombstones are filtered here, after an unfiltered graph search asked for enough extra
    /// neighbours to cover the dead share (twice the expected count, plus 8; doubled until k
    /// live ones are found or the graph is exhausted). hnsw_rs's own filtered search never takes
    /// its early exit and walks much of the graph: with a few thousand replaced documents in a
    /// 58k collection it doubled the candidate stage of a search (BENCHMARKS.md).
    pub fn search(&self, q: &[f32], k: usize) -> Vec<(usize, f32)> {
        let points = self.points();
        if k == 0 || points == 0 {
            return Vec::new();
        }
        let dead = self.tombstones.read().expect("lock");
        let live = points.saturating_sub(dead.len()).max(1);
        let mut ask = k + (2 * k * dead.len()).div_ceil(live) + if dead.is_empty() { 0 } else { 8 };
        loop {
            let ask_now = ask.min(points);
            let ef = self.params.ef_search.max(ask_now);
            let found = match &self.graph {
                Graph::Cosine(h) => h.search(q, ask_now, ef),
                Graph::L2(h) => h.search(q, ask_now, ef),
            };
            let hits: Vec<(usize, f32)> = found
                .into_iter()
                .filter(|n| !dead.contains(&n.d_id))
                .take(k)
                .map(|n| (n.d_id, n.distance))
                .collect();
            if hits.len() == k || ask_now == points {
                return hits;
            }
            ask = ask_now * 2;
        }
    }

    /// Saves the graph, recording the store checkpoint `seq` it reflects. Each save dumps into
    /// its own folder `dir/basename-SEQ/`; the small `dir/basename.meta.json`, replaced
    /// atomically last, names the folder to load. A crash mid-save leaves the previous save in
    /// force; older folders are removed after the switch.
    pub fn save(&self, dir: &Path, basename: &str, seq: u64) -> Result<()> {
        let folder = format!("{basename}-{seq}");
        let meta_path = dir.join(format!("{basename}.meta.json"));
        if let Some(meta) = read_meta(&meta_path) {
            if meta.seq == seq && meta.folder == folder && meta.points == self.points() {
                return Ok(()); // already saved at this checkpoint
            }
        }
        let target = dir.join(&folder);
        if target.exists() {
            std::fs::remove_dir_all(&target)
                .map_err(io_err(format!("clearing {}", target.display())))?;
        }
        std::fs::create_dir_all(&target)
            .map_err(io_err(format!("creating {}", target.display())))?;
        let dumped = match &self.graph {
            Graph::Cosine(h) => h.file_dump(&target, basename),
            Graph::L2(h) => h.file_dump(&target, basename),
        }
        .map_err(|e| InternalError::Store(format!("saving index {basename}: {e}")))?;
        let meta = Meta {
            metric: self.metric,
            seq,
            params: self.params,
            dim: self.dim,
            tombstones: self
                .tombstones
                .read()
                .expect("lock")
                .iter()
                .copied()
                .collect(),
            points: self.points(),
            folder: folder.clone(),
            dump: dumped,
        };
        let tmp = dir.join(format!("{basename}.meta.json.tmp"));
        std::fs::write(&tmp, serde_json::to_vec(&meta).expect("json"))
            .map_err(io_err("writing index meta"))?;
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(io_err("syncing index meta"))?;
        std::fs::rename(&tmp, &meta_path).map_err(io_err("installing index meta"))?;
        // Remove superseded saves.
        let prefix = format!("{basename}-");
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with(&prefix) && name != folder {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        Ok(())
    }

    /// Loads a saved graph if it reflects store checkpoint `seq` with these parameters;
    /// `Ok(None)` when it is missing or stale (the caller rebuilds).
    pub fn load(
        dir: &Path,
        basename: &str,
        metric: Metric,
        dim: usize,
        params: HnswParams,
        seq: u64,
    ) -> Result<Option<Self>> {
        let Some(meta) = read_meta(&dir.join(format!("{basename}.meta.json"))) else {
            return Ok(None);
        };
        if meta.seq != seq || meta.metric != metric || meta.params != params || meta.dim != dim {
            return Ok(None);
        }
        // hnsw_rs ties a loaded graph's lifetime to its HnswIo; the loader is small and lives
        // as long as the process keeps the collection open, so it is leaked deliberately.
        let io: &'static mut HnswIo =
            Box::leak(Box::new(HnswIo::new(&dir.join(&meta.folder), &meta.dump)));
        let graph = match metric {
            Metric::Cosine => io.load_hnsw::<f32, DistDot>().map(Graph::Cosine),
            Metric::L2 => io.load_hnsw::<f32, DistL2>().map(Graph::L2),
        };
        let Ok(graph) = graph else {
            return Ok(None);
        };
        let index = VectorIndex {
            graph,
            metric,
            params,
            dim,
            tombstones: RwLock::new(meta.tombstones.into_iter().collect()),
        };
        Ok((index.points() == meta.points).then_some(index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::score::stats::SplitMix64;

    fn unit_points(n: usize, d: usize, seed: u64) -> Vec<Vec<f32>> {
        let mut rng = SplitMix64(seed);
        (0..n)
            .map(|_| {
                let mut v: Vec<f32> = (0..d).map(|_| rng.next_f64() as f32 - 0.5).collect();
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.iter_mut().for_each(|x| *x /= norm);
                v
            })
            .collect()
    }

    fn index_of(metric: Metric, points: &[Vec<f32>]) -> VectorIndex {
        let ix = VectorIndex::new(metric, points[0].len(), HnswParams::default(), points.len());
        let refs: Vec<(usize, &[f32])> = points
            .iter()
            .enumerate()
            .map(|(i, v)| (i, v.as_slice()))
            .collect();
        ix.insert_many(&refs);
        ix
    }

    #[test]
    fn search_skips_tombstones_and_still_returns_k_live_points() {
        let (n, k) = (2000, 10);
        let points = unit_points(n, 16, 3);
        let ix = index_of(Metric::Cosine, &points);
        let q = &points[0];
        // Every id, nearest to the query first (exact cosine distance).
        let by_distance: Vec<usize> = {
            let mut all: Vec<(usize, f32)> = points
                .iter()
                .enumerate()
                .map(|(i, v)| (i, 1.0 - v.iter().zip(q).map(|(a, b)| a * b).sum::<f32>()))
                .collect();
            all.sort_by(|a, b| a.1.total_cmp(&b.1));
            all.into_iter().map(|(i, _)| i).collect()
        };
        // Tombstone the query's 40 exact nearest neighbours (the worst case for a post-filter)
        // and every 7th point elsewhere.
        let mut dead: HashSet<usize> = by_distance[..40].iter().copied().collect();
        dead.extend((0..n).step_by(7));
        for &id in &dead {
            ix.remove(id);
        }
        let hits = ix.search(q, k);
        assert_eq!(hits.len(), k);
        assert!(hits.iter().all(|(id, _)| !dead.contains(id)), "{hits:?}");
        let found: HashSet<usize> = hits.iter().map(|h| h.0).collect();
        let truth = by_distance.iter().filter(|i| !dead.contains(i)).take(k);
        let recall = truth.filter(|i| found.contains(i)).count();
        assert!(recall >= 9, "recall {recall}/10 of the live nearest");
        assert!(hits.windows(2).all(|w| w[0].1 <= w[1].1), "nearest first");
    }

    #[test]
    fn search_with_every_point_dead_but_a_few_returns_those_few() {
        let n = 300;
        let points = unit_points(n, 8, 5);
        let ix = index_of(Metric::L2, &points);
        for id in 3..n {
            ix.remove(id);
        }
        let mut ids: Vec<usize> = ix
            .search(&points[100], 10)
            .into_iter()
            .map(|h| h.0)
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, vec![0, 1, 2]);
    }
}
