//! Text normalisation, shared by every path that reads text (ingest, query, explain,
//! training: all of them tokenize through [`crate::text::TextTokenizer::tokenize`], and the
//! lexical terms come from [`crate::text::terms`]):
//!
//! - HTML character references are decoded: the named ones of the `entities` table (`&eacute;`,
//!   `&nbsp;`, `&rsquo;` …), decimal `&#39;` and hex `&#x27;`. A numeric reference to 0, a
//!   surrogate or a value past U+10FFFF becomes U+FFFD, and 0x80–0x9F are read as Windows-1252
//!   (`&#146;` is `’`), as browsers do. The closing `;` may be left out of a numeric reference
//!   and of the legacy names browsers accept without it (`amp`, `lt`, `gt`, `quot`, `nbsp`,
//!   `copy`, `reg` and the other Latin-1 names), but only where the name ends the word:
//!   `caf&eacute` and `&copy 2024` decode, `this&notion` and `&copy2024` stay as written.
//!   Anything else (`AT&T`, `&bogus;`) stays as written. One pass: `&amp;lt;` is `&lt;`.
//! - Unicode whitespace (`char::is_whitespace`: NBSP, the typographic spaces, line and
//!   paragraph separators, tabs, newlines, decoded or not) becomes a space; runs of it
//!   collapse to one space; the ends are trimmed.
//!
//! [`Normalized::origin`] maps every normalized char back to the original text, so token
//! offsets computed on the normalized text point into the text the user gave (and the store
//! keeps). Markup is a property of a document's format, not of text: [`strip_markup`] gives an
//! HTML fragment's visible text, and [`TextFormat::visible`] applies it where a format says
//! HTML. Pure: no I/O, nothing of tokenizers or the store.

mod entities;

use std::borrow::Cow;
use std::ops::Range;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Result, UserError};
use entities::ENTITIES;

/// A normalized text and where each of its chars comes from in the original.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalized<'a> {
    /// The normalized text (borrowed when normalisation changes nothing).
    pub text: Cow<'a, str>,
    /// Per char of `text`, the char offset (Unicode scalar values) in the original where its
    /// source starts: a decoded reference's `&`, a collapsed run's first whitespace char. Then
    /// one final entry: where the last char's source ends (the original's char length, less
    /// any trimmed trailing whitespace; 0 for an empty result). `text.chars().count() + 1`
    /// entries, non-decreasing.
    pub origin: Vec<usize>,
}

impl Normalized<'_> {
    /// The original char range a normalized char range comes from: a decoded `&eacute;` maps
    /// back to all 8 chars, a space to the whole whitespace run it replaced. An empty range
    /// maps to an empty range at its start's origin. Ends past the text are clamped.
    pub fn to_original(&self, range: Range<usize>) -> Range<usize> {
        let last = self.origin.len() - 1;
        let start = self.origin[range.start.min(last)];
        if range.end <= range.start {
            return start..start;
        }
        start..self.origin[range.end.min(last)]
    }
}

/// Normalizes `text` (see the module's doc), with the map back to it. O(n); a text without
/// `&` and without whitespace other than single inner spaces is borrowed, not copied.
pub fn normalize(text: &str) -> Normalized<'_> {
    if is_normal(text) {
        return Normalized {
            text: Cow::Borrowed(text),
            origin: (0..=text.chars().count()).collect(),
        };
    }
    let mut b = Builder::new(text.len(), true);
    b.run(text);
    let origin = b.origin.expect("the builder keeps origins");
    Normalized {
        text: Cow::Owned(b.text),
        origin: {
            let mut o = origin;
            o.push(b.last_end);
            o
        },
    }
}

/// The normalized text alone, without the map (the lexical terms need no offsets).
pub fn normalize_text(text: &str) -> Cow<'_, str> {
    if is_normal(text) {
        return Cow::Borrowed(text);
    }
    let mut b = Builder::new(text.len(), false);
    b.run(text);
    Cow::Owned(b.text)
}

/// True when normalisation would change nothing: no `&`, no whitespace but single spaces
/// between other chars.
fn is_normal(text: &str) -> bool {
    if text.starts_with(' ') || text.ends_with(' ') {
        return false;
    }
    let mut prev_space = false;
    for c in text.chars() {
        if c == '&' || (c.is_whitespace() && (c != ' ' || prev_space)) {
            return false;
        }
        prev_space = c == ' ';
    }
    true
}

/// Builds the normalized text one decoded char at a time.
struct Builder {
    text: String,
    /// Per char pushed, its origin (`None`: not kept).
    origin: Option<Vec<usize>>,
    /// Where the whitespace run waiting to become a space started.
    pending: Option<usize>,
    /// Where the last non-space char's source ends.
    last_end: usize,
}

impl Builder {
    fn new(len: usize, keep_origin: bool) -> Self {
        Builder {
            text: String::with_capacity(len),
            origin: keep_origin.then(|| Vec::with_capacity(len + 1)),
            pending: None,
            last_end: 0,
        }
    }

    fn run(&mut self, text: &str) {
        let mut at = 0; // chars of the original consumed
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            if c == '&' {
                if let Some((decoded, len)) = char_ref(rest) {
                    // A reference is ASCII: its bytes are its chars.
                    self.push(decoded, at, at + len);
                    at += len;
                    rest = &rest[len..];
                    continue;
                }
            }
            self.push(c, at, at + 1);
            at += 1;
            rest = &rest[c.len_utf8()..];
        }
    }

    /// Pushes `c`, whose source is the original chars `from..to`.
    fn push(&mut self, c: char, from: usize, to: usize) {
        if c.is_whitespace() {
            if !self.text.is_empty() && self.pending.is_none() {
                self.pending = Some(from);
            }
            return;
        }
        if let Some(p) = self.pending.take() {
            self.text.push(' ');
            if let Some(o) = &mut self.origin {
                o.push(p);
            }
        }
        self.text.push(c);
        if let Some(o) = &mut self.origin {
            o.push(from);
        }
        self.last_end = to;
    }
}

/// The character reference at the start of `s` (which starts with `&`): its char and its
/// length in bytes (= chars: references are ASCII). `None`: not a reference; the `&` stays.
fn char_ref(s: &str) -> Option<(char, usize)> {
    let b = s.as_bytes();
    let semicolon = |end: usize| usize::from(b.get(end) == Some(&b';'));
    if b.get(1) == Some(&b'#') {
        let hex = matches!(b.get(2), Some(b'x' | b'X'));
        let (radix, first) = if hex { (16, 3) } else { (10, 2) };
        let digits = b[first.min(b.len())..]
            .iter()
            .take_while(|&&d| (d as char).is_digit(radix))
            .count();
        if digits == 0 {
            return None;
        }
        let end = first + digits;
        let value = b[first..end].iter().fold(0u32, |v, d| {
            let d = (*d as char).to_digit(radix).expect("a digit");
            // Saturates past the last code point: still invalid, never overflows.
            v.saturating_mul(radix).saturating_add(d).min(0x11_0000)
        });
        return Some((numeric_char(value), end + semicolon(end)));
    }
    let name_len = b[1..]
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric())
        .count();
    if name_len == 0 {
        return None;
    }
    let end = 1 + name_len;
    let name = &s[1..end];
    let (c, legacy) = lookup(name)?;
    match semicolon(end) {
        1 => Some((c, end + 1)),
        // Without `;`: only the legacy names, and only ending the word (the name is the
        // whole alphanumeric run by construction).
        _ if legacy => Some((c, end)),
        _ => None,
    }
}

/// A named reference's char and whether it is accepted without `;`.
fn lookup(name: &str) -> Option<(char, bool)> {
    ENTITIES
        .binary_search_by(|(n, _, _)| n.as_bytes().cmp(name.as_bytes()))
        .ok()
        .map(|i| (ENTITIES[i].1, ENTITIES[i].2))
}

/// The char a numeric reference stands for, as browsers read it (HTML5 §13.2.5.80).
fn numeric_char(v: u32) -> char {
    const WINDOWS_1252: [char; 32] = [
        '\u{20ac}', '\u{81}', '\u{201a}', '\u{192}', '\u{201e}', '\u{2026}', '\u{2020}',
        '\u{2021}', '\u{2c6}', '\u{2030}', '\u{160}', '\u{2039}', '\u{152}', '\u{8d}', '\u{17d}',
        '\u{8f}', '\u{90}', '\u{2018}', '\u{2019}', '\u{201c}', '\u{201d}', '\u{2022}', '\u{2013}',
        '\u{2014}', '\u{2dc}', '\u{2122}', '\u{161}', '\u{203a}', '\u{153}', '\u{9d}', '\u{17e}',
        '\u{178}',
    ];
    match v {
        0 => char::REPLACEMENT_CHARACTER,
        0x80..=0x9f => WINDOWS_1252[(v - 0x80) as usize],
        _ => char::from_u32(v).unwrap_or(char::REPLACEMENT_CHARACTER),
    }
}

/// How a document's text is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TextFormat {
    /// Plain text, stored as given (character references are still decoded when it is
    /// tokenized).
    #[default]
    Text,
    /// An HTML fragment: what is stored is its visible text ([`strip_markup`]).
    Html,
}

impl TextFormat {
    /// The text kindred stores for a document written in this format: the text itself, or
    /// an HTML fragment's visible text. Character references stay in it (they are decoded
    /// when it is tokenized, so offsets point into the stored text).
    pub fn visible(self, text: &str) -> Cow<'_, str> {
        match self {
            TextFormat::Text => Cow::Borrowed(text),
            TextFormat::Html => Cow::Owned(strip_markup(text)),
        }
    }

    /// Its name: `text` or `html`.
    pub fn name(self) -> &'static str {
        match self {
            TextFormat::Text => "text",
            TextFormat::Html => "html",
        }
    }
}

impl FromStr for TextFormat {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "text" => Ok(TextFormat::Text),
            "html" => Ok(TextFormat::Html),
            other => Err(UserError::InvalidArgument {
                name: "text format",
                reason: format!("{other:?}; use text or html"),
            }
            .into()),
        }
    }
}

/// Elements whose content is not text: dropped with their tags.
const RAW_TEXT: &[&str] = &["script", "style"];

/// Elements that start a new line where they open or close.
const BLOCKS: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "br",
    "caption",
    "dd",
    "details",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hr",
    "li",
    "main",
    "nav",
    "ol",
    "option",
    "p",
    "pre",
    "section",
    "summary",
    "table",
    "tbody",
    "thead",
    "tr",
    "ul",
];

/// Elements that separate their content from what follows by a space (table cells).
const CELLS: &[&str] = &["td", "th"];

/// The visible text of an HTML fragment:
///
/// - A tag is `<` followed by a letter, `/`, `!` or `?`, up to the next `>` outside a quoted
///   attribute value; tags are removed. A `<` that starts no complete tag stays (`a < b`,
///   `x <y` at the end).
/// - Block elements (`<br>`, `<p>`, `<div>`, `<li>`, headings, lists, tables' rows …) start a
///   new line where they open or close; table cells are separated by a space; inline
///   elements (`<b>`, `<a>`, `<span>` …) leave nothing, so `caf<b>é</b>` is `café`.
/// - `<script>` and `<style>` are dropped with their content; comments (`<!-- … -->`, to
///   the end of the text when unclosed) are dropped.
/// - Whitespace runs between words become one space (one newline where a block separates
///   them, `<pre>` included); the ends are trimmed.
/// - Character references are left as written: [`normalize`] decodes them at tokenization,
///   so `&lt;b&gt;` is the text `<b>`, never a tag.
pub fn strip_markup(html: &str) -> String {
    let mut out = Visible::default();
    let b = html.as_bytes();
    let mut i = 0;
    let mut text_start = 0;
    while i < b.len() {
        if b[i] != b'<' {
            i += 1;
            continue;
        }
        let Some(tag) = tag_at(html, i) else {
            i += 1;
            continue;
        };
        out.text(&html[text_start..i]);
        match tag.name.map(str::to_ascii_lowercase) {
            Some(name) if !tag.closing && RAW_TEXT.contains(&name.as_str()) => {
                i = raw_text_end(html, tag.end, &name);
            }
            Some(name) => {
                if BLOCKS.contains(&name.as_str()) {
                    out.separate(Sep::Newline);
                } else if CELLS.contains(&name.as_str()) {
                    out.separate(Sep::Space);
                }
                i = tag.end;
            }
            None => i = tag.end,
        }
        text_start = i;
    }
    out.text(&html[text_start..]);
    out.text
}

/// A tag found at a `<`.
struct Tag<'a> {
    /// Its element's name (`None`: a comment, a declaration, a processing instruction).
    name: Option<&'a str>,
    /// `</name>`.
    closing: bool,
    /// The byte just past it.
    end: usize,
}

/// The tag starting at byte `i` (a `<`), if one does.
fn tag_at(html: &str, i: usize) -> Option<Tag<'_>> {
    let b = html.as_bytes();
    let rest = &html[i..];
    if let Some(comment) = rest.strip_prefix("<!--") {
        let end = comment.find("-->").map_or(html.len(), |e| i + 4 + e + 3);
        return Some(Tag {
            name: None,
            closing: false,
            end,
        });
    }
    match b.get(i + 1) {
        Some(b'!' | b'?') => {
            let end = rest.find('>')?;
            Some(Tag {
                name: None,
                closing: false,
                end: i + end + 1,
            })
        }
        Some(b'/') => {
            let name = element_name(html, i + 2);
            let end = rest.find('>')?;
            Some(Tag {
                name: (!name.is_empty()).then_some(name),
                closing: true,
                end: i + end + 1,
            })
        }
        Some(c) if c.is_ascii_alphabetic() => {
            let name = element_name(html, i + 1);
            let end = open_tag_end(b, i + 1 + name.len())?;
            Some(Tag {
                name: Some(name),
                closing: false,
                end,
            })
        }
        _ => None,
    }
}

/// The element name starting at byte `at` (letters, digits, `-`).
fn element_name(html: &str, at: usize) -> &str {
    let rest = html.get(at..).unwrap_or("");
    let len = rest
        .bytes()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == b'-')
        .count();
    &rest[..len]
}

/// The byte past the `>` closing an open tag whose attributes start at `at`, skipping `>`s
/// in quoted attribute values. `None`: the tag never closes.
fn open_tag_end(b: &[u8], mut at: usize) -> Option<usize> {
    let mut after_equals = false;
    while at < b.len() {
        match b[at] {
            b'>' => return Some(at + 1),
            b'=' => after_equals = true,
            q @ (b'"' | b'\'') if after_equals => {
                let close = b[at + 1..].iter().position(|&c| c == q)?;
                at += close + 1;
                after_equals = false;
            }
            c if c.is_ascii_whitespace() => {}
            _ => after_equals = false,
        }
        at += 1;
    }
    None
}

/// The byte past the `</name…>` closing a raw-text element whose content starts at `from`
/// (the end of the text when it never closes).
fn raw_text_end(html: &str, from: usize, name: &str) -> usize {
    let b = html.as_bytes();
    let mut at = from;
    while let Some(p) = html[at..].find("</") {
        let start = at + p + 2;
        let candidate = b.get(start..start + name.len());
        let after = b.get(start + name.len()).copied();
        if candidate.is_some_and(|c| c.eq_ignore_ascii_case(name.as_bytes()))
            && !after.is_some_and(|c| c.is_ascii_alphanumeric())
        {
            return html[start..]
                .find('>')
                .map_or(html.len(), |e| start + e + 1);
        }
        at = start;
    }
    html.len()
}

/// What separates two pieces of visible text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Sep {
    None,
    Space,
    Newline,
}

/// The visible text as it is built: separators wait until text follows them.
struct Visible {
    text: String,
    pending: Sep,
}

impl Default for Visible {
    fn default() -> Self {
        Visible {
            text: String::new(),
            pending: Sep::None,
        }
    }
}

impl Visible {
    fn separate(&mut self, sep: Sep) {
        self.pending = self.pending.max(sep);
    }

    /// Text between tags: HTML's whitespace (space, tab, newline, carriage return, form feed)
    /// separates words; every other char is kept, `&nbsp;` and a raw NBSP included.
    fn text(&mut self, s: &str) {
        for c in s.chars() {
            if matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0c') {
                self.separate(Sep::Space);
                continue;
            }
            if !self.text.is_empty() {
                match self.pending {
                    Sep::None => {}
                    Sep::Space => self.text.push(' '),
                    Sep::Newline => self.text.push('\n'),
                }
            }
            self.pending = Sep::None;
            self.text.push(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn n(s: &str) -> String {
        normalize(s).text.into_owned()
    }

    /// The original text of each normalized char, as `to_original` maps it.
    fn sources(s: &str) -> Vec<String> {
        let norm = normalize(s);
        let chars: Vec<char> = s.chars().collect();
        (0..norm.text.chars().count())
            .map(|i| chars[norm.to_original(i..i + 1)].iter().collect())
            .collect()
    }

    #[test]
    fn the_entity_table_is_sorted_and_unique() {
        for w in ENTITIES.windows(2) {
            assert!(
                w[0].0.as_bytes() < w[1].0.as_bytes(),
                "{} ≥ {}",
                w[0].0,
                w[1].0
            );
        }
        assert!(ENTITIES.len() >= 350, "{} entities", ENTITIES.len());
        // The legacy names: the Latin-1 block and six upper-case aliases of amp lt gt quot.
        let legacy: Vec<&str> = ENTITIES.iter().filter(|e| e.2).map(|e| e.0).collect();
        assert_eq!(legacy.len(), 106);
        for (name, c, is_legacy) in ENTITIES {
            if *is_legacy {
                assert!(
                    ('\u{a0}'..='\u{ff}').contains(c) || "&<>\"".contains(*c),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn named_references_decode() {
        assert_eq!(n("caf&eacute; &amp; cr&egrave;me"), "café & crème");
        assert_eq!(n("&lt;b&gt; &quot;x&quot; &apos;y&apos;"), "<b> \"x\" 'y'");
        assert_eq!(n("&Eacute;&eacute;"), "Éé", "names are case-sensitive");
        assert_eq!(
            n("&rsquo;&ldquo;&rdquo;&hellip;&mdash;&euro;&trade;"),
            "’“”…—€™"
        );
        assert_eq!(n("&alpha;&Omega;&rarr;&le;&infin;"), "αΩ→≤∞");
        assert_eq!(n("&commat;&lsqb;&check;&half;"), "@[✓½");
        // Unknown names and bare ampersands stay.
        assert_eq!(
            n("AT&T &bogus; Q&A & more &;"),
            "AT&T &bogus; Q&A & more &;"
        );
        // One pass: a double-escaped reference decodes once.
        assert_eq!(n("&amp;lt;"), "&lt;");
    }

    #[test]
    fn a_missing_semicolon_is_accepted_only_for_legacy_names_ending_the_word() {
        assert_eq!(n("caf&eacute au lait"), "café au lait");
        assert_eq!(n("&copy 2024 &amp &lt &gt &quot"), "© 2024 & < > \"");
        assert_eq!(n("&copy2024 this&notion"), "&copy2024 this&notion");
        // Not legacy: needs its `;`.
        assert_eq!(n("&hellip &rsquo"), "&hellip &rsquo");
    }

    #[test]
    fn numeric_references_decode_like_browsers() {
        assert_eq!(n("What&#39;s"), "What's");
        assert_eq!(n("What&#x27;s &#X27;"), "What's '");
        assert_eq!(n("&#233;&#xE9;&#128512;"), "éé😀");
        assert_eq!(n("&#39s"), "'s", "the ; of a numeric reference is optional");
        // Invalid code points: U+FFFD.
        assert_eq!(
            n("&#0;&#xD800;&#xDFFF;&#x110000;&#99999999999999999999;"),
            "\u{fffd}".repeat(5)
        );
        // 0x80–0x9F as Windows-1252.
        assert_eq!(n("&#146;&#150;&#151;&#128;&#x93;&#x94;"), "’–—€“”");
        assert_eq!(n("&#129;"), "\u{81}", "an unmapped C1 code stays itself");
        // No digits: not a reference.
        assert_eq!(n("&#; &#x; &#xg;"), "&#; &#x; &#xg;");
    }

    #[test]
    fn whitespace_becomes_one_space_and_the_ends_are_trimmed() {
        assert_eq!(n("  a \t\n b\r\n\r\nc  "), "a b c");
        assert_eq!(
            n("non\u{a0}breaking\u{2009}thin\u{3000}ideographic\u{2028}line"),
            "non breaking thin ideographic line"
        );
        assert_eq!(n("a&nbsp;&nbsp; b&#10;c&ensp;d"), "a b c d");
        assert_eq!(n("&nbsp;x&#32;"), "x");
        assert_eq!(n(" \t&nbsp;"), "");
        assert_eq!(n(""), "");
        // Zero-width chars are not whitespace: the tokenizer drops them.
        assert_eq!(n("zero\u{200b}width"), "zero\u{200b}width");
    }

    #[test]
    fn plain_text_is_borrowed() {
        for s in ["How do I learn Rust?", "a", "", "Ünïcödé façade"] {
            let norm = normalize(s);
            assert!(matches!(norm.text, Cow::Borrowed(_)), "{s:?}");
            assert_eq!(norm.origin, (0..=s.chars().count()).collect::<Vec<_>>());
            assert!(matches!(normalize_text(s), Cow::Borrowed(_)));
        }
        for s in [" a", "a ", "a  b", "a\tb", "a&amp;b", "a\u{a0}b"] {
            assert!(matches!(normalize(s).text, Cow::Owned(_)), "{s:?}");
        }
    }

    #[test]
    fn offsets_map_back_to_the_original() {
        let s = "What&#39;s the best caf&eacute;\u{a0}\u{a0}in  Doha?  ";
        let norm = normalize(s);
        assert_eq!(norm.text, "What's the best café in Doha?");
        let src = sources(s);
        assert_eq!(src[4], "&#39;");
        assert_eq!(src[19], "&eacute;");
        assert_eq!(
            src[20], "\u{a0}\u{a0}",
            "a space covers the run it replaced"
        );
        assert_eq!(src[23], "  ");
        assert_eq!(
            src.last().map(String::as_str),
            Some("?"),
            "trailing spaces are not the last char's"
        );
        // A word's range: `café` is `caf&eacute;`.
        let chars: Vec<char> = s.chars().collect();
        let r = norm.to_original(16..20);
        assert_eq!(chars[r].iter().collect::<String>(), "caf&eacute;");
        // The whole text maps to the original less its trimmed ends.
        assert_eq!(norm.to_original(0..29), 0..42);
        assert_eq!(norm.to_original(3..3), 3..3);
        // Leading whitespace: the first char starts after it.
        let norm = normalize("  \u{2003}x&amp;y");
        assert_eq!(norm.text, "x&y");
        assert_eq!(norm.origin, [3, 4, 9, 10]);
        // Multi-byte chars count once.
        let norm = normalize("é  ü&gt;");
        assert_eq!(norm.text, "é ü>");
        assert_eq!(norm.origin, [0, 1, 3, 4, 8]);
        assert_eq!(normalize("   ").origin, [0]);
    }

    #[test]
    fn normalize_text_equals_normalize() {
        for s in ["  a&amp;b\t c ", "caf&eacute", "&#0;x", "plain"] {
            assert_eq!(normalize_text(s), normalize(s).text);
        }
    }

    #[test]
    fn text_formats() {
        assert_eq!("text".parse::<TextFormat>().ok(), Some(TextFormat::Text));
        assert_eq!("html".parse::<TextFormat>().ok(), Some(TextFormat::Html));
        let e = "HTML".parse::<TextFormat>().expect_err("case-sensitive");
        assert_eq!(
            e.to_string(),
            "invalid text format: \"HTML\"; use text or html"
        );
        assert_eq!(TextFormat::default(), TextFormat::Text);
        assert_eq!(TextFormat::Text.visible("<b>x</b>"), "<b>x</b>");
        assert_eq!(TextFormat::Html.visible("<b>x</b>"), "x");
        assert_eq!(
            serde_json::from_str::<TextFormat>("\"html\"").ok(),
            Some(TextFormat::Html)
        );
    }

    #[test]
    fn strip_markup_keeps_the_visible_text() {
        assert_eq!(
            strip_markup("<p>What&#39;s the best <b>caf&eacute;</b>?</p>"),
            "What&#39;s the best caf&eacute;?"
        );
        assert_eq!(strip_markup("a < b and c > d"), "a < b and c > d");
        assert_eq!(strip_markup("x <y"), "x <y", "an unclosed tag stays text");
        assert_eq!(strip_markup("1 <2 & 3>"), "1 <2 & 3>");
        assert_eq!(strip_markup("caf<i>é</i>"), "café");
        assert_eq!(
            strip_markup(
                "<div>one</div><div>two<br>three<br/>four</div><ul><li>five</li><li>six</li></ul>"
            ),
            "one\ntwo\nthree\nfour\nfive\nsix"
        );
        assert_eq!(strip_markup("<h2>Title</h2>Body"), "Title\nBody");
        assert_eq!(
            strip_markup("<table><tr><td>a</td><td>b</td></tr></table>"),
            "a b"
        );
        assert_eq!(
            strip_markup(
                "before<script type=\"text/javascript\">if (a < b) { alert('</p>') }</script>after"
            ),
            "beforeafter"
        );
        assert_eq!(
            strip_markup("a<SCRIPT>x</Script >b<style>p { color: red }</style>c"),
            "abc"
        );
        assert_eq!(strip_markup("a<script>never closed"), "a");
        assert_eq!(
            strip_markup("a<!-- hidden <b>x</b> -->b<!---->c<!-- unclosed"),
            "abc"
        );
        assert_eq!(
            strip_markup("<!DOCTYPE html><?xml version=\"1.0\"?>text"),
            "text"
        );
        assert_eq!(
            strip_markup("<a href=\"x>y\" title='a > b'>link</a>"),
            "link"
        );
        assert_eq!(
            strip_markup("  <p>\n   indented\n   text  </p>\n\n"),
            "indented text"
        );
        assert_eq!(
            strip_markup("&lt;b&gt;not a tag&lt;/b&gt;"),
            "&lt;b&gt;not a tag&lt;/b&gt;"
        );
        assert_eq!(
            strip_markup("a&nbsp;\u{a0}b"),
            "a&nbsp;\u{a0}b",
            "NBSP is not HTML whitespace"
        );
        assert_eq!(
            strip_markup("</>x</ p>"),
            "x",
            "`</` starts a tag, as a bogus comment"
        );
        assert_eq!(strip_markup(""), "");
        assert_eq!(strip_markup("<p></p><br>"), "");
    }

    proptest! {
        #[test]
        fn normalize_never_panics_and_origin_is_a_monotone_map(
            s in "(\\PC|&|#|;|x|[0-9]|amp|eacute|nbsp|copy|\\s|\u{a0}){0,40}"
        ) {
            let norm = normalize(&s);
            let n_chars = s.chars().count();
            prop_assert_eq!(norm.origin.len(), norm.text.chars().count() + 1);
            prop_assert!(norm.origin.windows(2).all(|w| w[0] <= w[1]), "{:?}", norm.origin);
            prop_assert!(norm.origin.iter().all(|&o| o <= n_chars));
            prop_assert_eq!(normalize_text(&s), norm.text.clone());
            // Normalized text is a fixed point of whitespace handling.
            prop_assert!(!norm.text.starts_with(' ') && !norm.text.ends_with(' '));
            prop_assert!(!norm.text.contains("  "));
            prop_assert!(!norm.text.chars().any(|c| c.is_whitespace() && c != ' '));
        }

        #[test]
        fn normalize_handles_any_string(s in any::<String>()) {
            let norm = normalize(&s);
            prop_assert_eq!(norm.origin.len(), norm.text.chars().count() + 1);
            prop_assert!(norm.origin.windows(2).all(|w| w[0] <= w[1]));
        }

        #[test]
        fn strip_markup_never_panics(s in "(\\PC|<|>|/|!|-|\"|'|=|script|p|br|\\s){0,40}") {
            let out = strip_markup(&s);
            prop_assert!(out.len() <= s.len());
        }
    }
}
