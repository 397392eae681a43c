//! Indexes over what the store holds: ids and vectors in, ids and distances out. Knows no text
//! beyond the lexical index's terms, no sled, no burn. Every index can be rebuilt from the store.

pub(crate) mod files;
pub mod graph;
pub mod hnsw;
pub(crate) mod lexical;
pub(crate) mod metadata;
pub(crate) mod text;

pub use hnsw::{Metric, VectorIndex};
pub use lexical::LexicalIndex;
pub use metadata::{ClauseJson, Filter, MetadataIndex};
