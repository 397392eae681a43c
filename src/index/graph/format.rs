//! The graph's file format: writing it, and reading it back with every count, id, level and link validated.

use super::*;

pub(super) const MAGIC: &[u8; 8] = b"KNDHNSW\0";

/// 2 added the anchors; version 1 files load with none (the next inserts adopt them again).
/// 3 ends with a CRC-32 instead of FNV-1a 64 (files of 1 and 2 still load).
/// 4 says after the metric how the vectors are kept (`u8`: 0 f32, 1 sq8); sq8 vectors are
/// each a scale `f32` and `dim` int8 codes. Files of 1-3 hold f32 vectors.
pub(super) const VERSION: u32 = 4;

/// Reads every node's link lists (level 0, then each upper level) into `st`, validating each
/// count and target, and counts level-0 in-degrees.
pub(super) fn read_links(
    rd: &mut Src,
    st: &Store,
    m: usize,
    levels: &[u8],
) -> Result<(), GraphError> {
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
/// A graph file's header, checked: format version, metric, dimension, parameters, point
/// count (bounded by the bytes left) and entry point.
struct Header {
    version: u32,
    metric: Metric,
    vectors: GraphVectors,
    dim: usize,
    m: usize,
    efc: usize,
    n: usize,
    ep: u32,
}

impl Header {
    /// Reads and checks the header, and sets `rd`'s checksum by the version.
    fn read(rd: &mut Src) -> Result<Header, GraphError> {
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
        let vectors = match if version >= 4 { rd.u8()? } else { 0 } {
            0 => GraphVectors::F32,
            1 => GraphVectors::Sq8,
            _ => return Err(bad("bad vector encoding")),
        };
        let (dim, m, efc) = (rd.u32()? as usize, rd.u32()? as usize, rd.u32()? as usize);
        if !(1..=MAX_DIM).contains(&dim) || !(2..=MAX_M).contains(&m) || efc == 0 {
            return Err(bad("bad dim or params"));
        }
        let n = rd.u64()?;
        let ep = rd.u32()?;
        // Each point needs at least its vector + 8 + 1 + 1 + 4 bytes: bound n before allocating.
        let vector = match vectors {
            GraphVectors::F32 => dim as u64 * 4,
            GraphVectors::Sq8 => dim as u64 + 4,
        };
        if n > rd.left() / (vector + 14) {
            return Err(bad("point count exceeds data"));
        }
        Ok(Header {
            version,
            metric,
            vectors,
            dim,
            m,
            efc,
            n: n as usize,
            ep,
        })
    }
}

/// Reads `n` vectors straight into their slots: `dim` little-endian f32 each, or (sq8) a
/// scale and `dim` codes; a non-finite value (or a scale not above 0) is corruption.
fn read_vectors(rd: &mut Src, st: &Store, n: usize, dim: usize) -> Result<(), GraphError> {
    if st.vecs.kind() == GraphVectors::Sq8 {
        for s in 0..n {
            let scale = f32::from_bits(rd.u32()?);
            if !(scale.is_finite() && scale > 0.0) {
                return Err(GraphError::Corrupt("bad vector scale".into()));
            }
            let codes: Vec<i8> = rd.take(dim)?.iter().map(|&b| b as i8).collect();
            st.write_codes(s as u32, &codes, scale);
        }
        return Ok(());
    }
    let mut v = vec![0f32; dim];
    for s in 0..n {
        let bytes = rd.take(dim * 4)?;
        for (x, c) in v.iter_mut().zip(bytes.chunks_exact(4)) {
            *x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
        if v.iter().any(|x| !x.is_finite()) {
            return Err(GraphError::Corrupt("non-finite vector value".into()));
        }
        st.write_vec(s as u32, &v);
    }
    Ok(())
}

pub(super) fn read_anchors(rd: &mut Src, st: &Store, n: usize) -> Result<(), GraphError> {
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

/// Buffered, checksumming writer.
pub(super) struct Out<'a> {
    pub(super) w: &'a mut dyn Write,
    pub(super) buf: Vec<u8>,
    pub(super) h: Checksum,
}

impl Out<'_> {
    pub(super) fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.buf.extend_from_slice(b);
        if self.buf.len() >= 1 << 16 {
            self.flush()?;
        }
        Ok(())
    }
    pub(super) fn flush(&mut self) -> std::io::Result<()> {
        self.h.update(&self.buf);
        self.w.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }
    pub(super) fn finish(mut self) -> std::io::Result<()> {
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
pub(super) struct Src<'a> {
    pub(super) r: &'a mut dyn Read,
    pub(super) buf: Vec<u8>,
    pub(super) pos: usize,
    pub(super) end: usize,
    /// Body bytes not yet read into `buf`.
    pub(super) unread: u64,
    /// Over the body up to `buf[..0]`; `buf[..pos]` is added at the next refill (so the
    /// header's version can choose the checksum first: [`Src::checksum`]).
    pub(super) sum: Checksum,
}

/// Bytes a [`Src`] reads at a time (and the most one `take` can ask for).
pub(super) const BLOCK: usize = 1 << 20;

impl<'a> Src<'a> {
    pub(super) fn new(r: &'a mut dyn Read, len: u64) -> Result<Self, GraphError> {
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
    pub(super) fn checksum(&mut self, sum: Checksum) {
        self.sum = sum;
    }
    /// Body bytes not consumed yet.
    pub(super) fn left(&self) -> u64 {
        self.unread + (self.end - self.pos) as u64
    }
    pub(super) fn take(&mut self, n: usize) -> Result<&[u8], GraphError> {
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
    pub(super) fn bytes(&mut self, n: usize) -> Result<Vec<u8>, GraphError> {
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
    pub(super) fn u8(&mut self) -> Result<u8, GraphError> {
        Ok(self.take(1)?[0])
    }
    pub(super) fn u32(&mut self) -> Result<u32, GraphError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(super) fn u64(&mut self) -> Result<u64, GraphError> {
        Ok(self.u32()? as u64 | (self.u32()? as u64) << 32)
    }
    /// Checks that the body was read to its end and that its hash is the file's checksum.
    pub(super) fn finish(mut self) -> Result<(), GraphError> {
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

impl Graph {
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
        o.put(&[(self.params.vectors == GraphVectors::Sq8) as u8])?;
        for x in [self.dim, self.params.m, self.params.ef_construction] {
            o.put(&(x as u32).to_le_bytes())?;
        }
        o.put(&(n as u64).to_le_bytes())?;
        let ep = self.entry.load(Acquire);
        o.put(&(if ep == NO_ENTRY { u32::MAX } else { ep as u32 }).to_le_bytes())?;
        for s in 0..n as u32 {
            match st.row(s) {
                Row::F32(v) => {
                    for x in v {
                        o.put(&x.to_le_bytes())?;
                    }
                }
                Row::Sq8(r) => {
                    let (codes, scale) = Row::sq8(r);
                    o.put(&scale.to_le_bytes())?;
                    o.put(&codes.iter().map(|&c| c as u8).collect::<Vec<u8>>())?;
                }
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
        let Header {
            version,
            metric,
            vectors,
            dim,
            m,
            efc,
            n,
            ep,
        } = Header::read(&mut rd)?;
        let g = Graph::new(
            metric,
            dim,
            Params {
                m,
                ef_construction: efc,
                vectors,
            },
        );
        // Room for an eighth more: the writes a loaded graph is caught up with would otherwise
        // double every array at the first insert.
        g.ensure_cap(n + n / 8);
        let st = g.store.reading();
        read_vectors(&mut rd, &st, n, dim)?;
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
