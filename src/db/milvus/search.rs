//! Vector and full-text searches on the Milvus backend.

use super::*;

/// One search call of [`Remote::search_once`].
#[derive(Clone)]
pub(super) struct Search {
    pub(super) collection: String,
    pub(super) field: &'static str,
    pub(super) vectors: SearchVectors,
    pub(super) expr: Option<String>,
    pub(super) k: usize,
    /// HNSW search list size (vector fields only).
    pub(super) ef: Option<usize>,
}

/// A vector field of a kindred collection in Milvus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VectorField {
    /// The sentence vectors (COSINE).
    Sentence,
    /// The intents [μ; σ] (L2).
    W2,
}

impl VectorField {
    pub(super) fn name(self) -> &'static str {
        match self {
            VectorField::Sentence => "sentence",
            VectorField::W2 => "w2",
        }
    }
}

/// One vector search of [`Remote::search`].
pub(crate) struct VectorQuery<'a> {
    /// Which field.
    pub field: VectorField,
    /// The query vector.
    pub vector: Vec<f32>,
    /// Hits wanted.
    pub k: usize,
    /// HNSW search list size (at least k).
    pub ef: usize,
    /// Only documents this filter admits.
    pub filter: Option<&'a Filter>,
    /// Only these internal ids.
    pub among: Option<&'a [u64]>,
}

impl Remote {
    /// The `q.k` nearest documents to `q.vector` in collection `name`: (internal id, score
    /// as Milvus gives it).
    pub fn search(&self, name: &str, q: VectorQuery<'_>) -> Result<Vec<(u64, f32)>> {
        let VectorQuery {
            field,
            vector,
            k,
            ef,
            filter,
            among,
        } = q;
        let part = match field {
            VectorField::Sentence => "docs",
            VectorField::W2 => self.layout(name)?.intent_part(),
        };
        let search = Search {
            collection: format!("{}_{part}", physical(name)),
            field: field.name(),
            vectors: SearchVectors::Float(vec![vector]),
            expr: restrict(filter, among),
            k,
            ef: Some(ef),
        };
        self.search_once(search)
    }

    /// The `k` best documents of collection `name` for `text` by Milvus's own BM25 over the
    /// `lex` field (full-text layout only): (internal id, score as Milvus gives it), best first;
    /// only those `filter` admits and among `among` when given. The query is turned into
    /// kindred's lexical terms as the documents were, so the scores are kindred's BM25 (up to
    /// the statistics the server keeps).
    pub fn full_text(
        &self,
        name: &str,
        text: &str,
        k: usize,
        filter: Option<&Filter>,
        among: Option<&[u64]>,
    ) -> Result<Vec<(u64, f32)>> {
        let terms = lexical_terms(text, CHUNK_CHARS);
        if terms.is_empty() || among.is_some_and(<[u64]>::is_empty) {
            return Ok(Vec::new());
        }
        self.search_once(Search {
            collection: format!("{}_docs", physical(name)),
            field: "bm25",
            vectors: SearchVectors::EmbeddedText(vec![terms]),
            expr: restrict(filter, among),
            k,
            ef: None,
        })
    }

    pub(super) fn search_once(&self, s: Search) -> Result<Vec<(u64, f32)>> {
        if s.k == 0 {
            return Ok(Vec::new());
        }
        let k = s.k.min(QUERY_ROWS);
        let target = s.collection.clone();
        self.reloading(&target, || {
            let s = s.clone();
            self.call("searching", move |c| {
                let s = s.clone();
                async move {
                    let mut b = SearchRequest::builder()
                        .collection_name(s.collection)
                        .vector_field(s.field)
                        .vectors(s.vectors)
                        .limit(k as i64)
                        .consistency_level(READS);
                    if let Some(ef) = s.ef {
                        let ef = ef.max(k).to_string();
                        b = b.extra_params([("ef".to_string(), ef)].into_iter().collect());
                    }
                    if let Some(e) = s.expr {
                        b = b.filter(e);
                    }
                    let r = c.search(b.build()?).await?;
                    let mut out = Vec::new();
                    for one in r.results() {
                        let ids = match one.get_ids() {
                            Ids::Int64(v) => v.iter().map(|&i| i as u64).collect::<Vec<_>>(),
                            _ => Vec::new(),
                        };
                        out.extend(ids.into_iter().zip(one.get_scores().iter().copied()));
                    }
                    Ok(out)
                }
            })
        })
    }
}
