//! Reading documents from files, one record at a time (memory stays flat in the file size):
//! TSV and CSV with a header row, JSON Lines, and the Quora pair files (`label<TAB>q1<TAB>q2
//! <TAB>id`, each distinct question once). A record that cannot become a document is a
//! [`Rejected`] row with its line number and reason, never a failure of the whole read.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::str::FromStr;

use sha2::{Digest, Sha256};

use super::lines::Line;
use crate::db::NewDocument;
use crate::error::{io_err, Result, UserError};

/// File formats `kindred ingest` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Tab-separated values with a header row (no quoting).
    Tsv,
    /// Comma-separated values with a header row (RFC 4180 quoting).
    Csv,
    /// One JSON object per line.
    Jsonl,
    /// Quora question pairs: label, question 1, question 2, pair id; no header.
    Qqp,
}

impl FromStr for Format {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "tsv" => Ok(Format::Tsv),
            "csv" => Ok(Format::Csv),
            "jsonl" | "ndjson" => Ok(Format::Jsonl),
            "qqp" => Ok(Format::Qqp),
            other => Err(UserError::InvalidArgument {
                name: "format",
                reason: format!("{other:?}; use tsv, csv, jsonl or qqp"),
            }
            .into()),
        }
    }
}

impl Format {
    /// The format a file name suggests (`.tsv`, `.csv`, `.jsonl`/`.ndjson`/`.json`).
    pub fn from_path(path: &Path) -> Result<Self> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        match ext.as_str() {
            "tsv" | "tab" => Ok(Format::Tsv),
            "csv" => Ok(Format::Csv),
            "jsonl" | "ndjson" | "json" => Ok(Format::Jsonl),
            _ => Err(UserError::InvalidArgument {
                name: "format",
                reason: format!(
                    "cannot tell the format of {} from its extension; pass --format tsv|csv|jsonl|qqp",
                    path.display()
                ),
            }
            .into()),
        }
    }
}

/// Which fields make a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fields {
    /// The id column / key.
    pub id: String,
    /// The text column / key.
    pub text: String,
    /// Columns / keys copied into metadata. For JSON Lines, empty means "the `metadata`
    /// object, if any".
    pub meta: Vec<String>,
}

impl Default for Fields {
    fn default() -> Self {
        Fields {
            id: "id".into(),
            text: "text".into(),
            meta: Vec::new(),
        }
    }
}

/// A row that cannot be ingested.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rejected {
    /// 1-based line number in the file (for CSV: where the record starts).
    pub line: u64,
    /// What is wrong and how to fix it.
    pub reason: String,
}

/// One record of the file.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A document, from `line`.
    Doc(u64, NewDocument),
    /// A bad row.
    Bad(Rejected),
}

impl Record {
    /// Its line number.
    pub fn line(&self) -> u64 {
        match self {
            Record::Doc(l, _) => *l,
            Record::Bad(r) => r.line,
        }
    }
}

/// The id kindred gives a question read from a QQP file: `q` + 16 hex digits of the SHA-256
/// of its text (the files carry pair ids, not question ids), so the same question read twice,
/// or in a resumed load, is the same document.
pub fn qqp_id(text: &str) -> String {
    let h = Sha256::digest(text.as_bytes());
    let hex: String = h[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("q{hex}")
}

/// Streams the records of a file.
pub fn records(
    path: &Path,
    format: Format,
    fields: &Fields,
) -> Result<Box<dyn Iterator<Item = Result<Record>> + Send>> {
    let file = std::fs::File::open(path).map_err(io_err(format!("opening {}", path.display())))?;
    let source = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let reader = BufReader::with_capacity(1 << 16, file);
    Ok(match format {
        Format::Jsonl => Box::new(jsonl(reader, fields.clone())),
        Format::Qqp => Box::new(qqp(reader, source)),
        Format::Tsv => Box::new(delimited(reader, b'\t', false, fields.clone(), path)?),
        Format::Csv => Box::new(delimited(reader, b',', true, fields.clone(), path)?),
    })
}

/// Longest line the JSON Lines and QQP readers accept (a question with its metadata fits
/// many times over); a longer line is a rejected row, and reading goes on after it.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Lines as lossy UTF-8 with 1-based numbers; an over-long line is `Err` with its number.
fn lines(
    reader: impl BufRead,
) -> impl Iterator<Item = Result<std::result::Result<(u64, String), u64>>> {
    super::lines::read_lines(reader, MAX_LINE_BYTES).map(|r| match r {
        Ok(Line::Text(n, bytes)) => Ok(Ok((n, String::from_utf8_lossy(&bytes).into_owned()))),
        Ok(Line::TooLong(n)) => Ok(Err(n)),
        Err(e) => Err(crate::InternalError::io("reading the input file", e).into()),
    })
}

/// The bad row of an over-long line.
fn too_long(n: u64) -> Record {
    bad(
        n,
        format!("the line is longer than {MAX_LINE_BYTES} bytes; is it one record?"),
    )
}

fn bad(line: u64, reason: impl Into<String>) -> Record {
    Record::Bad(Rejected {
        line,
        reason: reason.into(),
    })
}

fn jsonl(reader: impl BufRead, fields: Fields) -> impl Iterator<Item = Result<Record>> {
    lines(reader).filter_map(move |r| {
        let (n, line) = match r {
            Ok(Ok(x)) => x,
            Ok(Err(n)) => return Some(Ok(too_long(n))),
            Err(e) => return Some(Err(e)),
        };
        if line.trim().is_empty() {
            return None;
        }
        let value: serde_json::Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => return Some(Ok(bad(n, format!("not valid JSON: {e}")))),
        };
        let Some(obj) = value.as_object() else {
            return Some(Ok(bad(
                n,
                "not a JSON object; each line must be {\"id\": ..., \"text\": ...}",
            )));
        };
        let id = match obj.get(&fields.id) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Number(x)) => x.to_string(),
            _ => {
                return Some(Ok(bad(
                    n,
                    format!("no string field {:?} for the id (--id-field)", fields.id),
                )))
            }
        };
        let Some(text) = obj.get(&fields.text).and_then(|t| t.as_str()) else {
            return Some(Ok(bad(
                n,
                format!(
                    "no string field {:?} for the text (--text-field)",
                    fields.text
                ),
            )));
        };
        let metadata = if fields.meta.is_empty() {
            obj.get("metadata")
                .cloned()
                .unwrap_or(serde_json::Value::Null)
        } else {
            serde_json::Value::Object(
                fields
                    .meta
                    .iter()
                    .filter_map(|k| obj.get(k).map(|v| (k.clone(), v.clone())))
                    .collect(),
            )
        };
        Some(Ok(Record::Doc(
            n,
            NewDocument {
                id,
                text: text.to_string(),
                metadata,
            },
        )))
    })
}

fn qqp(reader: impl BufRead, source: String) -> impl Iterator<Item = Result<Record>> {
    let mut seen: HashSet<[u8; 32]> = HashSet::new();
    lines(reader).flat_map(move |r| {
        let (n, line) = match r {
            Ok(Ok(x)) => x,
            Ok(Err(n)) => return vec![Ok(too_long(n))],
            Err(e) => return vec![Err(e)],
        };
        if line.trim().is_empty() {
            return vec![];
        }
        let cols: Vec<&str> = line.split('\t').collect();
        if cols.len() < 3 {
            return vec![Ok(bad(n, "fewer than 3 tab-separated columns; QQP lines are label<TAB>question1<TAB>question2<TAB>id"))];
        }
        let mut out = Vec::new();
        for q in [cols[1].trim(), cols[2].trim()] {
            // Each distinct question once (a set of digests keeps memory small).
            if q.is_empty() || !seen.insert(Sha256::digest(q.as_bytes()).into()) {
                continue;
            }
            out.push(Ok(Record::Doc(
                n,
                NewDocument {
                    id: qqp_id(q),
                    text: q.to_string(),
                    metadata: serde_json::json!({ "source": source }),
                },
            )));
        }
        out
    })
}

fn delimited(
    reader: impl Read + Send + 'static,
    delimiter: u8,
    quoting: bool,
    fields: Fields,
    path: &Path,
) -> Result<impl Iterator<Item = Result<Record>> + Send> {
    let mut rdr = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .quoting(quoting)
        .flexible(true)
        .has_headers(true)
        .from_reader(reader);
    let headers = rdr
        .byte_headers()
        .map_err(|e| UserError::InvalidArgument {
            name: "input file",
            reason: format!("{}: cannot read the header row: {e}", path.display()),
        })?
        .clone();
    let col = |name: &str| {
        headers
            .iter()
            .position(|h| String::from_utf8_lossy(h).trim() == name)
    };
    let header_names: Vec<String> = headers
        .iter()
        .map(|h| String::from_utf8_lossy(h).into_owned())
        .collect();
    let missing = |what: &str, name: &str| UserError::InvalidArgument {
        name: "input file",
        reason: format!(
            "{}: the header has no {what} column {name:?} (columns: {}); pass --{what}-field",
            path.display(),
            header_names.join(", ")
        ),
    };
    let id_col = col(&fields.id).ok_or_else(|| missing("id", &fields.id))?;
    let text_col = col(&fields.text).ok_or_else(|| missing("text", &fields.text))?;
    let mut meta_cols = Vec::new();
    for m in &fields.meta {
        meta_cols.push((m.clone(), col(m).ok_or_else(|| missing("meta", m))?));
    }
    let mut records = rdr.into_byte_records();
    Ok(std::iter::from_fn(move || {
        let rec = records.next()?;
        Some(match rec {
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line());
                match e.kind() {
                    csv::ErrorKind::Io(_) => Err(crate::InternalError::Io {
                        context: "reading the input file".into(),
                        source: std::io::Error::other(e.to_string()),
                    }
                    .into()),
                    _ => Ok(bad(line, format!("unreadable record: {e}"))),
                }
            }
            Ok(r) => {
                let line = r.position().map_or(0, |p| p.line());
                let get = |i: usize| r.get(i).map(|b| String::from_utf8_lossy(b).into_owned());
                match (get(id_col), get(text_col)) {
                    (Some(id), Some(text)) => {
                        let metadata = serde_json::Value::Object(
                            meta_cols
                                .iter()
                                .filter_map(|(k, i)| {
                                    get(*i).map(|v| (k.clone(), serde_json::Value::String(v)))
                                })
                                .collect(),
                        );
                        Ok(Record::Doc(
                            line,
                            NewDocument {
                                id: id.trim().to_string(),
                                text,
                                metadata,
                            },
                        ))
                    }
                    _ => Ok(bad(
                        line,
                        format!(
                            "{} fields; the id and text columns are missing on this row",
                            r.len()
                        ),
                    )),
                }
            }
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(content: &str, name: &str, format: Format, fields: Fields) -> Vec<Record> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(name);
        std::fs::write(&p, content).unwrap();
        records(&p, format, &fields)
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
    }

    #[test]
    fn an_over_long_line_is_a_rejected_row_and_reading_goes_on() {
        let long = format!(
            "{{\"id\": \"big\", \"text\": \"{}\"}}",
            "x".repeat(MAX_LINE_BYTES)
        );
        let content = format!("{long}\n{{\"id\": \"a\", \"text\": \"hi\"}}\n");
        let recs = read(&content, "d.jsonl", Format::Jsonl, Fields::default());
        assert_eq!(recs.len(), 2);
        assert!(
            matches!(&recs[0], Record::Bad(r) if r.line == 1 && r.reason.contains("longer than")),
            "{:?}",
            recs[0]
        );
        assert!(matches!(&recs[1], Record::Doc(2, d) if d.id == "a"));
        let qqp = format!(
            "0\t{}\tshort\t1\n1\tq one\tq two\t2\n",
            "y".repeat(MAX_LINE_BYTES)
        );
        let recs = read(&qqp, "p.tsv", Format::Qqp, Fields::default());
        assert!(matches!(&recs[0], Record::Bad(r) if r.line == 1));
        assert_eq!(recs.len(), 3, "the next line's two questions");
    }

    #[test]
    fn jsonl_rows_and_rejects() {
        let recs = read(
            "{\"id\": \"a\", \"text\": \"hi\", \"metadata\": {\"x\": 1}}\n\nnot json\n{\"id\": 7, \"text\": \"n\"}\n{\"text\": \"no id\"}\n",
            "d.jsonl",
            Format::Jsonl,
            Fields::default(),
        );
        assert_eq!(recs.len(), 4);
        assert!(matches!(&recs[0], Record::Doc(1, d) if d.id == "a" && d.metadata["x"] == 1));
        assert!(
            matches!(&recs[1], Record::Bad(r) if r.line == 3 && r.reason.contains("not valid JSON"))
        );
        assert!(matches!(&recs[2], Record::Doc(4, d) if d.id == "7"));
        assert!(
            matches!(&recs[3], Record::Bad(r) if r.line == 5 && r.reason.contains("--id-field"))
        );
    }

    #[test]
    fn csv_with_quotes_and_meta_columns() {
        let fields = Fields {
            id: "qid".into(),
            text: "question".into(),
            meta: vec!["topic".into()],
        };
        let recs = read(
            "qid,question,topic\n1,\"Hello, world?\",greet\n2,\"multi\nline\",x\n3\n",
            "d.csv",
            Format::Csv,
            fields,
        );
        assert!(
            matches!(&recs[0], Record::Doc(2, d) if d.text == "Hello, world?" && d.metadata["topic"] == "greet")
        );
        assert!(matches!(&recs[1], Record::Doc(3, d) if d.text == "multi\nline"));
        assert!(matches!(&recs[2], Record::Bad(r) if r.line == 5));
        let e = records(
            Path::new("/nonexistent.csv"),
            Format::Csv,
            &Fields::default(),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("/nonexistent.csv"));
    }

    #[test]
    fn tsv_missing_column_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d.tsv");
        std::fs::write(&p, "key\tbody\n1\thello\n").unwrap();
        let e = records(&p, Format::Tsv, &Fields::default())
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("\"id\"") && e.contains("key, body") && e.contains("--id-field"),
            "{e}"
        );
    }

    #[test]
    fn qqp_yields_each_distinct_question_once() {
        let recs = read(
            "1\tHow are you?\tHow do you do?\t1\n0\tHow are you?\tWhat time is it?\t2\nbroken line\n",
            "dev.tsv",
            Format::Qqp,
            Fields::default(),
        );
        let docs: Vec<&NewDocument> = recs
            .iter()
            .filter_map(|r| match r {
                Record::Doc(_, d) => Some(d),
                _ => None,
            })
            .collect();
        assert_eq!(docs.len(), 3);
        assert_eq!(docs[0].id, qqp_id("How are you?"));
        assert_eq!(docs[2].text, "What time is it?");
        assert_eq!(docs[0].metadata["source"], "dev.tsv");
        assert!(matches!(recs.last(), Some(Record::Bad(r)) if r.line == 3));
    }
}
