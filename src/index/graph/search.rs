//! Searching the graph: the greedy descent, the layer search with its thread-local scratch, filtered and exact searches, and reads by id.

use super::*;

#[derive(Clone, Copy, Debug)]
pub(super) struct Near {
    pub(super) d: f32,
    pub(super) s: u32,
}

impl PartialEq for Near {
    #[inline]
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}

impl Eq for Near {}

impl PartialOrd for Near {
    #[inline]
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Near {
    #[inline]
    fn cmp(&self, o: &Self) -> Ordering {
        self.d.total_cmp(&o.d).then(self.s.cmp(&o.s))
    }
}

/// Per-thread search scratch: generation-tagged visited marks and the two heaps.
#[derive(Default)]
pub(super) struct Scratch {
    pub(super) marks: Vec<u16>,
    pub(super) tag: u16,
    pub(super) cand: BinaryHeap<Reverse<Near>>,
    pub(super) res: BinaryHeap<Near>,
    /// The unvisited neighbours of the node being expanded.
    pub(super) fresh: Vec<u32>,
}

impl Scratch {
    #[inline]
    pub(super) fn reset(&mut self, n: usize) {
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
    pub(super) fn visit(&mut self, s: u32) -> bool {
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
#[inline]
pub(super) fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    let mut s = SCRATCH.with(|c| c.take()).unwrap_or_default();
    let r = f(&mut s);
    SCRATCH.with(|c| c.set(Some(s)));
    r
}

impl Graph {
    /// Greedy descent from level `from` down to level `to + 1`.
    pub(super) fn greedy(
        &self,
        st: &Store,
        q: &[f32],
        mut cur: Near,
        from: usize,
        to: usize,
    ) -> Near {
        for l in (to + 1..=from).rev() {
            let mut changed = true;
            while changed {
                changed = false;
                for a in entries(st.links(cur.s, l)) {
                    let nb = a.load(Acquire);
                    let d = self.d(q, st.row(nb));
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
    pub(super) fn search_layer<F: Fn(u32) -> bool>(
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
                    prefetch_vec(st.row(nb));
                    fresh.push(nb);
                }
            }
            for &nb in &fresh {
                let d = self.d(q, st.row(nb));
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

    /// The `k` nearest live points to `q`, nearest first, searching with breadth `max(ef, k)`.
    #[inline]
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
    #[inline]
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

    pub(super) fn search_impl<F: Fn(&Store, u32) -> bool>(
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
                d: self.d(q, st.row(s)),
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

    pub(super) fn exact_slots(
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
                d: self.d(q, st.row(s)),
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
    #[inline]
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
    #[inline]
    pub fn exact_all(&self, q: &[f32], k: usize) -> Vec<(u64, f32)> {
        let st = self.store.reading();
        self.exact_slots(&st, q, k, 0..st.cap as u32)
    }

    /// A copy of a live point's vector (decoded, where the graph keeps codes).
    #[inline]
    pub fn vector(&self, id: u64) -> Option<Vec<f32>> {
        let s = self.slot(id)?;
        let st = self.store.reading();
        st.live(s).then(|| st.floats(s, &mut Vec::new()).to_vec())
    }

    /// Whether point `id` is live and holds exactly vector `v` (as this graph keeps vectors:
    /// coded, `v`'s codes); None when `id` was never a point of this graph (a removed point
    /// is `Some(false)`: its id cannot be inserted again).
    #[inline]
    pub fn holds(&self, id: u64, v: &[f32]) -> Option<bool> {
        let s = self.slot(id)?;
        let st = self.store.reading();
        if !st.live(s) || v.len() != self.dim {
            return Some(false);
        }
        Some(match st.row(s) {
            Row::F32(kept) => kept == v,
            Row::Sq8(r) => {
                let (codes, scale) = Row::sq8(r);
                let mut c = vec![0i8; self.dim];
                sq8_encode(v, &mut c) == scale && c == codes
            }
        })
    }

    /// None when `id` was never a point of this graph; else whether it is live (a removed
    /// point is `Some(false)`: its id cannot be inserted again).
    #[inline]
    pub fn status(&self, id: u64) -> Option<bool> {
        let s = self.slot(id)?;
        Some(self.store.reading().live(s))
    }

    /// Live ids, in insertion order.
    #[inline]
    pub fn ids(&self) -> Vec<u64> {
        let st = self.store.reading();
        (0..st.cap as u32)
            .filter(|&s| st.live(s))
            .map(|s| st.ids[s as usize].load(Relaxed))
            .collect()
    }
}
