//! Splitting a byte stream into the records of a delimited file, with a bound on each record's
//! length: TSV (fields split on tabs, one record per line, no quoting) and CSV (RFC 4180: a
//! field that starts with `"` is quoted, may hold delimiters and newlines, and writes a quote
//! as `""`). Lines end in `\n` or `\r\n`. A malformed record is reported with its lines instead
//! of being read wrong: one over the bound (its bytes are dropped as they come, never held), a
//! quote still open at the end of the input, or text after a closing quote. Pure: bytes in,
//! records out, like [`super::lines::LineSplitter`]; what the fields mean, and whether they are
//! UTF-8, is the caller's business.
//!
//! Where a record ends does not depend on the bound: an over-long record is still parsed
//! (quotes and all) to its end, only its bytes are dropped, so the lines of a long quoted text
//! never come back as records of their own. After text following a closing quote, reading
//! resumes after the end of that line.

use super::lines::Split;

/// How fields are delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dialect {
    /// The byte between fields.
    pub delimiter: u8,
    /// Whether a field starting with `"` is quoted (CSV); if not, quotes are plain text.
    pub quoting: bool,
}

/// Tab-separated values: no quoting.
pub const TSV: Dialect = Dialect {
    delimiter: b'\t',
    quoting: false,
};

/// Comma-separated values with RFC 4180 quoting.
pub const CSV: Dialect = Dialect {
    delimiter: b',',
    quoting: true,
};

/// Where a field's content lies, in [`RawRecord`]'s bytes and in the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    /// End of its content in the record's bytes (the start is the previous field's end).
    end: u32,
    /// Offset in the record's input bytes of its content's first byte.
    raw_start: u32,
    /// Whether it was quoted (so each `"` of its content was `""` in the input).
    quoted: bool,
}

/// One record: its fields' contents, unquoted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    /// The line it starts on (1-based).
    pub line: u64,
    bytes: Vec<u8>,
    fields: Vec<Span>,
}

impl RawRecord {
    /// Its number of fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Field `i`'s content.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let end = self.fields.get(i)?.end as usize;
        let start = match i {
            0 => 0,
            _ => self.fields[i - 1].end as usize,
        };
        Some(&self.bytes[start..end])
    }

    /// Field `i`'s content as text; `Err(k)`: it is not UTF-8, and byte `k` (0-based, counted
    /// from the start of the record's first line) is the first that is not.
    pub fn text(&self, i: usize) -> Option<Result<&str, usize>> {
        let bytes = self.get(i)?;
        let span = self.fields[i];
        Some(std::str::from_utf8(bytes).map_err(|e| {
            let ok = &bytes[..e.valid_up_to()];
            // In a quoted field each quote of the content was two in the input.
            let doubled = match span.quoted {
                true => ok.iter().filter(|&&b| b == b'"').count(),
                false => 0,
            };
            span.raw_start as usize + ok.len() + doubled
        }))
    }

    /// Every field's content.
    #[cfg(test)]
    pub fn fields(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.len()).map(|i| self.get(i).expect("in range"))
    }
}

/// One record of input, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Row {
    /// A well-formed record.
    Record(RawRecord),
    /// The record on lines `line..=last_line` is longer than `max` bytes; its bytes were
    /// dropped.
    TooLong {
        /// Its first line.
        line: u64,
        /// Its last line.
        last_line: u64,
        /// The bound.
        max: usize,
    },
    /// A quoted field opened on `quote_line` is still open at the end of the input: the record
    /// from `line` to the end (`last_line`) was dropped.
    Unclosed {
        /// The record's first line.
        line: u64,
        /// Where the quote opened.
        quote_line: u64,
        /// The input's last line.
        last_line: u64,
    },
    /// A quoted field opened on `quote_line` is closed on `stray_line` by a quote followed by
    /// something other than a delimiter or a line end: the record was dropped through the end
    /// of `stray_line`.
    StrayQuote {
        /// The record's first line.
        line: u64,
        /// Where the quote opened.
        quote_line: u64,
        /// Where the closing quote is followed by more text.
        stray_line: u64,
    },
}

impl Row {
    /// The line it starts on.
    pub fn line(&self) -> u64 {
        match self {
            Row::Record(r) => r.line,
            Row::TooLong { line, .. }
            | Row::Unclosed { line, .. }
            | Row::StrayQuote { line, .. } => *line,
        }
    }

    /// Why it is not a record, and how to fix that; `None` for a record.
    pub fn problem(&self) -> Option<String> {
        let lines = |a: u64, b: u64| match a == b {
            true => format!("line {a}"),
            false => format!("lines {a}-{b}"),
        };
        let at = |quote_line: u64, line: u64| match quote_line == line {
            true => "on this line".to_string(),
            false => format!("on line {quote_line}"),
        };
        Some(match *self {
            Row::Record(_) => return None,
            Row::TooLong {
                line,
                last_line,
                max,
            } if line == last_line => {
                format!("the line is longer than {max} bytes; is it one record?")
            }
            Row::TooLong {
                line,
                last_line,
                max,
            } => format!(
                "the record ({}) is longer than {max} bytes and was skipped; is a quote left open? double the quotes inside a quoted field (\"\")",
                lines(line, last_line)
            ),
            Row::Unclosed {
                line,
                quote_line,
                last_line,
            } => format!(
                "a quoted field opened {} is never closed; the rest of the file ({}) was not ingested; close the quote, or double the quotes inside it (\"\")",
                at(quote_line, line),
                lines(line, last_line)
            ),
            Row::StrayQuote {
                line,
                quote_line,
                stray_line,
            } if line == stray_line => format!(
                "text follows the closing quote of a quoted field {}; a quote inside a quoted field must be doubled (\"\")",
                at(quote_line, line)
            ),
            Row::StrayQuote {
                line,
                quote_line,
                stray_line,
            } => format!(
                "a quoted field opened {} is closed on line {stray_line} by a quote followed by more text, so {} were not ingested; a quote inside a quoted field must be doubled (\"\")",
                at(quote_line, line),
                lines(line, stray_line)
            ),
        })
    }
}

/// Where the splitter is within a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// At the start of a field.
    FieldStart,
    /// In a field that is not quoted.
    Unquoted,
    /// In a quoted field.
    Quoted,
    /// Just after a quote in a quoted field: an escaped quote or the field's end.
    QuoteInQuoted,
    /// After a closing quote and a `\r`: a `\r\n` line end, or stray text.
    CrAfterQuote,
    /// Dropping the rest of the line after stray text.
    SkipLine {
        /// The line of the stray text.
        stray_line: u64,
    },
}

/// Feeds bytes in, takes records out.
#[derive(Debug)]
pub struct RecordSplitter {
    dialect: Dialect,
    max: usize,
    state: State,
    /// The line of the next byte (1-based).
    line: u64,
    /// The line the current record starts on.
    start: u64,
    /// The line the current quoted field opened on.
    quote_line: u64,
    /// Input bytes of the current record so far, its line end excluded.
    raw: usize,
    /// The last input byte taken (0 before any).
    last: u8,
    /// Over the bound: the record's bytes are being dropped.
    too_long: bool,
    /// The current record's fields' contents.
    bytes: Vec<u8>,
    fields: Vec<Span>,
    /// Where the current field's content starts in the input.
    field_raw: usize,
    field_quoted: bool,
}

impl RecordSplitter {
    /// A splitter refusing records longer than `max` bytes (their final line end excluded;
    /// `max` is capped at 1 GiB).
    pub fn new(dialect: Dialect, max: usize) -> Self {
        RecordSplitter {
            dialect,
            max: max.min(1 << 30),
            state: State::FieldStart,
            line: 1,
            start: 1,
            quote_line: 1,
            raw: 0,
            last: 0,
            too_long: false,
            bytes: Vec::new(),
            fields: Vec::new(),
            field_raw: 0,
            field_quoted: false,
        }
    }

    /// Counts `n` input bytes of the record, `last` the last of them.
    fn advance(&mut self, n: usize, last: u8) {
        if n == 0 {
            return;
        }
        self.raw += n;
        self.last = last;
        // One byte of slack for the \r of a \r\n; end_record checks the exact bound.
        if !self.too_long && self.raw > self.max + 1 {
            self.too_long = true;
            self.bytes = Vec::new();
            self.fields = Vec::new();
        }
    }

    /// Takes `part` as content of the current field.
    fn content(&mut self, part: &[u8]) {
        if let Some(&last) = part.last() {
            self.advance(part.len(), last);
            if !self.too_long {
                self.bytes.extend_from_slice(part);
            }
        }
    }

    /// Starts a field at the current input byte.
    fn start_field(&mut self, quoted: bool) {
        self.field_raw = self.raw;
        self.field_quoted = quoted;
    }

    /// Ends the current field (dropping a `\r` that ends its line when `cr`).
    fn end_field(&mut self, cr: bool) {
        if self.too_long {
            return;
        }
        if cr && !self.field_quoted {
            self.bytes.pop();
        }
        let as_u32 = |n: usize| u32::try_from(n).expect("records are at most 1 GiB");
        self.fields.push(Span {
            end: as_u32(self.bytes.len()),
            raw_start: as_u32(self.field_raw),
            quoted: self.field_quoted,
        });
    }

    /// Ends the current record, at a line end when `newline` (else at the end of input).
    fn end_record(&mut self, cr: bool, newline: bool, out: &mut Vec<Row>) {
        let last_line = self.line;
        let len = self.raw - usize::from(cr);
        let bytes = std::mem::take(&mut self.bytes);
        let fields = std::mem::take(&mut self.fields);
        let blank = fields.len() == 1 && !fields[0].quoted && bytes.is_empty();
        if self.too_long || len > self.max {
            out.push(Row::TooLong {
                line: self.start,
                last_line,
                max: self.max,
            });
        } else if !blank {
            out.push(Row::Record(RawRecord {
                line: self.start,
                bytes,
                fields,
            }));
        }
        if newline {
            self.line += 1;
        }
        self.reset();
    }

    fn reset(&mut self) {
        self.state = State::FieldStart;
        self.start = self.line;
        self.raw = 0;
        self.last = 0;
        self.too_long = false;
    }

    /// Takes `bytes`; appends every record (or malformed one) they complete to `out`.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Vec<Row>) {
        let delim = self.dialect.delimiter;
        while let Some(&b) = bytes.first() {
            match self.state {
                State::FieldStart if self.dialect.quoting && b == b'"' => {
                    self.advance(1, b);
                    self.start_field(true);
                    self.quote_line = self.line;
                    self.state = State::Quoted;
                    bytes = &bytes[1..];
                }
                State::FieldStart => {
                    self.start_field(false);
                    self.state = State::Unquoted;
                }
                State::Unquoted => {
                    let i = bytes
                        .iter()
                        .position(|&c| c == delim || c == b'\n')
                        .unwrap_or(bytes.len());
                    self.content(&bytes[..i]);
                    bytes = &bytes[i..];
                    match bytes.first() {
                        Some(&b'\n') => {
                            let cr = self.last == b'\r';
                            self.end_field(cr);
                            self.end_record(cr, true, out);
                        }
                        Some(&c) => {
                            self.end_field(false);
                            self.advance(1, c);
                            self.state = State::FieldStart;
                        }
                        None => break,
                    }
                    bytes = &bytes[1..];
                }
                State::Quoted => {
                    let i = bytes.iter().position(|&c| c == b'"').unwrap_or(bytes.len());
                    let part = &bytes[..i];
                    self.line += part.iter().filter(|&&c| c == b'\n').count() as u64;
                    self.content(part);
                    bytes = &bytes[i..];
                    if !bytes.is_empty() {
                        self.advance(1, b'"');
                        self.state = State::QuoteInQuoted;
                        bytes = &bytes[1..];
                    }
                }
                State::QuoteInQuoted => {
                    if b == b'"' {
                        // `""`: one quote of content (its first half is already counted).
                        if !self.too_long {
                            self.bytes.push(b'"');
                        }
                        self.advance(1, b);
                        self.state = State::Quoted;
                    } else if b == delim {
                        self.end_field(false);
                        self.advance(1, b);
                        self.state = State::FieldStart;
                    } else if b == b'\n' {
                        self.end_field(false);
                        self.end_record(false, true, out);
                    } else if b == b'\r' {
                        self.advance(1, b);
                        self.state = State::CrAfterQuote;
                    } else {
                        self.state = State::SkipLine {
                            stray_line: self.line,
                        };
                        continue;
                    }
                    bytes = &bytes[1..];
                }
                State::CrAfterQuote => {
                    if b == b'\n' {
                        self.end_field(false);
                        self.end_record(true, true, out);
                        bytes = &bytes[1..];
                    } else {
                        self.state = State::SkipLine {
                            stray_line: self.line,
                        };
                    }
                }
                State::SkipLine { stray_line } => match bytes.iter().position(|&c| c == b'\n') {
                    Some(i) => {
                        self.stray(stray_line, out);
                        self.line += 1;
                        self.reset();
                        bytes = &bytes[i + 1..];
                    }
                    None => break,
                },
            }
        }
    }

    fn stray(&mut self, stray_line: u64, out: &mut Vec<Row>) {
        out.push(Row::StrayQuote {
            line: self.start,
            quote_line: self.quote_line,
            stray_line,
        });
        self.bytes.clear();
        self.fields.clear();
    }

    /// Ends the input: the last record, if it had no line end.
    pub fn finish(&mut self, out: &mut Vec<Row>) {
        match self.state {
            State::FieldStart if self.raw == 0 => {}
            State::FieldStart => {
                self.start_field(false);
                self.end_field(false);
                self.end_record(false, false, out);
            }
            State::Unquoted => {
                let cr = self.last == b'\r';
                self.end_field(cr);
                self.end_record(cr, false, out);
            }
            State::QuoteInQuoted => {
                self.end_field(false);
                self.end_record(false, false, out);
            }
            State::CrAfterQuote => {
                self.end_field(false);
                self.end_record(true, false, out);
            }
            State::Quoted => {
                // A line end just before the end of input ends the last line.
                let last_line = match self.last {
                    b'\n' => self.line - 1,
                    _ => self.line,
                };
                out.push(Row::Unclosed {
                    line: self.start,
                    quote_line: self.quote_line,
                    last_line,
                });
                self.bytes.clear();
                self.fields.clear();
                self.reset();
            }
            State::SkipLine { stray_line } => {
                self.stray(stray_line, out);
                self.reset();
            }
        }
    }
}

impl Split for RecordSplitter {
    type Item = Row;
    fn push(&mut self, bytes: &[u8], out: &mut Vec<Row>) {
        RecordSplitter::push(self, bytes, out)
    }
    fn finish(&mut self, out: &mut Vec<Row>) {
        RecordSplitter::finish(self, out)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    fn split(dialect: Dialect, chunks: &[&[u8]], max: usize) -> Vec<Row> {
        let mut s = RecordSplitter::new(dialect, max);
        let mut out = Vec::new();
        for c in chunks {
            s.push(c, &mut out);
        }
        s.finish(&mut out);
        out
    }

    /// (line, fields as text) of each row; a malformed one as its problem.
    fn shown(rows: &[Row]) -> Vec<(u64, Vec<String>)> {
        rows.iter()
            .map(|r| match r {
                Row::Record(rec) => (
                    rec.line,
                    rec.fields()
                        .map(|f| String::from_utf8_lossy(f).into_owned())
                        .collect(),
                ),
                bad => (bad.line(), vec![format!("{bad:?}")]),
            })
            .collect()
    }

    fn rec(line: u64, fields: &[&str]) -> (u64, Vec<String>) {
        (line, fields.iter().map(|f| f.to_string()).collect())
    }

    #[test]
    fn csv_quoting_newlines_crlf_and_blank_lines() {
        let data = b"a,\"b,1\",c\r\n\n\"multi\nline\",\"say \"\"hi\"\"\"\r\n,\r\n\"\"\nlast";
        let got = shown(&split(CSV, &[data], 100));
        assert_eq!(
            got,
            [
                rec(1, &["a", "b,1", "c"]),
                rec(3, &["multi\nline", "say \"hi\""]),
                rec(5, &["", ""]),
                rec(6, &[""]),
                rec(7, &["last"]),
            ]
        );
        // Quotes inside an unquoted field, and every quote in TSV, are text.
        assert_eq!(
            shown(&split(CSV, &[b"5\" screen,x"], 100)),
            [rec(1, &["5\" screen", "x"])]
        );
        assert_eq!(
            shown(&split(TSV, &[b"\"a\tb\"\tc,d\r\n"], 100)),
            [rec(1, &["\"a", "b\"", "c,d"])]
        );
    }

    #[test]
    fn an_unclosed_quote_names_where_it_opened_and_the_lines_lost() {
        let rows = split(CSV, &[b"id,text\n1,\"abc\n2,def\n3,ghi\n"], 100);
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows[1],
            Row::Unclosed {
                line: 2,
                quote_line: 2,
                last_line: 4
            }
        );
        let why = rows[1].problem().expect("a problem");
        assert_eq!(
            why,
            "a quoted field opened on this line is never closed; the rest of the file (lines 2-4) was not ingested; close the quote, or double the quotes inside it (\"\")"
        );
    }

    #[test]
    fn text_after_a_closing_quote_drops_the_rest_of_that_line() {
        let rows = split(CSV, &[b"1,\"abc\"def,\"x\"\n2,ok\n3,\"q\"\r4\n5"], 100);
        assert_eq!(
            rows[..2],
            [
                Row::StrayQuote {
                    line: 1,
                    quote_line: 1,
                    stray_line: 1
                },
                Row::Record(RawRecord {
                    line: 2,
                    bytes: b"2ok".to_vec(),
                    fields: vec![
                        Span {
                            end: 1,
                            raw_start: 0,
                            quoted: false
                        },
                        Span {
                            end: 3,
                            raw_start: 2,
                            quoted: false
                        }
                    ]
                })
            ]
        );
        assert_eq!(
            rows[2],
            Row::StrayQuote {
                line: 3,
                quote_line: 3,
                stray_line: 3
            }
        );
        assert_eq!(shown(&rows[3..]), [rec(4, &["5"])]);
        assert!(rows[0].problem().unwrap().contains("must be doubled"));
        // A field opened on one line and closed badly on another names both.
        let rows = split(CSV, &[b"1,\"a\nb\"c\n2,d\n"], 100);
        let why = rows[0].problem().unwrap();
        assert!(
            why.contains("closed on line 2") && why.contains("lines 1-2"),
            "{why}"
        );
        assert_eq!(shown(&rows[1..]), [rec(3, &["2", "d"])]);
    }

    #[test]
    fn an_over_long_record_is_dropped_to_its_end_quotes_and_all() {
        // The long quoted field's inner lines do not come back as records.
        let data = b"1,\"0123456789\nabc,def\n\"\n2,ok\n3,0123456789\r\n4,\"x\"\r\n";
        for cut in 1..data.len() {
            let chunks: Vec<&[u8]> = data.chunks(cut).collect();
            let rows = split(CSV, &chunks, 8);
            assert_eq!(
                rows,
                [
                    Row::TooLong {
                        line: 1,
                        last_line: 3,
                        max: 8
                    },
                    split(CSV, &[b"\n\n\n2,ok"], 8).remove(0),
                    Row::TooLong {
                        line: 5,
                        last_line: 5,
                        max: 8
                    },
                    split(CSV, &[b"\n\n\n\n\n4,\"x\""], 8).remove(0),
                ],
                "chunks of {cut}"
            );
        }
        // Exactly at the bound is fine, the \r of a \r\n not counted; one more is not.
        let rows = split(TSV, &[b"1234\t678\r\n1234\t6789\n"], 8);
        assert_eq!(shown(&rows[..1]), [rec(1, &["1234", "678"])]);
        assert_eq!(
            rows[1].problem().unwrap(),
            "the line is longer than 8 bytes; is it one record?"
        );
    }

    #[test]
    fn utf8_errors_are_located_in_the_input_line() {
        let rows = split(CSV, &[b"ab,\"x\"\"y\"\"\xe9\",\xff"], 100);
        let Row::Record(r) = &rows[0] else {
            panic!("{rows:?}")
        };
        assert_eq!(r.text(0), Some(Ok("ab")));
        assert_eq!(r.text(1), Some(Err(10)));
        assert_eq!(r.text(2), Some(Err(13)));
        assert_eq!(r.text(3), None);
    }

    /// A field as a CSV writer would write it: quoted when it must be (or when `quote`).
    pub(crate) fn quoted(field: &str, quote: bool) -> String {
        let must = field.is_empty() || field.contains(['"', ',', '\n', '\r']);
        match quote || must {
            true => format!("\"{}\"", field.replace('"', "\"\"")),
            false => field.to_string(),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Records written with RFC 4180 quoting come back field for field, however the
        /// input is chunked and whichever line ends it uses.
        #[test]
        fn csv_written_with_quoting_round_trips(
            records in proptest::collection::vec(
                proptest::collection::vec(("[a-c\",\n\r\t é]{0,8}", any::<bool>()), 1..5),
                0..6,
            ),
            crlf in any::<bool>(),
            final_end in any::<bool>(),
            cut in 1usize..9,
        ) {
            let end = if crlf { "\r\n" } else { "\n" };
            let lines: Vec<String> = records
                .iter()
                .map(|r| r.iter().map(|(f, q)| quoted(f, *q)).collect::<Vec<_>>().join(","))
                .collect();
            let mut input = lines.join(end);
            if final_end && !input.is_empty() {
                input.push_str(end);
            }
            let chunks: Vec<&[u8]> = input.as_bytes().chunks(cut).collect();
            let rows = split(CSV, &chunks, 1 << 20);
            let got: Vec<Vec<String>> = shown(&rows).into_iter().map(|(_, f)| f).collect();
            let want: Vec<Vec<String>> = records
                .iter()
                .map(|r| r.iter().map(|(f, _)| f.clone()).collect())
                .collect();
            prop_assert_eq!(got, want);
        }

        /// Arbitrary bytes: chunking never changes the rows, no record is over the bound,
        /// lines never go backwards, and every row consumed input.
        #[test]
        fn any_bytes_split_the_same_however_chunked(
            input in proptest::collection::vec(
                prop_oneof![
                    Just(b'"'), Just(b','), Just(b'\t'), Just(b'\r'), Just(b'\n'), Just(b'a'),
                    any::<u8>(),
                ],
                0..120,
            ),
            cut in 1usize..9,
            max in 0usize..24,
            csv in any::<bool>(),
        ) {
            let dialect = if csv { CSV } else { TSV };
            let whole = split(dialect, &[&input], max);
            let chunks: Vec<&[u8]> = input.chunks(cut).collect();
            prop_assert_eq!(&split(dialect, &chunks, max), &whole);
            prop_assert!(whole.len() <= input.len());
            let mut line = 0;
            for row in &whole {
                prop_assert!(row.line() >= line);
                line = row.line();
                if let Row::Record(r) = row {
                    prop_assert!(r.bytes.len() <= max);
                    prop_assert!(r.fields().all(|f| f.len() <= max));
                } else {
                    prop_assert!(row.problem().is_some());
                }
            }
        }
    }
}
