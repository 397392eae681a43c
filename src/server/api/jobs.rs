//! File ingest: the rows a load rejected and what a finished load did (the job status itself,
//! a server-only type, is in [`crate::server::jobs`]).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ingest;

/// A file format as a job shows it: `tsv`, `csv`, `jsonl` or `qqp` (what `format=` takes).
pub fn format_name(format: ingest::Format) -> &'static str {
    match format {
        ingest::Format::Tsv => "tsv",
        ingest::Format::Csv => "csv",
        ingest::Format::Jsonl => "jsonl",
        ingest::Format::Qqp => "qqp",
    }
}

/// A row that cannot be ingested.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Rejected {
    /// 1-based line number in the file (for CSV: where the record starts).
    pub line: u64,
    /// What is wrong and how to fix it.
    pub reason: String,
}

impl From<ingest::Rejected> for Rejected {
    fn from(r: ingest::Rejected) -> Self {
        Rejected {
            line: r.line,
            reason: r.reason,
        }
    }
}

/// What an ingest did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct IngestSummary {
    /// The input file.
    #[schema(value_type = String)]
    pub file: PathBuf,
    /// The collection.
    pub collection: String,
    /// Lines skipped because an earlier run committed them.
    pub resumed_after_line: u64,
    /// New documents.
    pub ingested: u64,
    /// Documents that replaced one with the same id.
    pub updated: u64,
    /// Rows set aside.
    pub rejected: u64,
    /// The first rejected rows (all of them are in the reject file).
    pub rejects: Vec<Rejected>,
    /// Seconds.
    pub seconds: f64,
    /// (ingested + updated) / seconds.
    pub docs_per_sec: f64,
}

impl From<ingest::Summary> for IngestSummary {
    fn from(s: ingest::Summary) -> Self {
        IngestSummary {
            file: s.file,
            collection: s.collection,
            resumed_after_line: s.resumed_after_line,
            ingested: s.ingested,
            updated: s.updated,
            rejected: s.rejected,
            rejects: s.rejects.into_iter().map(Rejected::from).collect(),
            seconds: s.seconds,
            docs_per_sec: s.docs_per_sec,
        }
    }
}
