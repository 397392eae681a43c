//! HNSW approximate-nearest-neighbour graph (replaces the `hnsw_rs` crate).
//!
//! This module owns the vectors, the id -> slot map, the multi-layer proximity graph, tombstones,
//! and the on-disk format of one index. Distances: `Cosine` = 1 − dot (inputs are unit vectors),
//! `L2` = Euclidean (compared squared internally, square-rooted on output).
//!
//! # Layout (hnswlib-style)
//! * Points live in *slots* `0..len`, assigned in insertion order. Vectors sit in one flat
//!   buffer: `f32` (`slot * dim`), or with `GraphVectors::Sq8` per slot a scale and `dim` int8
//!   codes (`slot * (4 + dim)` bytes, about 4× smaller; distances are taken from the query's
//!   `f32` vector to the codes). Level-0 links sit in one flat `u32` buffer (`slot * (2M + 1)`,
//!   count first); upper-level links in a per-node boxed block (`level * (M + 1)`, count first).
//! * All per-slot storage lives in a `Store` behind an `RwLock`: inserts and searches take it
//!   shared for their whole duration; only capacity growth (doubling) takes it exclusively.
//!
//! # Concurrency
//! * A slot is reserved under the id-map lock, then its vector, id, level and upper-link block are
//!   written by the reserving thread alone. Links are `AtomicU32`s: a link to a node is stored
//!   with `Release` only after the node is fully written, and readers load links with `Acquire`,
//!   so anyone reaching a node through a link sees its data. The `READY` flag (Release/Acquire)
//!   publishes slots to the scanning APIs (`exact_all`, `ids`, `vector`, ...).
//! * Link *writers* hold the node's own `Mutex`; readers never lock (a reader may see a list
//!   mid-rewrite, but every entry it can see is a valid, published slot).
//! * An insert that raises the top level holds `ep_lock` until it is linked, then publishes the
//!   new entry point (packed in an `AtomicU64`).
//! * `gate` (an `RwLock<()>`) is taken shared by inserts and exclusively by `write_to` and
//!   `compacted`, which therefore see a consistent snapshot while searches keep running.
//! * Searches reuse a thread-local scratch (generation-tagged `u16` visited marks and heaps).
//!
//! # Neighbour selection
//! HNSW paper Alg. 4 (hnswlib's `getNeighborsByHeuristic2`). A new node's own list is filled up to
//! M with pruned candidates ("keep pruned connections"). When a back-link overflows a neighbour's
//! list, the list is re-selected by the heuristic; at level 0 every node's in-degree is counted,
//! and a node whose last in-link would be pruned is kept (displacing a node that has other
//! in-links), so pruning cannot orphan a node. That is what keeps near-duplicates reachable.
//! Each node also has an *anchor*: the nearest node linked so far (its nearest neighbour when it
//! is linked, replaced by any later node nearer to it), which always keeps a level-0 link to it.
//! A search for a point reaches its nearest neighbours; the anchor link takes it the last step.
//! That is what keeps outliers linked early (when their true neighbours were not yet in the
//! graph) findable at the default ef.
//!
//! # File format (little-endian)
//! `b"KNDHNSW\0"`, version `u32`, metric `u8`, (version 4) vectors `u8` (0 f32, 1 sq8), dim `u32`,
//! M `u32`, ef_construction `u32`, n `u64`, entry slot `u32` (`u32::MAX` = none), n vectors
//! (`dim` `f32`, or sq8: scale `f32` and `dim` `i8`), n `u64` ids, n `u8` levels,
//! n `u8` flags (1 = tombstone), per node `count u32 + count u32` level-0 links, per node and
//! level `1..=level` the same for upper links, (version 2) per node the anchor slot `u32`
//! (`u32::MAX` = none) and its distance `f32`, then the checksum of all preceding bytes (u64:
//! version 3 the CRC-32, zero-extended; versions 1 and 2 FNV-1a 64).
//! `read_from` validates every count, id, level and link as it reads, and the checksum at the
//! end.

use super::files::Checksum;
use crate::sync::{MutexExt, RwLockExt};
pub use crate::types::GraphVectors;
use rayon::prelude::*;
use std::cell::{Cell, UnsafeCell};
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::io::{Read, Write};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize};
use std::sync::{Mutex, OnceLock, RwLock};

mod build;
mod distance;
mod format;
mod search;
mod storage;
#[cfg(test)]
mod tests;

use distance::*;
use search::*;
use storage::*;

/// Distance metric of a graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// `1 − dot(a, b)`; inputs are expected to be unit vectors (not normalised here).
    Cosine,
    /// Euclidean distance.
    L2,
}

/// Construction parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Links per node on upper levels (2M on level 0). Clamped to `2..=MAX_M`.
    pub m: usize,
    /// Beam width while inserting. Clamped to `>= 1`.
    pub ef_construction: usize,
    /// How points' vectors are kept.
    pub vectors: GraphVectors,
}

impl Default for Params {
    #[inline]
    fn default() -> Self {
        Params {
            m: 16,
            ef_construction: 200,
            vectors: GraphVectors::F32,
        }
    }
}

/// Errors from inserting or loading.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    /// Vector length differs from the graph's dimension.
    #[error("vector has dimension {got}, graph expects {expected}")]
    Dim {
        /// The graph's dimension.
        expected: usize,
        /// The vector's.
        got: usize,
    },
    /// Vector contains NaN or an infinity.
    #[error("vector contains a non-finite value")]
    NonFinite,
    /// Id already present (live or deleted).
    #[error("id {0} is already in the graph")]
    Duplicate(u64),
    /// Bad serialised data.
    #[error("corrupt graph data: {0}")]
    Corrupt(String),
    /// I/O failure while reading.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

const MAX_M: usize = 512;

const MAX_DIM: usize = 1 << 16;

const MAX_LEVEL: usize = 16;

const READY: u8 = 1;

const DELETED: u8 = 2;

const NO_ENTRY: u64 = u64::MAX;

/// No slot.
const NONE: u32 = u32::MAX;

const INITIAL_CAP: usize = 1024;

// ---------------------------------------------------------------- distance kernels

/// A concurrent HNSW graph over fixed-dimension `f32` vectors with caller-chosen `u64` ids.
pub struct Graph {
    metric: Metric,
    dim: usize,
    params: Params,
    m0: usize,
    ml: f64,
    dist: DistFn,
    dist8: Dist8Fn,
    gate: RwLock<()>,
    map: RwLock<HashMap<u64, u32>>,
    store: RwLock<Store>,
    entry: AtomicU64,
    ep_lock: Mutex<()>,
    rng: AtomicU64,
    deleted: AtomicUsize,
}

impl std::fmt::Debug for Graph {
    #[inline]
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("metric", &self.metric)
            .field("dim", &self.dim)
            .field("params", &self.params)
            .field("len", &self.len())
            .field("deleted", &self.deleted())
            .finish()
    }
}

#[inline]
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

// ---------------------------------------------------------------- the graph

impl Graph {
    /// An empty graph. `dim` is clamped to `1..=65536`, `m` to `2..=512`, `ef_construction` to >= 1.
    pub fn new(metric: Metric, dim: usize, params: Params) -> Graph {
        let dim = dim.clamp(1, MAX_DIM);
        let m = params.m.clamp(2, MAX_M);
        let params = Params {
            m,
            ef_construction: params.ef_construction.max(1),
            vectors: params.vectors,
        };
        let (cos, l2) = kernels();
        let (cos8, l28) = kernels_sq8();
        let store = Store {
            cap: 0,
            dim,
            s0: 2 * m + 1,
            s1: m + 1,
            vecs: Vectors::new(params.vectors),
            ids: Vec::new(),
            flags: Vec::new(),
            levels: Vec::new(),
            locks: Vec::new(),
            links0: Vec::new(),
            upper: Vec::new(),
            indeg: Vec::new(),
            anchor: Vec::new(),
            anchor_d: Vec::new(),
        };
        Graph {
            metric,
            dim,
            params,
            m0: 2 * m,
            ml: 1.0 / (m as f64).ln(),
            dist: if metric == Metric::Cosine { cos } else { l2 },
            dist8: if metric == Metric::Cosine { cos8 } else { l28 },
            gate: RwLock::new(()),
            map: RwLock::new(HashMap::new()),
            store: RwLock::new(store),
            entry: AtomicU64::new(NO_ENTRY),
            ep_lock: Mutex::new(()),
            rng: AtomicU64::new(0x5eed),
            deleted: AtomicUsize::new(0),
        }
    }

    /// The metric.
    #[inline]
    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// The vector dimension.
    #[inline]
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The (clamped) construction parameters.
    #[inline]
    pub fn params(&self) -> Params {
        self.params
    }

    /// Points ever inserted, deleted ones included.
    #[inline]
    pub fn len(&self) -> usize {
        self.map.reading().len()
    }

    /// True when nothing was ever inserted.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Live (not removed) points.
    #[inline]
    pub fn live(&self) -> usize {
        self.len().saturating_sub(self.deleted())
    }

    /// Tombstoned points.
    #[inline]
    pub fn deleted(&self) -> usize {
        self.deleted.load(Relaxed)
    }

    /// Whether `id` is a live point.
    #[inline]
    pub fn contains(&self, id: u64) -> bool {
        self.slot(id).is_some_and(|s| self.store.reading().live(s))
    }

    #[inline]
    fn slot(&self, id: u64) -> Option<u32> {
        self.map.reading().get(&id).copied()
    }

    /// The (internal) distance from `q` to a stored vector.
    #[inline]
    fn d(&self, q: &[f32], r: Row<'_>) -> f32 {
        // SAFETY: `dist` and `dist8` come from `kernels()` and `kernels_sq8()`, which pick a
        // SIMD kernel only after detecting the CPU features it needs.
        unsafe {
            match r {
                Row::F32(v) => (self.dist)(q, v),
                Row::Sq8(r) => {
                    let (c, scale) = Row::sq8(r);
                    (self.dist8)(q, c, scale)
                }
            }
        }
    }

    /// How points' vectors are kept.
    #[inline]
    pub fn vectors(&self) -> GraphVectors {
        self.params.vectors
    }

    /// Bytes of memory one point's vector takes.
    #[inline]
    pub fn vector_bytes(&self) -> usize {
        match self.params.vectors {
            GraphVectors::F32 => 4 * self.dim,
            GraphVectors::Sq8 => self.dim + 4,
        }
    }

    #[inline]
    fn out(&self, d: f32) -> f32 {
        match self.metric {
            Metric::Cosine => d,
            Metric::L2 => d.max(0.0).sqrt(),
        }
    }

    #[inline]
    fn check(&self, v: &[f32]) -> Result<(), GraphError> {
        if v.len() != self.dim {
            return Err(GraphError::Dim {
                expected: self.dim,
                got: v.len(),
            });
        }
        if v.iter().any(|x| !x.is_finite()) {
            return Err(GraphError::NonFinite);
        }
        Ok(())
    }

    #[inline]
    fn ensure_cap(&self, need: usize) {
        if self.store.reading().cap >= need {
            return;
        }
        let mut st = self.store.writing();
        if st.cap < need {
            let cap = need.max(st.cap * 2).max(INITIAL_CAP);
            st.grow(cap);
        }
    }

    #[inline]
    fn random_level(&self) -> usize {
        let x = splitmix(self.rng.fetch_add(0x9E37_79B9_7F4A_7C15, Relaxed));
        let u = ((x >> 11) + 1) as f64 / (1u64 << 53) as f64;
        ((-u.ln() * self.ml) as usize).min(MAX_LEVEL)
    }
}
