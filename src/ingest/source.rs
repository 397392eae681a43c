//! Reading documents from files, one record at a time (memory stays flat in the file size):
//! TSV and CSV with a header row, JSON Lines, and the Quora pair files (`label<TAB>q1<TAB>q2
//! <TAB>id`, each distinct question once). A record that cannot become a document is a
//! [`Rejected`] row with its line number and reason, never a failure of the whole read: one
//! over [`MAX_RECORD_BYTES`] (never held in memory), one with bytes that are not UTF-8 in a
//! field it uses (never replaced), a malformed CSV record ([`super::delimited`]). A UTF-8 byte
//! order mark at the very start of a file is skipped. Only an unusable TSV or CSV header row
//! fails the read.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::str::FromStr;

use sha2::{Digest, Sha256};

use super::delimited::{self, RecordSplitter, Row};
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
    /// Columns / keys whose texts are the document's context (never encoded or searched).
    /// TSV/CSV: each named column's non-empty cell is one context text. JSON Lines: each
    /// key's value is a string or a list of strings; empty means "the `context` key, if any".
    pub context: Vec<String>,
}

impl Default for Fields {
    fn default() -> Self {
        Fields {
            id: "id".into(),
            text: "text".into(),
            meta: Vec::new(),
            context: Vec::new(),
        }
    }
}

/// The JSON Lines key read as the context when no context keys are named.
pub const CONTEXT_KEY: &str = "context";

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
    let reader = BufReader::with_capacity(1 << 16, file);
    read_records(reader, path, format, fields, MAX_RECORD_BYTES)
}

/// Streams the records of `reader`, the content of the file `path` (named in messages; QQP's
/// metadata `source`), each record at most `max` bytes. A UTF-8 byte order mark at the very
/// start is skipped. Fails only when a TSV or CSV header row is unusable.
pub fn read_records<R: BufRead + Send + 'static>(
    reader: R,
    path: &Path,
    format: Format,
    fields: &Fields,
    max: usize,
) -> Result<Box<dyn Iterator<Item = Result<Record>> + Send>> {
    let source = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(match format {
        Format::Jsonl => Box::new(jsonl(reader, max, fields.clone())),
        Format::Qqp => Box::new(qqp(reader, max, source)),
        Format::Tsv => Box::new(delimited(reader, delimited::TSV, max, fields, path)?),
        Format::Csv => Box::new(delimited(reader, delimited::CSV, max, fields, path)?),
    })
}

/// Longest record (a line, or a CSV record over several) the readers accept: a question with
/// its metadata fits many times over. A longer one is a rejected row, never held in memory,
/// and reading goes on after it.
pub const MAX_RECORD_BYTES: usize = 1 << 20;

/// The numbered lines of a reader, as bytes; an over-long line is `Err` with its number.
fn lines(
    reader: impl BufRead,
    max: usize,
) -> impl Iterator<Item = Result<std::result::Result<(u64, Vec<u8>), u64>>> {
    super::lines::read_lines(reader, max).map(|r| match r {
        Ok(Line::Text(n, bytes)) => Ok(Ok((n, bytes))),
        Ok(Line::TooLong(n)) => Ok(Err(n)),
        Err(e) => Err(read_error(e)),
    })
}

fn read_error(e: std::io::Error) -> crate::Error {
    crate::InternalError::io("reading the input file", e).into()
}

/// The bad row of an over-long line.
fn too_long(n: u64, max: usize) -> Record {
    bad(
        n,
        format!("the line is longer than {max} bytes; is it one record?"),
    )
}

fn bad(line: u64, reason: impl Into<String>) -> Record {
    Record::Bad(Rejected {
        line,
        reason: reason.into(),
    })
}

/// Why bytes are refused: `what` (e.g. `column "text"`) is not UTF-8 from byte `offset` (0-based)
/// of its line.
fn not_utf8(what: &str, offset: usize) -> String {
    let what = match what {
        "" => String::new(),
        w => format!("{w} is "),
    };
    format!("{what}not valid UTF-8 (byte offset {offset} of the line); convert the file, e.g. iconv -f latin1 -t utf-8")
}

/// Whether a line holds only whitespace.
fn blank(line: &[u8]) -> bool {
    std::str::from_utf8(line).is_ok_and(|s| s.trim().is_empty())
}

fn jsonl(reader: impl BufRead, max: usize, fields: Fields) -> impl Iterator<Item = Result<Record>> {
    lines(reader, max).filter_map(move |r| {
        let (n, bytes) = match r {
            Ok(Ok(x)) => x,
            Ok(Err(n)) => return Some(Ok(too_long(n, max))),
            Err(e) => return Some(Err(e)),
        };
        let line = match std::str::from_utf8(&bytes) {
            Ok(line) => line,
            Err(e) => return Some(Ok(bad(n, not_utf8("", e.valid_up_to())))),
        };
        if line.trim().is_empty() {
            return None;
        }
        let value: serde_json::Value = match serde_json::from_str(line) {
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
        let default_key = [CONTEXT_KEY.to_string()];
        let keys = match fields.context.is_empty() {
            true => &default_key[..],
            false => &fields.context[..],
        };
        let mut context = Vec::new();
        for key in keys {
            match obj.get(key) {
                None | Some(serde_json::Value::Null) => {}
                Some(serde_json::Value::String(s)) => context.push(s.clone()),
                Some(serde_json::Value::Array(texts))
                    if texts.iter().all(serde_json::Value::is_string) =>
                {
                    let texts = texts.iter().filter_map(|t| t.as_str());
                    context.extend(texts.map(str::to_string));
                }
                Some(_) => {
                    return Some(Ok(bad(
                        n,
                        format!("field {key:?} (context) must be a string or a list of strings"),
                    )))
                }
            }
        }
        Some(Ok(Record::Doc(
            n,
            NewDocument {
                id,
                text: text.to_string(),
                metadata,
                context,
            },
        )))
    })
}

fn qqp(reader: impl BufRead, max: usize, source: String) -> impl Iterator<Item = Result<Record>> {
    let mut seen: HashSet<[u8; 32]> = HashSet::new();
    lines(reader, max).flat_map(move |r| {
        let (n, line) = match r {
            Ok(Ok(x)) => x,
            Ok(Err(n)) => return vec![Ok(too_long(n, max))],
            Err(e) => return vec![Err(e)],
        };
        if blank(&line) {
            return vec![];
        }
        let cols: Vec<&[u8]> = line.split(|&b| b == b'\t').collect();
        if cols.len() < 3 {
            return vec![Ok(bad(n, "fewer than 3 tab-separated columns; QQP lines are label<TAB>question1<TAB>question2<TAB>id"))];
        }
        let mut questions = Vec::with_capacity(2);
        for (i, what) in [(1, "question 1"), (2, "question 2")] {
            match std::str::from_utf8(cols[i]) {
                Ok(q) => questions.push(q.trim()),
                Err(e) => {
                    // Each column before it, and its tab.
                    let start: usize = cols[..i].iter().map(|c| c.len() + 1).sum();
                    return vec![Ok(bad(n, not_utf8(what, start + e.valid_up_to())))];
                }
            }
        }
        let mut out = Vec::new();
        for q in questions {
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
                    context: Vec::new(),
                },
            )));
        }
        out
    })
}

/// The documents of a TSV or CSV file: a header row naming the columns, then records.
fn delimited(
    reader: impl BufRead + Send + 'static,
    dialect: delimited::Dialect,
    max: usize,
    fields: &Fields,
    path: &Path,
) -> Result<impl Iterator<Item = Result<Record>> + Send> {
    let mut rows = super::lines::read_split(reader, RecordSplitter::new(dialect, max));
    let header = header_names(rows.next(), path)?;
    let columns = Columns::find(&header, fields, path)?;
    Ok(rows.map(move |row| match row.map_err(read_error)? {
        Row::Record(r) => Ok(columns.record(&r)),
        bad_row => Ok(bad(
            bad_row.line(),
            bad_row.problem().expect("not a record"),
        )),
    }))
}

/// An error about a delimited file's header.
fn header_error(path: &Path, reason: String) -> crate::Error {
    UserError::InvalidArgument {
        name: "input file",
        reason: format!("{}: {reason}", path.display()),
    }
    .into()
}

/// The column names of the header row (none in an empty file).
fn header_names(first: Option<std::io::Result<Row>>, path: &Path) -> Result<Vec<String>> {
    match first {
        None => Ok(Vec::new()),
        Some(Err(e)) => Err(read_error(e)),
        Some(Ok(Row::Record(header))) => (0..header.len())
            .map(|i| match header.text(i).expect("in range") {
                Ok(name) => Ok(name.to_string()),
                Err(offset) => Err(header_error(
                    path,
                    format!(
                        "the header row (line {}): {}",
                        header.line,
                        not_utf8("", offset)
                    ),
                )),
            })
            .collect(),
        Some(Ok(bad_row)) => Err(header_error(
            path,
            format!(
                "cannot read the header row (line {}): {}",
                bad_row.line(),
                bad_row.problem().expect("not a record")
            ),
        )),
    }
}

/// Where the fields of a document are in a delimited file's records: (name, column index).
struct Columns {
    id: (String, usize),
    text: (String, usize),
    meta: Vec<(String, usize)>,
    context: Vec<(String, usize)>,
}

impl Columns {
    /// Finds every named field in the header; a missing one is an error naming the option.
    fn find(header: &[String], fields: &Fields, path: &Path) -> Result<Self> {
        let col = |what: &str, name: &str, option: &str| match header
            .iter()
            .position(|h| h.trim() == name)
        {
            Some(i) => Ok((name.to_string(), i)),
            None => Err(header_error(
                path,
                format!(
                    "the header has no {what} column {name:?} (columns: {}); pass {option}",
                    header.join(", ")
                ),
            )),
        };
        Ok(Columns {
            id: col("id", &fields.id, "--id-field")?,
            text: col("text", &fields.text, "--text-field")?,
            meta: (fields.meta.iter())
                .map(|m| col("meta", m, "--meta-fields"))
                .collect::<Result<_>>()?,
            context: (fields.context.iter())
                .map(|c| col("context", c, "--context-fields"))
                .collect::<Result<_>>()?,
        })
    }

    /// One record as a document, or as a rejected row saying why.
    fn record(&self, r: &delimited::RawRecord) -> Record {
        let line = r.line;
        // A column's text, `None` if this row is too short for it, `Err`: not UTF-8.
        let text = |(name, i): &(String, usize)| {
            r.text(*i)
                .map(|t| t.map_err(|offset| not_utf8(&format!("column {name:?}"), offset)))
        };
        let (Some(id), Some(body)) = (text(&self.id), text(&self.text)) else {
            return bad(
                line,
                format!(
                    "{} fields; the id and text columns are missing on this row",
                    r.len()
                ),
            );
        };
        let (id, body) = match (id, body) {
            (Ok(id), Ok(body)) => (id, body),
            (Err(why), _) | (_, Err(why)) => return bad(line, why),
        };
        let mut metadata = serde_json::Map::new();
        for column in &self.meta {
            match text(column) {
                Some(Ok(v)) => {
                    metadata.insert(column.0.clone(), serde_json::Value::String(v.to_string()));
                }
                Some(Err(why)) => return bad(line, why),
                None => {}
            }
        }
        let mut context = Vec::new();
        for column in &self.context {
            match text(column) {
                Some(Ok(v)) if !v.trim().is_empty() => context.push(v.to_string()),
                Some(Err(why)) => return bad(line, why),
                _ => {}
            }
        }
        Record::Doc(
            line,
            NewDocument {
                id: id.trim().to_string(),
                text: body.to_string(),
                metadata: serde_json::Value::Object(metadata),
                context,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn read(content: &str, name: &str, format: Format, fields: Fields) -> Vec<Record> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(name);
        std::fs::write(&p, content).unwrap();
        records(&p, format, &fields)
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
    }

    fn read_bytes(content: &[u8], name: &str, format: Format, fields: Fields) -> Vec<Record> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(name);
        std::fs::write(&p, content).unwrap();
        records(&p, format, &fields)
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
    }

    fn reason(r: &Record) -> (u64, &str) {
        match r {
            Record::Bad(r) => (r.line, r.reason.as_str()),
            other => panic!("expected a rejected row, got {other:?}"),
        }
    }

    #[test]
    fn an_unterminated_quote_is_a_rejected_row_not_one_swallowing_document() {
        let recs = read(
            "id,text\n1,\"abc\n2,def\n3,ghi\n",
            "d.csv",
            Format::Csv,
            Fields::default(),
        );
        assert_eq!(recs.len(), 1, "{recs:?}");
        let (line, why) = reason(&recs[0]);
        assert_eq!(line, 2);
        assert!(
            why.contains("never closed") && why.contains("lines 2-4") && why.contains("\"\""),
            "{why}"
        );
    }

    #[test]
    fn text_after_a_closing_quote_is_a_rejected_row_and_reading_resumes_after_the_line() {
        let recs = read(
            "id,text\n1,\"abc\"def\n2,\"ok \"\"quoted\"\"\"\r\n3,plain\n",
            "d.csv",
            Format::Csv,
            Fields::default(),
        );
        assert_eq!(recs.len(), 3, "{recs:?}");
        let (line, why) = reason(&recs[0]);
        assert!(line == 2 && why.contains("must be doubled"), "{why}");
        assert!(matches!(&recs[1], Record::Doc(3, d) if d.text == "ok \"quoted\""));
        assert!(matches!(&recs[2], Record::Doc(4, d) if d.id == "3" && d.text == "plain"));
    }

    #[test]
    fn an_over_long_csv_or_tsv_record_is_a_rejected_row_and_reading_goes_on() {
        let big = "x".repeat(MAX_RECORD_BYTES);
        for (name, format, row) in [
            (
                "d.csv",
                Format::Csv,
                format!("1,\"{big}\nstill the same field\"\n"),
            ),
            ("d.tsv", Format::Tsv, format!("1\t{big}\n")),
        ] {
            let content = format!(
                "id{sep}text\n{row}2{sep}next\n",
                sep = if format == Format::Csv { "," } else { "\t" }
            );
            let recs = read(&content, name, format, Fields::default());
            assert_eq!(recs.len(), 2, "{name}");
            let (line, why) = reason(&recs[0]);
            assert!(
                line == 2 && why.contains("longer than 1048576 bytes"),
                "{name}: {why}"
            );
            let next = if format == Format::Csv { 4 } else { 3 };
            assert!(
                matches!(&recs[1], Record::Doc(l, d) if *l == next && d.text == "next"),
                "{name}: {:?}",
                recs[1]
            );
        }
    }

    #[test]
    fn invalid_utf8_is_a_rejected_row_naming_the_byte_and_the_fix() {
        let fields = Fields {
            meta: vec!["topic".into()],
            ..Fields::default()
        };
        // File name, format, fields, content, the bad row's line, the bad byte's offset.
        type Case<'a> = (&'a str, Format, Fields, &'a [u8], u64, usize);
        let cases: [Case; 6] = [
            (
                "d.jsonl",
                Format::Jsonl,
                Fields::default(),
                b"{\"id\": \"a\", \"text\": \"caf\xe9\"}\n{\"id\": \"b\", \"text\": \"ok\"}\n",
                1,
                24,
            ),
            (
                "d.csv",
                Format::Csv,
                fields.clone(),
                b"id,text,topic\n1,\"a \"\"b\"\" caf\xe9\",x\n2,ok,y\n",
                2,
                14,
            ),
            (
                "d.csv",
                Format::Csv,
                fields.clone(),
                b"id,text,topic\n1,fine,t\xffpic\n2,ok,y\n",
                2,
                8,
            ),
            (
                "d.tsv",
                Format::Tsv,
                fields.clone(),
                b"id\ttext\ttopic\n\xff1\tfine\tx\n2\tok\ty\n",
                2,
                0,
            ),
            (
                "d.tsv",
                Format::Tsv,
                Fields::default(),
                b"id\ttext\n1\tcaf\xe9\n2\tok\n",
                2,
                5,
            ),
            (
                "p.tsv",
                Format::Qqp,
                Fields::default(),
                b"0\tq one\tcaf\xe9?\t1\n1\tq two\tq three\t2\n",
                1,
                11,
            ),
        ];
        for (name, format, fields, content, line, offset) in cases {
            let recs = read_bytes(content, name, format, fields);
            let (l, why) = reason(&recs[0]);
            assert_eq!(l, line, "{name}: {why}");
            assert!(
                why.contains(&format!(
                    "not valid UTF-8 (byte offset {offset} of the line)"
                )) && why.contains("iconv -f latin1 -t utf-8"),
                "{name}: {why}"
            );
            assert!(
                recs[1..].iter().all(|r| matches!(r, Record::Doc(..))) && recs.len() >= 2,
                "{name}: {recs:?}"
            );
        }
        // An unused column may hold anything.
        let recs = read_bytes(
            b"id,text,other\n1,ok,\xff\n",
            "d.csv",
            Format::Csv,
            Fields::default(),
        );
        assert!(matches!(&recs[0], Record::Doc(2, d) if d.text == "ok"));
        // A header that is not UTF-8 is an error of the whole file.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("h.csv");
        std::fs::write(&p, b"id,t\xe9xt\n1,a\n").unwrap();
        let e = records(&p, Format::Csv, &Fields::default())
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("header row")
                && e.contains("not valid UTF-8 (byte offset 4")
                && e.contains("iconv"),
            "{e}"
        );
    }

    #[test]
    fn a_byte_order_mark_at_the_start_is_skipped_in_every_format() {
        let bom = "\u{feff}";
        let cases = [
            (
                "d.jsonl",
                Format::Jsonl,
                "{\"id\": \"a\", \"text\": \"hi\"}\n",
            ),
            ("d.csv", Format::Csv, "id,text\na,hi\n"),
            ("d.tsv", Format::Tsv, "id\ttext\na\thi\n"),
            ("p.tsv", Format::Qqp, "0\thi\thi\t1\n"),
        ];
        for (name, format, body) in cases {
            let recs = read(&format!("{bom}{body}"), name, format, Fields::default());
            assert_eq!(recs.len(), 1, "{name}: {recs:?}");
            assert!(
                matches!(&recs[0], Record::Doc(_, d) if d.text == "hi" && !d.id.contains(bom)),
                "{name}: {recs:?}"
            );
        }
        // Only at the very start: elsewhere it is text.
        let recs = read(
            &format!("id,text\na,{bom}hi\n"),
            "d.csv",
            Format::Csv,
            Fields::default(),
        );
        assert!(matches!(&recs[0], Record::Doc(_, d) if d.text == format!("{bom}hi")));
    }

    #[test]
    fn an_over_long_line_is_a_rejected_row_and_reading_goes_on() {
        let long = format!(
            "{{\"id\": \"big\", \"text\": \"{}\"}}",
            "x".repeat(MAX_RECORD_BYTES)
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
            "y".repeat(MAX_RECORD_BYTES)
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

    /// The context of a JSON Lines record: the `context` key (a string or a list of strings)
    /// or the keys named; anything else is a rejected row naming the key.
    #[test]
    fn jsonl_context_is_a_string_or_a_list_of_strings() {
        let content = concat!(
            "{\"id\": \"a\", \"text\": \"q\", \"context\": \"an answer\"}\n",
            "{\"id\": \"b\", \"text\": \"q\", \"context\": [\"one\", \"two\"], \"faq\": \"F\"}\n",
            "{\"id\": \"c\", \"text\": \"q\", \"context\": null}\n",
            "{\"id\": \"d\", \"text\": \"q\"}\n",
            "{\"id\": \"e\", \"text\": \"q\", \"context\": [\"ok\", 3]}\n",
        );
        let contexts = |fields: Fields| -> Vec<std::result::Result<Vec<String>, String>> {
            read(content, "d.jsonl", Format::Jsonl, fields)
                .into_iter()
                .map(|r| match r {
                    Record::Doc(_, d) => Ok(d.context),
                    Record::Bad(r) => Err(r.reason),
                })
                .collect()
        };
        let got = contexts(Fields::default());
        assert_eq!(got[0], Ok(vec!["an answer".to_string()]));
        assert_eq!(got[1], Ok(vec!["one".to_string(), "two".to_string()]));
        assert_eq!((&got[2], &got[3]), (&Ok(vec![]), &Ok(vec![])));
        assert_eq!(
            got[4],
            Err("field \"context\" (context) must be a string or a list of strings".into())
        );
        let named = contexts(Fields {
            context: vec!["faq".into(), "context".into()],
            ..Fields::default()
        });
        assert_eq!(named[1], Ok(vec!["F".into(), "one".into(), "two".into()]));
        assert_eq!(named[3], Ok(vec![]));
    }

    /// `--context-fields`: each named column's non-empty cell is one context text, verbatim;
    /// a column the header lacks fails the read naming the option.
    #[test]
    fn csv_context_columns_give_one_text_per_non_empty_cell() {
        let fields = Fields {
            context: vec!["answer".into(), "comment".into()],
            ..Fields::default()
        };
        let recs = read(
            "id,text,answer,comment\n1,q one,\" Use the link. \",Thanks!\n2,q two,,  \n3,q three\n",
            "d.csv",
            Format::Csv,
            fields.clone(),
        );
        let context = |i: usize| match &recs[i] {
            Record::Doc(_, d) => d.context.clone(),
            bad => panic!("{bad:?}"),
        };
        assert_eq!(context(0), [" Use the link. ", "Thanks!"]);
        assert!(context(1).is_empty() && context(2).is_empty());
        let tsv = read(
            "id\ttext\tanswer\tcomment\n1\tq\tA\t\n",
            "d.tsv",
            Format::Tsv,
            fields,
        );
        assert!(matches!(&tsv[0], Record::Doc(_, d) if d.context == ["A"]));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d.csv");
        std::fs::write(&p, "id,text\n1,q\n").unwrap();
        let fields = Fields {
            context: vec!["answer".into()],
            ..Fields::default()
        };
        let e = records(&p, Format::Csv, &fields).err().expect("refused");
        assert!(
            e.to_string().contains(
                "the header has no context column \"answer\" (columns: id, text); pass --context-fields"
            ),
            "{e}"
        );
    }

    #[test]
    fn csv_with_quotes_and_meta_columns() {
        let fields = Fields {
            id: "qid".into(),
            text: "question".into(),
            meta: vec!["topic".into()],
            context: Vec::new(),
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

    /// Pieces fuzz inputs are made of: the bytes the formats treat specially (quotes,
    /// delimiters, line ends, a byte order mark, bytes that are never or not yet UTF-8), and
    /// fragments that make some records well-formed.
    const PIECES: &[&[u8]] = &[
        b"\"",
        b"\"\"",
        b",",
        b"\t",
        b"\r",
        b"\n",
        b"\r\n",
        b"\xff",
        b"\xc3",
        b"\xc3\xa9",
        b"\xef\xbb\xbf",
        b"a",
        b"bc ",
        b"{\"id\":\"1\",\"text\":\"",
        b"\"}",
        b"{\"id\":\"2\",\"text\":\"hi\"}\n",
        b"0\tq\tr\t1\n",
        b"\n3,\"q \"\"r\"\"\",m\n",
        b"\n4\tt\tm\n",
    ];

    fn fuzz_bytes() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            prop_oneof![
                3 => proptest::sample::select(PIECES).prop_map(|p| p.to_vec()),
                1 => any::<u8>().prop_map(|b| vec![b]),
            ],
            0..60,
        )
        .prop_map(|pieces| pieces.concat())
    }

    /// Every record `read_records` yields for `input` (split into reads of `cut` bytes), or
    /// the file-level error; at most `limit` records are taken.
    fn read_all(
        input: Vec<u8>,
        cut: usize,
        format: Format,
        max: usize,
        limit: usize,
    ) -> std::result::Result<Vec<Record>, String> {
        let fields = Fields {
            meta: vec!["m".into()],
            ..Fields::default()
        };
        let reader = BufReader::with_capacity(cut, std::io::Cursor::new(input));
        let recs = read_records(reader, Path::new("fuzz.txt"), format, &fields, max)
            .map_err(|e| e.to_string())?;
        Ok(recs
            .take(limit)
            .map(|r| r.expect("no I/O error from memory"))
            .collect())
    }

    use crate::ingest::delimited::tests::quoted;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Any bytes, in any format, chunked any way: reading never panics, never yields a
        /// text over the bound, numbers records with lines that never go backwards and exist,
        /// and ends (at most two records per line). A file-level error is a header's, named.
        #[test]
        fn any_bytes_read_in_any_format_stay_bounded_ordered_and_end(
            bom in any::<bool>(),
            header in any::<bool>(),
            body in fuzz_bytes(),
            format in proptest::sample::select(vec![Format::Jsonl, Format::Tsv, Format::Csv, Format::Qqp]),
            cut in 1usize..16,
            max in prop_oneof![0usize..40, Just(MAX_RECORD_BYTES)],
        ) {
            let mut input = Vec::new();
            if bom {
                input.extend_from_slice(super::super::lines::BOM);
            }
            if header {
                input.extend_from_slice(match format {
                    Format::Csv => b"id,text,m\n",
                    Format::Tsv => b"id\ttext\tm\n",
                    _ => b"",
                });
            }
            input.extend_from_slice(&body);
            let lines = input.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
            let limit = 2 * lines as usize;
            let recs = match read_all(input, cut, format, max, limit + 1) {
                Ok(recs) => recs,
                Err(e) => {
                    prop_assert!(matches!(format, Format::Csv | Format::Tsv), "{}", e);
                    prop_assert!(e.contains("fuzz.txt") && e.contains("header"), "{}", e);
                    return Ok(());
                }
            };
            prop_assert!(recs.len() <= limit, "{} records from {} lines", recs.len(), lines);
            let mut last = 1;
            for r in &recs {
                prop_assert!(r.line() >= last && r.line() <= lines, "{:?} after line {}", r, last);
                last = r.line();
                match r {
                    Record::Doc(_, d) => prop_assert!(d.text.len() <= max, "{:?}", d),
                    Record::Bad(b) => prop_assert!(!b.reason.is_empty()),
                }
            }
        }

        /// Documents written as a CSV writer writes them (quoting fields with commas, quotes,
        /// line ends; `\n` or `\r\n` between records) read back exactly.
        #[test]
        fn csv_documents_read_back_exactly(
            rows in proptest::collection::vec(
                ("[a-c\",\n\r\t \u{e9}\u{4e2d}]{0,10}", "[a-c\",\n\r ]{0,6}", any::<bool>()),
                0..8,
            ),
            crlf in any::<bool>(),
            bom in any::<bool>(),
            cut in 1usize..16,
        ) {
            let end = if crlf { "\r\n" } else { "\n" };
            let mut input = String::from(if bom { "\u{feff}id,text,m" } else { "id,text,m" });
            for (i, (text, meta, q)) in rows.iter().enumerate() {
                input.push_str(end);
                input.push_str(&format!("{i},{},{}", quoted(text, *q), quoted(meta, *q)));
            }
            let recs = read_all(input.into_bytes(), cut, Format::Csv, MAX_RECORD_BYTES, 100)
                .expect("a good header");
            prop_assert_eq!(recs.len(), rows.len());
            for (i, (r, (text, meta, _))) in recs.iter().zip(&rows).enumerate() {
                let Record::Doc(_, d) = r else {
                    return Err(TestCaseError::fail(format!("{r:?}")));
                };
                prop_assert_eq!(&d.id, &i.to_string());
                prop_assert_eq!(&d.text, text);
                prop_assert_eq!(&d.metadata["m"], meta.as_str());
            }
        }
    }
}
