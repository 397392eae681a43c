//! Text normalisation end to end: HTML character references decoded and markup stripped for
//! the real tokenizer, over HTTP (document upserts with `format`, search, explanations) and in
//! `kindred ingest --text-format html`; offsets always point into the stored text.

use std::process::Command;

use kindred::db::Database;
use kindred::store::Durability;
use kindred::text::normalize::normalize;
use serde_json::{json, Value};

use crate::common::{encoder, model_dir};
use crate::server::{call, call_raw, Server};

const ADMIN: &str = "admin-key-0123456789abcdef";

/// `chars[start..end]` of `text`.
fn slice(text: &str, start: usize, end: usize) -> String {
    text.chars().skip(start).take(end - start).collect()
}

/// Each word of an explanation side: (its text, what its offsets cover in the side's text).
fn words(side: &Value) -> Vec<(String, String)> {
    let text = side["text"].as_str().expect("side text");
    side["words"]
        .as_array()
        .expect("words")
        .iter()
        .map(|w| {
            let (start, end) = (
                w["start"].as_u64().expect("start") as usize,
                w["end"].as_u64().expect("end") as usize,
            );
            assert!(
                start < end && end <= text.chars().count(),
                "{w} in {text:?}"
            );
            (
                w["text"].as_str().expect("word").to_string(),
                slice(text, start, end),
            )
        })
        .collect()
}

/// The words of a side with entities are the decoded words, spanning the written ones.
fn check_side(side: &Value) {
    let words = words(side);
    for (word, covered) in &words {
        // A word is its span of the text (as written, or decoded).
        assert_eq!(normalize(word).text, normalize(covered).text);
        assert!(
            !["39", "#", "&", ";", "eacute"].contains(&word.as_str()),
            "{word:?} in {words:?}"
        );
    }
    let decoded: Vec<String> = words
        .iter()
        .map(|(w, _)| normalize(w).text.into_owned())
        .collect();
    assert!(decoded.contains(&"café".to_string()), "{decoded:?}");
    assert!(decoded.contains(&"What".to_string()), "{decoded:?}");
    assert!(
        words.iter().any(|(_, c)| c == "caf&eacute;"),
        "café spans `caf&eacute;`: {words:?}"
    );
    assert!(
        words.iter().any(|(_, c)| c == "&#39;"),
        "the apostrophe spans `&#39;`: {words:?}"
    );
}

#[test]
fn the_real_tokenizer_reads_references_with_offsets_into_the_original() {
    let text = "What&#39;s the best caf&eacute;\u{a0}in  Doha?";
    let t = encoder().tokenizer().tokenize(text, 0).expect("tokenizes");
    let spans: Vec<(&str, String)> = t
        .tokens
        .iter()
        .map(|k| (k.text.as_str(), slice(text, k.start, k.end)))
        .collect();
    let plain = encoder()
        .tokenizer()
        .tokenize("What's the best café in Doha?", 0)
        .expect("tokenizes");
    assert_eq!(
        t.ids, plain.ids,
        "the same wordpieces as the decoded text: {spans:?}"
    );
    assert!(spans.contains(&("'", "&#39;".to_string())), "{spans:?}");
    assert!(
        spans.iter().any(|(_, s)| s.ends_with("&eacute;")),
        "{spans:?}"
    );
    assert!(
        !spans.iter().any(|(w, _)| *w == "39" || *w == "#"),
        "{spans:?}"
    );
}

#[test]
fn html_documents_over_http_are_stored_visible_and_explained_with_decoded_words() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(dir.path(), &[], &[("KINDRED_ADMIN_KEY", ADMIN)]);
    let admin = Some(ADMIN);
    let (st, v) = call(
        "POST",
        &s.url("/v1/collections"),
        admin,
        Some(&json!({ "name": "forum" })),
    );
    assert_eq!(st, 201, "{v}");
    let docs = json!([
        {
            "id": "cafe",
            "text": "<p>What&#39;s the best <b>caf&eacute;</b> in Doha?</p><script>track('cafe')</script><!-- 39 -->",
            "format": "html",
            "metadata": { "forum": "travel" }
        },
        { "id": "visa", "text": "Do I need a visa to visit Qatar?", "format": "text" },
        { "id": "taxi", "text": "How much is a taxi from the airport?" },
    ]);
    let url = s.url("/v1/collections/forum/documents");
    let (st, v) = call("POST", &url, admin, Some(&docs));
    assert_eq!((st, v["upserted"].as_u64()), (200, Some(3)), "{v}");
    // NDJSON lines take the format too.
    let line = json!({ "id": "tea", "text": "Where can I buy <i>karak</i> tea&nbsp;&amp; snacks?", "format": "html" });
    let (st, v) = call_raw(
        &url,
        admin,
        "application/x-ndjson",
        format!("{line}\n").as_bytes(),
    );
    assert_eq!((st, v["upserted"].as_u64()), (200, Some(1)), "{v}");

    // What is stored is the visible text, references as written.
    let (st, doc) = call(
        "GET",
        &s.url("/v1/collections/forum/documents/cafe"),
        admin,
        None,
    );
    assert_eq!(st, 200, "{doc}");
    assert_eq!(doc["text"], "What&#39;s the best caf&eacute; in Doha?");
    let (_, doc) = call(
        "GET",
        &s.url("/v1/collections/forum/documents/tea"),
        admin,
        None,
    );
    assert_eq!(doc["text"], "Where can I buy karak tea&nbsp;&amp; snacks?");

    // An unknown format is refused, naming the accepted ones.
    let bad = json!([{ "id": "x", "text": "t", "format": "markdown" }]);
    let (st, e) = call("POST", &url, admin, Some(&bad));
    assert_eq!(st, 422, "{e}");
    let message = e["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("`markdown`") && message.contains("`text` or `html`"),
        "{message}"
    );

    // Search with the query written with references too; the explanation's words are
    // decoded words whose offsets point into each side's text.
    let q = json!({ "text": "What&#39;s the best caf&eacute; in Doha?", "k": 2, "explain": true });
    let (st, out) = call(
        "POST",
        &s.url("/v1/collections/forum/search"),
        admin,
        Some(&q),
    );
    assert_eq!(st, 200, "{out}");
    let hit = &out["hits"][0];
    assert_eq!(hit["id"], "cafe", "{out}");
    let e = &hit["explanation"];
    assert_eq!(e["b"]["text"], "What&#39;s the best caf&eacute; in Doha?");
    check_side(&e["a"]);
    check_side(&e["b"]);

    // The lexical index holds the decoded words: `café` matches, `39` (from `&#39;`) and the
    // script's and comment's words do not.
    let lexical = |text: &str| -> Vec<String> {
        let q = json!({ "text": text, "k": 5, "mode": "lexical", "rerank": "none" });
        let (st, out) = call(
            "POST",
            &s.url("/v1/collections/forum/search"),
            admin,
            Some(&q),
        );
        assert_eq!(st, 200, "{out}");
        out["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .map(|h| h["id"].as_str().expect("id").to_string())
            .collect()
    };
    assert_eq!(lexical("café").first().map(String::as_str), Some("cafe"));
    assert!(!lexical("39").contains(&"cafe".to_string()));
    assert!(!lexical("track").contains(&"cafe".to_string()));
    assert_eq!(lexical("snacks").first().map(String::as_str), Some("tea"));
    s.stop();
}

#[test]
fn kindred_ingest_text_format_html_stores_the_visible_text() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let file = dir.path().join("posts.jsonl");
    std::fs::write(
        &file,
        "{\"id\": \"a\", \"text\": \"<div>What&#39;s the best <b>caf&eacute;</b>?</div>\"}\n\
         {\"id\": \"b\", \"text\": \"<p><style>p {}</style></p>&nbsp;\"}\n\
         {\"id\": \"c\", \"text\": \"a < b <br> c\"}\n",
    )
    .expect("write");
    let kindred = || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kindred"));
        cmd.env("KINDRED_MODEL", &model_dir().path)
            .env("RUST_LOG", "warn")
            .args(["--data", data.to_str().expect("utf-8")]);
        cmd
    };
    let out = kindred()
        .args([
            "ingest",
            file.to_str().expect("utf-8"),
            "-c",
            "posts",
            "--create",
        ])
        .args(["--text-format", "xml"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid text format: \"xml\"; use text or html"),
        "{stderr}"
    );
    let out = kindred()
        .args([
            "ingest",
            file.to_str().expect("utf-8"),
            "-c",
            "posts",
            "--create",
        ])
        .args(["--text-format", "html"])
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // b has no visible text once its markup is gone: a rejected row.
    assert!(
        stdout.contains("ingested 2 new, updated 0, rejected 1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("line 2:") && stdout.contains("empty"),
        "{stdout}"
    );
    let db = Database::open(&data, Durability::Flush).expect("opens");
    let mut stored: Vec<(String, String)> = db
        .documents("posts")
        .expect("collection")
        .map(|d| {
            let d = d.expect("record");
            (d.id, d.text)
        })
        .collect();
    stored.sort();
    assert_eq!(
        stored,
        [
            (
                "a".to_string(),
                "What&#39;s the best caf&eacute;?".to_string()
            ),
            ("c".to_string(), "a < b\nc".to_string()),
        ]
    );
}
