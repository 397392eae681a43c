//! Splitting a byte stream into numbered lines with a bound on each line's length: the one
//! line reader behind `kindred ingest`'s JSON Lines and QQP files and the API's NDJSON stream.
//! A line over the bound is reported (and its bytes discarded up to the next newline) instead
//! of growing a buffer without limit. Pure: bytes in, lines out.
//!
//! Also the chunk driver every ingest reader shares ([`read_split`]): a [`Split`]ter fed from a
//! `BufRead` in its own buffer chunks, with a UTF-8 byte order mark at the very start of the
//! stream dropped ([`SkipBom`]). Knows nothing of records, fields or UTF-8 beyond the mark.

/// One line of input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// Line `n` (1-based), without its `\n` or `\r\n`.
    Text(u64, Vec<u8>),
    /// Line `n` was longer than the bound; its bytes were dropped.
    TooLong(u64),
}

/// Feeds bytes in, takes complete lines out.
#[derive(Debug)]
pub struct LineSplitter {
    max: usize,
    pending: Vec<u8>,
    /// Dropping the rest of an over-long line until its newline.
    skipping: bool,
    line: u64,
}

impl LineSplitter {
    /// A splitter refusing lines longer than `max` bytes (newline excluded).
    pub fn new(max: usize) -> Self {
        LineSplitter {
            max,
            pending: Vec::new(),
            skipping: false,
            line: 0,
        }
    }

    /// Takes `bytes`; appends every line they complete to `out`.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Vec<Line>) {
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|&b| b == b'\n');
            let (part, rest) = match newline {
                Some(i) => (&bytes[..i], &bytes[i + 1..]),
                None => (bytes, &[][..]),
            };
            if !self.skipping {
                // One byte of slack for the \r of a \r\n; take_line checks the exact bound.
                if self.pending.len() + part.len() > self.max + 1 {
                    self.line += 1;
                    out.push(Line::TooLong(self.line));
                    self.pending.clear();
                    self.skipping = true;
                } else {
                    self.pending.extend_from_slice(part);
                }
            }
            if newline.is_some() {
                if self.skipping {
                    self.skipping = false;
                } else {
                    self.line += 1;
                    out.push(self.take_line());
                }
            }
            bytes = rest;
        }
    }

    /// Ends the input: the last line, if it had no newline.
    pub fn finish(&mut self, out: &mut Vec<Line>) {
        if !self.skipping && !self.pending.is_empty() {
            self.line += 1;
            out.push(self.take_line());
        }
        self.skipping = false;
    }

    fn take_line(&mut self) -> Line {
        let mut text = std::mem::take(&mut self.pending);
        if text.last() == Some(&b'\r') {
            text.pop();
        }
        if text.len() > self.max {
            return Line::TooLong(self.line);
        }
        Line::Text(self.line, text)
    }
}

/// A pure splitter of a byte stream: bytes pushed in chunks, items out.
pub trait Split {
    /// What it splits the stream into.
    type Item;
    /// Takes `bytes`; appends every item they complete to `out`.
    fn push(&mut self, bytes: &[u8], out: &mut Vec<Self::Item>);
    /// Ends the input: appends what the last bytes complete.
    fn finish(&mut self, out: &mut Vec<Self::Item>);
}

impl Split for LineSplitter {
    type Item = Line;
    fn push(&mut self, bytes: &[u8], out: &mut Vec<Line>) {
        LineSplitter::push(self, bytes, out)
    }
    fn finish(&mut self, out: &mut Vec<Line>) {
        LineSplitter::finish(self, out)
    }
}

/// The UTF-8 byte order mark some editors (and Excel's "CSV UTF-8") put first in a file.
pub const BOM: &[u8] = b"\xEF\xBB\xBF";

/// A [`Split`]ter with a [`BOM`] at the very start of the stream dropped, however the stream
/// is chunked; the mark anywhere else is passed on as it is.
#[derive(Debug)]
pub struct SkipBom<S> {
    inner: S,
    /// The first bytes, held until they are known to be (or not be) the mark.
    head: Option<Vec<u8>>,
}

impl<S> SkipBom<S> {
    /// `inner`, fed everything but a leading mark.
    pub fn new(inner: S) -> Self {
        SkipBom {
            inner,
            head: Some(Vec::with_capacity(BOM.len())),
        }
    }
}

impl<S: Split> Split for SkipBom<S> {
    type Item = S::Item;

    fn push(&mut self, bytes: &[u8], out: &mut Vec<S::Item>) {
        let Some(head) = &mut self.head else {
            return self.inner.push(bytes, out);
        };
        let take = (BOM.len() - head.len()).min(bytes.len());
        head.extend_from_slice(&bytes[..take]);
        if head.len() < BOM.len() && BOM.starts_with(head) {
            return; // all of `bytes` taken; still undecided
        }
        let head = self.head.take().expect("undecided until here");
        if head != BOM {
            self.inner.push(&head, out);
        }
        self.inner.push(&bytes[take..], out);
    }

    fn finish(&mut self, out: &mut Vec<S::Item>) {
        if let Some(head) = self.head.take() {
            if head != BOM {
                self.inner.push(&head, out);
            }
        }
        self.inner.finish(out);
    }
}

/// The items `splitter` makes of a reader (a leading [`BOM`] dropped), read in the reader's
/// own buffer chunks: memory is the reader's buffer plus what the splitter holds.
pub fn read_split<R: std::io::BufRead, S: Split>(
    mut reader: R,
    splitter: S,
) -> impl Iterator<Item = std::io::Result<S::Item>> {
    let mut splitter = SkipBom::new(splitter);
    let mut ready = std::collections::VecDeque::new();
    let mut done = false;
    std::iter::from_fn(move || loop {
        if let Some(item) = ready.pop_front() {
            return Some(Ok(item));
        }
        if done {
            return None;
        }
        let mut out = Vec::new();
        match reader.fill_buf() {
            Ok([]) => {
                done = true;
                splitter.finish(&mut out);
            }
            Ok(buf) => {
                let n = buf.len();
                splitter.push(buf, &mut out);
                reader.consume(n);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                done = true;
                return Some(Err(e));
            }
        }
        ready.extend(out);
    })
}

/// The lines of a reader (a leading [`BOM`] dropped), each at most `max` bytes, read in the
/// reader's own buffer chunks.
pub fn read_lines<R: std::io::BufRead>(
    reader: R,
    max: usize,
) -> impl Iterator<Item = std::io::Result<Line>> {
    read_split(reader, LineSplitter::new(max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn split(chunks: &[&[u8]], max: usize) -> Vec<Line> {
        let mut s = LineSplitter::new(max);
        let mut out = Vec::new();
        for c in chunks {
            s.push(c, &mut out);
        }
        s.finish(&mut out);
        out
    }

    fn text(n: u64, s: &str) -> Line {
        Line::Text(n, s.as_bytes().to_vec())
    }

    #[test]
    fn lines_across_chunks_with_crlf_and_no_final_newline() {
        assert_eq!(
            split(&[b"ab", b"c\r\nde\n\nf"], 10),
            [text(1, "abc"), text(2, "de"), text(3, ""), text(4, "f")]
        );
    }

    #[test]
    fn an_over_long_line_is_reported_and_skipped_to_its_newline() {
        assert_eq!(
            split(&[b"ok\n0123", b"456789", b"xyz\nnext\n"], 5),
            [text(1, "ok"), Line::TooLong(2), text(3, "next")]
        );
        // Exactly at the bound is fine; the \r of \r\n does not count.
        assert_eq!(
            split(&[b"12345\r\n123456"], 5),
            [text(1, "12345"), Line::TooLong(2)]
        );
    }

    #[test]
    fn reader_lines_match_the_splitter() {
        let data = b"a\nbb\r\n\nccccccc\nd";
        let reader = std::io::BufReader::with_capacity(3, &data[..]);
        let got: Vec<Line> = read_lines(reader, 4).map(|l| l.unwrap()).collect();
        assert_eq!(
            got,
            [
                text(1, "a"),
                text(2, "bb"),
                text(3, ""),
                Line::TooLong(4),
                text(5, "d")
            ]
        );
    }

    #[test]
    fn a_byte_order_mark_is_dropped_only_at_the_very_start_however_chunked() {
        let data = b"\xEF\xBB\xBFa\n\xEF\xBB\xBFb\n";
        for cut in 1..data.len() {
            let mut s = SkipBom::new(LineSplitter::new(10));
            let mut out = Vec::new();
            for c in data.chunks(cut) {
                Split::push(&mut s, c, &mut out);
            }
            Split::finish(&mut s, &mut out);
            assert_eq!(out, [text(1, "a"), text(2, "\u{feff}b")], "chunks of {cut}");
        }
        // A prefix of the mark, or a stream shorter than it, is kept.
        let got: Vec<Line> = read_lines(&b"\xEF\xBBx\n"[..], 10)
            .map(|l| l.unwrap())
            .collect();
        assert_eq!(got, [Line::Text(1, b"\xEF\xBBx".to_vec())]);
        let got: Vec<Line> = read_lines(&b"\xEF"[..], 10).map(|l| l.unwrap()).collect();
        assert_eq!(got, [Line::Text(1, b"\xEF".to_vec())]);
    }

    proptest! {
        /// However the input is chunked, the lines are those of `split('\n')` (a final empty
        /// piece is no line), with over-long ones reported in place.
        #[test]
        fn chunking_never_changes_the_lines(
            lines in proptest::collection::vec("[a-z]{0,12}", 0..8),
            cut in 1usize..7,
            max in 0usize..10,
        ) {
            let input = lines.join("\n");
            let bytes = input.as_bytes();
            let chunks: Vec<&[u8]> = bytes.chunks(cut).collect();
            let got = split(&chunks, max);
            let mut want = Vec::new();
            let pieces: Vec<&str> = input.split('\n').collect();
            // A trailing newline ends the last line; it does not start another.
            let n = if input.is_empty() {
                0
            } else if input.ends_with('\n') {
                pieces.len() - 1
            } else {
                pieces.len()
            };
            for (i, p) in pieces.iter().take(n).enumerate() {
                let no = i as u64 + 1;
                want.push(if p.len() > max { Line::TooLong(no) } else { text(no, p) });
            }
            prop_assert_eq!(got, want);
        }
    }
}
