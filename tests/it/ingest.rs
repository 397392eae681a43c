//! `kindred ingest` as a user runs it: formats, bad rows, --strict, and a load killed with
//! SIGKILL half-way that resumes to the same result as an uninterrupted one.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use kindred::db::Database;
use kindred::store::Durability;

use crate::common::{model_dir, shared_data};

fn kindred(data: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kindred"));
    cmd.env("KINDRED_MODEL", &model_dir().path)
        .env("RUST_LOG", "warn")
        .args(["--data", data.to_str().expect("utf-8")]);
    cmd
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// (id, text) of every stored document.
fn contents(data: &Path, collection: &str) -> Vec<(String, String, Vec<f32>)> {
    let db = Database::open(data, Durability::Flush).expect("opens");
    db.documents(collection)
        .expect("collection")
        .map(|d| {
            let d = d.expect("record");
            (d.id, d.text, d.sentence)
        })
        .collect()
}

#[test]
fn bad_rows_are_set_aside_with_line_numbers_and_strict_stops() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let file = dir.path().join("faq.jsonl");
    std::fs::write(
        &file,
        "{\"id\": \"a\", \"text\": \"How do I reset my password?\", \"metadata\": {\"t\": 1}}\n\
         {\"id\": \"b\", \"text\": \"   \"}\n\
         not json\n\
         {\"id\": \"c\", \"text\": \"Where is my order?\", \"metadata\": [1]}\n\
         {\"id\": \"d\", \"text\": \"Can I pay with PayPal?\"}\n",
    )
    .expect("write");
    let out = ok(kindred(&data)
        .args(["ingest", file.to_str().unwrap(), "-c", "faq", "--create"])
        .output()
        .expect("runs"));
    assert!(
        out.contains("ingested 2 new, updated 0, rejected 3"),
        "{out}"
    );
    assert!(
        out.contains("line 2:") && out.contains("line 3:") && out.contains("line 4:"),
        "{out}"
    );
    let rejects =
        std::fs::read_to_string(format!("{}.rejects.tsv", file.display())).expect("reject file");
    let lines: Vec<&str> = rejects.lines().collect();
    assert_eq!(lines.len(), 3, "{rejects}");
    assert!(
        lines[0].starts_with("2\t") && lines[0].contains("empty"),
        "{rejects}"
    );
    assert!(
        lines[2].starts_with("4\t") && lines[2].contains("metadata must be a JSON object"),
        "{rejects}"
    );
    let docs = contents(&data, "faq");
    assert_eq!(
        docs.iter().map(|d| d.0.as_str()).collect::<Vec<_>>(),
        ["a", "d"]
    );

    // --strict: stops at line 2, keeps line 1, exits non-zero naming the line.
    let out = kindred(&data)
        .args([
            "ingest",
            file.to_str().unwrap(),
            "-c",
            "strict",
            "--create",
            "--strict",
            "--restart",
        ])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 2") && err.contains("--strict"), "{err}");
    assert_eq!(contents(&data, "strict").len(), 1);

    // CSV with named columns and metadata columns.
    let csv = dir.path().join("faq.csv");
    std::fs::write(
        &csv,
        "qid,question,topic\n1,\"Hello, can I pay later?\",billing\n2,Where is my parcel?,orders\n",
    )
    .expect("write");
    let out = ok(kindred(&data)
        .args([
            "ingest",
            csv.to_str().unwrap(),
            "-c",
            "csv",
            "--create",
            "--id-field",
            "qid",
            "--text-field",
            "question",
            "--meta-fields",
            "topic",
            "--json",
        ])
        .output()
        .expect("runs"));
    let summary: serde_json::Value = serde_json::from_str(&out).expect("json summary");
    assert_eq!(summary["ingested"], 2);
    let db = Database::open(&data, Durability::Flush).expect("opens");
    let doc = db.get("csv", "1").expect("get").expect("stored");
    assert_eq!(doc.text, "Hello, can I pay later?");
    assert_eq!(doc.metadata()["topic"], "billing");
}

/// Issue 23: `kindred ingest` reads each document's context — JSON Lines' `context` (a string
/// or a list), CSV/TSV columns named by `--context-fields` / `--context-column` (each non-empty
/// cell one text), HTML stripped with `--text-format html` — rejects a row over the limits
/// naming them, and `kindred get` shows it; the vectors are the text's alone.
#[test]
fn context_is_ingested_from_jsonl_keys_and_csv_columns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let jsonl = dir.path().join("faq.jsonl");
    let many =
        serde_json::json!({ "id": "many", "text": "Can I pay later?", "context": vec!["a"; 65] });
    std::fs::write(
        &jsonl,
        format!(
            "{}\n{}\n{}\n{many}\n{}\n",
            r#"{"id": "one", "text": "How do I reset my password?", "context": "Use the <b>link</b>."}"#,
            r#"{"id": "list", "text": "How do I reset my password?", "context": ["First.", "<p>Second.</p>"]}"#,
            r#"{"id": "none", "text": "How do I reset my password?"}"#,
            r#"{"id": "bad", "text": "Where is my order?", "context": {"a": 1}}"#,
        ),
    )
    .expect("write");
    let out = ok(kindred(&data)
        .args(["ingest", jsonl.to_str().unwrap(), "-c", "faq", "--create"])
        .args(["--text-format", "html"])
        .output()
        .expect("runs"));
    assert!(
        out.contains("ingested 3 new, updated 0, rejected 2"),
        "{out}"
    );
    assert!(
        out.contains(
            "line 4: document \"many\" rejected: its context has 65 texts; the limit is 64"
        ) && out
            .contains("line 5: field \"context\" (context) must be a string or a list of strings"),
        "{out}"
    );

    let csv = dir.path().join("faq.csv");
    std::fs::write(
        &csv,
        "id,text,answer,comment\n\
         close,How do I close my account?,\"Settings, then Account.\",Takes a day.\n\
         gift,Can I send a gift?,,\n",
    )
    .expect("write");
    ok(kindred(&data)
        .args(["ingest", csv.to_str().unwrap(), "-c", "faq"])
        .args(["--context-fields", "answer", "--context-column", "comment"])
        .output()
        .expect("runs"));
    let tsv = dir.path().join("faq.tsv");
    std::fs::write(
        &tsv,
        "id\ttext\tanswer\nship\tHow long is shipping?\tThree days.\n",
    )
    .expect("write");
    ok(kindred(&data)
        .args([
            "ingest",
            tsv.to_str().unwrap(),
            "-c",
            "faq",
            "--context-column",
            "answer",
        ])
        .output()
        .expect("runs"));
    let out = kindred(&data)
        .args(["ingest", tsv.to_str().unwrap(), "-c", "faq", "--restart"])
        .args(["--context-fields", "nope"])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("the header has no context column \"nope\" (columns: id, text, answer); pass --context-fields"),
        "{err}"
    );

    let db = Database::open(&data, Durability::Flush).expect("opens");
    let read: std::collections::BTreeMap<String, (Vec<String>, Vec<f32>)> = db
        .documents("faq")
        .expect("collection")
        .map(|d| d.map(|d| (d.id, (d.context, d.sentence))).expect("record"))
        .collect();
    let context = |id: &str| read[id].0.clone();
    assert_eq!(context("one"), ["Use the link."]);
    assert_eq!(context("list"), ["First.", "Second."]);
    assert!(context("none").is_empty() && context("gift").is_empty());
    assert_eq!(
        context("close"),
        ["Settings, then Account.", "Takes a day."]
    );
    assert_eq!(context("ship"), ["Three days."]);
    assert_eq!(read["one"].1, read["none"].1, "context changed the vectors");
    drop(db);
    let shown: serde_json::Value = serde_json::from_str(&ok(kindred(&data)
        .args(["get", "-c", "faq", "close"])
        .output()
        .expect("runs")))
    .expect("json");
    assert_eq!(
        shown["context"],
        serde_json::json!(["Settings, then Account.", "Takes a day."])
    );
}

#[test]
fn malformed_rows_are_set_aside_naming_the_line_and_the_fix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let file = dir.path().join("faq.csv");
    // A byte order mark (Excel's "CSV UTF-8"), a Latin-1 row, a text over --max-text-chars,
    // and a quote never closed, which must not swallow the rows after it into one text.
    let mut content = b"\xEF\xBB\xBFid,text\n1,How do I reset my password?\n".to_vec();
    content.extend_from_slice(b"2,caf\xe9 au lait\n");
    content.extend_from_slice(b"3,Where is my order and when will it arrive?\n");
    content.extend_from_slice(b"4,\"never closed\n5,lost\n");
    std::fs::write(&file, content).expect("write");
    let out = ok(kindred(&data)
        .args(["ingest", file.to_str().unwrap(), "-c", "faq", "--create"])
        .args(["--max-text-chars", "30"])
        .output()
        .expect("runs"));
    assert!(
        out.contains("ingested 1 new, updated 0, rejected 3"),
        "{out}"
    );
    let rejects =
        std::fs::read_to_string(format!("{}.rejects.tsv", file.display())).expect("reject file");
    let lines: Vec<&str> = rejects.lines().collect();
    assert_eq!(lines.len(), 3, "{rejects}");
    assert!(
        lines[0].starts_with("3\t")
            && lines[0].contains("not valid UTF-8 (byte offset 5 of the line)")
            && lines[0].contains("iconv -f latin1 -t utf-8"),
        "{rejects}"
    );
    assert!(
        lines[1].starts_with("4\t")
            && lines[1].contains("the text is 42 characters; the limit is 30 (--max-text-chars"),
        "{rejects}"
    );
    assert!(
        lines[2].starts_with("5\t")
            && lines[2].contains("never closed")
            && lines[2].contains("lines 5-6"),
        "{rejects}"
    );
    let docs = contents(&data, "faq");
    assert_eq!(docs.iter().map(|d| d.0.as_str()).collect::<Vec<_>>(), ["1"]);

    // The default limit is the server's.
    let help = ok(kindred(&data)
        .args(["ingest", "--help"])
        .output()
        .expect("runs"));
    assert!(
        help.contains("--max-text-chars <N>") && help.contains("[default: 2000]"),
        "{help}"
    );
}

#[test]
fn a_killed_ingest_resumes_to_the_same_result_as_an_uninterrupted_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let raw = std::fs::read(shared_data("qqp_bimpm/test.tsv")).expect("QQP");
    let text = String::from_utf8_lossy(&raw);
    let slice: String = text.lines().take(1200).map(|l| format!("{l}\n")).collect();
    let file = dir.path().join("pairs.tsv");
    std::fs::write(&file, slice).expect("write");
    let args = |c: &str| -> Vec<String> {
        [
            "ingest",
            file.to_str().unwrap(),
            "-c",
            c,
            "--create",
            "--format",
            "qqp",
            "--batch",
            "128",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };

    let full = dir.path().join("full");
    let out = ok(kindred(&full).args(args("q")).output().expect("runs"));
    assert!(out.contains("rejected 0"), "{out}");

    // Kill -9 once some batches are committed, then run again.
    let part = dir.path().join("part");
    let mut child = kindred(&part)
        .args(args("q"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawns");
    let state_dir = part.join("ingest").join("q");
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let committed = std::fs::read_dir(&state_dir)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| std::fs::read(e.ok()?.path()).ok())
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["committed_line"].as_u64())
            .unwrap_or(0);
        if committed >= 300 {
            break;
        }
        assert!(Instant::now() < deadline, "no progress");
        assert!(
            child.try_wait().expect("wait").is_none(),
            "the ingest finished before it could be killed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let out = ok(kindred(&part).args(args("q")).output().expect("runs"));
    assert!(out.contains("resumed after line"), "{out}");

    let (a, b) = (contents(&full, "q"), contents(&part, "q"));
    assert_eq!(a.len(), b.len(), "document counts differ");
    let distinct: std::collections::HashSet<&str> = text
        .lines()
        .take(1200)
        .flat_map(|l| l.split('\t').skip(1).take(2).map(str::trim))
        .filter(|q| !q.is_empty())
        .collect();
    assert_eq!(
        a.len(),
        distinct.len(),
        "each distinct question exactly once"
    );
    for (x, y) in a.iter().zip(&b) {
        assert_eq!((&x.0, &x.1), (&y.0, &y.1));
        let cos: f32 = x.2.iter().zip(&y.2).map(|(p, q)| p * q).sum();
        assert!(cos > 0.9999, "{}: {cos}", x.0);
    }
}
