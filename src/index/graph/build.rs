//! Building the graph: inserting and linking points (HNSW neighbour selection, in-degree protection, anchors), removing, and compacting.

use super::*;

/// Keeps in `n`'s re-selected level-0 list every candidate anchored to `n` (see
/// [`Store::anchor`]), filling free room first, then displacing from the end entries that are
/// not.
/// An outlier's nearest neighbour is the node a search for it reaches: without this rule the
/// heuristic prunes the outlier from that node's list (some other neighbour is nearer to it),
/// and only a wide beam finds it.
pub(super) fn anchored<'a>(
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
pub(super) fn protect(
    st: &Store,
    n: u32,
    old: &[u32],
    fresh: &[u32],
    keep: &mut Vec<u32>,
    maxm: usize,
) {
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

impl Graph {
    /// Inserts a point. Safe to call concurrently with searches and other inserts.
    #[inline]
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
    pub(super) fn insert_reserved(&self, base: usize, points: &[(u64, &[f32])]) {
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
            self.link(st, s, v, level);
        };
        if points.len() == 1 {
            points.iter().enumerate().for_each(one);
        } else {
            points.par_iter().enumerate().for_each(one);
        }
    }

    /// Connects the written slot `s` (vector `q`, as inserted) into the graph.
    pub(super) fn link(&self, st: &Store, s: u32, q: &[f32], level: usize) {
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
            d: self.d(q, st.row(ep_s)),
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
    pub(super) fn adopt(&self, st: &Store, s: u32, w: &[Near], nbrs: &mut Vec<u32>, max: usize) {
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

    /// HNSW Alg. 4 over `cands` (nearest first); with `keep_pruned` the result is topped up to `m`
    /// with pruned candidates (exact duplicates of kept nodes last). A candidate that ties with a
    /// bit-identical kept node is redundant: without that rule, a group of exact duplicates fills
    /// each other's lists and becomes a closed clique that searches cannot leave.
    pub(super) fn select(
        &self,
        st: &Store,
        cands: &[Near],
        m: usize,
        keep_pruned: bool,
    ) -> Vec<u32> {
        if cands.len() <= m {
            return cands.iter().map(|c| c.s).collect();
        }
        let mut sel: Vec<Near> = Vec::with_capacity(m);
        let (mut pruned, mut dups) = (Vec::new(), Vec::new());
        let mut buf = Vec::new();
        for &c in cands {
            if sel.len() >= m {
                break;
            }
            let vc = st.floats(c.s, &mut buf);
            let mut verdict = 0; // 0 keep, 1 pruned, 2 duplicate
            for r in &sel {
                let d = self.d(vc, st.row(r.s));
                if d < c.d {
                    verdict = 1;
                    break;
                }
                if d == c.d && st.row(c.s) == st.row(r.s) {
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
    pub(super) fn set_own(&self, st: &Store, s: u32, l: usize, nbrs: &[u32], maxm: usize) {
        let _g = st.locks[s as usize].locked();
        let list = st.links(s, l);
        let old: Vec<u32> = entries(list).iter().map(|a| a.load(Relaxed)).collect();
        let mut keep: Vec<u32> = old.iter().chain(nbrs).copied().collect();
        keep.sort_unstable();
        keep.dedup();
        if keep.len() > maxm {
            let mut buf = Vec::new();
            let vs = st.floats(s, &mut buf);
            let mut c: Vec<Near> = keep
                .iter()
                .map(|&t| Near {
                    d: self.d(vs, st.row(t)),
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
    pub(super) fn add_link(&self, st: &Store, n: u32, x: u32, l: usize, maxm: usize) {
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
        let mut buf = Vec::new();
        let vn = st.floats(n, &mut buf);
        let mut c: Vec<Near> = old
            .iter()
            .chain([&x])
            .map(|&s| Near {
                d: self.d(vn, st.row(s)),
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
    #[inline]
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

    /// A new graph holding only the live points. Inserts wait during the snapshot copy; searches
    /// on `self` keep running throughout.
    pub fn compacted(&self) -> Graph {
        let (ids, flat) = {
            let _gate = self.gate.writing();
            let st = self.store.reading();
            let slots: Vec<u32> = (0..st.cap as u32).filter(|&s| st.live(s)).collect();
            let mut flat = Vec::with_capacity(slots.len() * self.dim);
            let mut buf = Vec::new();
            slots
                .iter()
                .for_each(|&s| flat.extend_from_slice(st.floats(s, &mut buf)));
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
}
