//! Walking a collection's documents: every document once (whole or only its text), and pages of recent ones for the review queue.

use super::*;

/// A walk over a collection's documents by ascending ranges of internal ids that does not
/// rely on the order a server returns a query's rows in (Milvus returns them by primary key,
/// milvus-lite in insertion order, so paging with `id > last` would skip documents there):
/// the id space is cut into ranges of about half a page each (ids are uniform hashes), each
/// range is asked for at most a page, and a range whose answer fills the page is split in two
/// and asked again, so every document is given exactly once.
pub(super) struct Ranges {
    pub(super) collection: String,
    pub(super) fields: Vec<&'static str>,
    pub(super) page: usize,
    /// Inclusive ranges still to read, the next one last.
    pub(super) todo: Vec<(u64, u64)>,
    /// Highest ids first ([`Ranges::descending_below`]).
    pub(super) descending: bool,
}

impl Ranges {
    /// Ranges over collection `name`'s `count` documents (about: it only sizes the ranges).
    pub(super) fn new(name: &str, count: u64, fields: &[&'static str], page: usize) -> Ranges {
        const TOP: u64 = i64::MAX as u64;
        let n = (count / (page as u64 / 2).max(1)).max(1);
        let width = TOP / n + 1;
        let mut todo = Vec::new();
        let mut lo = 0u64;
        loop {
            let hi = lo.saturating_add(width - 1).min(TOP);
            todo.push((lo, hi));
            if hi == TOP {
                break;
            }
            lo = hi + 1;
        }
        todo.reverse();
        Ranges {
            collection: format!("{}_docs", physical(name)),
            fields: fields.to_vec(),
            page,
            todo,
            descending: false,
        }
    }

    /// These ranges read from the highest id down, and only ids below `before` (all: None).
    pub(super) fn descending_below(mut self, before: Option<u64>) -> Ranges {
        let before = before.unwrap_or(u64::MAX);
        self.todo.reverse();
        self.todo.retain(|&(lo, _)| lo < before);
        for r in &mut self.todo {
            r.1 = r.1.min(before.saturating_sub(1));
        }
        self.descending = true;
        self
    }

    /// Whether every range was read.
    pub(super) fn done(&self) -> bool {
        self.todo.is_empty()
    }

    /// The next range's rows by ascending id (descending ones: by descending id), with the
    /// range's last id in that order (None: all read).
    pub(super) fn next(&mut self, remote: &Remote) -> Result<Option<(u64, Vec<Row>)>> {
        while let Some((lo, hi)) = self.todo.pop() {
            let mut rows = remote.query(
                &self.collection,
                &format!("id >= {lo} and id <= {hi}"),
                &self.fields,
                Some(self.page),
            )?;
            if rows.len() >= self.page && lo < hi {
                let mid = lo + (hi - lo) / 2;
                let (first, second) = ((lo, mid), (mid + 1, hi));
                if self.descending {
                    self.todo.extend([first, second]);
                } else {
                    self.todo.extend([second, first]);
                }
                continue;
            }
            rows.sort_by_key(|r| r.get("id").and_then(|v| v.as_u64()).unwrap_or(0));
            if self.descending {
                rows.reverse();
                return Ok(Some((lo, rows)));
            }
            return Ok(Some((hi, rows)));
        }
        Ok(None)
    }
}

impl Remote {
    /// Every document, by ascending internal id, read as the iterator is advanced (ids 4,096
    /// at a time, [`Ranges`], records 256 at a time), so memory stays flat in the collection's
    /// size.
    pub fn iter(self: &Arc<Self>, name: &str) -> impl Iterator<Item = Result<StoredDoc>> {
        let (remote, name) = (self.clone(), name.to_string());
        let (mut ranges, mut ids, mut docs): (Option<Ranges>, Vec<u64>, Vec<StoredDoc>) =
            (None, Vec::new(), Vec::new());
        let mut finished = false;
        std::iter::from_fn(move || loop {
            if let Some(d) = docs.pop() {
                return Some(Ok(d));
            }
            if ids.is_empty() {
                if finished {
                    return None;
                }
                let walk = match &mut ranges {
                    Some(r) => r,
                    None => match remote.count(&name) {
                        Ok(count) => ranges.insert(Ranges::new(&name, count, &["id"], 4096)),
                        Err(e) => {
                            finished = true;
                            return Some(Err(e));
                        }
                    },
                };
                match walk.next(&remote) {
                    Ok(Some((_, rows))) => {
                        ids = rows.iter().filter_map(|r| r.get("id")?.as_u64()).collect();
                        ids.reverse(); // popped from the end: ascending
                        continue;
                    }
                    Ok(None) => return None,
                    Err(e) => {
                        finished = true;
                        return Some(Err(e));
                    }
                }
            }
            let chunk: Vec<u64> = ids.split_off(ids.len().saturating_sub(256));
            match remote.get_many(&name, &chunk) {
                Ok(mut got) => {
                    // Popped from the end: keep them descending.
                    docs = chunk.iter().rev().filter_map(|id| got.remove(id)).collect();
                }
                Err(e) => {
                    (finished, ids) = (true, Vec::new());
                    return Some(Err(e));
                }
            }
        })
    }

    /// Up to `limit` documents with the highest internal ids below `before` (all when None),
    /// highest first: (internal id, external id). Internal ids are hashes of the external
    /// ids here, so this is a fixed order over the documents, not the order of their writes
    /// (Milvus keeps none); paging with `before` still sees each document once.
    pub fn recent(
        &self,
        name: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, String)>> {
        let page = limit.clamp(16, 1024);
        let mut ranges =
            Ranges::new(name, self.count(name)?, &["id", "doc"], page).descending_below(before);
        let mut out = Vec::with_capacity(limit);
        while out.len() < limit {
            let Some((_, rows)) = ranges.next(self)? else {
                break;
            };
            out.extend(rows.iter().filter_map(|r| {
                Some((r.get("id")?.as_u64()?, r.get("doc")?.as_str()?.to_string()))
            }));
        }
        out.truncate(limit);
        Ok(out)
    }

    /// Each document's internal id and (first 8 KiB of) text, by ascending internal id, until
    /// at least `limit` were given: then the bound of what was given (every document with an
    /// internal id up to it, and none above), None when it gave all.
    pub(super) fn scan_texts(
        &self,
        name: &str,
        limit: usize,
        mut each: impl FnMut(u64, &str),
    ) -> Result<Option<u64>> {
        let mut ranges = Ranges::new(name, self.count(name)?, &["id", "text"], 256);
        let mut seen = 0;
        while let Some((last, rows)) = ranges.next(self)? {
            for r in &rows {
                if let (Some(id), Some(text)) = (
                    r.get("id").and_then(|v| v.as_u64()),
                    r.get("text").and_then(|v| v.as_str()),
                ) {
                    each(id, text);
                    seen += 1;
                }
            }
            if seen >= limit && !ranges.done() {
                return Ok(Some(last));
            }
        }
        Ok(None)
    }
}
