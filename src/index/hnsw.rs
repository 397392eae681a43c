//! A collection's vector index: cosine over unit sentence vectors (distance 1 − cos) or L2 over
//! intents [μ; σ] (exactly W2; design.md §3), on kindred's own HNSW graph ([`super::graph`]).
//!
//! This layer owns the search *plan* and the files. A search restricted to a set of documents
//! (a metadata filter's) scores each of them exactly when there are at most
//! [`EXACT_SCAN_MAX`], and otherwise walks the graph admitting only them, widening the beam
//! until k are found; a collection of at most [`SMALL_EXACT_MAX`] live points is always searched
//! exactly. Deleted and replaced documents are tombstones the graph still routes through;
//! [`VectorIndex::needs_compaction`] tells the owner when a rebuild pays off.
//!
//! Saved as `dir/BASENAME-SEQ.graph` (the graph's own checksummed format) plus a small
//! `dir/BASENAME.meta.json`, replaced atomically last, recording the store checkpoint (`seq`)
//! the graph reflects ([`super::files`]). A missing, stale or damaged file is reported (and counted:
//! [`refused_files`]) and the index rebuilt from the store, and the next checkpoint overwrites
//! it. `indexes/STORE` names the store the files were saved from ([`claim_folder`]), so a store
//! swapped or emptied under them is refused rather than taken for theirs.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::files;
pub use super::graph::Metric;
use super::graph::{Graph, GraphError, Params};
use crate::error::{io_err, InternalError, Result};
use crate::types::HnswParams;

/// Tombstones over live points beyond which a rebuild pays off.
pub const COMPACTION_RATIO: f64 = 0.2;

/// Most admitted documents a restricted search scores one by one instead of searching the
/// graph. Measured (BENCHMARKS.md, "Filtered search"; 50,000 real question vectors): the scan
/// costs as much as the filtered graph walk at about 9,000 admitted (cosine, 384-d) and 7,500
/// (W2, 768-d); at 20,000 it was 7× slower. Below the crossover the scan is also exact.
pub const EXACT_SCAN_MAX: usize = 8_000;

/// Most live points a collection has for every search to be exact. Measured (BENCHMARKS.md,
/// "Filtered search"): an exact scan of the whole collection is as fast as the graph at ef 128
/// up to about 3,000 points (cosine) and 2,000–3,000 (W2).
pub const SMALL_EXACT_MAX: usize = 2_000;

pub(crate) use super::files::note_refused_file;
pub use super::files::refused_files;

#[derive(Serialize, Deserialize)]
struct Meta {
    metric: Metric,
    seq: u64,
    params: HnswParams,
    dim: usize,
    points: usize,
    /// The graph file, under the index directory.
    file: String,
}

/// The file in the index folder naming the store its index files were saved from.
const OWNER_FILE: &str = "STORE";

/// Checks that the index files under `index_dir` were saved from the store `store_id` (see
/// `Store::id`) and records it there when no file names one yet. Another id beside saved
/// collection folders means the store was emptied, replaced or damaged under its indexes:
/// refused, with `refuse(theirs)` building the error, rather than opened as a store that
/// silently lost its documents.
pub fn claim_folder(
    index_dir: &Path,
    store_id: &str,
    refuse: impl FnOnce(&str) -> crate::Error,
) -> Result<()> {
    let path = index_dir.join(OWNER_FILE);
    let recorded = std::fs::read_to_string(&path).ok();
    match recorded.as_deref().map(str::trim) {
        Some(theirs) if theirs == store_id => return Ok(()),
        Some(theirs) => {
            let saved_folders = std::fs::read_dir(index_dir)
                .into_iter()
                .flatten()
                .flatten()
                .any(|e| e.path().is_dir());
            if saved_folders {
                return Err(refuse(theirs));
            }
        }
        None => {}
    }
    std::fs::create_dir_all(index_dir)
        .map_err(io_err(format!("creating {}", index_dir.display())))?;
    let tmp = index_dir.join(format!("{OWNER_FILE}.tmp"));
    std::fs::write(&tmp, store_id)
        .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
        .map_err(io_err(format!("writing {}", tmp.display())))?;
    std::fs::rename(&tmp, &path).map_err(io_err(format!("installing {}", path.display())))?;
    files::sync_dir(index_dir)
}

/// One HNSW graph and its search plan.
pub struct VectorIndex {
    graph: Graph,
    params: HnswParams,
}

impl std::fmt::Debug for VectorIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VectorIndex")
            .field("metric", &self.metric())
            .field("points", &self.points())
            .finish()
    }
}

fn graph_params(p: HnswParams) -> Params {
    Params {
        m: p.m,
        ef_construction: p.ef_construction,
        vectors: p.vectors,
    }
}

fn refused(e: GraphError) -> crate::Error {
    InternalError::Store(format!("vector index: {e}")).into()
}

impl VectorIndex {
    /// An empty index.
    pub fn new(metric: Metric, dim: usize, params: HnswParams) -> Self {
        VectorIndex {
            graph: Graph::new(metric, dim, graph_params(params)),
            params,
        }
    }

    /// An index over `points` (internal id, vector), built in parallel.
    pub fn build(
        metric: Metric,
        dim: usize,
        params: HnswParams,
        points: &[(u64, Vec<f32>)],
    ) -> Result<Self> {
        let index = Self::new(metric, dim, params);
        let refs: Vec<(u64, &[f32])> = points.iter().map(|(id, v)| (*id, v.as_slice())).collect();
        index.insert_many(&refs)?;
        Ok(index)
    }

    /// The metric.
    pub fn metric(&self) -> Metric {
        self.graph.metric()
    }

    /// Points in the graph, tombstoned ones included.
    pub fn points(&self) -> usize {
        self.graph.len()
    }

    /// Bytes of memory the points' vectors take (tombstoned ones included).
    pub fn vector_bytes(&self) -> u64 {
        (self.graph.len() * self.graph.vector_bytes()) as u64
    }

    /// Tombstoned points.
    pub fn tombstones(&self) -> usize {
        self.graph.deleted()
    }

    /// True when tombstones exceed [`COMPACTION_RATIO`] of the live points.
    pub fn needs_compaction(&self) -> bool {
        let dead = self.tombstones();
        dead > 0 && dead as f64 > COMPACTION_RATIO * self.graph.live().max(1) as f64
    }

    /// Inserts many points, in parallel (all or, on a bad vector, none).
    pub fn insert_many(&self, points: &[(u64, &[f32])]) -> Result<()> {
        self.graph.insert_many(points).map_err(refused)
    }

    /// Marks a point deleted.
    pub fn remove(&self, id: u64) {
        self.graph.remove(id);
    }

    /// The k nearest live points, (id, distance), nearest first: among `among` (ascending
    /// ids) only, when given.
    pub fn search(&self, q: &[f32], k: usize, among: Option<&[u64]>) -> Vec<(u64, f32)> {
        let ef = self.params.ef_search.max(k);
        match among {
            Some(ids) if ids.len() <= EXACT_SCAN_MAX => self.graph.exact(q, k, ids),
            Some(ids) => self
                .graph
                .search_filtered(q, k, ef, &|id| ids.binary_search(&id).is_ok()),
            None if self.graph.live() <= SMALL_EXACT_MAX => self.graph.exact_all(q, k),
            None => self.graph.search(q, k, ef),
        }
    }

    /// The graph alone, searched approximately (for measuring it against the exact paths).
    pub fn search_graph(&self, q: &[f32], k: usize) -> Vec<(u64, f32)> {
        self.graph.search(q, k, self.params.ef_search.max(k))
    }

    /// A copy holding only the live points (a compaction), built while this one serves.
    pub fn compacted(&self) -> Self {
        VectorIndex {
            graph: self.graph.compacted(),
            params: self.params,
        }
    }

    /// Live ids.
    pub fn ids(&self) -> Vec<u64> {
        self.graph.ids()
    }

    /// Whether point `id` is live and holds exactly vector `v`; None when `id` was never a
    /// point of this graph (a removed point is `Some(false)`).
    pub fn holds(&self, id: u64, v: &[f32]) -> Option<bool> {
        self.graph.holds(id, v)
    }

    /// None when `id` was never a point of this graph; else whether it is live.
    pub fn status(&self, id: u64) -> Option<bool> {
        self.graph.status(id)
    }

    /// A live point's vector.
    pub fn vector(&self, id: u64) -> Option<Vec<f32>> {
        self.graph.vector(id)
    }

    /// Saves the graph, recording the store checkpoint `seq` it reflects (how: [`files`]).
    /// A crash mid-save leaves the previous save in force.
    pub fn save(&self, dir: &Path, basename: &str, seq: u64) -> Result<()> {
        let meta = |file| Meta {
            metric: self.metric(),
            seq,
            params: self.params,
            dim: self.graph.dim(),
            points: self.points(),
            file,
        };
        files::save(
            dir,
            (basename, "graph"),
            seq,
            |w| self.graph.write_to(w),
            meta,
        )
    }

    /// Loads a saved graph with these parameters saved at a store checkpoint no later than
    /// `upto`, with the checkpoint it reflects (the caller catches it up with the writes made
    /// after it); `None` when it is missing, later than `upto`, made with other parameters or
    /// damaged (the caller rebuilds; a damaged file is logged).
    pub fn load(
        dir: &Path,
        basename: &str,
        metric: Metric,
        dim: usize,
        params: HnswParams,
        upto: u64,
    ) -> Option<(Self, u64)> {
        let meta: Meta = files::read_meta(dir, basename)?;
        if meta.seq > upto || meta.metric != metric || meta.params != params || meta.dim != dim {
            return None;
        }
        let path = files::saved_file(dir, basename, &meta.file)?;
        // The reader refuses every damaged file without panicking (unit-tested); a panic all
        // the same is caught here as a last guard and means "rebuild", never a dead process.
        let read = std::panic::catch_unwind(|| {
            let mut f = std::fs::File::open(&path)?;
            let len = f.metadata()?.len();
            Graph::read_sized(&mut f, len)
        })
        .unwrap_or_else(|_| Err(GraphError::Corrupt("the reader panicked".into())));
        let graph = match read {
            Ok(g) => g,
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e,
                    "index file unreadable; rebuilding it from the store");
                note_refused_file();
                return None;
            }
        };
        let sound = graph.metric() == metric
            && graph.dim() == dim
            && graph.params() == graph_params(params)
            && graph.len() == meta.points;
        if !sound {
            tracing::warn!(file = %path.display(),
                "index file disagrees with its meta; rebuilding it from the store");
            note_refused_file();
            return None;
        }
        Some((VectorIndex { graph, params }, meta.seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::score::stats::SplitMix64;

    fn unit_points(n: usize, d: usize, seed: u64) -> Vec<(u64, Vec<f32>)> {
        let mut rng = SplitMix64(seed);
        (0..n as u64)
            .map(|i| {
                let mut v: Vec<f32> = (0..d).map(|_| rng.next_f64() as f32 - 0.5).collect();
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.iter_mut().for_each(|x| *x /= norm);
                (i, v)
            })
            .collect()
    }

    fn exact(
        points: &[(u64, Vec<f32>)],
        q: &[f32],
        k: usize,
        keep: impl Fn(u64) -> bool,
    ) -> Vec<u64> {
        let mut all: Vec<(u64, f32)> = points
            .iter()
            .filter(|(id, _)| keep(*id))
            .map(|(id, v)| (*id, 1.0 - v.iter().zip(q).map(|(a, b)| a * b).sum::<f32>()))
            .collect();
        all.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        all.into_iter().take(k).map(|(id, _)| id).collect()
    }

    #[test]
    fn a_restricted_search_plans_exact_or_graph_and_finds_the_k_best_admitted() {
        let points = unit_points(30_000, 16, 11);
        let ix = VectorIndex::build(Metric::Cosine, 16, HnswParams::default(), &points).unwrap();
        let q = &points[5].1;
        // Selective: 300 admitted ids, scanned exactly.
        let few: Vec<u64> = (0..30_000).step_by(100).collect();
        let got: Vec<u64> = ix
            .search(q, 10, Some(&few))
            .into_iter()
            .map(|h| h.0)
            .collect();
        assert_eq!(got, exact(&points, q, 10, |id| id % 100 == 0));
        // Broad: 25,000 admitted, searched in the graph.
        let many: Vec<u64> = (0..30_000).filter(|i| i % 6 != 0).collect();
        assert!(many.len() > EXACT_SCAN_MAX);
        let got: Vec<u64> = ix
            .search(q, 10, Some(&many))
            .into_iter()
            .map(|h| h.0)
            .collect();
        assert_eq!(got.len(), 10);
        assert!(got.iter().all(|id| id % 6 != 0), "{got:?}");
        let truth = exact(&points, q, 10, |id| id % 6 != 0);
        let recall = truth.iter().filter(|id| got.contains(id)).count();
        assert!(recall >= 9, "recall {recall}/10");
    }

    #[test]
    fn saves_reload_and_a_damaged_file_means_rebuild_not_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let points = unit_points(500, 8, 3);
        let p = HnswParams::default();
        let ix = VectorIndex::build(Metric::L2, 8, p, &points).unwrap();
        ix.remove(7);
        ix.save(dir.path(), "w2", 42).unwrap();
        let (back, saved) = VectorIndex::load(dir.path(), "w2", Metric::L2, 8, p, 42).unwrap();
        assert_eq!((back.tombstones(), saved), (1, 42));
        assert_eq!(
            back.search(&points[9].1, 5, None),
            ix.search(&points[9].1, 5, None)
        );
        // A later store position: loaded, with the checkpoint it is behind (the caller
        // catches up); an earlier one or another dimension: refused.
        let (_, saved) = VectorIndex::load(dir.path(), "w2", Metric::L2, 8, p, 43).unwrap();
        assert_eq!(saved, 42);
        assert!(VectorIndex::load(dir.path(), "w2", Metric::L2, 8, p, 41).is_none());
        assert!(VectorIndex::load(dir.path(), "w2", Metric::L2, 9, p, 42).is_none());
        // A flipped byte in the graph file: refused, so the caller rebuilds.
        let file = dir.path().join("w2-42.graph");
        let mut bytes = std::fs::read(&file).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x40;
        std::fs::write(&file, &bytes).unwrap();
        assert!(VectorIndex::load(dir.path(), "w2", Metric::L2, 8, p, 42).is_none());
        // Saving again heals it (even at the same checkpoint); a later save drops older files.
        ix.save(dir.path(), "w2", 42).unwrap();
        assert!(VectorIndex::load(dir.path(), "w2", Metric::L2, 8, p, 42).is_some());
        ix.save(dir.path(), "w2", 44).unwrap();
        assert!(VectorIndex::load(dir.path(), "w2", Metric::L2, 8, p, 44).is_some());
        assert!(!file.exists());
    }

    /// A garbled meta file, or one naming a file outside its save, is damage: refused (the
    /// caller rebuilds), logged and counted (before: rebuilt silently, and a meta file could
    /// send the load to any file on the machine).
    #[test]
    fn a_garbled_or_escaping_meta_file_is_counted_as_damage() {
        let dir = tempfile::tempdir().unwrap();
        let points = unit_points(50, 8, 5);
        let p = HnswParams::default();
        let ix = VectorIndex::build(Metric::L2, 8, p, &points).unwrap();
        ix.save(dir.path(), "w2", 3).unwrap();
        let meta = dir.path().join("w2.meta.json");
        let good = std::fs::read_to_string(&meta).unwrap();
        let load = || VectorIndex::load(dir.path(), "w2", Metric::L2, 8, p, 3);
        assert!(load().is_some());
        let before = refused_files();
        std::fs::write(&meta, b"{\"seq\": \"x\"").unwrap();
        assert!(load().is_none());
        assert!(refused_files() > before, "a garbled meta file is counted");
        for escaping in [
            "../../w2-3.graph",
            "/etc/passwd",
            "w2-3.graph/../x",
            "other-3.graph",
        ] {
            let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
            v["file"] = serde_json::json!(escaping);
            std::fs::write(&meta, v.to_string()).unwrap();
            let before = refused_files();
            assert!(load().is_none(), "{escaping}");
            assert!(refused_files() > before, "{escaping} is counted");
        }
        // A missing meta file is no damage: nothing was saved yet.
        std::fs::remove_file(&meta).unwrap();
        assert!(load().is_none());
    }
}
