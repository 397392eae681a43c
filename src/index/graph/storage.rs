//! Per-slot storage of one graph: vectors, ids, levels, flags and links, growable behind one lock.

use super::*;

/// Flat vector buffer written through shared references.
pub(super) struct Floats(pub(super) Vec<UnsafeCell<f32>>);

// SAFETY: a slot's floats are written exactly once, by the thread that reserved the slot, before
// the slot is published (READY flag or a link, both stored with Release). Every other access is a
// read that follows an Acquire load synchronising with that publication, so no access races with
// the write. The buffer is only resized under the exclusive store lock, when nobody else reads.
unsafe impl Sync for Floats {}

pub(super) struct Store {
    pub(super) cap: usize,
    pub(super) dim: usize,
    pub(super) s0: usize,
    pub(super) s1: usize,
    pub(super) vecs: Floats,
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
    pub(super) fn vec(&self, s: u32) -> &[f32] {
        let i = s as usize * self.dim;
        let cells = &self.vecs.0[i..i + self.dim];
        // SAFETY: UnsafeCell<f32> has f32's layout; the slot is published, so (see `Floats`) no
        // thread writes these cells any more while this shared borrow lives.
        unsafe { std::slice::from_raw_parts(cells.as_ptr() as *const f32, self.dim) }
    }

    /// Writes the vector of a slot that the calling thread reserved and has not published.
    #[inline]
    pub(super) fn write_vec(&self, s: u32, v: &[f32]) {
        let i = s as usize * self.dim;
        for (c, x) in self.vecs.0[i..i + self.dim].iter().zip(v) {
            // SAFETY: the slot is reserved for this thread and unpublished: no other access exists.
            unsafe { *c.get() = *x };
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
