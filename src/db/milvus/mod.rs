//! The Milvus backend: collections kept in a Milvus server or cluster instead of the embedded
//! store and graphs, for collections that outgrow one machine.
//!
//! What it owns: the mapping of a kindred collection onto Milvus collections, the translation
//! of kindred's metadata filters into Milvus expressions, batched upserts and deletes, reads
//! at Session consistency (a write acknowledged by this node is seen by its every later read;
//! other nodes see it within Milvus's graceful time),
//! retries with backoff, and startup checks. What stays above it is everything else:
//! encoding, fusion, RCMD, explanations, calibration math, the API.
//!
//! Layouts, chosen when a collection is created from what the server can do
//! ([`Capabilities`], from its version) and recorded in the shared metadata (`meta/<C>/layout`;
//! a collection without the record has the first layout), so each collection keeps its own
//! after a server upgrade. For collection `C`, with `c` = [`physical`]`(C)`:
//! - **split** (Milvus 2.3: one vector field per collection): `c_docs` has `id` Int64 primary
//!   key (the document's internal id, [`internal_id`]: a stable 63-bit hash of its external id,
//!   so every node agrees without a shared counter), `doc` the external id, `meta` JSON (what
//!   filters read), `text` (the first 8 KiB of the text, what a node builds its BM25 index
//!   from), `rec0..rec3` the kindred record (text, token vectors, intent, context) base64 in up
//!   to four VarChar chunks, and `sentence` FloatVector(dim), HNSW, COSINE; `c_intent` has
//!   `id`, `meta` and `w2` FloatVector(2·k) = [μ; σ], HNSW, L2 (squared L2 on [μ; σ] is the
//!   squared exact 2-Wasserstein distance of diagonal Gaussians);
//! - **one** (Milvus 2.4: several vector fields per collection): `c_docs` alone, with `w2`
//!   beside `sentence`, so a batch is one upsert;
//! - **full-text** (Milvus 2.5 and later, milvus-lite 3): as **one**, plus `lex` — the text's
//!   lexical terms ([`lexical_terms`]: the words and word bigrams kindred's own BM25 index
//!   uses, a bigram joined by `_`) analysed by the server's standard tokenizer — and `bm25`, the
//!   sparse vector Milvus's BM25 function derives from it (SPARSE_INVERTED_INDEX, k1 1.2,
//!   b 0.75: kindred's own BM25). The lexical stage is then a Milvus full-text search with
//!   the filter pushed down, fresh on every node at once.
//!
//! And `kindred_meta` (shared): `key` → `value`, the collection settings, calibration, search
//! defaults, layouts and review verdicts, so every kindred node sees the same.
//!
//! Node-local (documented in docs/scale-out.md): a BM25 index of the `text` field, built when
//! a node first opens the collection, kept current with that node's own writes, and rebuilt
//! in the background every `lexical_refresh` ([`crate::db::MilvusSettings`]) to take in other nodes' changes. It is the
//! lexical stage on the split and one layouts, and on every layout the source of IDF weights
//! and of the lexical feature of P(duplicate).
//!
//! Milvus has no transaction across collections: on the split layout a batch is written to
//! `c_intent` and then to `c_docs`, each an upsert by primary key, so a batch that fails
//! part-way (the server went away) can be retried as is; it is acknowledged only when both
//! succeeded. On the other layouts a batch of up to [`BATCH_ROWS`] rows is one upsert.

// The SDK's error type is large (176 bytes); results carrying it are the SDK's shape.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use milvus::v2::prelude::*;
use serde_json::json;

use crate::error::{Result, UserError};
use crate::index::{Filter, LexicalIndex};
use crate::store::{CollectionSettings, StoredDoc, Upserted};
use crate::sync::MutexExt;

mod backend;
mod client;
mod filter;
mod layout;
mod lexical;
mod meta;
mod rows;
mod scan;
mod search;
#[cfg(test)]
mod tests;
mod view;

pub(crate) use backend::Milvus;
use client::*;
use filter::*;
use layout::*;
use lexical::*;
use meta::*;
use rows::*;
use scan::*;
use search::*;
