//! Per-slot storage of one graph: vectors, ids, levels, flags and links, growable behind one lock.

use super::*;

/// A flat buffer written through shared references.
pub(super) struct Cells<T>(pub(super) Vec<UnsafeCell<T>>);

// SAFETY: a slot's cells are written exactly once, by the thread that reserved the slot, before
// the slot is published (READY flag or a link, both stored with Release). Every other access is a
// read that follows an Acquire load synchronising with that publication, so no access races with
// the write. The buffer is only resized under the exclusive store lock, when nobody else reads.
unsafe impl<T: Send> Sync for Cells<T> {}

impl<T: Copy + Default> Cells<T> {
    fn resize(&mut self, len: usize) {
        self.0.resize_with(len, || UnsafeCell::new(T::default()));
    }

    /// Cells `at..at + n` of published slots.
    #[inline]
    fn slice(&self, at: usize, n: usize) -> &[T] {
        let cells = &self.0[at..at + n];
        // SAFETY: UnsafeCell<T> has T's layout; the slot is published, so (see `Cells`) no
        // thread writes these cells any more while this shared borrow lives.
        unsafe { std::slice::from_raw_parts(cells.as_ptr() as *const T, n) }
    }

    /// Writes cells of a slot that the calling thread reserved and has not published.
    #[inline]
    fn write(&self, at: usize, v: &[T]) {
        for (c, x) in self.0[at..at + v.len()].iter().zip(v) {
            // SAFETY: the slot is reserved for this thread and unpublished: no other access exists.
            unsafe { *c.get() = *x };
        }
    }
}

/// The points' vectors, as the graph keeps them ([`GraphVectors`]).
pub(super) enum Vectors {
    /// `slot * dim` floats.
    F32(Cells<f32>),
    /// Per slot (`slot * (4 + dim)`) its scale's 4 bytes (little-endian `f32`), then its `dim`
    /// int8 codes (see [`sq8_encode`]): one memory stream per distance.
    Sq8(Cells<i8>),
}

/// Bytes of an sq8 row before its codes (the scale).
const SCALE_BYTES: usize = 4;

/// One slot's vector as stored.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Row<'a> {
    F32(&'a [f32]),
    /// The scale's bytes, then the codes.
    Sq8(&'a [i8]),
}

impl<'a> Row<'a> {
    /// The first byte, for prefetching.
    #[inline]
    pub(super) fn as_ptr(&self) -> *const u8 {
        match self {
            Row::F32(v) => v.as_ptr() as *const u8,
            Row::Sq8(r) => r.as_ptr() as *const u8,
        }
    }

    /// Bytes it takes.
    #[inline]
    pub(super) fn bytes(&self) -> usize {
        match self {
            Row::F32(v) => 4 * v.len(),
            Row::Sq8(r) => r.len(),
        }
    }

    /// An sq8 row's codes and scale.
    #[inline]
    pub(super) fn sq8(r: &'a [i8]) -> (&'a [i8], f32) {
        let (s, codes) = r.split_at(SCALE_BYTES);
        let scale = f32::from_le_bytes([s[0] as u8, s[1] as u8, s[2] as u8, s[3] as u8]);
        (codes, scale)
    }
}

impl Vectors {
    pub(super) fn new(kind: GraphVectors) -> Vectors {
        match kind {
            GraphVectors::F32 => Vectors::F32(Cells(Vec::new())),
            GraphVectors::Sq8 => Vectors::Sq8(Cells(Vec::new())),
        }
    }

    pub(super) fn kind(&self) -> GraphVectors {
        match self {
            Vectors::F32(_) => GraphVectors::F32,
            Vectors::Sq8(_) => GraphVectors::Sq8,
        }
    }

    fn resize(&mut self, cap: usize, dim: usize) {
        match self {
            Vectors::F32(f) => f.resize(cap * dim),
            Vectors::Sq8(rows) => rows.resize(cap * (SCALE_BYTES + dim)),
        }
    }
}

pub(super) struct Store {
    pub(super) cap: usize,
    pub(super) dim: usize,
    pub(super) s0: usize,
    pub(super) s1: usize,
    pub(super) vecs: Vectors,
    pub(super) ids: Vec<AtomicU64>,
    pub(super) flags: Vec<AtomicU8>,
    pub(super) levels: Vec<AtomicU8>,
    pub(super) locks: Vec<Mutex<()>>,
    pub(super) links0: Vec<AtomicU32>,
    pub(super) upper: Vec<OnceLock<Box<[AtomicU32]>>>,
    pub(super) indeg: Vec<AtomicU32>,
    /// Level 0: the node that must keep a link to this one, `NONE` if not known: its nearest
    /// neighbour when it was linked, or a nearer node linked after it (see `Graph::adopt`).
    pub(super) anchor: Vec<AtomicU32>,
    /// The (internal) distance to the anchor, as `f32` bits; infinity when there is none.
    pub(super) anchor_d: Vec<AtomicU32>,
}

impl Store {
    pub(super) fn grow(&mut self, cap: usize) {
        self.vecs.resize(cap, self.dim);
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
    pub(super) fn row(&self, s: u32) -> Row<'_> {
        match &self.vecs {
            Vectors::F32(f) => Row::F32(f.slice(s as usize * self.dim, self.dim)),
            Vectors::Sq8(rows) => {
                let n = SCALE_BYTES + self.dim;
                Row::Sq8(rows.slice(s as usize * n, n))
            }
        }
    }

    /// The vector of a published slot as floats: borrowed where they are kept, else decoded
    /// into `buf`.
    #[inline]
    pub(super) fn floats<'a>(&'a self, s: u32, buf: &'a mut Vec<f32>) -> &'a [f32] {
        match self.row(s) {
            Row::F32(v) => v,
            Row::Sq8(r) => {
                let (c, scale) = Row::sq8(r);
                buf.clear();
                buf.extend(c.iter().map(|&x| scale * x as f32));
                buf
            }
        }
    }

    /// Writes the vector of a slot that the calling thread reserved and has not published
    /// (coded, where the graph keeps codes).
    #[inline]
    pub(super) fn write_vec(&self, s: u32, v: &[f32]) {
        match &self.vecs {
            Vectors::F32(f) => f.write(s as usize * self.dim, v),
            Vectors::Sq8(_) => {
                let mut c = vec![0i8; self.dim];
                let scale = sq8_encode(v, &mut c);
                self.write_codes(s, &c, scale);
            }
        }
    }

    /// Writes the stored form of a slot the calling thread reserved (from a file).
    #[inline]
    pub(super) fn write_codes(&self, s: u32, c: &[i8], scale: f32) {
        if let Vectors::Sq8(rows) = &self.vecs {
            let at = s as usize * (SCALE_BYTES + self.dim);
            let bytes = scale.to_le_bytes().map(|b| b as i8);
            rows.write(at, &bytes);
            rows.write(at + SCALE_BYTES, c);
        }
    }

    #[inline]
    pub(super) fn live(&self, s: u32) -> bool {
        self.flags
            .get(s as usize)
            .is_some_and(|f| f.load(Acquire) & (READY | DELETED) == READY)
    }

    /// The link block (count first) of slot `s` at level `l`; empty if the node has no such level.
    #[inline]
    pub(super) fn links(&self, s: u32, l: usize) -> &[AtomicU32] {
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
pub(super) fn entries(list: &[AtomicU32]) -> &[AtomicU32] {
    match list.split_first() {
        Some((c, rest)) => &rest[..(c.load(Acquire) as usize).min(rest.len())],
        None => &[],
    }
}

/// Replaces a link block's contents (caller holds the node's lock).
#[inline]
pub(super) fn set_list(list: &[AtomicU32], items: &[u32]) {
    if let Some((c, rest)) = list.split_first() {
        for (a, &v) in rest.iter().zip(items) {
            a.store(v, Release);
        }
        c.store(items.len().min(rest.len()) as u32, Release);
    }
}
