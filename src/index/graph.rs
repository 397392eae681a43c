//! HNSW approximate-nearest-neighbour graph (replaces the `hnsw_rs` crate).
//!
//! This module owns the vectors, the id -> slot map, the multi-layer proximity graph, tombstones,
//! and the on-disk format of one index. Distances: `Cosine` = 1 − dot (inputs are unit vectors),
//! `L2` = Euclidean (compared squared internally, square-rooted on output).
//!
//! # Layout (hnswlib-style)
//! * Points live in *slots* `0..len`, assigned in insertion order. Vectors sit in one flat `f32`
//!   buffer (`slot * dim`); level-0 links in one flat `u32` buffer (`slot * (2M + 1)`, count
//!   first); upper-level links in a per-node boxed block (`level * (M + 1)`, count first).
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
//! `b"KNDHNSW\0"`, version `u32`, metric `u8`, dim `u32`, M `u32`, ef_construction `u32`, n `u64`,
//! entry slot `u32` (`u32::MAX` = none), n×dim `f32` vectors, n `u64` ids, n `u8` levels,
//! n `u8` flags (1 = tombstone), per node `count u32 + count u32` level-0 links, per node and
//! level `1..=level` the same for upper links, (version 2) per node the anchor slot `u32`
//! (`u32::MAX` = none) and its distance `f32`, then the checksum of all preceding bytes (u64:
//! version 3 the CRC-32, zero-extended; versions 1 and 2 FNV-1a 64).
//! `read_from` validates every count, id, level and link as it reads, and the checksum at the
//! end.

use super::files::Checksum;
use crate::sync::{MutexExt, RwLockExt};
use rayon::prelude::*;
use std::cell::{Cell, UnsafeCell};
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::io::{Read, Write};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize};
use std::sync::{Mutex, OnceLock, RwLock};

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
}

impl Default for Params {
    fn default() -> Self {
        Params {
            m: 16,
            ef_construction: 200,
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
const MAGIC: &[u8; 8] = b"KNDHNSW\0";
/// 2 added the anchors; version 1 files load with none (the next inserts adopt them again).
/// 3 ends with a CRC-32 instead of FNV-1a 64 (files of 1 and 2 still load).
const VERSION: u32 = 3;
const INITIAL_CAP: usize = 1024;

// ---------------------------------------------------------------- distance kernels

type DistFn = unsafe fn(&[f32], &[f32]) -> f32;

fn l2sq_portable(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| (x - y) * (x - y))
        .sum();
    for (x, y) in ca.zip(cb) {
        for ((s, x), y) in acc.iter_mut().zip(x).zip(y) {
            *s += (x - y) * (x - y);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// The portable dot product is the project's one kernel, [`crate::score::dot`].
fn cos_portable(a: &[f32], b: &[f32]) -> f32 {
    1.0 - crate::score::dot(a, b)
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    macro_rules! kernel512 {
        ($name:ident, $step:ident) => {
            /// # Safety
            /// The CPU must support AVX-512F.
            #[target_feature(enable = "avx512f")]
            pub(super) unsafe fn $name(a: &[f32], b: &[f32]) -> f32 {
                let n = a.len().min(b.len());
                let (pa, pb) = (a.as_ptr(), b.as_ptr());
                let (mut s0, mut s1, mut s2, mut s3) = (
                    _mm512_setzero_ps(),
                    _mm512_setzero_ps(),
                    _mm512_setzero_ps(),
                    _mm512_setzero_ps(),
                );
                let mut i = 0;
                // SAFETY: every unmasked load reads 16 floats at offset i with i + 16 <= n, and the
                // masked tail load only touches lanes below n, so all reads are inside both slices.
                unsafe {
                    while i + 64 <= n {
                        s0 = $step(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), s0);
                        s1 = $step(
                            _mm512_loadu_ps(pa.add(i + 16)),
                            _mm512_loadu_ps(pb.add(i + 16)),
                            s1,
                        );
                        s2 = $step(
                            _mm512_loadu_ps(pa.add(i + 32)),
                            _mm512_loadu_ps(pb.add(i + 32)),
                            s2,
                        );
                        s3 = $step(
                            _mm512_loadu_ps(pa.add(i + 48)),
                            _mm512_loadu_ps(pb.add(i + 48)),
                            s3,
                        );
                        i += 64;
                    }
                    while i + 16 <= n {
                        s0 = $step(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), s0);
                        i += 16;
                    }
                    if i < n {
                        let m = ((1u32 << (n - i)) - 1) as __mmask16;
                        s1 = $step(
                            _mm512_maskz_loadu_ps(m, pa.add(i)),
                            _mm512_maskz_loadu_ps(m, pb.add(i)),
                            s1,
                        );
                    }
                }
                _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)))
            }
        };
    }
    macro_rules! kernel256 {
        ($name:ident, $step:ident, $scalar:expr) => {
            /// # Safety
            /// The CPU must support AVX2 and FMA.
            #[target_feature(enable = "avx2,fma")]
            pub(super) unsafe fn $name(a: &[f32], b: &[f32]) -> f32 {
                let n = a.len().min(b.len());
                let (pa, pb) = (a.as_ptr(), b.as_ptr());
                let (mut s0, mut s1, mut s2, mut s3) = (
                    _mm256_setzero_ps(),
                    _mm256_setzero_ps(),
                    _mm256_setzero_ps(),
                    _mm256_setzero_ps(),
                );
                let mut i = 0;
                // SAFETY: every load reads 8 floats at offset i with i + 8 <= n.
                unsafe {
                    while i + 32 <= n {
                        s0 = $step(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s0);
                        s1 = $step(
                            _mm256_loadu_ps(pa.add(i + 8)),
                            _mm256_loadu_ps(pb.add(i + 8)),
                            s1,
                        );
                        s2 = $step(
                            _mm256_loadu_ps(pa.add(i + 16)),
                            _mm256_loadu_ps(pb.add(i + 16)),
                            s2,
                        );
                        s3 = $step(
                            _mm256_loadu_ps(pa.add(i + 24)),
                            _mm256_loadu_ps(pb.add(i + 24)),
                            s3,
                        );
                        i += 32;
                    }
                    while i + 8 <= n {
                        s0 = $step(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s0);
                        i += 8;
                    }
                }
                let s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
                let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
                let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
                let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
                let tail: f32 = a[i..n].iter().zip(&b[i..n]).map($scalar).sum();
                _mm_cvtss_f32(h) + tail
            }
        };
    }
    #[inline(always)]
    fn fma512(a: __m512, b: __m512, s: __m512) -> __m512 {
        // SAFETY: only inlined into the avx512f kernels above.
        unsafe { _mm512_fmadd_ps(a, b, s) }
    }
    #[inline(always)]
    fn sq512(a: __m512, b: __m512, s: __m512) -> __m512 {
        // SAFETY: only inlined into the avx512f kernels above.
        unsafe {
            let d = _mm512_sub_ps(a, b);
            _mm512_fmadd_ps(d, d, s)
        }
    }
    #[inline(always)]
    fn fma256(a: __m256, b: __m256, s: __m256) -> __m256 {
        // SAFETY: only inlined into the avx2+fma kernels above.
        unsafe { _mm256_fmadd_ps(a, b, s) }
    }
    #[inline(always)]
    fn sq256(a: __m256, b: __m256, s: __m256) -> __m256 {
        // SAFETY: only inlined into the avx2+fma kernels above.
        unsafe {
            let d = _mm256_sub_ps(a, b);
            _mm256_fmadd_ps(d, d, s)
        }
    }
    kernel512!(dot512, fma512);
    kernel512!(l2sq512, sq512);
    kernel256!(dot256, fma256, |(x, y)| x * y);
    kernel256!(l2sq256, sq256, |(x, y)| (x - y) * (x - y));

    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn cos512(a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: same requirement as ours.
        1.0 - unsafe { dot512(a, b) }
    }
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn cos256(a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: same requirement as ours.
        1.0 - unsafe { dot256(a, b) }
    }
}

/// (cosine distance, squared L2) kernels for this CPU, chosen once.
fn kernels() -> (DistFn, DistFn) {
    static K: OnceLock<(DistFn, DistFn)> = OnceLock::new();
    *K.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f") {
                return (simd::cos512 as DistFn, simd::l2sq512 as DistFn);
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                return (simd::cos256 as DistFn, simd::l2sq256 as DistFn);
            }
        }
        (cos_portable as DistFn, l2sq_portable as DistFn)
    })
}

// ---------------------------------------------------------------- storage

/// Flat vector buffer written through shared references.
struct Floats(Vec<UnsafeCell<f32>>);

// SAFETY: a slot's floats are written exactly once, by the thread that reserved the slot, before
// the slot is published (READY flag or a link, both stored with Release). Every other access is a
// read that follows an Acquire load synchronising with that publication, so no access races with
// the write. The buffer is only resized under the exclusive store lock, when nobody else reads.
unsafe impl Sync for Floats {}

struct Store {
    cap: usize,
    dim: usize,
    s0: usize,
    s1: usize,
    vecs: Floats,
    ids: Vec<AtomicU64>,
    flags: Vec<AtomicU8>,
    levels: Vec<AtomicU8>,
    locks: Vec<Mutex<()>>,
    links0: Vec<AtomicU32>,
    upper: Vec<OnceLock<Box<[AtomicU32]>>>,
    indeg: Vec<AtomicU32>,
    /// Level 0: the node that must keep a link to this one, `NONE` if not known: its nearest
    /// neighbour when it was linked, or a nearer node linked after it (see `Graph::adopt`).
    anchor: Vec<AtomicU32>,
    /// The (internal) distance to the anchor, as `f32` bits; infinity when there is none.
    anchor_d: Vec<AtomicU32>,
}

impl Store {
    fn grow(&mut self, cap: usize) {
        self.vecs
            .0
            .resize_with(cap * self.dim, || UnsafeCell::new(0.0));
        self.ids.resize_with(cap, Default::default);
        self.flags.resize_with(cap, Default::default);
        self.levels.resize_with(cap, Default::default);
        self.locks.resize_with(cap, Default::default);
        self.links0.resize_with(cap * self.s0, Default::default);
        self.upper.resize_with(cap, OnceLock::new);
        self.indeg.resize_with(cap, Default::default);
        self.anchor.resize_with(cap, || AtomicU32::new(NONE));
        self.anchor_d
            .resize_with(cap, || AtomicU32::new(f32::INFINITY.to_bits()));
        self.cap = cap;
    }

    /// Vector of a published slot (reached through a link, the entry point, or a READY check).
    #[inline]
    fn vec(&self, s: u32) -> &[f32] {
        let i = s as usize * self.dim;
        let cells = &self.vecs.0[i..i + self.dim];
        // SAFETY: UnsafeCell<f32> has f32's layout; the slot is published, so (see `Floats`) no
        // thread writes these cells any more while this shared borrow lives.
        unsafe { std::slice::from_raw_parts(cells.as_ptr() as *const f32, self.dim) }
    }

    /// Writes the vector of a slot that the calling thread reserved and has not published.
    fn write_vec(&self, s: u32, v: &[f32]) {
        let i = s as usize * self.dim;
        for (c, x) in self.vecs.0[i..i + self.dim].iter().zip(v) {
            // SAFETY: the slot is reserved for this thread and unpublished: no other access exists.
            unsafe { *c.get() = *x };
        }
    }

    fn live(&self, s: u32) -> bool {
        self.flags
            .get(s as usize)
            .is_some_and(|f| f.load(Acquire) & (READY | DELETED) == READY)
    }

    /// The link block (count first) of slot `s` at level `l`; empty if the node has no such level.
    #[inline]
    fn links(&self, s: u32, l: usize) -> &[AtomicU32] {
        if l == 0 {
            let b = s as usize * self.s0;
            &self.links0[b..b + self.s0]
        } else {
            let u = self.upper[s as usize].get();
            u.and_then(|u| u.get((l - 1) * self.s1..l * self.s1))
                .unwrap_or(&[])
        }
    }
}

/// The live entries of a link block.
#[inline]
fn entries(list: &[AtomicU32]) -> &[AtomicU32] {
    match list.split_first() {
        Some((c, rest)) => &rest[..(c.load(Acquire) as usize).min(rest.len())],
        None => &[],
    }
}

/// Replaces a link block's contents (caller holds the node's lock).
fn set_list(list: &[AtomicU32], items: &[u32]) {
    if let Some((c, rest)) = list.split_first() {
        for (a, &v) in rest.iter().zip(items) {
            a.store(v, Release);
        }
        c.store(items.len().min(rest.len()) as u32, Release);
    }
}

#[derive(Clone, Copy, Debug)]
struct Near {
    d: f32,
    s: u32,
}
impl PartialEq for Near {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Near {}
impl PartialOrd for Near {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Near {
    fn cmp(&self, o: &Self) -> Ordering {
        self.d.total_cmp(&o.d).then(self.s.cmp(&o.s))
    }
}

/// Per-thread search scratch: generation-tagged visited marks and the two heaps.
#[derive(Default)]
struct Scratch {
    marks: Vec<u16>,
    tag: u16,
    cand: BinaryHeap<Reverse<Near>>,
    res: BinaryHeap<Near>,
    /// The unvisited neighbours of the node being expanded.
    fresh: Vec<u32>,
}

impl Scratch {
    fn reset(&mut self, n: usize) {
        if self.marks.len() < n {
            self.marks.resize(n, 0);
        }
        self.tag = self.tag.wrapping_add(1);
        if self.tag == 0 {
            self.marks.fill(0);
            self.tag = 1;
        }
        self.cand.clear();
        self.res.clear();
    }
    /// Marks `s` visited; false if it already was.
    #[inline]
    fn visit(&mut self, s: u32) -> bool {
        let m = &mut self.marks[s as usize];
        let fresh = *m != self.tag;
        *m = self.tag;
        fresh
    }
}

thread_local! {
    static SCRATCH: Cell<Option<Box<Scratch>>> = const { Cell::new(None) };
}

/// Runs `f` with this thread's scratch (taken out, so a re-entrant call just gets a fresh one).
fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    let mut s = SCRATCH.with(|c| c.take()).unwrap_or_default();
    let r = f(&mut s);
    SCRATCH.with(|c| c.set(Some(s)));
    r
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

// ---------------------------------------------------------------- the graph

/// A concurrent HNSW graph over fixed-dimension `f32` vectors with caller-chosen `u64` ids.
pub struct Graph {
    metric: Metric,
    dim: usize,
    params: Params,
    m0: usize,
    ml: f64,
    dist: DistFn,
    gate: RwLock<()>,
    map: RwLock<HashMap<u64, u32>>,
    store: RwLock<Store>,
    entry: AtomicU64,
    ep_lock: Mutex<()>,
    rng: AtomicU64,
    deleted: AtomicUsize,
}

impl std::fmt::Debug for Graph {
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

impl Graph {
    /// An empty graph. `dim` is clamped to `1..=65536`, `m` to `2..=512`, `ef_construction` to >= 1.
    pub fn new(metric: Metric, dim: usize, params: Params) -> Graph {
        let dim = dim.clamp(1, MAX_DIM);
        let m = params.m.clamp(2, MAX_M);
        let params = Params {
            m,
            ef_construction: params.ef_construction.max(1),
        };
        let (cos, l2) = kernels();
        let store = Store {
            cap: 0,
            dim,
            s0: 2 * m + 1,
            s1: m + 1,
            vecs: Floats(Vec::new()),
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
    pub fn metric(&self) -> Metric {
        self.metric
    }
    /// The vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// The (clamped) construction parameters.
    pub fn params(&self) -> Params {
        self.params
    }
    /// Points ever inserted, deleted ones included.
    pub fn len(&self) -> usize {
        self.map.reading().len()
    }
    /// True when nothing was ever inserted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Live (not removed) points.
    pub fn live(&self) -> usize {
        self.len().saturating_sub(self.deleted())
    }
    /// Tombstoned points.
    pub fn deleted(&self) -> usize {
        self.deleted.load(Relaxed)
    }
    /// Whether `id` is a live point.
    pub fn contains(&self, id: u64) -> bool {
        self.slot(id).is_some_and(|s| self.store.reading().live(s))
    }

    fn slot(&self, id: u64) -> Option<u32> {
        self.map.reading().get(&id).copied()
    }

    #[inline]
    fn d(&self, a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: `dist` comes from `kernels()`, which picks a SIMD kernel only after detecting
        // the CPU features it needs.
        unsafe { (self.dist)(a, b) }
    }

    fn out(&self, d: f32) -> f32 {
        match self.metric {
            Metric::Cosine => d,
            Metric::L2 => d.max(0.0).sqrt(),
        }
    }

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

    fn random_level(&self) -> usize {
        let x = splitmix(self.rng.fetch_add(0x9E37_79B9_7F4A_7C15, Relaxed));
        let u = ((x >> 11) + 1) as f64 / (1u64 << 53) as f64;
        ((-u.ln() * self.ml) as usize).min(MAX_LEVEL)
    }

    /// Inserts a point. Safe to call concurrently with searches and other inserts.
    pub fn insert(&self, id: u64, v: &[f32]) -> Result<(), GraphError> {
        self.insert_many(&[(id, v)])
    }

    /// Inserts a batch in parallel (rayon). Everything is validated first; on error nothing is inserted.
    pub fn insert_many(&self, points: &[(u64, &[f32])]) -> Result<(), GraphError> {
        for (_, v) in points {
            self.check(v)?;
        }
        let mut seen = HashSet::with_capacity(points.len());
        for &(id, _) in points {
            if !seen.insert(id) {
                return Err(GraphError::Duplicate(id));
            }
        }
        let _gate = self.gate.reading();
        let base = {
            let mut map = self.map.writing();
            if let Some(&(id, _)) = points.iter().find(|(id, _)| map.contains_key(id)) {
                return Err(GraphError::Duplicate(id));
            }
            let base = map.len();
            if base + points.len() >= u32::MAX as usize {
                return Err(GraphError::Corrupt("graph is full (2^32 points)".into()));
            }
            map.extend(
                points
                    .iter()
                    .enumerate()
                    .map(|(i, &(id, _))| (id, (base + i) as u32)),
            );
            base
        };
        self.insert_reserved(base, points);
        Ok(())
    }

    /// Writes and links points whose slots `base..` are already reserved in the map.
    fn insert_reserved(&self, base: usize, points: &[(u64, &[f32])]) {
        self.ensure_cap(base + points.len());
        let guard = self.store.reading();
        let st: &Store = &guard;
        let one = |(i, &(id, v)): (usize, &(u64, &[f32]))| {
            let s = (base + i) as u32;
            let level = self.random_level();
            st.write_vec(s, v);
            st.ids[s as usize].store(id, Relaxed);
            st.levels[s as usize].store(level as u8, Relaxed);
            if level > 0 {
                let block = (0..level * st.s1).map(|_| AtomicU32::new(0)).collect();
                let _ = st.upper[s as usize].set(block);
            }
            st.flags[s as usize].fetch_or(READY, Release);
            self.link(st, s, level);
        };
        if points.len() == 1 {
            points.iter().enumerate().for_each(one);
        } else {
            points.par_iter().enumerate().for_each(one);
        }
    }

    /// Connects the written slot `s` into the graph.
    fn link(&self, st: &Store, s: u32, level: usize) {
        let q = st.vec(s);
        let mut top_guard = None;
        let mut ep = self.entry.load(Acquire);
        if ep == NO_ENTRY || level > (ep >> 32) as usize {
            let g = self.ep_lock.locked();
            ep = self.entry.load(Acquire);
            if ep == NO_ENTRY {
                self.entry.store(((level as u64) << 32) | s as u64, Release);
                return;
            }
            if level > (ep >> 32) as usize {
                top_guard = Some(g);
            }
        }
        let (ep_s, ep_l) = (ep as u32, (ep >> 32) as usize);
        let top = Near {
            d: self.d(q, st.vec(ep_s)),
            s: ep_s,
        };
        let mut cur = self.greedy(st, q, top, ep_l, level);
        with_scratch(|sc| {
            for l in (0..=level.min(ep_l)).rev() {
                // The global entry point is a second seed: `cur` may be a node still being linked.
                let seeds = [cur, top];
                let mut w =
                    self.search_layer(st, sc, q, &seeds, self.params.ef_construction, l, |_| true);
                w.retain(|c| c.s != s);
                let Some(&first) = w.first() else { continue };
                cur = first;
                let mut nbrs = self.select(st, &w, self.params.m, true);
                let maxm = if l == 0 { self.m0 } else { self.params.m };
                if l == 0 {
                    // `w` is nearest first and `select` keeps the nearest: nbrs[0] is it.
                    st.anchor[s as usize].store(nbrs[0], Relaxed);
                    st.anchor_d[s as usize].store(w[0].d.to_bits(), Relaxed);
                    self.adopt(st, s, &w, &mut nbrs, maxm / 2);
                }
                self.set_own(st, s, l, &nbrs, maxm);
                for &n in &nbrs {
                    self.add_link(st, n, s, l, maxm);
                }
            }
        });
        if top_guard.is_some() {
            self.entry.store(((level as u64) << 32) | s as u64, Release);
        }
    }

    /// Makes the new node `s` the anchor of up to `max` candidates `w` (nearest first) to which
    /// it is nearer than their current anchor, adding them to `nbrs` (its own list to be).
    /// Without this, a point linked early keeps only the neighbours it had then: its true nearest
    /// neighbours, linked later, prune it from their lists (some other neighbour is nearer to
    /// it), and a search for it reaches them and stops there.
    fn adopt(&self, st: &Store, s: u32, w: &[Near], nbrs: &mut Vec<u32>, max: usize) {
        let mut adopted = 0;
        for c in w {
            if adopted >= max {
                break;
            }
            let cur = &st.anchor_d[c.s as usize];
            if c.d < f32::from_bits(cur.load(Relaxed)) {
                cur.store(c.d.to_bits(), Relaxed);
                st.anchor[c.s as usize].store(s, Relaxed);
                if !nbrs.contains(&c.s) {
                    nbrs.push(c.s);
                }
                adopted += 1;
            }
        }
    }

    /// Greedy descent from level `from` down to level `to + 1`.
    fn greedy(&self, st: &Store, q: &[f32], mut cur: Near, from: usize, to: usize) -> Near {
        for l in (to + 1..=from).rev() {
            let mut changed = true;
            while changed {
                changed = false;
                for a in entries(st.links(cur.s, l)) {
                    let nb = a.load(Acquire);
                    let d = self.d(q, st.vec(nb));
                    if d < cur.d {
                        cur = Near { d, s: nb };
                        changed = true;
                    }
                }
            }
        }
        cur
    }

    /// Beam search on one level; returns up to `ef` accepted nodes, nearest first. Rejected nodes
    /// still route. Stops only once `ef` accepted nodes are held and no candidate can improve them.
    #[allow(clippy::too_many_arguments)]
    fn search_layer<F: Fn(u32) -> bool>(
        &self,
        st: &Store,
        sc: &mut Scratch,
        q: &[f32],
        eps: &[Near],
        ef: usize,
        l: usize,
        accept: F,
    ) -> Vec<Near> {
        sc.reset(st.cap);
        for &ep in eps {
            if sc.visit(ep.s) {
                sc.cand.push(Reverse(ep));
                if accept(ep.s) {
                    sc.res.push(ep);
                }
            }
        }
        let mut bound = sc.res.peek().map_or(f32::INFINITY, |n| n.d);
        while let Some(Reverse(c)) = sc.cand.pop() {
            if c.d > bound && sc.res.len() >= ef {
                break;
            }
            // Unvisited neighbours first, their vectors prefetched, then the distances: the
            // memory loads of a whole neighbour list overlap instead of queueing one by one.
            let mut fresh = std::mem::take(&mut sc.fresh);
            fresh.clear();
            for a in entries(st.links(c.s, l)) {
                let nb = a.load(Acquire);
                if sc.visit(nb) {
                    #[cfg(target_arch = "x86_64")]
                    prefetch_vec(st.vec(nb));
                    fresh.push(nb);
                }
            }
            for &nb in &fresh {
                let d = self.d(q, st.vec(nb));
                if sc.res.len() < ef || d < bound {
                    sc.cand.push(Reverse(Near { d, s: nb }));
                    if accept(nb) {
                        sc.res.push(Near { d, s: nb });
                        if sc.res.len() > ef {
                            sc.res.pop();
                        }
                        bound = sc.res.peek().map_or(f32::INFINITY, |n| n.d);
                    }
                }
            }
            sc.fresh = fresh;
        }
        let mut out: Vec<Near> = sc.res.drain().collect();
        out.sort_unstable();
        out
    }

    /// HNSW Alg. 4 over `cands` (nearest first); with `keep_pruned` the result is topped up to `m`
    /// with pruned candidates (exact duplicates of kept nodes last). A candidate that ties with a
    /// bit-identical kept node is redundant: without that rule, a group of exact duplicates fills
    /// each other's lists and becomes a closed clique that searches cannot leave.
    fn select(&self, st: &Store, cands: &[Near], m: usize, keep_pruned: bool) -> Vec<u32> {
        if cands.len() <= m {
            return cands.iter().map(|c| c.s).collect();
        }
        let mut sel: Vec<Near> = Vec::with_capacity(m);
        let (mut pruned, mut dups) = (Vec::new(), Vec::new());
        for &c in cands {
            if sel.len() >= m {
                break;
            }
            let vc = st.vec(c.s);
            let mut verdict = 0; // 0 keep, 1 pruned, 2 duplicate
            for r in &sel {
                let (vr, d) = (st.vec(r.s), self.d(vc, st.vec(r.s)));
                if d < c.d {
                    verdict = 1;
                    break;
                }
                if d == c.d && vc == vr {
                    verdict = 2;
                    break;
                }
            }
            match verdict {
                0 => sel.push(c),
                1 if keep_pruned => pruned.push(c.s),
                2 if keep_pruned => dups.push(c.s),
                _ => {}
            }
        }
        let mut out: Vec<u32> = sel.iter().map(|c| c.s).collect();
        let room = m - out.len();
        out.extend(pruned.into_iter().chain(dups).take(room));
        out
    }

    /// Sets node `s`'s own list at level `l`. Links that concurrent inserts already added to it
    /// are merged in (re-selected if over capacity), never silently dropped.
    fn set_own(&self, st: &Store, s: u32, l: usize, nbrs: &[u32], maxm: usize) {
        let _g = st.locks[s as usize].locked();
        let list = st.links(s, l);
        let old: Vec<u32> = entries(list).iter().map(|a| a.load(Relaxed)).collect();
        let mut keep: Vec<u32> = old.iter().chain(nbrs).copied().collect();
        keep.sort_unstable();
        keep.dedup();
        if keep.len() > maxm {
            let vs = st.vec(s);
            let mut c: Vec<Near> = keep
                .iter()
                .map(|&t| Near {
                    d: self.d(vs, st.vec(t)),
                    s: t,
                })
                .collect();
            c.sort_unstable();
            keep = self.select(st, &c, maxm, true);
        }
        if l == 0 {
            let fresh: Vec<u32> = nbrs.iter().copied().filter(|t| !old.contains(t)).collect();
            anchored(st, s, old.iter().chain(&fresh), &mut keep, maxm);
            protect(st, s, &old, &fresh, &mut keep, maxm);
        }
        set_list(list, &keep);
    }

    /// Adds the link `n -> x` at level `l`, re-selecting `n`'s list if it is full.
    fn add_link(&self, st: &Store, n: u32, x: u32, l: usize, maxm: usize) {
        let _g = st.locks[n as usize].locked();
        let list = st.links(n, l);
        let old: Vec<u32> = entries(list).iter().map(|a| a.load(Relaxed)).collect();
        if list.is_empty() || old.contains(&x) {
            return;
        }
        if old.len() < maxm {
            list[1 + old.len()].store(x, Release);
            list[0].store(old.len() as u32 + 1, Release);
            if l == 0 {
                st.indeg[x as usize].fetch_add(1, AcqRel);
            }
            return;
        }
        let vn = st.vec(n);
        let mut c: Vec<Near> = old
            .iter()
            .chain([&x])
            .map(|&s| Near {
                d: self.d(vn, st.vec(s)),
                s,
            })
            .collect();
        c.sort_unstable();
        let mut keep = self.select(st, &c, maxm, false);
        if l == 0 {
            anchored(st, n, old.iter().chain([&x]), &mut keep, maxm);
            protect(st, n, &old, &[x], &mut keep, maxm);
        }
        set_list(list, &keep);
    }

    /// Removes (tombstones) a point: it keeps routing but is never returned. True if it was live.
    pub fn remove(&self, id: u64) -> bool {
        let Some(s) = self.slot(id) else { return false };
        let st = self.store.reading();
        let Some(f) = st.flags.get(s as usize) else {
            return false;
        };
        if f.load(Acquire) & READY == 0 || f.fetch_or(DELETED, AcqRel) & DELETED != 0 {
            return false;
        }
        self.deleted.fetch_add(1, Relaxed);
        true
    }

    /// The `k` nearest live points to `q`, nearest first, searching with breadth `max(ef, k)`.
    pub fn search(&self, q: &[f32], k: usize, ef: usize) -> Vec<(u64, f32)> {
        if self.deleted() == 0 {
            self.search_impl(q, k, ef, |_, _| true)
        } else {
            self.search_impl(q, k, ef, |st, s| {
                st.flags[s as usize].load(Relaxed) & DELETED == 0
            })
        }
    }

    /// Like [`Graph::search`], returning only points with `allow(id)`. Keeps expanding until
    /// `max(ef, k)` allowed points are held, so it returns min(k, reachable allowed live points).
    pub fn search_filtered(
        &self,
        q: &[f32],
        k: usize,
        ef: usize,
        allow: &(dyn Fn(u64) -> bool + Sync),
    ) -> Vec<(u64, f32)> {
        self.search_impl(q, k, ef, |st, s| {
            st.flags[s as usize].load(Relaxed) & DELETED == 0
                && allow(st.ids[s as usize].load(Relaxed))
        })
    }

    fn search_impl<F: Fn(&Store, u32) -> bool>(
        &self,
        q: &[f32],
        k: usize,
        ef: usize,
        accept: F,
    ) -> Vec<(u64, f32)> {
        if k == 0 || q.len() != self.dim {
            return Vec::new();
        }
        let guard = self.store.reading();
        let st: &Store = &guard;
        let ep = self.entry.load(Acquire);
        if ep == NO_ENTRY {
            return Vec::new();
        }
        let (s, l) = (ep as u32, (ep >> 32) as usize);
        let cur = self.greedy(
            st,
            q,
            Near {
                d: self.d(q, st.vec(s)),
                s,
            },
            l,
            0,
        );
        let res = with_scratch(|sc| {
            self.search_layer(st, sc, q, &[cur], ef.max(k), 0, |x| accept(st, x))
        });
        res.iter()
            .take(k)
            .map(|n| (st.ids[n.s as usize].load(Relaxed), self.out(n.d)))
            .collect()
    }

    fn exact_slots(
        &self,
        st: &Store,
        q: &[f32],
        k: usize,
        slots: impl Iterator<Item = u32>,
    ) -> Vec<(u64, f32)> {
        if k == 0 || q.len() != self.dim {
            return Vec::new();
        }
        let mut v: Vec<Near> = slots
            .filter(|&s| st.live(s))
            .map(|s| Near {
                d: self.d(q, st.vec(s)),
                s,
            })
            .collect();
        if v.len() > k {
            v.select_nth_unstable(k - 1);
            v.truncate(k);
        }
        v.sort_unstable();
        v.iter()
            .map(|n| (st.ids[n.s as usize].load(Relaxed), self.out(n.d)))
            .collect()
    }

    /// Exact k nearest among `ids` (unknown and deleted ids skipped), nearest first.
    pub fn exact(&self, q: &[f32], k: usize, ids: &[u64]) -> Vec<(u64, f32)> {
        let mut slots: Vec<u32> = {
            let map = self.map.reading();
            ids.iter().filter_map(|i| map.get(i).copied()).collect()
        };
        slots.sort_unstable();
        slots.dedup();
        let st = self.store.reading();
        self.exact_slots(&st, q, k, slots.into_iter())
    }

    /// Exact k nearest among all live points.
    pub fn exact_all(&self, q: &[f32], k: usize) -> Vec<(u64, f32)> {
        let st = self.store.reading();
        self.exact_slots(&st, q, k, 0..st.cap as u32)
    }

    /// A copy of a live point's vector.
    pub fn vector(&self, id: u64) -> Option<Vec<f32>> {
        let s = self.slot(id)?;
        let st = self.store.reading();
        st.live(s).then(|| st.vec(s).to_vec())
    }

    /// Whether point `id` is live and holds exactly vector `v`; None when `id` was never a
    /// point of this graph (a removed point is `Some(false)`: its id cannot be inserted again).
    pub fn holds(&self, id: u64, v: &[f32]) -> Option<bool> {
        let s = self.slot(id)?;
        let st = self.store.reading();
        Some(st.live(s) && st.vec(s) == v)
    }

    /// None when `id` was never a point of this graph; else whether it is live (a removed
    /// point is `Some(false)`: its id cannot be inserted again).
    pub fn status(&self, id: u64) -> Option<bool> {
        let s = self.slot(id)?;
        Some(self.store.reading().live(s))
    }

    /// Live ids, in insertion order.
    pub fn ids(&self) -> Vec<u64> {
        let st = self.store.reading();
        (0..st.cap as u32)
            .filter(|&s| st.live(s))
            .map(|s| st.ids[s as usize].load(Relaxed))
            .collect()
    }

    /// A new graph holding only the live points. Inserts wait during the snapshot copy; searches
    /// on `self` keep running throughout.
    pub fn compacted(&self) -> Graph {
        let (ids, flat) = {
            let _gate = self.gate.writing();
            let st = self.store.reading();
            let slots: Vec<u32> = (0..st.cap as u32).filter(|&s| st.live(s)).collect();
            let mut flat = Vec::with_capacity(slots.len() * self.dim);
            slots
                .iter()
                .for_each(|&s| flat.extend_from_slice(st.vec(s)));
            (
                slots
                    .iter()
                    .map(|&s| st.ids[s as usize].load(Relaxed))
                    .collect::<Vec<u64>>(),
                flat,
            )
        };
        let g = Graph::new(self.metric, self.dim, self.params);
        let pts: Vec<(u64, &[f32])> = ids
            .iter()
            .copied()
            .zip(flat.chunks_exact(self.dim))
            .collect();
        g.map
            .writing()
            .extend(ids.iter().enumerate().map(|(i, &id)| (id, i as u32)));
        g.insert_reserved(0, &pts);
        g
    }

    /// Serialises the graph (format in the module docs). Inserts wait; searches continue.
    pub fn write_to(&self, w: &mut dyn Write) -> std::io::Result<()> {
        let _gate = self.gate.writing();
        let n = self.len();
        let st = self.store.reading();
        let mut o = Out {
            w,
            buf: Vec::with_capacity(1 << 16),
            h: Checksum::crc32(),
        };
        o.put(MAGIC)?;
        o.put(&VERSION.to_le_bytes())?;
        o.put(&[(self.metric == Metric::L2) as u8])?;
        for x in [self.dim, self.params.m, self.params.ef_construction] {
            o.put(&(x as u32).to_le_bytes())?;
        }
        o.put(&(n as u64).to_le_bytes())?;
        let ep = self.entry.load(Acquire);
        o.put(&(if ep == NO_ENTRY { u32::MAX } else { ep as u32 }).to_le_bytes())?;
        for s in 0..n as u32 {
            for x in st.vec(s) {
                o.put(&x.to_le_bytes())?;
            }
        }
        for s in 0..n {
            o.put(&st.ids[s].load(Relaxed).to_le_bytes())?;
        }
        for s in 0..n {
            o.put(&[st.levels[s].load(Relaxed)])?;
        }
        for s in 0..n {
            o.put(&[(st.flags[s].load(Acquire) & DELETED != 0) as u8])?;
        }
        for l in 0..=MAX_LEVEL {
            for s in 0..n as u32 {
                if l <= st.levels[s as usize].load(Relaxed) as usize {
                    let e = entries(st.links(s, l));
                    o.put(&(e.len() as u32).to_le_bytes())?;
                    for a in e {
                        o.put(&a.load(Acquire).to_le_bytes())?;
                    }
                }
            }
        }
        for s in 0..n {
            o.put(&st.anchor[s].load(Relaxed).to_le_bytes())?;
            o.put(&st.anchor_d[s].load(Relaxed).to_le_bytes())?;
        }
        o.finish()
    }

    /// Loads a graph written by [`Graph::write_to`], validating everything; never panics on bad input.
    pub fn read_from(r: &mut dyn Read) -> Result<Graph, GraphError> {
        let mut buf = Vec::new();
        r.read_to_end(&mut buf)?;
        Graph::read_sized(&mut buf.as_slice(), buf.len() as u64)
    }

    /// [`Graph::read_from`] for a reader of `len` bytes (a file: its length), streamed: the
    /// file is never held in memory whole, and vectors go straight to their slots.
    pub fn read_sized(r: &mut dyn Read, len: u64) -> Result<Graph, GraphError> {
        let mut rd = Src::new(r, len)?;
        let bad = |m: &str| GraphError::Corrupt(m.to_string());
        if rd.left() < 8 + 4 + 1 + 12 + 8 + 4 {
            return Err(bad("truncated header"));
        }
        if rd.take(8)? != MAGIC {
            return Err(bad("bad magic"));
        }
        let version = rd.u32()?;
        if !(1..=VERSION).contains(&version) {
            return Err(bad("unsupported version"));
        }
        rd.checksum(if version >= 3 {
            Checksum::crc32()
        } else {
            Checksum::fnv()
        });
        let metric = match rd.u8()? {
            0 => Metric::Cosine,
            1 => Metric::L2,
            _ => return Err(bad("bad metric")),
        };
        let (dim, m, efc) = (rd.u32()? as usize, rd.u32()? as usize, rd.u32()? as usize);
        if !(1..=MAX_DIM).contains(&dim) || !(2..=MAX_M).contains(&m) || efc == 0 {
            return Err(bad("bad dim or params"));
        }
        let n = rd.u64()?;
        let ep = rd.u32()?;
        // Each point needs at least dim*4 + 8 + 1 + 1 + 4 bytes: bound n before allocating.
        if n > rd.left() / (dim as u64 * 4 + 14) {
            return Err(bad("point count exceeds data"));
        }
        let n = n as usize;
        let g = Graph::new(
            metric,
            dim,
            Params {
                m,
                ef_construction: efc,
            },
        );
        // Room for an eighth more: the writes a loaded graph is caught up with would otherwise
        // double every array at the first insert.
        g.ensure_cap(n + n / 8);
        let st = g.store.reading();
        let mut v = vec![0f32; dim];
        for s in 0..n {
            let bytes = rd.take(dim * 4)?;
            for (x, c) in v.iter_mut().zip(bytes.chunks_exact(4)) {
                *x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
            if v.iter().any(|x| !x.is_finite()) {
                return Err(bad("non-finite vector value"));
            }
            st.write_vec(s as u32, &v);
        }
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            ids.push(rd.u64()?);
        }
        let levels = rd.bytes(n)?;
        let flags = rd.bytes(n)?;
        if levels.iter().any(|&l| l as usize > MAX_LEVEL) || flags.iter().any(|&f| f > 1) {
            return Err(bad("bad level or flag"));
        }
        let top = levels.iter().copied().max().unwrap_or(0);
        match (n, ep) {
            (0, u32::MAX) => {}
            (0, _) => return Err(bad("entry point in empty graph")),
            (_, e) if (e as usize) < n && levels[e as usize] == top => {}
            _ => return Err(bad("bad entry point")),
        }
        {
            let mut map = g.map.writing();
            map.reserve(n);
            for (s, &id) in ids.iter().enumerate() {
                if map.insert(id, s as u32).is_some() {
                    return Err(bad("duplicate id"));
                }
            }
        }
        for s in 0..n {
            st.ids[s].store(ids[s], Relaxed);
            st.levels[s].store(levels[s], Relaxed);
            if levels[s] > 0 {
                let block = (0..levels[s] as usize * st.s1)
                    .map(|_| AtomicU32::new(0))
                    .collect();
                let _ = st.upper[s].set(block);
            }
            st.flags[s].store(READY | if flags[s] == 1 { DELETED } else { 0 }, Release);
        }
        read_links(&mut rd, &st, m, &levels)?;
        if version >= 2 {
            read_anchors(&mut rd, &st, n)?;
        }
        rd.finish()?;
        drop(st);
        if n > 0 {
            g.entry.store(((top as u64) << 32) | ep as u64, Release);
        }
        g.deleted
            .store(flags.iter().filter(|&&f| f == 1).count(), Relaxed);
        Ok(g)
    }
}

/// Reads every node's link lists (level 0, then each upper level) into `st`, validating each
/// count and target, and counts level-0 in-degrees.
fn read_links(rd: &mut Src, st: &Store, m: usize, levels: &[u8]) -> Result<(), GraphError> {
    let bad = |m: &str| GraphError::Corrupt(m.to_string());
    let n = levels.len();
    let mut list = Vec::with_capacity(2 * m);
    for l in 0..=MAX_LEVEL {
        let maxm = if l == 0 { 2 * m } else { m };
        for s in 0..n {
            if l > levels[s] as usize {
                continue;
            }
            let c = rd.u32()? as usize;
            if c > maxm {
                return Err(bad("link count too large"));
            }
            list.clear();
            for _ in 0..c {
                let t = rd.u32()? as usize;
                if t >= n || t == s || levels[t] < l as u8 {
                    return Err(bad("link target out of range"));
                }
                if l == 0 {
                    st.indeg[t].fetch_add(1, Relaxed);
                }
                list.push(t as u32);
            }
            set_list(st.links(s as u32, l), &list);
        }
    }
    Ok(())
}

/// Reads the `n` anchors (version 2) into `st`.
fn read_anchors(rd: &mut Src, st: &Store, n: usize) -> Result<(), GraphError> {
    for s in 0..n {
        let (a, d) = (rd.u32()?, f32::from_bits(rd.u32()?));
        // A cosine distance may be a hair below 0 (1 − dot of near-identical unit vectors).
        if (a as usize >= n && a != NONE) || a as usize == s || d.is_nan() {
            return Err(GraphError::Corrupt("bad anchor".into()));
        }
        st.anchor[s].store(a, Relaxed);
        st.anchor_d[s].store(d.to_bits(), Relaxed);
    }
    Ok(())
}

/// Keeps in `n`'s re-selected level-0 list every candidate anchored to `n` (see
/// [`Store::anchor`]), filling free room first, then displacing from the end entries that are
/// not.
/// An outlier's nearest neighbour is the node a search for it reaches: without this rule the
/// heuristic prunes the outlier from that node's list (some other neighbour is nearer to it),
/// and only a wide beam finds it.
fn anchored<'a>(
    st: &Store,
    n: u32,
    cands: impl Iterator<Item = &'a u32>,
    keep: &mut Vec<u32>,
    maxm: usize,
) {
    let is_anchored = |s: u32| st.anchor[s as usize].load(Relaxed) == n;
    for &c in cands {
        if !is_anchored(c) || keep.contains(&c) {
            continue;
        }
        if keep.len() < maxm {
            keep.push(c);
            continue;
        }
        match keep.iter().rposition(|&v| !is_anchored(v)) {
            Some(i) => keep[i] = c,
            None => return,
        }
    }
}

/// Level-0 orphan protection when a node's list changes from `old` (+ candidates `fresh`) to
/// `keep`: a dropped node whose in-degree would reach zero is kept, displacing (from the far end)
/// a kept node `n` may drop (it has other in-links and is not anchored to `n`). In-degree
/// counters are updated for the final list.
fn protect(st: &Store, n: u32, old: &[u32], fresh: &[u32], keep: &mut Vec<u32>, maxm: usize) {
    let deg = |s: u32| &st.indeg[s as usize];
    let mut need = Vec::new();
    for &o in old {
        if !keep.contains(&o) && deg(o).fetch_sub(1, AcqRel) <= 1 {
            need.push(o);
        }
    }
    need.extend(
        fresh
            .iter()
            .filter(|&&f| !keep.contains(&f) && deg(f).load(Acquire) == 0),
    );
    for o in need {
        let placed = if keep.len() < maxm {
            keep.push(o);
            true
        } else {
            let mut placed = false;
            for i in (0..keep.len()).rev() {
                let v = keep[i];
                if !old.contains(&v)
                    || fresh.contains(&v)
                    || st.anchor[v as usize].load(Relaxed) == n
                {
                    continue;
                }
                if deg(v).fetch_sub(1, AcqRel) >= 2 {
                    keep[i] = o;
                    placed = true;
                    break;
                }
                deg(v).fetch_add(1, AcqRel);
            }
            placed
        };
        if placed && old.contains(&o) {
            deg(o).fetch_add(1, AcqRel);
        }
    }
    for &f in fresh {
        if keep.contains(&f) {
            deg(f).fetch_add(1, AcqRel);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch(p: *const f32) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: prefetching is a hint and never faults; SSE is part of the x86_64 baseline.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(p as *const i8) };
}

/// Prefetches the first cache lines of a vector (the hardware prefetcher streams the rest).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_vec(v: &[f32]) {
    for i in (0..v.len().min(PREFETCH_FLOATS)).step_by(16) {
        prefetch(v[i..].as_ptr());
    }
}

/// Floats of a vector prefetched ahead of its distance (4 cache lines).
#[cfg(target_arch = "x86_64")]
const PREFETCH_FLOATS: usize = 64;

/// Buffered, checksumming writer.
struct Out<'a> {
    w: &'a mut dyn Write,
    buf: Vec<u8>,
    h: Checksum,
}

impl Out<'_> {
    fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.buf.extend_from_slice(b);
        if self.buf.len() >= 1 << 16 {
            self.flush()?;
        }
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.h.update(&self.buf);
        self.w.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }
    fn finish(mut self) -> std::io::Result<()> {
        self.flush()?;
        self.w.write_all(&self.h.value())?;
        self.w.flush()
    }
}

/// Bounds-checked, checksumming reader of a graph file of known length: reads in blocks,
/// hashes the body (all but the last 8 bytes) as it is consumed, never reads past it, and
/// [`Src::finish`] compares the hash with the file's checksum. Nothing read is trusted before
/// that: every value is validated as it is parsed, so damaged bytes are refused (at the
/// latest by the checksum) without a panic or an allocation larger than the file.
struct Src<'a> {
    r: &'a mut dyn Read,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// Body bytes not yet read into `buf`.
    unread: u64,
    /// Over the body up to `buf[..0]`; `buf[..pos]` is added at the next refill (so the
    /// header's version can choose the checksum first: [`Src::checksum`]).
    sum: Checksum,
}

/// Bytes a [`Src`] reads at a time (and the most one `take` can ask for).
const BLOCK: usize = 1 << 20;

impl<'a> Src<'a> {
    fn new(r: &'a mut dyn Read, len: u64) -> Result<Self, GraphError> {
        let unread = len
            .checked_sub(8)
            .ok_or_else(|| GraphError::Corrupt("truncated header".into()))?;
        Ok(Src {
            r,
            buf: vec![0; BLOCK],
            pos: 0,
            end: 0,
            unread,
            sum: Checksum::crc32(),
        })
    }
    /// Sets the checksum the file ends with; before any refill (the header fits the first).
    fn checksum(&mut self, sum: Checksum) {
        self.sum = sum;
    }
    /// Body bytes not consumed yet.
    fn left(&self) -> u64 {
        self.unread + (self.end - self.pos) as u64
    }
    fn take(&mut self, n: usize) -> Result<&[u8], GraphError> {
        if self.end - self.pos < n {
            if n > BLOCK || n as u64 > self.left() {
                return Err(GraphError::Corrupt("truncated".into()));
            }
            self.sum.update(&self.buf[..self.pos]);
            self.buf.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
            let want = ((BLOCK - self.end) as u64).min(self.unread) as usize;
            self.r
                .read_exact(&mut self.buf[self.end..self.end + want])?;
            self.end += want;
            self.unread -= want as u64;
        }
        self.pos += n;
        Ok(&self.buf[self.pos - n..self.pos])
    }
    /// `n` bytes into a vector of their own (any `n` up to what is left).
    fn bytes(&mut self, n: usize) -> Result<Vec<u8>, GraphError> {
        if n as u64 > self.left() {
            return Err(GraphError::Corrupt("truncated".into()));
        }
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let step = (n - out.len()).min(BLOCK);
            out.extend_from_slice(self.take(step)?);
        }
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8, GraphError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, GraphError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, GraphError> {
        Ok(self.u32()? as u64 | (self.u32()? as u64) << 32)
    }
    /// Checks that the body was read to its end and that its hash is the file's checksum.
    fn finish(mut self) -> Result<(), GraphError> {
        if self.left() != 0 {
            return Err(GraphError::Corrupt("trailing bytes".into()));
        }
        self.sum.update(&self.buf[..self.pos]);
        let mut sum = [0u8; 8];
        self.r.read_exact(&mut sum)?;
        if sum != self.sum.value() {
            return Err(GraphError::Corrupt("checksum mismatch".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(1);
            splitmix(self.0)
        }
        fn unif(&mut self) -> f32 {
            (self.next() >> 40) as f32 / (1u64 << 24) as f32
        }
        fn gauss(&mut self) -> f32 {
            let (u, v) = (self.unif().max(1e-7), self.unif());
            (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
        }
        fn unit(&mut self, dim: usize) -> Vec<f32> {
            normalise((0..dim).map(|_| self.gauss()).collect())
        }
    }

    fn normalise(mut v: Vec<f32>) -> Vec<f32> {
        let n = v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
        v.iter_mut().for_each(|x| *x = (*x as f64 / n) as f32);
        v
    }

    fn build(metric: Metric, data: &[Vec<f32>], params: Params) -> Graph {
        let g = Graph::new(metric, data[0].len(), params);
        let pts: Vec<(u64, &[f32])> = data
            .iter()
            .enumerate()
            .map(|(i, v)| (i as u64, v.as_slice()))
            .collect();
        g.insert_many(&pts).expect("insert");
        g
    }

    fn recall(g: &Graph, qs: &[Vec<f32>], k: usize, ef: usize) -> f64 {
        let hits: usize = qs
            .par_iter()
            .map(|q| {
                let truth: HashSet<u64> = g.exact_all(q, k).iter().map(|h| h.0).collect();
                g.search(q, k, ef)
                    .iter()
                    .filter(|h| truth.contains(&h.0))
                    .count()
            })
            .sum();
        hits as f64 / (qs.len() * k) as f64
    }

    /// Rank 1, or present tied with rank 1, or rank 1 is an exact duplicate of the vector.
    /// (ef 200: at ef 64 hnswlib itself misses ~0.05% of random 384-d points; see report.)
    fn self_found(g: &Graph, id: u64, v: &[f32]) -> bool {
        let r = g.search(v, 10, 200);
        let Some(&(first, d0)) = r.first() else {
            return false;
        };
        first == id
            || r.iter().any(|&(i, d)| i == id && d <= d0 + 1e-7)
            || (d0 <= 1e-6 && g.vector(first).as_deref() == Some(v))
    }

    fn all_self_found(g: &Graph, data: &[Vec<f32>]) -> usize {
        data.par_iter()
            .enumerate()
            .filter(|(i, v)| !self_found(g, *i as u64, v))
            .count()
    }

    #[test]
    fn kernels_match_scalar() {
        let mut r = Rng(1);
        for dim in [1, 7, 8, 15, 16, 17, 63, 64, 65, 100, 384, 768] {
            let (a, b): (Vec<f32>, Vec<f32>) = (0..dim).map(|_| (r.gauss(), r.gauss())).unzip();
            let dot: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            let l2: f32 = a.iter().zip(&b).map(|(x, y)| (x - y) * (x - y)).sum();
            let (cos, sq) = kernels();
            // SAFETY: kernels() only returns kernels this CPU supports.
            let (c, s) = unsafe { (cos(&a, &b), sq(&a, &b)) };
            assert!(
                (1.0 - dot - c).abs() < 1e-3 && (l2 - s).abs() < 1e-3 * l2.max(1.0),
                "dim {dim}"
            );
            assert!(
                (1.0 - dot - cos_portable(&a, &b)).abs() < 1e-3
                    && (l2 - l2sq_portable(&a, &b)).abs() < 1e-2
            );
        }
    }

    /// Random 384-d unit vectors have no structure: every HNSW (hnswlib included: 0.265 at ef=64
    /// on this data) gets low recall@10 there, so the 0.99 recall bar is checked on clustered
    /// data, and random data is used for self-retrieval and a sanity recall floor.
    #[test]
    fn random_recall_and_self_retrieval() {
        let mut r = Rng(7);
        let data: Vec<Vec<f32>> = (0..20_000).map(|_| r.unit(384)).collect();
        let qs: Vec<Vec<f32>> = (0..200).map(|_| r.unit(384)).collect();
        let centres: Vec<Vec<f32>> = (0..200).map(|_| r.unit(384)).collect();
        let noisy = |c: &[f32], r: &mut Rng| {
            normalise(
                c.iter()
                    .zip(r.unit(384))
                    .map(|(a, b)| a + 0.7 * b)
                    .collect(),
            )
        };
        let clustered: Vec<Vec<f32>> = (0..20_000)
            .map(|i| noisy(&centres[i % 200], &mut r))
            .collect();
        let cqs: Vec<Vec<f32>> = (0..200)
            .map(|i| noisy(&clustered[i * 97], &mut r))
            .collect();
        for metric in [Metric::Cosine, Metric::L2] {
            let g = build(metric, &data, Params::default());
            assert_eq!((g.len(), g.live()), (20_000, 20_000));
            let rec = recall(&g, &qs, 10, 64);
            assert_eq!(all_self_found(&g, &data), 0, "{metric:?} self-retrieval");
            let g = build(metric, &clustered, Params::default());
            let crec = recall(&g, &cqs, 10, 64);
            println!("{metric:?}: recall@10 at ef=64: random {rec:.4}, clustered {crec:.4}");
            assert!(
                rec >= 0.2 && crec >= 0.99,
                "{metric:?} recall {rec} / {crec}"
            );
        }
    }

    #[test]
    fn near_duplicates_are_reachable() {
        let mut r = Rng(11);
        let bases: Vec<Vec<f32>> = (0..50).map(|_| r.unit(384)).collect();
        let mut data: Vec<Vec<f32>> = (0..5000)
            .map(|i| {
                let noise = r.unit(384);
                normalise(
                    bases[i % 50]
                        .iter()
                        .zip(&noise)
                        .map(|(b, n)| b + 1e-3 * n)
                        .collect(),
                )
            })
            .collect();
        let dup = data[17].clone();
        data.extend((0..100).map(|_| dup.clone()));
        let qs: Vec<Vec<f32>> = (0..200)
            .map(|i| {
                normalise(
                    data[i * 25]
                        .iter()
                        .zip(r.unit(384))
                        .map(|(b, n)| b + 1e-3 * n)
                        .collect(),
                )
            })
            .collect();
        for metric in [Metric::Cosine, Metric::L2] {
            let g = build(metric, &data, Params::default());
            assert_eq!(
                all_self_found(&g, &data),
                0,
                "{metric:?} near-duplicate self-retrieval"
            );
            let rec = recall(&g, &qs, 10, 64);
            println!("{metric:?}: near-duplicate recall@10 at ef=64 = {rec:.4}");
            assert!(rec >= 0.99, "{metric:?} recall {rec}");
        }
    }

    #[test]
    fn filtered_search() {
        let mut r = Rng(3);
        let (c1, c2) = (r.unit(32), r.unit(32));
        let near = |c: &[f32], r: &mut Rng| {
            normalise(
                c.iter()
                    .zip(r.unit(32))
                    .map(|(a, b)| a + 0.05 * b)
                    .collect(),
            )
        };
        let data: Vec<Vec<f32>> = (0..160)
            .map(|i| near(if i < 150 { &c1 } else { &c2 }, &mut r))
            .collect();
        let g = build(Metric::Cosine, &data, Params::default());
        let few: Vec<u64> = (150..160).collect();
        let q = near(&c1, &mut r);
        let hits = g.search_filtered(&q, 10, 16, &|id| id >= 150);
        assert_eq!(hits, g.exact(&q, 10, &few));
        assert_eq!(g.search_filtered(&q, 50, 16, &|id| id >= 150).len(), 10);

        let data: Vec<Vec<f32>> = (0..20_000).map(|_| r.unit(64)).collect();
        let g = build(
            Metric::L2,
            &data,
            Params {
                m: 16,
                ef_construction: 100,
            },
        );
        let allowed: Vec<u64> = (0..20_000).filter(|i| i % 100 == 37).collect();
        let (mut same, mut total) = (0, 0);
        for _ in 0..50 {
            let q = r.unit(64);
            let got = g.search_filtered(&q, 10, 64, &|id| id % 100 == 37);
            let truth = g.exact(&q, 10, &allowed);
            assert_eq!(got.len(), 10);
            assert!(got.iter().all(|h| h.0 % 100 == 37));
            same += got
                .iter()
                .filter(|h| truth.iter().any(|t| t.0 == h.0))
                .count();
            total += 10;
        }
        let rec = same as f64 / total as f64;
        println!("1% filter recall@10 = {rec:.4}");
        assert!(rec >= 0.95);
    }

    #[test]
    fn tombstones() {
        let mut r = Rng(5);
        let data: Vec<Vec<f32>> = (0..3000).map(|_| r.unit(48)).collect();
        let g = build(Metric::Cosine, &data, Params::default());
        let q = r.unit(48);
        for (id, _) in g.exact_all(&q, 40) {
            assert!(g.remove(id));
        }
        for id in (0..3000).step_by(7) {
            g.remove(id);
        }
        assert!(!g.remove(0) && !g.remove(999_999));
        assert_eq!(g.live() + g.deleted(), 3000);
        let qs: Vec<Vec<f32>> = std::iter::once(q.clone())
            .chain((0..200).map(|_| r.unit(48)))
            .collect();
        for q in &qs {
            let hits = g.search(q, 10, 32);
            assert_eq!(hits.len(), 10);
            assert!(hits.iter().all(|h| g.contains(h.0)));
        }
        // Parallel construction makes the graph differ from run to run: at ef 32 recall on these
        // random 48-d points ranged 0.898..0.933 over 51 queries (it failed CI once at 0.898), so
        // the bar is checked at ef 64 over 201 queries, where runs stay well above it.
        let rec = recall(&g, &qs, 10, 64);
        println!("recall with tombstones = {rec:.4}");
        assert!(rec >= 0.95);
        let keep = [5u64, 1234, 2999];
        for id in 0..3000 {
            if !keep.contains(&id) {
                g.remove(id);
            }
        }
        let mut got: Vec<u64> = g.search(&q, 10, 10).iter().map(|h| h.0).collect();
        got.sort_unstable();
        assert_eq!(got, keep);
        assert_eq!(g.ids(), keep);
        assert_eq!((g.live(), g.len()), (3, 3000));
    }

    #[test]
    fn concurrent_inserts_and_searches() {
        let mut r = Rng(9);
        let data: Vec<Vec<f32>> = (0..8000).map(|_| r.unit(32)).collect();
        let g = Graph::new(Metric::L2, 32, Params::default());
        let done = AtomicUsize::new(0);
        std::thread::scope(|sc| {
            for t in 0..4 {
                let (g, data, done) = (&g, &data, &done);
                sc.spawn(move || {
                    for (i, v) in data.iter().enumerate().skip(t * 2000).take(2000) {
                        g.insert(i as u64, v).expect("insert");
                    }
                    done.fetch_add(1, Relaxed);
                });
            }
            for t in 0..2 {
                let (g, data, done) = (&g, &data, &done);
                sc.spawn(move || {
                    let mut i = t;
                    while done.load(Relaxed) < 4 {
                        let hits = g.search(&data[i % 8000], 5, 32);
                        assert!(hits.windows(2).all(|w| w[0].1 <= w[1].1));
                        i += 13;
                    }
                });
            }
        });
        assert_eq!(g.len(), 8000);
        assert_eq!(all_self_found(&g, &data), 0);
    }

    /// `b` with the checksum its version's files end with.
    fn reseal(mut b: Vec<u8>) -> Vec<u8> {
        let n = b.len() - 8;
        let sum = match u32::from_le_bytes([b[8], b[9], b[10], b[11]]) {
            1 | 2 => Checksum::fnv(),
            _ => Checksum::crc32(),
        };
        let h = sum.of(&b[..n]);
        b[n..].copy_from_slice(&h);
        b
    }

    #[test]
    fn persistence_round_trip_and_corruption() {
        let mut r = Rng(13);
        let data: Vec<Vec<f32>> = (0..2000).map(|_| r.unit(24)).collect();
        let g = build(
            Metric::L2,
            &data,
            Params {
                m: 8,
                ef_construction: 64,
            },
        );
        g.remove(3);
        let mut bytes = Vec::new();
        g.write_to(&mut bytes).expect("write");
        let h = Graph::read_from(&mut bytes.as_slice()).expect("read");
        assert_eq!(
            (h.len(), h.live(), h.dim(), h.params(), h.metric()),
            (2000, 1999, 24, g.params(), Metric::L2)
        );
        for _ in 0..100 {
            let q = r.unit(24);
            assert_eq!(g.search(&q, 10, 32), h.search(&q, 10, 32));
        }
        let mut again = Vec::new();
        h.write_to(&mut again).expect("write");
        assert_eq!(again, bytes);

        let small = build(
            Metric::Cosine,
            &data[..50]
                .iter()
                .map(|v| v[..8].to_vec())
                .collect::<Vec<_>>(),
            Params::default(),
        );
        let mut b = Vec::new();
        small.write_to(&mut b).expect("write");
        assert!(Graph::read_from(&mut b.as_slice()).is_ok());
        for len in 0..b.len() {
            assert!(
                matches!(
                    Graph::read_from(&mut &b[..len]),
                    Err(GraphError::Corrupt(_))
                ),
                "prefix {len}"
            );
        }
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x5a;
            assert!(
                matches!(
                    Graph::read_from(&mut c.as_slice()),
                    Err(GraphError::Corrupt(_))
                ),
                "flip {i}"
            );
            // With a valid checksum the structural checks must still never panic.
            let _ = Graph::read_from(&mut reseal(c).as_slice());
        }
        let header = 8 + 4 + 1 + 12;
        let mut huge = b.clone();
        huge[header..header + 8].copy_from_slice(&(1u64 << 60).to_le_bytes());
        assert!(matches!(
            Graph::read_from(&mut reseal(huge).as_slice()),
            Err(GraphError::Corrupt(_))
        ));
        let mut dim = b.clone();
        dim[13..17].copy_from_slice(&9u32.to_le_bytes());
        assert!(Graph::read_from(&mut reseal(dim).as_slice()).is_err());
        // Point the first level-0 link of node 0 out of range.
        let links = header + 8 + 4 + 50 * (8 * 4 + 8 + 1 + 1);
        let mut link = b.clone();
        link[links + 4..links + 8].copy_from_slice(&50u32.to_le_bytes());
        assert!(matches!(
            Graph::read_from(&mut reseal(link).as_slice()),
            Err(GraphError::Corrupt(_))
        ));
        let empty = Graph::new(Metric::Cosine, 4, Params::default());
        let mut e = Vec::new();
        empty.write_to(&mut e).expect("write");
        assert!(Graph::read_from(&mut e.as_slice())
            .expect("empty")
            .is_empty());
    }

    #[test]
    fn compaction() {
        let mut r = Rng(17);
        let data: Vec<Vec<f32>> = (0..3000).map(|_| r.unit(32)).collect();
        let g = build(Metric::Cosine, &data, Params::default());
        for id in (0..3000).step_by(3) {
            g.remove(id);
        }
        let c = g.compacted();
        assert_eq!((c.len(), c.live(), c.deleted()), (2000, 2000, 0));
        assert_eq!(c.ids(), g.ids());
        assert!(!c.contains(0) && c.contains(1));
        for _ in 0..100 {
            let q = r.unit(32);
            assert_eq!(c.search(&q, 10, 200), g.search(&q, 10, 200));
        }
        assert_eq!(all_self_found(&c, &data[1..2]), 0);
    }

    #[test]
    fn errors_and_edge_cases() {
        let g = Graph::new(Metric::L2, 4, Params::default());
        assert!(g.search(&[0.0; 4], 5, 10).is_empty());
        assert!(matches!(
            g.insert(1, &[0.0; 3]),
            Err(GraphError::Dim {
                expected: 4,
                got: 3
            })
        ));
        assert!(matches!(
            g.insert(1, &[0.0, f32::NAN, 0.0, 0.0]),
            Err(GraphError::NonFinite)
        ));
        g.insert(1, &[1.0, 0.0, 0.0, 0.0]).expect("insert");
        assert_eq!(g.search(&[0.0; 4], 5, 0), vec![(1, 1.0)]);
        assert!(g.search(&[0.0; 4], 0, 10).is_empty());
        assert!(matches!(
            g.insert(1, &[0.0; 4]),
            Err(GraphError::Duplicate(1))
        ));
        let batch: Vec<(u64, &[f32])> = vec![(2, &[0.0; 4]), (3, &[0.0, 0.0, f32::INFINITY, 0.0])];
        assert!(matches!(g.insert_many(&batch), Err(GraphError::NonFinite)));
        let batch: Vec<(u64, &[f32])> = vec![(2, &[0.0; 4]), (1, &[0.0; 4])];
        assert!(matches!(
            g.insert_many(&batch),
            Err(GraphError::Duplicate(1))
        ));
        let batch: Vec<(u64, &[f32])> = vec![(2, &[0.0; 4]), (2, &[0.0; 4])];
        assert!(matches!(
            g.insert_many(&batch),
            Err(GraphError::Duplicate(2))
        ));
        assert_eq!((g.len(), g.ids()), (1, vec![1]));
        assert_eq!(g.vector(1), Some(vec![1.0, 0.0, 0.0, 0.0]));
        assert_eq!(g.exact(&[0.0; 4], 3, &[1, 1, 42]), vec![(1, 1.0)]);
        assert!(g.remove(1) && g.search(&[0.0; 4], 5, 10).is_empty() && g.vector(1).is_none());
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Graph>();
    }

    /// Every node's anchor keeps a level-0 link to it through re-selected lists (small M, so
    /// lists overflow constantly). Inserted one by one, so the graph is the same every run.
    #[test]
    fn anchors_keep_their_links() {
        let mut r = Rng(21);
        let g = Graph::new(
            Metric::L2,
            16,
            Params {
                m: 4,
                ef_construction: 32,
            },
        );
        for id in 0..3000 {
            g.insert(id, &r.unit(16)).expect("inserts");
        }
        let st = g.store.reading();
        let (mut anchored, mut broken) = (0, 0);
        for x in 0..g.len() as u32 {
            let a = st.anchor[x as usize].load(Relaxed);
            if a == NONE {
                continue;
            }
            anchored += 1;
            let d = f32::from_bits(st.anchor_d[x as usize].load(Relaxed));
            assert_eq!(d, g.d(st.vec(x), st.vec(a)), "anchor distance of {x}");
            if !entries(st.links(a, 0)).iter().any(|l| l.load(Relaxed) == x) {
                broken += 1;
            }
        }
        // Every point but perhaps the first has one (the first gets one once a later point is
        // nearer to it than anything).
        assert!(anchored >= g.len() - 1, "{anchored} anchored");
        assert_eq!(broken, 0, "anchors that lost their link");
    }

    /// Version 1 files (no anchors) still load and answer the same; later inserts work.
    #[test]
    fn version_1_files_load_without_anchors() {
        let mut r = Rng(5);
        let data: Vec<Vec<f32>> = (0..500).map(|_| r.unit(12)).collect();
        let g = build(Metric::Cosine, &data, Params::default());
        let mut b = Vec::new();
        g.write_to(&mut b).expect("write");
        // Drop the anchor section (8 bytes a point) and say version 1.
        let end = b.len() - 8 - 8 * g.len();
        let mut v1 = b[..end].to_vec();
        v1.extend_from_slice(&[0; 8]);
        v1[8..12].copy_from_slice(&1u32.to_le_bytes());
        let h = Graph::read_from(&mut reseal(v1).as_slice()).expect("version 1 loads");
        for _ in 0..50 {
            let q = r.unit(12);
            assert_eq!(g.search(&q, 10, 64), h.search(&q, 10, 64));
        }
        assert_eq!(h.store.reading().anchor[7].load(Relaxed), NONE);
        let v = r.unit(12);
        h.insert(10_000, &v).expect("inserts");
        assert_eq!(h.search(&v, 1, 64)[0].0, 10_000);
        let mut future = b.clone();
        future[8..12].copy_from_slice(&(VERSION + 1).to_le_bytes());
        assert!(Graph::read_from(&mut reseal(future).as_slice()).is_err());
    }

    /// Version 2 files (FNV-1a checksum) still load; version 3 ends with a CRC-32, and each
    /// version's file is refused under the other's checksum.
    #[test]
    fn version_2_files_with_the_fnv_checksum_still_load() {
        let mut r = Rng(6);
        let data: Vec<Vec<f32>> = (0..300).map(|_| r.unit(8)).collect();
        let g = build(Metric::L2, &data, Params::default());
        let mut v3 = Vec::new();
        g.write_to(&mut v3).expect("write");
        let n = v3.len() - 8;
        assert_eq!(v3[n..], Checksum::crc32().of(&v3[..n]));
        let mut v2 = v3.clone();
        v2[8..12].copy_from_slice(&2u32.to_le_bytes());
        let v2 = reseal(v2);
        assert_eq!(v2[n..], Checksum::fnv().of(&v2[..n]));
        let h = Graph::read_from(&mut v2.as_slice()).expect("version 2 loads");
        for _ in 0..30 {
            let q = r.unit(8);
            assert_eq!(g.search(&q, 10, 64), h.search(&q, 10, 64));
        }
        let mut crossed = v2.clone();
        crossed[n..].copy_from_slice(&Checksum::crc32().of(&v2[..n]));
        assert!(Graph::read_from(&mut crossed.as_slice()).is_err());
        let mut crossed = v3.clone();
        crossed[n..].copy_from_slice(&Checksum::fnv().of(&v3[..n]));
        assert!(Graph::read_from(&mut crossed.as_slice()).is_err());
    }

    /// A graph larger than the reader's block streams in and reads back the same; every
    /// truncation of it is refused.
    #[test]
    fn graphs_larger_than_a_read_block_stream_in() {
        let mut r = Rng(9);
        let data: Vec<Vec<f32>> = (0..3000).map(|_| r.unit(96)).collect();
        let g = build(Metric::Cosine, &data, Params::default());
        let mut b = Vec::new();
        g.write_to(&mut b).expect("write");
        assert!(b.len() > BLOCK, "{} bytes", b.len());
        let h = Graph::read_sized(&mut b.as_slice(), b.len() as u64).expect("loads");
        let mut again = Vec::new();
        h.write_to(&mut again).expect("write");
        assert_eq!(again, b, "reads back the same graph");
        for cut in [b.len() - 1, BLOCK + 3, BLOCK - 1, 100] {
            assert!(Graph::read_from(&mut &b[..cut]).is_err(), "cut at {cut}");
            // A length that promises more than the reader has.
            assert!(Graph::read_sized(&mut &b[..cut], b.len() as u64).is_err());
        }
        let mut flipped = b.clone();
        flipped[BLOCK + 5] ^= 0x10;
        assert!(Graph::read_from(&mut flipped.as_slice()).is_err());
    }

    /// Exact duplicates in a cosine graph anchor each other at a distance of 1 − dot, which
    /// rounding can put a hair below 0: such a graph must still load.
    #[test]
    fn a_cosine_graph_of_duplicates_round_trips() {
        let mut r = Rng(8);
        let g = Graph::new(Metric::Cosine, 48, Params::default());
        for i in 0..300 {
            // Unit vectors up to rounding: a norm a hair above 1 makes 1 − dot(v, v) negative.
            let v: Vec<f32> = normalise(r.unit(48)).iter().map(|x| x * 1.000_01).collect();
            g.insert(i, &v).expect("inserts");
            g.insert(1000 + i, &v).expect("inserts");
        }
        let below = {
            let st = g.store.reading();
            (0..g.len())
                .filter(|&s| f32::from_bits(st.anchor_d[s].load(Relaxed)) < 0.0)
                .count()
        };
        assert!(
            below > 0,
            "no anchor distance below 0: the test shows nothing"
        );
        let mut b = Vec::new();
        g.write_to(&mut b).expect("write");
        let h = Graph::read_from(&mut b.as_slice()).expect("loads");
        assert_eq!(h.len(), 600);
    }
}
