//! The read handle on one collection ([`View`]) that every search stage goes through,
//! whatever the backend: it checks query vectors once and hands each question to the
//! backend's [`CollectionView`].

use std::collections::HashMap;
use std::sync::Arc;

use super::backend::{CollectionView, Within};
use super::Database;
use crate::error::{Result, UserError};
use crate::index::{Filter, LexicalIndex};
use crate::score::calibration::Calibrator;
use crate::score::wasserstein::embed;
use crate::store::{CollectionSettings, SearchDefaults, StoredDoc};
use crate::types::Gaussian;

/// A read handle on one collection ([`Database::view`]): its settings, its indexes as of when
/// it was taken, and its documents by internal id. First stages answer internal ids, which
/// are what the pipeline carries until it loads each candidate once.
pub struct View<'a> {
    db: &'a Database,
    name: String,
    inner: Box<dyn CollectionView + 'a>,
}

/// How many BM25 candidates [`View::lexical_filtered`] looks at, at most, for one search on a
/// backend that applies filters itself.
pub const LEXICAL_FILTER_DEPTH: usize = 65_536;

impl std::fmt::Debug for View<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View").field("name", &self.name).finish()
    }
}

impl<'a> View<'a> {
    pub(super) fn new(db: &'a Database, name: &str, inner: Box<dyn CollectionView + 'a>) -> Self {
        View {
            db,
            name: name.to_string(),
            inner,
        }
    }

    /// The collection's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its settings (model, codec, HNSW parameters).
    pub fn settings(&self) -> &CollectionSettings {
        self.inner.settings()
    }

    /// The database it is a view of.
    pub fn db(&self) -> &Database {
        self.db
    }

    /// True once a reindex switched the collection to new indexes (take a new view).
    pub fn is_retired(&self) -> bool {
        self.inner.is_retired()
    }

    /// Whether the backend applies metadata filters inside its vector search
    /// ([`View::cosine_filtered`], [`View::w2_filtered`]) rather than from a list of admitted
    /// ids ([`View::admitted`]).
    pub fn pushes_filters(&self) -> bool {
        self.inner.pushes_filters()
    }

    /// The k nearest documents by cosine of sentence vectors: (internal id, cosine), best
    /// first; only among `among` (ascending internal ids) when given.
    pub fn cosine(
        &self,
        sentence: &[f32],
        k: usize,
        among: Option<&[u64]>,
    ) -> Result<Vec<(u64, f32)>> {
        self.cosine_within(sentence, k, Within::Ids(among))
    }

    /// [`View::cosine`] among the documents `filter` admits, the backend applying it.
    pub fn cosine_filtered(
        &self,
        sentence: &[f32],
        k: usize,
        filter: &Filter,
    ) -> Result<Vec<(u64, f32)>> {
        self.cosine_within(sentence, k, Within::Filter(filter))
    }

    fn cosine_within(
        &self,
        sentence: &[f32],
        k: usize,
        within: Within<'_>,
    ) -> Result<Vec<(u64, f32)>> {
        self.same_dim("sentence", self.settings().model.dim, sentence.len())?;
        self.inner.cosine(sentence, k, within)
    }

    /// The k nearest documents by W2 of intents: (internal id, W2), nearest first; only among
    /// `among` when given.
    pub fn w2(
        &self,
        intent: &Gaussian,
        k: usize,
        among: Option<&[u64]>,
    ) -> Result<Vec<(u64, f32)>> {
        self.w2_within(intent, k, Within::Ids(among))
    }

    /// [`View::w2`] among the documents `filter` admits, the backend applying it.
    pub fn w2_filtered(
        &self,
        intent: &Gaussian,
        k: usize,
        filter: &Filter,
    ) -> Result<Vec<(u64, f32)>> {
        self.w2_within(intent, k, Within::Filter(filter))
    }

    fn w2_within(
        &self,
        intent: &Gaussian,
        k: usize,
        within: Within<'_>,
    ) -> Result<Vec<(u64, f32)>> {
        let dim = self.settings().model.intent_dim();
        self.same_dim("intent", dim, intent.mu.len())?;
        self.inner.w2(embed(intent), k, within)
    }

    /// The k best documents by lexical BM25: (internal id, score), best first; only among
    /// `among` when given.
    pub fn lexical(&self, text: &str, k: usize, among: Option<&[u64]>) -> Result<Vec<(u64, f32)>> {
        self.inner.lexical(text, k, among)
    }

    /// [`View::lexical`] among the documents `filter` admits. A backend that
    /// [pushes filters](View::pushes_filters) down looks at most at [`LEXICAL_FILTER_DEPTH`]
    /// BM25 candidates where it cannot apply the filter inside its lexical search.
    pub fn lexical_filtered(
        &self,
        text: &str,
        k: usize,
        filter: &Filter,
    ) -> Result<Vec<(u64, f32)>> {
        self.inner.lexical_filtered(text, k, filter)
    }

    /// The live documents `filter` admits: internal ids, ascending. Empty on a backend that
    /// [pushes filters](View::pushes_filters) down (ask [`View::matching`] for the count).
    pub fn admitted(&self, filter: &Filter) -> Vec<u64> {
        self.inner.admitted(filter)
    }

    /// How many live documents `filter` admits.
    pub fn matching(&self, filter: &Filter) -> Result<usize> {
        self.inner.matching(filter)
    }

    /// Whether a vector search among `n` admitted documents scores each of them (exact)
    /// rather than searching the graph.
    pub fn scans_exactly(&self, n: usize) -> bool {
        self.inner.scans_exactly(n)
    }

    /// TF-IDF cosine of `text` with each of `docs` ((internal id, text)), with the lexical
    /// index's IDF (0 for a document it does not hold, where it holds every document).
    pub fn lexical_similarities(&self, text: &str, docs: &[(u64, &str)]) -> Vec<f32> {
        self.inner.lexical_similarities(text, docs)
    }

    /// The lexical index (for IDF weights). On the Milvus backend, this node's.
    pub fn lexical_index(&self) -> &LexicalIndex {
        self.inner.lexical_index()
    }

    /// Loads documents by internal id ahead of [`View::get_internal`], in one call to a
    /// remote backend (nothing to do on the embedded one).
    pub fn prefetch(&self, internals: &[u64]) -> Result<()> {
        self.inner.prefetch(internals)
    }

    /// A live document by internal id.
    pub fn get_internal(&self, internal: u64) -> Result<Option<StoredDoc>> {
        self.inner.get_internal(internal)
    }

    /// A live document by external id.
    pub fn get(&self, id: &str) -> Result<Option<StoredDoc>> {
        self.db.get(&self.name, id)
    }

    /// The collection's calibrator: its own if fitted (`kindred calibrate --collection`), else
    /// the shipped default. A stored calibration that does not decode (damaged) is logged and
    /// replaced by the default, so searches go on; calibrating again replaces it.
    pub fn calibrator(&self) -> Result<Arc<Calibrator>> {
        self.inner.calibrator()
    }

    /// The context vectors of `internals` that have one, when the collection has a set made
    /// with its current model (None: it has none, or only a stale one).
    pub fn context_vectors(&self, internals: &[u64]) -> Result<Option<HashMap<u64, Vec<f32>>>> {
        self.inner.context_vectors(internals)
    }

    /// The collection's search defaults, stale or not (None: it has none). Whether they apply
    /// is the search layer's call (`search::resolve`).
    pub fn search_defaults(&self) -> Result<Option<Arc<SearchDefaults>>> {
        self.inner.search_defaults()
    }

    /// Refuses a query `what` vector (sentence or intent) of another dimension than the
    /// indexes' `expected` (a query encoded by the old model just as a reindex switched).
    fn same_dim(&self, what: &str, expected: usize, dim: usize) -> Result<()> {
        if dim == expected {
            return Ok(());
        }
        Err(UserError::ModelMismatch {
            collection: self.name.clone(),
            expected: format!(
                "{} ({expected}-dimensional {what} vectors)",
                self.settings().model.id
            ),
            found: format!("a query {what} vector of {dim} dimensions"),
        }
        .into())
    }
}
