//! The engine: the database plus the encoders, and the one place that orchestrates reads and
//! writes. It owns the encoding side of every operation: a search, a duplicate check, an
//! explanation, the review queue's scoring and every write of text go through a [`Collection`]
//! handle, taken once per request, which carries the collection's [`View`] (settings, indexes,
//! cached calibrator), the encoder of the model its vectors come from, and its [`Judge`].
//!
//! Owns: choosing the encoder per collection, encoding, the retry when a reindex switches a
//! collection mid-request. Must not know: HTTP, the CLI, file formats.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use tracing::field::Empty;

use crate::db::{Database, NewDocument, ReindexReport, View};
use crate::encoder::{Encoder, Encoders};
use crate::error::{Result, UserError};
use crate::index::LexicalIndex;
use crate::model::operators::{self, Operation};
use crate::score::calibration::Calibrator;
use crate::score::features::lexical_similarity;
use crate::search::{
    self, Beyond, DuplicateVerdict, Explained, FirstStages, Judge, Nearest, Overrides,
    PairExplanation, Pairing, Scope, SearchOutcome, SearchParams, Settings, Weighting,
};
use crate::store::Upserted;
use crate::types::Encoded;

/// Stored questions a `beyond` reads the difference back as.
pub const BEYOND_NEAREST: usize = 3;
/// The least cosine a stored question needs with the difference to be named in `beyond`
/// (unrelated questions sit near 0.1–0.25 there).
pub const BEYOND_MIN_COSINE: f32 = 0.3;

/// The answer to [`Collection::operate`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Operated {
    /// Which operator ran: `learned` (the model's), `arithmetic` (it carries none for the
    /// operation; compression is then the identity), or `none` (decoding).
    pub operator: &'static str,
    /// The stored questions nearest the result, best first.
    pub nearest: Vec<Nearest>,
    /// The result read back as words by the model's decoder, in their usual order (None: the
    /// model carries no decoder).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub words: Option<Vec<String>>,
}

/// The database and the encoders.
#[derive(Debug)]
pub struct Engine {
    db: Arc<Database>,
    encoders: Encoders,
}

impl Engine {
    /// An engine over `db` with `encoders`.
    pub fn new(db: Arc<Database>, encoders: Encoders) -> Self {
        Engine { db, encoders }
    }

    /// An engine whose own model is `encoder`'s (others load from their recorded directories).
    pub fn with_encoder(db: Arc<Database>, encoder: Arc<Encoder>) -> Self {
        let options = *encoder.options();
        Self::new(db, Encoders::new(encoder, options))
    }

    /// The database.
    pub fn db(&self) -> &Arc<Database> {
        &self.db
    }

    /// The encoders.
    pub fn encoders(&self) -> &Encoders {
        &self.encoders
    }

    /// The process's own model's encoder (new collections are created with it).
    pub fn encoder(&self) -> &Arc<Encoder> {
        self.encoders.default_encoder()
    }

    /// A handle on collection `name` (blocking: may load its indexes or its model).
    #[tracing::instrument(level = "debug", skip(self))]
    pub fn collection(&self, name: &str) -> Result<Collection<'_>> {
        let view = self.db.view(name)?;
        let settings = view.settings();
        let encoder = self
            .encoders
            .get(name, &settings.model, settings.model_path.as_deref())?;
        Ok(Collection { view, encoder })
    }

    /// Runs a write `f` on a handle on collection `name`; if a reindex switched the
    /// collection's model between taking the handle and the write (the database refuses the
    /// old model's vectors under the writer lock), once more on a fresh handle. A write that
    /// succeeded is never repeated.
    pub fn write_with<T>(&self, name: &str, f: impl Fn(&Collection<'_>) -> Result<T>) -> Result<T> {
        let c = self.collection(name)?;
        match f(&c) {
            Err(crate::Error::User(UserError::ModelMismatch { .. })) if c.view.is_retired() => {
                f(&self.collection(name)?)
            }
            other => other,
        }
    }

    /// Runs a read `f` on a handle on collection `name`; if a reindex switched the collection
    /// while `f` ran (so `f` may have mixed the old model with the new one), once more on a
    /// fresh handle.
    pub fn with_collection<T>(
        &self,
        name: &str,
        f: impl Fn(&Collection<'_>) -> Result<T>,
    ) -> Result<T> {
        let c = self.collection(name)?;
        let out = f(&c);
        if !c.view.is_retired() {
            return out;
        }
        f(&self.collection(name)?)
    }

    /// Explains two texts with the process's own model, outside any collection: the lexical
    /// similarity takes its IDF from the two texts, P(duplicate) comes from the model's
    /// classifier or the default calibration. IDF token weights need a collection's IDF, so
    /// `weights: idf` is refused here (explain in a collection instead).
    pub fn explain_texts(&self, a: &str, b: &str, weights: Weighting) -> Result<PairExplanation> {
        if weights == Weighting::Idf {
            return Err(UserError::InvalidArgument {
                name: "weights",
                reason: "\"idf\" takes its IDF from a collection; name one (\"collection\": \"NAME\") or use \"uniform\"".into(),
            }
            .into());
        }
        let encoder = self.encoder();
        let enc = encoder.encode(&[a, b])?;
        let lexicon = LexicalIndex::new();
        lexicon.upsert(0, a);
        lexicon.upsert(1, b);
        let judge = judge_of(encoder, || Ok(Arc::new(Calibrator::default_for_minilm())))?;
        Ok(search::explain_pair(
            &judge,
            &lexicon,
            weights,
            (a, &enc[0]),
            (b, &enc[1]),
            &**encoder,
        ))
    }

    /// Re-encodes collection `name` with `encoder` (another model, from directory
    /// `model_path`) as a new generation, serving meanwhile (see [`Database::reindex`]); the
    /// encoder is kept for the collection's later requests. What happens to its context
    /// vectors (`rerank: context`) once it switched: [`OnReindex`] (until they are made again
    /// that rerank is refused).
    pub fn reindex(
        &self,
        name: &str,
        encoder: Arc<Encoder>,
        model_path: Option<&Path>,
        context_vectors: OnReindex,
        progress: &dyn Fn(u64, u64),
    ) -> Result<ReindexReport> {
        let make = match context_vectors {
            OnReindex::Remake => self.db.context_vectors_stamp(name)?.is_some(),
            OnReindex::Make => true,
            OnReindex::Leave => false,
        };
        let encode = |texts: &[&str]| encoder.encode(texts);
        let report = self
            .db
            .reindex(name, encoder.identity(), &encode, model_path, progress)?;
        self.encoders.insert(encoder.clone());
        if make {
            let made = make_context_vectors(&self.db, name, &encoder, |_, _| {})?;
            tracing::info!(collection = name, documents = made, "context vectors made");
        }
        Ok(report)
    }
}

/// What [`Engine::reindex`] does with a collection's context vectors once it switched models.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnReindex {
    /// Make them again with the new model if the collection had a set (the default).
    Remake,
    /// Make a set whether or not it had one (`reindex --context-vectors`).
    Make,
    /// Leave a set stale for a `tune` that follows and makes it anyway (`adapt`): at 100,000
    /// questions with 10 comments each, making a set is most of an hour.
    Leave,
}

impl OnReindex {
    /// `--context-vectors` / `"context_vectors": true` given or not.
    pub fn from_flag(make: bool) -> Self {
        if make {
            OnReindex::Make
        } else {
            OnReindex::Remake
        }
    }
}

/// Context vectors — what `rerank: context` compares a query with ([`crate::score::context`])
/// — of documents' contexts: for each, the normalised mean of the sentence vectors of its
/// first `max_texts` non-blank texts (None: it has none). `progress(done, total)` counts
/// texts encoded.
pub fn context_vectors(
    encoder: &Encoder,
    contexts: &[&[String]],
    max_texts: usize,
    mut progress: impl FnMut(u64, u64),
) -> Result<Vec<Option<Vec<f32>>>> {
    let mut texts: Vec<&str> = Vec::new();
    let mut owner: Vec<usize> = Vec::new();
    for (i, context) in contexts.iter().enumerate() {
        for c in context
            .iter()
            .filter(|c| !c.trim().is_empty())
            .take(max_texts.max(1))
        {
            texts.push(c);
            owner.push(i);
        }
    }
    let total = texts.len() as u64;
    let mut done = 0u64;
    let encoded = encoder.encode_with_progress(&texts, |k| {
        done += k as u64;
        progress(done, total);
    })?;
    let mut rows: Vec<Vec<&[f32]>> = vec![Vec::new(); contexts.len()];
    for (e, &o) in encoded.iter().zip(&owner) {
        rows[o].push(&e.sentence);
    }
    Ok(rows
        .iter()
        .map(|r| crate::score::context::mean_direction(r))
        .collect())
}

/// Makes collection `name`'s whole set of context vectors with `encoder` (its model's),
/// replacing any it had: one per document with context ([`context_vectors`], the first
/// [`CONTEXT_TEXTS`](crate::score::context::CONTEXT_TEXTS) texts). From then on documents
/// written with context get theirs as they are written ([`add_context_vectors`]). Returns how
/// many documents have one. `progress(done, total)` counts context texts encoded.
pub fn make_context_vectors(
    db: &Database,
    name: &str,
    encoder: &Encoder,
    mut progress: impl FnMut(u64, u64),
) -> Result<usize> {
    let mut with_context: Vec<(u64, Vec<String>)> = Vec::new();
    for doc in db.documents(name)? {
        let doc = doc?;
        if doc.context.iter().any(|c| !c.trim().is_empty()) {
            with_context.push((doc.internal, doc.context));
        }
    }
    let docs: Vec<(u64, &[String])> = with_context
        .iter()
        .map(|(id, c)| (*id, c.as_slice()))
        .collect();
    let vectors = vectors_by_id(encoder, &docs, &mut progress)?;
    db.set_context_vectors(name, encoder.identity(), &vectors, true)?;
    Ok(vectors.len())
}

/// Adds the context vectors of documents just written (internal id, context) when collection
/// `name` keeps a set made with `encoder`'s model (after `kindred tune`); does nothing
/// otherwise, or for documents without context. Derived data, written after the documents,
/// which are stored whatever happens here: a vector that could not be made or stored (or that
/// a crash lost) is logged, and its document ranks by its question alone under
/// `rerank: context` until the set is made again.
pub fn add_context_vectors(
    db: &Database,
    name: &str,
    encoder: &Encoder,
    written: &[(u64, &[String])],
) {
    if let Err(e) = try_add_context_vectors(db, name, encoder, written) {
        tracing::warn!(
            collection = name,
            error = %e,
            "documents stored without their context vectors: they rank by their question alone \
             under rerank: context until `kindred tune` makes the set again"
        );
    }
}

fn try_add_context_vectors(
    db: &Database,
    name: &str,
    encoder: &Encoder,
    written: &[(u64, &[String])],
) -> Result<()> {
    let with_context: Vec<(u64, &[String])> = written
        .iter()
        .filter(|(_, c)| c.iter().any(|t| !t.trim().is_empty()))
        .copied()
        .collect();
    if with_context.is_empty() || !db.has_context_vectors(name, &encoder.identity().fingerprint)? {
        return Ok(());
    }
    let vectors = vectors_by_id(encoder, &with_context, |_, _| {})?;
    db.set_context_vectors(name, encoder.identity(), &vectors, false)
}

/// [`context_vectors`] of documents (internal id, context), by id: those that have one.
fn vectors_by_id(
    encoder: &Encoder,
    docs: &[(u64, &[String])],
    progress: impl FnMut(u64, u64),
) -> Result<Vec<(u64, Vec<f32>)>> {
    let contexts: Vec<&[String]> = docs.iter().map(|(_, c)| *c).collect();
    let vectors = context_vectors(
        encoder,
        &contexts,
        crate::score::context::CONTEXT_TEXTS,
        progress,
    )?;
    Ok(docs
        .iter()
        .zip(vectors)
        .filter_map(|((id, _), v)| Some((*id, v?)))
        .collect())
}

/// One collection, as one request sees it: its view, its model's encoder, its judge.
pub struct Collection<'e> {
    view: View<'e>,
    encoder: Arc<Encoder>,
}

impl std::fmt::Debug for Collection<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collection")
            .field("name", &self.view.name())
            .field("model", &self.encoder.identity().id)
            .finish()
    }
}

impl Collection<'_> {
    /// The collection's name.
    pub fn name(&self) -> &str {
        self.view.name()
    }

    /// Its view (settings, indexes, documents).
    pub fn view(&self) -> &View<'_> {
        &self.view
    }

    /// The encoder of the model its vectors come from.
    pub fn encoder(&self) -> &Arc<Encoder> {
        &self.encoder
    }

    /// Where its P(duplicate) comes from: the model's classifier, else its calibrator.
    pub fn judge(&self) -> Result<Judge<'_>> {
        judge_of(&self.encoder, || self.view.calibrator())
    }

    /// Searches for `text`: the lexical stage runs while the query is encoded. With
    /// `params.compound`, a text that splits at a join (" and ", "? ", …) is also checked for
    /// a compound among the scored candidates (its halves encoded for it).
    #[tracing::instrument(level = "debug", skip_all, fields(collection = self.name(), k = params.k,
        encode_ms = Empty, candidates_ms = Empty, rerank_ms = Empty, total_ms = Empty))]
    pub fn search(&self, text: &str, params: &SearchParams) -> Result<SearchOutcome> {
        search::validate(params)?;
        let judge = self.judge()?;
        let start = Instant::now();
        let scope = search::scope(&self.view, params)?;
        let (query, encode_ms, lexical) = self.encode_beside_lexical(text, params, &scope, start);
        let (query, lexical) = (query?, lexical?);
        let stages_start = Instant::now();
        let scored = self.scored(
            &judge,
            text,
            &query,
            (params, &scope),
            lexical,
            stages_start,
        )?;
        let mut out = self.answer(scored, &judge, (text, &query), params, stages_start)?;
        out.timings.encode_ms = encode_ms;
        out.timings.total_ms = search::ms(start);
        record_timings(&out.timings);
        Ok(out)
    }

    /// The parameters a search runs with in this collection when it chose `asked` itself:
    /// for mode, rerank, weights and fusion, `asked`'s value, else the collection's search
    /// defaults unless stale, else `fallback`'s ([`search::resolve()`]); every other value is
    /// `fallback`'s. With the settings in force and where each came from.
    pub fn resolve(
        &self,
        asked: &Overrides,
        fallback: &SearchParams,
    ) -> Result<(SearchParams, Settings)> {
        let defaults = self.view.search_defaults()?;
        Ok(search::resolve(
            asked,
            defaults.as_deref(),
            &self.view.settings().model.fingerprint,
            fallback,
        ))
    }

    /// Searches for `text` as a user asks: the settings `asked` leaves open take the
    /// collection's search defaults ([`Self::resolve`]); the outcome's `settings` says which
    /// were in force and where each came from. What the API and `kindred search` run;
    /// [`Self::search`] takes explicit parameters and applies no defaults.
    pub fn search_with_defaults(
        &self,
        text: &str,
        asked: &Overrides,
        fallback: &SearchParams,
    ) -> Result<SearchOutcome> {
        let (params, settings) = self.resolve(asked, fallback)?;
        let mut out = self.search(text, &params)?;
        out.settings = Some(settings);
        Ok(out)
    }

    /// [`Self::duplicates`] as a user asks, the settings `asked` leaves open taking the
    /// collection's search defaults, like [`Self::search_with_defaults`].
    pub fn duplicates_with_defaults(
        &self,
        text: &str,
        threshold: Option<f32>,
        asked: &Overrides,
        fallback: &SearchParams,
    ) -> Result<DuplicateVerdict> {
        let (params, settings) = self.resolve(asked, fallback)?;
        let mut out = self.duplicates(text, threshold, &params)?;
        out.settings = Some(settings);
        Ok(out)
    }

    /// Searches for an already encoded query (with this collection's model).
    pub fn search_encoded(
        &self,
        text: &str,
        query: &Encoded,
        params: &SearchParams,
    ) -> Result<SearchOutcome> {
        search::search_encoded(
            &self.view,
            &self.judge()?,
            (text, query),
            params,
            &*self.encoder,
        )
    }

    /// Searches the *other* documents for stored document `id` (`text` and its stored vectors
    /// `query` as the query): its own hit leaves the scored candidates before the top k and
    /// before the compound check (`params.compound`), so that two other documents it joins can
    /// be found. What the review queue runs.
    pub fn search_beside(
        &self,
        id: &str,
        text: &str,
        query: &Encoded,
        params: &SearchParams,
    ) -> Result<SearchOutcome> {
        search::validate(params)?;
        let judge = self.judge()?;
        let start = Instant::now();
        let scope = search::scope(&self.view, params)?;
        let lexical = search::lexical_stage(&self.view, text, params, &scope)?;
        let mut scored = self.scored(&judge, text, query, (params, &scope), lexical, start)?;
        scored.hits.retain(|(hit, _)| hit.id != id);
        self.answer(scored, &judge, (text, query), params, start)
    }

    /// The answer to a search from its scored candidates ([`search::outcome`]), with the
    /// compound check when `params.compound` asks for it.
    fn answer(
        &self,
        scored: search::Scored,
        judge: &Judge<'_>,
        (text, query): (&str, &Encoded),
        params: &SearchParams,
        start: Instant,
    ) -> Result<SearchOutcome> {
        let outcome = |pairing: Option<&Pairing<'_>>| {
            search::outcome(
                scored,
                judge,
                (text, query),
                params,
                (&*self.encoder, pairing),
                start,
            )
        };
        if params.compound {
            self.with_pairing(text, |pairing| outcome(Some(pairing)))
        } else {
            Ok(outcome(None))
        }
    }

    /// Is `text` a duplicate of stored questions? A hybrid search scores the whole candidate
    /// pool (`rerank_depth`), whose `k` most probable matches are judged against `threshold`
    /// (default: the judge's).
    #[tracing::instrument(level = "debug", skip_all, fields(collection = self.name(), k = params.k,
        encode_ms = Empty, candidates_ms = Empty, rerank_ms = Empty, total_ms = Empty))]
    pub fn duplicates(
        &self,
        text: &str,
        threshold: Option<f32>,
        params: &SearchParams,
    ) -> Result<DuplicateVerdict> {
        search::validate_threshold(threshold)?;
        search::validate(params)?;
        let judge = self.judge()?;
        let threshold = threshold.unwrap_or_else(|| judge.threshold());
        let pool = SearchParams {
            k: params.rerank_depth.max(params.k),
            explain: false,
            ..params.clone()
        };
        let start = Instant::now();
        let scope = search::scope(&self.view, &pool)?;
        let (query, encode_ms, lexical) = self.encode_beside_lexical(text, &pool, &scope, start);
        let (query, lexical) = (query?, lexical?);
        let stages_start = Instant::now();
        let scored = self.scored(&judge, text, &query, (&pool, &scope), lexical, stages_start)?;
        let mut out = self.with_pairing(text, |pairing| {
            search::verdict(
                scored,
                &judge,
                (text, &query),
                params,
                threshold,
                &*self.encoder,
                Some(pairing),
                stages_start,
            )
        })?;
        out.timings.encode_ms = encode_ms;
        out.timings.total_ms = search::ms(start);
        record_timings(&out.timings);
        Ok(out)
    }

    /// Runs `f` with this collection's [`Pairing`] for `text`: the sentence vectors of its
    /// halves at every join (encoded here; none for a text without a join), fusion, the
    /// difference, intents, lexical similarity to `text` and the read-backs, for the compound
    /// check and `beyond`. Compounds are judged on arithmetic fusion: the learned fusion
    /// (trained on WikiSplit) found fewer of them (EVALUATION.md, "Compound questions"); the
    /// difference read back in `beyond` is the model's own when it carries one.
    fn with_pairing<R>(&self, text: &str, f: impl FnOnce(&Pairing<'_>) -> R) -> Result<R> {
        let query_terms = crate::text::terms(text);
        let split: Vec<String> = search::halves(text)
            .into_iter()
            .flat_map(|(l, r)| [l, r])
            .collect();
        let halves: Vec<(Vec<f32>, Vec<f32>)> = match split.is_empty() {
            true => Vec::new(),
            false => {
                let mut v = self.encoder.encode(&split)?.into_iter().map(|e| e.sentence);
                std::iter::from_fn(|| Some((v.next()?, v.next()?))).collect()
            }
        };
        let pairing = Pairing {
            halves: &halves,
            fuse: &|a, b| Operation::Fusion.arithmetic(a, Some(b)),
            difference: &|a, b| self.difference(a, b),
            intent: &|tokens| self.encoder.intent_of_tokens(tokens),
            lexical: &|t| {
                self.view
                    .lexical_index()
                    .with_idf(|idf| lexical_similarity(&query_terms, &crate::text::terms(t), idf))
            },
            nearest: &|v, exclude| self.read_back(v, &[Some(exclude)]),
            words: &|v| self.words(v),
        };
        Ok(f(&pairing))
    }

    /// What `text` (encoded as `query`) asks beyond stored document `id` ([`search::beyond`]):
    /// None when every phrase of it is matched, or when there is no document `id`. `asker`:
    /// the id `text` is stored under, if it is (the review queue's documents), which the
    /// difference's read-back leaves out as it leaves out `id`.
    pub fn beyond(
        &self,
        (text, query, asker): (&str, &Encoded, Option<&str>),
        id: &str,
    ) -> Result<Option<Beyond>> {
        let Some(doc) = self.view.get(id)? else {
            return Ok(None);
        };
        let doc = search::Explainable::of(doc, None);
        let read_back: search::ReadBack<'_> = (
            &|a, b| self.difference(a, b),
            &|v, exclude| self.read_back(v, &[Some(exclude), asker]),
            &|v| self.words(v),
        );
        Ok(search::beyond(
            (text, query),
            (id, &doc),
            &*self.encoder,
            read_back,
        ))
    }

    /// `a ⊖ b`: the model's learned difference when it carries one, else arithmetic.
    fn difference(&self, a: &[f32], b: &[f32]) -> Vec<f32> {
        let learned = self
            .encoder
            .operators()
            .and_then(|o| o.nets.get(&Operation::Difference));
        operators::apply(learned, Operation::Difference, a, Some(b))
    }

    /// A difference read back for `beyond`: the [`BEYOND_NEAREST`] stored questions nearest
    /// `v` at cosine [`BEYOND_MIN_COSINE`] or more, the documents `exclude` names left out. A
    /// read that fails leaves `beyond` without questions, not the answer.
    fn read_back(&self, v: &[f32], exclude: &[Option<&str>]) -> Vec<Nearest> {
        let mut near = self
            .nearest(v, BEYOND_NEAREST, exclude)
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "reading back what a query asks beyond a match");
                Vec::new()
            });
        near.retain(|n| n.cosine >= BEYOND_MIN_COSINE);
        near
    }

    /// The words the model's decoder reads `v` as (none without a decoder).
    fn words(&self, v: &[f32]) -> Vec<String> {
        self.encoder.decoder().map_or_else(Vec::new, |d| d.words(v))
    }

    /// The `k` stored questions nearest `vector` by cosine (the graph's answer), leaving out
    /// the documents `exclude` names: a vector read back as questions.
    pub fn nearest(
        &self,
        vector: &[f32],
        k: usize,
        exclude: &[Option<&str>],
    ) -> Result<Vec<Nearest>> {
        let mut out = Vec::with_capacity(k);
        let wanted = k + exclude.iter().flatten().count();
        for (internal, cosine) in self.view.cosine(vector, wanted, None)? {
            let Some(doc) = self.view.get_internal(internal)? else {
                continue;
            };
            if !exclude.contains(&Some(doc.id.as_str())) && out.len() < k {
                out.push(Nearest {
                    id: doc.id,
                    text: doc.text,
                    cosine,
                });
            }
        }
        Ok(out)
    }

    /// A compositional operation on texts, read back as the `k` nearest stored questions:
    /// `op` over their sentence vectors (fusion and difference take two texts, compression
    /// one; the model's learned operator when it carries one, else arithmetic), or with `op`
    /// None one text's own vector (decoding).
    pub fn operate(&self, op: Option<Operation>, texts: &[&str], k: usize) -> Result<Operated> {
        let arity = op.map_or(1, Operation::arity);
        if texts.len() != arity {
            return Err(UserError::InvalidArgument {
                name: "texts",
                reason: format!(
                    "{} takes {arity} text{}, {} given",
                    op.map_or("decode", Operation::name),
                    if arity == 1 { "" } else { "s" },
                    texts.len()
                ),
            }
            .into());
        }
        let encoded = self.encoder.encode(texts)?;
        let net = op.and_then(|o| self.encoder.operators()?.nets.get(&o));
        let vector = match op {
            Some(o) => operators::apply(
                net,
                o,
                &encoded[0].sentence,
                encoded.get(1).map(|e| e.sentence.as_slice()),
            ),
            None => encoded[0].sentence.clone(),
        };
        Ok(Operated {
            operator: match (op, net) {
                (None, _) => "none",
                (Some(_), Some(_)) => "learned",
                (Some(_), None) => "arithmetic",
            },
            nearest: self.nearest(&vector, k, &[])?,
            words: self.encoder.decoder().map(|_| self.words(&vector)),
        })
    }

    /// Explains two texts as this collection sees them: encoded with its model, the lexical
    /// similarity and (with `weights: idf`) the token weights from its IDF, P(duplicate) from
    /// its judge.
    pub fn explain_texts(&self, a: &str, b: &str, weights: Weighting) -> Result<PairExplanation> {
        let enc = self.encoder.encode(&[a, b])?;
        Ok(search::explain_pair(
            &self.judge()?,
            self.view.lexical_index(),
            weights,
            (a, &enc[0]),
            (b, &enc[1]),
            &*self.encoder,
        ))
    }

    /// The RCMD explanation (uniform weights) of (a query, stored document `id`), from the
    /// document's stored int8 token vectors.
    pub fn explain(&self, text: &str, query: &Encoded, id: &str) -> Result<Explained> {
        let doc = self
            .view
            .get(id)?
            .ok_or_else(|| UserError::InvalidArgument {
                name: "id",
                reason: format!("no document {id:?} in {}", self.name()),
            })?;
        let chunks = self.encoder.phrase_chunks(&[text, &doc.text]);
        Ok(search::explain_doc(
            text,
            query,
            &search::Explainable::of(doc, None),
            None,
            (&chunks[0], &chunks[1]),
        ))
    }

    /// Encodes and upserts documents: all of them, or (on any error) none. Bad documents are
    /// refused before any encoder time.
    #[tracing::instrument(level = "debug", skip_all, fields(collection = self.name(), docs = docs.len()))]
    pub fn upsert(&self, docs: Vec<NewDocument>) -> Result<Vec<Upserted>> {
        self.upsert_if(docs, || true)
            .map(|written| written.unwrap_or_default())
    }

    /// [`Collection::upsert`], asking `proceed` once the documents are encoded, just before
    /// anything is written: `false` writes nothing and returns `None` (a request that timed
    /// out while it encoded is not stored after its client was told so).
    pub fn upsert_if(
        &self,
        docs: Vec<NewDocument>,
        proceed: impl FnOnce() -> bool,
    ) -> Result<Option<Vec<Upserted>>> {
        docs.iter().try_for_each(crate::db::validate)?;
        let texts: Vec<&str> = docs.iter().map(|d| d.text.as_str()).collect();
        let encoded = self.encoder.encode(&texts)?;
        if !proceed() {
            return Ok(None);
        }
        self.upsert_encoded(docs.into_iter().zip(encoded).collect())
            .map(Some)
    }

    /// Upserts documents already encoded with this collection's model.
    /// Documents with context get their context vectors when the collection keeps a set
    /// ([`add_context_vectors`]).
    pub fn upsert_encoded(&self, docs: Vec<(NewDocument, Encoded)>) -> Result<Vec<Upserted>> {
        let db = self.view.db();
        // Kept for after the write only when the collection keeps a set.
        let fingerprint = &self.encoder.identity().fingerprint;
        let contexts: Option<Vec<Vec<String>>> = db
            .has_context_vectors(self.name(), fingerprint)?
            .then(|| docs.iter().map(|(d, _)| d.context.clone()).collect());
        let upserted = db.upsert_encoded(self.name(), self.encoder.identity(), docs)?;
        if let Some(contexts) = contexts {
            let written: Vec<(u64, &[String])> = upserted
                .iter()
                .zip(&contexts)
                .map(|(u, c)| (u.internal, c.as_slice()))
                .collect();
            add_context_vectors(db, self.name(), &self.encoder, &written);
        }
        Ok(upserted)
    }

    /// Deletes a document; true if it existed.
    pub fn delete(&self, id: &str) -> Result<bool> {
        self.view.db().delete(self.name(), id)
    }

    /// Encodes `text` while the lexical first stage runs beside it: (query, encode ms,
    /// lexical candidates).
    fn encode_beside_lexical(
        &self,
        text: &str,
        params: &SearchParams,
        scope: &Scope,
        start: Instant,
    ) -> (Result<Encoded>, f64, Result<Vec<u64>>) {
        std::thread::scope(|s| {
            let lexical = s.spawn(|| search::lexical_stage(&self.view, text, params, scope));
            let query = self.encoder.encode_one(text);
            let encode_ms = search::ms(start);
            (query, encode_ms, lexical.join().expect("lexical stage"))
        })
    }

    /// The vector stages, then fusion, loading and scoring.
    fn scored(
        &self,
        judge: &Judge<'_>,
        text: &str,
        query: &Encoded,
        (params, scope): (&SearchParams, &Scope),
        lexical: Vec<u64>,
        start: Instant,
    ) -> Result<search::Scored> {
        let (cosine, w2) = search::vector_stages(&self.view, query, params, scope)?;
        let stages = FirstStages {
            cosine,
            w2,
            lexical,
        };
        search::score(
            &self.view,
            judge,
            (text, query),
            (params, scope),
            &stages,
            start,
        )
    }
}

/// The judge of a collection on `encoder`'s model: the model's classifier when it carries one,
/// else the logistic model `calibrator` gives (asked only then).
fn judge_of(
    encoder: &Encoder,
    calibrator: impl FnOnce() -> Result<Arc<Calibrator>>,
) -> Result<Judge<'_>> {
    Ok(match encoder.heads().classifier.as_ref() {
        Some(classifier) => Judge::Siamese {
            classifier,
            model: &encoder.identity().id,
        },
        None => Judge::Calibrated(calibrator()?),
    })
}

/// Puts a request's stage timings (the ones /metrics aggregates) on its span.
fn record_timings(t: &crate::search::Timings) {
    let span = tracing::Span::current();
    span.record("encode_ms", t.encode_ms);
    span.record("candidates_ms", t.candidates_ms);
    span.record("rerank_ms", t.rerank_ms);
    span.record("total_ms", t.total_ms);
}
