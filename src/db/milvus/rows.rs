//! Documents as Milvus rows: upserts, deletes, reads by id, counts, and size statistics.

use super::*;

/// Rows per upsert call.
pub(super) const BATCH_ROWS: usize = 256;

/// JSON bytes per upsert call, well under the gRPC message limits of Milvus's proxy (a row
/// may carry 256 KiB of record).
pub(super) const BATCH_BYTES: usize = 16 << 20;

/// Records per read: a gRPC answer must stay under the client's 4 MiB, and a record may be
/// up to [`CHUNKS`] × 64 KiB of base64.
pub(super) const RECORDS_PER_READ: usize = 12;

/// Bytes of a document's text kept in the `text` field, what a node builds its BM25 index
/// from (pages of 256 stay under 4 MiB).
pub(super) const TEXT_BYTES: usize = 8192;

/// How many documents [`Remote::stats`] reads to extrapolate a collection's sizes from.
pub(super) const STATS_SAMPLE: usize = 256;

/// Ids per `id in [..]` query when asking which candidates a filter admits.
pub(super) const ADMITTED_PER_QUERY: usize = 4_096;

pub(super) fn decode_row(
    r: &serde_json::Map<String, serde_json::Value>,
) -> Result<(u64, StoredDoc)> {
    let internal = r.get("id").and_then(|v| v.as_u64()).unwrap_or(0);
    let mut b64 = String::new();
    for c in 0..CHUNKS {
        if let Some(s) = r.get(&record_field(c)).and_then(|v| v.as_str()) {
            b64.push_str(s);
        }
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.as_bytes())
        .map_err(|e| {
            crate::error::InternalError::Corrupt(format!("document {internal} in Milvus: {e}"))
        })?;
    let mut doc = StoredDoc::from_bytes(&bytes)?;
    doc.internal = internal;
    Ok((internal, doc))
}

impl Remote {
    /// Live documents of collection `name`.
    pub fn count(&self, name: &str) -> Result<u64> {
        self.count_where(name, &Filter::default())
    }

    /// Documents of collection `name` that `filter` admits.
    pub fn count_where(&self, name: &str, filter: &Filter) -> Result<u64> {
        let expr = expression(filter, "meta").unwrap_or_default();
        let rows = self.query(
            &format!("{}_docs", physical(name)),
            &expr,
            &["count(*)"],
            None,
        )?;
        Ok(rows
            .first()
            .and_then(|r| r.get("count(*)"))
            .and_then(|v| v.as_u64())
            .unwrap_or(0))
    }

    /// Which of `ids` (internal ids of collection `name`) `filter` admits.
    pub fn admitted_among(
        &self,
        name: &str,
        filter: &Filter,
        ids: &[u64],
    ) -> Result<std::collections::HashSet<u64>> {
        let expr = expression(filter, "meta");
        let collection = format!("{}_docs", physical(name));
        let mut admitted = std::collections::HashSet::new();
        for group in ids.chunks(ADMITTED_PER_QUERY) {
            let e = and_ids(expr.as_deref(), group);
            let rows = self.query(&collection, &e, &["id"], Some(group.len()))?;
            admitted.extend(
                rows.iter()
                    .filter_map(|r| r.get("id")?.as_i64())
                    .map(|i| i as u64),
            );
        }
        Ok(admitted)
    }

    // --- documents ----------------------------------------------------------------------

    /// Upserts `docs` (validated, with vectors of the collection's model) by external id;
    /// the last of several with one id wins, as in the embedded store.
    pub fn upsert(&self, name: &str, docs: Vec<StoredDoc>) -> Result<Vec<Upserted>> {
        let p = physical(name);
        let layout = self.layout(name)?;
        let mut rows_docs = Vec::with_capacity(docs.len());
        let mut rows_intent = Vec::with_capacity(docs.len());
        let internals: Vec<u64> = docs.iter().map(|d| internal_id(&d.id)).collect();
        // Which ids exist already (and that no two external ids share an internal one).
        let existing: HashMap<u64, String> = internals
            .chunks(1024)
            .map(|ids| self.query(&format!("{p}_docs"), &ids_expr(ids), &["id", "doc"], None))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .flatten()
            .filter_map(|r| Some((r.get("id")?.as_u64()?, r.get("doc")?.as_str()?.to_string())))
            .collect();
        let mut seen: HashMap<u64, &str> = HashMap::new();
        for (d, &internal) in docs.iter().zip(&internals) {
            let clash = existing
                .get(&internal)
                .map(String::as_str)
                .or(seen.get(&internal).copied())
                .filter(|other| *other != d.id);
            if let Some(other) = clash {
                return Err(UserError::InvalidDocument {
                    id: d.id.clone(),
                    reason: format!("its id hashes to the same internal id as document {other:?} (a 1 in 2^63 chance): store it under another id"),
                }
                .into());
            }
            seen.insert(internal, &d.id);
        }
        let mut out = Vec::with_capacity(docs.len());
        let mut last: HashMap<u64, usize> = HashMap::new();
        for (i, &internal) in internals.iter().enumerate() {
            last.insert(internal, i);
        }
        for (i, (d, &internal)) in docs.iter().zip(&internals).enumerate() {
            let replaced = existing.contains_key(&internal) || internals[..i].contains(&internal);
            out.push(Upserted {
                internal,
                replaced: replaced.then_some(internal),
            });
            if last[&internal] != i {
                continue;
            }
            let meta: serde_json::Value =
                serde_json::from_str(&d.metadata_json).unwrap_or_else(|_| json!({}));
            let b64 = base64::engine::general_purpose::STANDARD.encode(d.to_bytes());
            if b64.len() > CHUNK_CHARS * CHUNKS {
                return Err(UserError::InvalidDocument {
                    id: d.id.clone(),
                    reason: format!(
                        "its record is {} bytes encoded; the Milvus backend stores at most {} per document: shorten its context or text",
                        b64.len(),
                        CHUNK_CHARS * CHUNKS
                    ),
                }
                .into());
            }
            let mut cut = d.text.len().min(TEXT_BYTES);
            while !d.text.is_char_boundary(cut) {
                cut -= 1;
            }
            let mut row = json!({
                "id": internal, "doc": d.id, "text": &d.text[..cut], "meta": meta,
                "sentence": d.sentence,
            });
            for c in 0..CHUNKS {
                let part = b64
                    .get(c * CHUNK_CHARS..((c + 1) * CHUNK_CHARS).min(b64.len()))
                    .unwrap_or("");
                row[record_field(c)] = json!(part);
            }
            let w2: Vec<f32> = d.mu.iter().chain(&d.sigma).copied().collect();
            match layout {
                Layout::Split => rows_intent.push(json!({"id": internal, "meta": meta, "w2": w2})),
                Layout::One => row["w2"] = json!(w2),
                Layout::FullText => {
                    row["w2"] = json!(w2);
                    row["lex"] = json!(lexical_terms(&d.text, CHUNK_CHARS));
                }
            }
            rows_docs.push(row);
        }
        if layout == Layout::Split {
            self.upsert_rows(&format!("{p}_intent"), rows_intent)?;
        }
        self.upsert_rows(&format!("{p}_docs"), rows_docs)?;
        if let Some(lex) = self.lexical.locked().get_mut(name) {
            for (d, &internal) in docs.iter().zip(&internals) {
                lex.upsert(internal, &d.text);
            }
        }
        Ok(out)
    }

    /// Deletes a document by external id; its internal id if it existed.
    pub fn delete(&self, name: &str, id: &str) -> Result<Option<u64>> {
        let p = physical(name);
        let internal = internal_id(id);
        let expr = ids_expr(&[internal]);
        let rows = self.query(&format!("{p}_docs"), &expr, &["doc"], None)?;
        if !rows
            .iter()
            .any(|r| r.get("doc").and_then(|d| d.as_str()) == Some(id))
        {
            return Ok(None);
        }
        let parts: &[&str] = match self.layout(name)? {
            Layout::Split => &["docs", "intent"],
            Layout::One | Layout::FullText => &["docs"],
        };
        for part in parts {
            self.delete_where(&format!("{p}_{part}"), &expr)?;
        }
        // Session reads do not see a delete on Milvus 2.3 at once (measured: the next read
        // still found the document); one Strong read waits until the query nodes applied it,
        // so this node's later reads see it. Deletes are rare; this costs a time tick.
        for part in parts {
            self.reloading(&format!("{p}_{part}"), || {
                let c = format!("{p}_{part}");
                self.query_once(
                    c,
                    expr.clone(),
                    vec!["id".into()],
                    None,
                    ConsistencyLevel::Strong,
                )
            })?;
        }
        if let Some(lex) = self.lexical.locked().get_mut(name) {
            lex.remove(internal);
        }
        Ok(Some(internal))
    }

    /// Documents by internal id (absent ones left out), read in groups of
    /// [`RECORDS_PER_READ`] at once.
    pub fn get_many(&self, name: &str, internals: &[u64]) -> Result<HashMap<u64, StoredDoc>> {
        let collection = format!("{}_docs", physical(name));
        let fields: Vec<String> = std::iter::once("id".to_string())
            .chain(record_fields())
            .collect();
        let groups: Vec<Vec<u64>> = internals
            .chunks(RECORDS_PER_READ)
            .map(<[u64]>::to_vec)
            .collect();
        let target = collection.clone();
        let rows = self.reloading(&target, || {
            self.read_groups(collection.clone(), fields.clone(), groups.clone())
        })?;
        rows.iter().map(decode_row).collect()
    }

    /// The rows of `collection` with ids in each of `groups`, the groups read at once.
    pub(super) fn read_groups(
        &self,
        collection: String,
        fields: Vec<String>,
        groups: Vec<Vec<u64>>,
    ) -> Result<Vec<serde_json::Map<String, serde_json::Value>>> {
        self.call("reading documents", move |c| {
            let (collection, fields, groups) = (collection.clone(), fields.clone(), groups.clone());
            async move {
                let mut set = tokio::task::JoinSet::new();
                for ids in groups {
                    let (c, collection, fields) = (c.clone(), collection.clone(), fields.clone());
                    set.spawn(query_rows(
                        c,
                        collection,
                        ids_expr(&ids),
                        fields,
                        None,
                        READS,
                    ));
                }
                let mut all = Vec::new();
                while let Some(done) = set.join_next().await {
                    let rows =
                        done.map_err(|e| Error::Unexpected(format!("a read task failed: {e}")))??;
                    all.extend(rows);
                }
                Ok(all)
            }
        })
    }

    /// Collection `name`'s size statistics, extrapolated from a sample of up to
    /// [`STATS_SAMPLE`] documents (the first by internal id: a uniform sample, internal ids
    /// being hashes) to its `documents`. Record bytes are the kindred records' as the embedded
    /// store counts them (8-byte key and encoded record), not Milvus's field storage (base64
    /// text, the vector fields, its indexes): docs/scale-out.md has the per-field sizing.
    pub fn stats(&self, name: &str, documents: u64) -> Result<crate::store::CollectionStats> {
        let mut ranges = Ranges::new(name, documents, &["id"], STATS_SAMPLE);
        let mut ids: Vec<u64> = Vec::new();
        while ids.len() < STATS_SAMPLE {
            let Some((_, rows)) = ranges.next(self)? else {
                break;
            };
            ids.extend(rows.iter().filter_map(|r| r.get("id")?.as_u64()));
        }
        ids.truncate(STATS_SAMPLE); // ascending: the smallest ids, still a uniform sample
        let (mut tokens, mut record, mut token_bytes) = (0u64, 0u64, 0u64);
        let sample = self.get_many(name, &ids)?;
        for doc in sample.values() {
            tokens += doc.token_scales.len() as u64;
            record += 8 + doc.to_bytes().len() as u64;
            token_bytes += (doc.token_codes.len() + 4 * doc.token_scales.len()) as u64;
        }
        let n = sample.len() as u64;
        let scale = |x: u64| -> u64 {
            if n == 0 {
                0
            } else {
                (x as f64 * documents as f64 / n as f64).round() as u64
            }
        };
        Ok(crate::store::CollectionStats {
            documents,
            token_vectors: scale(tokens),
            record_bytes: scale(record),
            token_vector_bytes: scale(token_bytes),
            bytes_per_document: record as f64 / n.max(1) as f64,
            bytes_per_token_vector: token_bytes as f64 / tokens.max(1) as f64,
            seq: 0,
            sampled: Some(n),
        })
    }

    /// A document by external id.
    pub fn get(&self, name: &str, id: &str) -> Result<Option<StoredDoc>> {
        let internal = internal_id(id);
        Ok(self
            .get_many(name, &[internal])?
            .remove(&internal)
            .filter(|d| d.id == id))
    }
}
