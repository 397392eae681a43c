//! This node's BM25 index of a Milvus collection: built from the `text` field on first use, kept current with this node's writes, rebuilt in the background.

use super::*;

/// `text` as the `lex` field holds it: kindred's lexical terms ([`crate::text::terms`]: the
/// words and word bigrams) separated by spaces, a bigram's words joined by `_` so the
/// server's standard tokenizer keeps it one token (`_` never occurs inside a term: terms split
/// at every character that is not alphanumeric). At most `max` bytes, cut between terms.
pub(crate) fn lexical_terms(text: &str, max: usize) -> String {
    let mut out = String::new();
    for t in crate::text::terms(text) {
        let t = t.replace(' ', "_");
        if out.len() + t.len() + 1 > max {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&t);
    }
    out
}

/// A node's BM25 index of one collection.
pub(super) struct Lexical {
    pub(super) index: Arc<LexicalIndex>,
    /// The index holds the documents with internal ids up to this one: all of them
    /// (`u64::MAX`), or on the full-text layout of a large collection about `idf_sample` ([`crate::db::MilvusSettings`]), a
    /// uniform sample since internal ids are hashes.
    pub(super) bound: u64,
    pub(super) built: std::time::Instant,
    /// While a rebuild runs: this node's writes since it started (id, text; None: deleted),
    /// replayed onto the new index before it replaces this one.
    pub(super) pending: Option<Vec<(u64, Option<String>)>>,
}

impl Lexical {
    pub(super) fn upsert(&mut self, id: u64, text: &str) {
        if id <= self.bound {
            self.index.upsert(id, text);
        }
        if let Some(p) = &mut self.pending {
            p.push((id, Some(text.to_string())));
        }
    }

    pub(super) fn remove(&mut self, id: u64) {
        self.index.remove(id);
        if let Some(p) = &mut self.pending {
            p.push((id, None));
        }
    }
}

impl Remote {
    /// This node's BM25 index of collection `name`: built from a scan on first use; once
    /// older than `lexical_refresh` ([`crate::db::MilvusSettings`]), rebuilt in the background (searches go on with the old
    /// one meanwhile), which brings in what other nodes wrote and deleted.
    pub fn lexical(self: &Arc<Self>, name: &str) -> Result<Arc<LexicalIndex>> {
        {
            let mut all = self.lexical.locked();
            if let Some(l) = all.get_mut(name) {
                if l.built.elapsed() > self.lexical_refresh && l.pending.is_none() {
                    l.pending = Some(Vec::new());
                    let (remote, name) = (self.clone(), name.to_string());
                    std::thread::spawn(move || remote.rebuild_lexical(&name));
                }
                return Ok(l.index.clone());
            }
        }
        let _building = self.building.locked();
        if let Some(l) = self.lexical.locked().get(name) {
            return Ok(l.index.clone()); // built while this thread waited
        }
        let (lex, bound) = self.build_lexical(name)?;
        let mut all = self.lexical.locked();
        let entry = all.entry(name.to_string()).or_insert(Lexical {
            index: Arc::new(lex),
            bound,
            built: std::time::Instant::now(),
            pending: None,
        });
        Ok(entry.index.clone())
    }

    /// Documents in this node's BM25 index of collection `name` (0 while not built).
    pub fn lexical_len(&self, name: &str) -> usize {
        self.lexical.locked().get(name).map_or(0, |l| l.index.len())
    }

    /// Collection `name`'s BM25 index as this node keeps it, and its bound ([`Lexical`]): every
    /// document, but on the full-text layout (where Milvus answers the lexical stage and the
    /// index only gives IDF weights) about `idf_sample` ([`crate::db::MilvusSettings`]) of them, so a node's memory and
    /// rebuild time stay bounded however large the collection grows.
    pub(super) fn build_lexical(&self, name: &str) -> Result<(LexicalIndex, u64)> {
        let limit = match self.layout(name)? {
            Layout::FullText => self.idf_sample,
            Layout::Split | Layout::One => usize::MAX,
        };
        let lex = LexicalIndex::new();
        let last = self.scan_texts(name, limit, |id, text| lex.upsert(id, text))?;
        Ok((lex, last.unwrap_or(u64::MAX)))
    }

    /// Builds collection `name`'s BM25 index anew and swaps it in, with this node's writes
    /// made meanwhile replayed onto it. On failure the old one stays (and is retried later).
    pub(super) fn rebuild_lexical(&self, name: &str) {
        let built = self.build_lexical(name);
        let mut all = self.lexical.locked();
        let Some(l) = all.get_mut(name) else { return };
        let pending = l.pending.take().unwrap_or_default();
        match built {
            Ok((index, bound)) => {
                for (id, text) in pending {
                    match text {
                        Some(t) if id <= bound => index.upsert(id, &t),
                        Some(_) => {}
                        None => index.remove(id),
                    }
                }
                l.index = Arc::new(index);
                l.bound = bound;
                l.built = std::time::Instant::now();
            }
            Err(e) => {
                tracing::warn!(collection = name, error = %e, "rebuilding this node's BM25 index from Milvus failed; keeping the old one");
                l.built = std::time::Instant::now();
            }
        }
    }
}
