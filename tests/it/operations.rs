//! Operations on questions (INTERSENT, issue 62), over a real socket with the real model and
//! the real binary: a compound question answers `compound` covering both FAQ entries (in the
//! duplicate check and in a search that asks for it), a
//! near-duplicate that asks more says what (`beyond`, in the duplicate check and the review
//! queue), the operations route reads vectors back
//! as stored questions and refuses bad requests clearly, and `kindred train operators` writes
//! a model directory whose operators the CLI then uses, on a collection made with the base, and
//! `kindred train decoder` adds a decoder that reads the vectors back as words.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use crate::common::{model_dir, shared_data};
use crate::server::{call, collection_with, Server};

/// A small FAQ, as the demo's.
const FAQ: [(&str, &str); 12] = [
    ("reset", "How do I reset my password?"),
    ("email", "How can I change the email address on my account?"),
    ("delete", "How do I delete my account permanently?"),
    ("cancel", "How do I cancel my subscription?"),
    (
        "pause",
        "Can I pause my subscription instead of cancelling it?",
    ),
    ("paypal", "Can I pay with PayPal?"),
    ("refund", "How do I get a refund for an order?"),
    ("ship", "Do you ship internationally?"),
    ("track", "How can I track my package?"),
    ("return", "How do I return an item?"),
    ("invoice", "How do I download my invoices?"),
    ("student", "Is there a student discount?"),
];

fn faq_server(data: &Path) -> Server {
    let s = Server::start(data, &[], &[]);
    collection_with(&s, "faq", &FAQ);
    s
}

fn duplicates(s: &Server, text: &str) -> Value {
    let (st, v) = call(
        "POST",
        &s.url("/v1/collections/faq/duplicates"),
        None,
        Some(&json!({ "text": text, "k": 3 })),
    );
    assert_eq!(st, 200, "{v}");
    v
}

#[test]
fn a_compound_question_covers_both_entries_and_a_near_duplicate_says_what_it_asks_beyond() {
    let dir = tempfile::tempdir().unwrap();
    let s = faq_server(dir.path());

    let v = duplicates(
        &s,
        "How do I reset my password and change the email on my account?",
    );
    let covers = v["compound"]["covers"]
        .as_array()
        .unwrap_or_else(|| panic!("no compound: {v}"));
    let ids: Vec<&str> = covers.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["reset", "email"], "{v}");
    let phrases = |i: usize| covers[i]["phrases"].to_string().to_lowercase();
    assert!(phrases(0).contains("password"), "{v}");
    assert!(phrases(1).contains("email"), "{v}");
    let p = v["compound"]["probability"].as_f64().unwrap();
    assert!(
        p >= v["threshold"].as_f64().unwrap() && p > v["probability"].as_f64().unwrap(),
        "{v}"
    );

    // A search that asks for it carries the same compound beside its hits; one that does not
    // ask, or a text without a join, none.
    let search = |text: &str, compound: bool| {
        let (st, v) = call(
            "POST",
            &s.url("/v1/collections/faq/search"),
            None,
            Some(&json!({ "text": text, "k": 3, "compound": compound })),
        );
        assert_eq!(st, 200, "{v}");
        v
    };
    let compound = "How do I reset my password and change the email on my account?";
    let plain = search(compound, false);
    assert!(plain.get("compound").is_none(), "{plain}");
    let found = search(compound, true);
    let found_ids: Vec<&str> = found["compound"]["covers"]
        .as_array()
        .unwrap_or_else(|| panic!("no compound in the search: {found}"))
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(found_ids, ids, "{found}");
    assert_eq!(found["hits"].as_array().unwrap().len(), 3, "{found}");
    let found = search("How do I cancel my subscription?", true);
    assert!(found.get("compound").is_none(), "{found}");

    // A near-duplicate that asks more: the refund entry matches, and what it leaves out is the
    // payment, read back as the PayPal entry.
    let v = duplicates(&s, "How do I get a refund for an order paid with PayPal?");
    assert!(v.get("compound").is_none(), "{v}");
    let top = &v["matches"][0];
    assert_eq!(top["id"], "refund", "{v}");
    let beyond = &top["beyond"];
    assert!(
        beyond["phrases"]
            .to_string()
            .to_lowercase()
            .contains("paid"),
        "{v}"
    );
    assert_eq!(beyond["nearest"][0]["id"], "paypal", "{v}");

    // A single question asked as stored is no compound and asks nothing beyond its match.
    let v = duplicates(&s, "How do I cancel my subscription?");
    assert!(v.get("compound").is_none(), "{v}");
    assert_eq!(v["matches"][0]["id"], "cancel", "{v}");
    assert!(v["matches"][0].get("beyond").is_none(), "{v}");
    s.stop();
}

/// The review queue says what a queued question asks beyond its match, as the duplicate
/// check does: a stored near-duplicate that asks more is queued with `beyond` (the phrase,
/// read back as the entry it is about); a paraphrase that asks nothing more is queued without;
/// a stored compound question is queued with `compound` covering both entries, at the
/// collection's own threshold too, where its best single match alone is not queued.
#[test]
fn the_review_queue_says_what_a_queued_question_asks_beyond_its_match() {
    let dir = tempfile::tempdir().unwrap();
    let s = faq_server(dir.path());
    let (st, v) = call(
        "POST",
        &s.url("/v1/collections/faq/documents"),
        None,
        Some(&json!([
            { "id": "cancel-again", "text": "How can I cancel my subscription?" },
            { "id": "refund-paypal", "text": "How do I get a refund for an order paid with PayPal?" },
            { "id": "both", "text": "How do I reset my password and change the email on my account?" },
        ])),
    );
    assert_eq!(st, 200, "{v}");
    let review = |threshold: &str| -> Value {
        let (st, page) = call(
            "GET",
            &s.url(&format!("/v1/collections/faq/review?scan=20{threshold}")),
            None,
            None,
        );
        assert_eq!(st, 200, "{page}");
        page
    };
    let find = |page: &Value, id: &str| -> Option<Value> {
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["document"]["id"] == id)
            .cloned()
    };
    let page = review("&threshold=0.05");
    let item = |id: &str| find(&page, id).unwrap_or_else(|| panic!("{id} is not queued: {page}"));

    // The compound: both entries, at the low threshold and at one its best single match's P
    // does not reach, where the compound alone queues it.
    let ids = |item: &Value| -> Vec<String> {
        item["compound"]["covers"]
            .as_array()
            .unwrap_or_else(|| panic!("no compound: {item}"))
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_string())
            .collect()
    };
    let both = item("both");
    assert_eq!(ids(&both), ["reset", "email"], "{both}");
    let (single, fused) = (
        both["matched"]["probability"].as_f64().unwrap(),
        both["compound"]["probability"].as_f64().unwrap(),
    );
    assert!(fused > single + 0.1, "{both}");
    let between = (single + fused) / 2.0;
    let high = review(&format!("&threshold={between}"));
    let both = find(&high, "both").unwrap_or_else(|| panic!("the compound is not queued: {high}"));
    assert_eq!(ids(&both), ["reset", "email"], "{both}");
    assert!(
        find(&high, "cancel-again")
            .is_some_and(|i| i["matched"]["probability"].as_f64().unwrap() >= between),
        "a single match above the threshold is still queued: {high}"
    );
    assert!(item("cancel-again").get("compound").is_none());
    // What an item asks beyond its match is read back among the other documents: never as
    // the queued document itself (before, the compound's rest read back as itself first).
    for i in page["items"].as_array().unwrap() {
        let own = &i["document"]["id"];
        let nearest = i["beyond"]["nearest"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(nearest.iter().all(|n| &n["id"] != own), "{i}");
    }
    let paypal = item("refund-paypal");
    assert_eq!(paypal["matched"]["id"], "refund", "{paypal}");
    let beyond = &paypal["beyond"];
    assert!(
        beyond["phrases"]
            .to_string()
            .to_lowercase()
            .contains("paid"),
        "{paypal}"
    );
    assert_eq!(beyond["nearest"][0]["id"], "paypal", "{paypal}");
    let again = item("cancel-again");
    assert_eq!(again["matched"]["id"], "cancel", "{again}");
    assert!(again.get("beyond").is_none(), "{again}");
    s.stop();
}

#[test]
fn the_operations_route_reads_vectors_back_and_refuses_bad_requests() {
    let dir = tempfile::tempdir().unwrap();
    let s = faq_server(dir.path());
    let ops = s.url("/v1/collections/faq/operations");
    let ask = |body: Value| call("POST", &ops, None, Some(&body));

    let (st, v) = ask(json!({ "operation": "decode", "texts": ["how to reset a password"] }));
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (v["operator"].as_str(), v["nearest"][0]["id"].as_str()),
        (Some("none"), Some("reset")),
        "{v}"
    );
    assert_eq!(v["nearest"].as_array().unwrap().len(), 5, "{v}");

    let (st, v) = ask(json!({
        "operation": "fusion",
        "texts": ["Can I pay with PayPal?", "Do you ship internationally?"],
        "k": 2
    }));
    assert_eq!(st, 200, "{v}");
    // The test model carries no learned operators: the normalised sum.
    assert_eq!(v["operator"], "arithmetic", "{v}");
    let mut ids: Vec<&str> = v["nearest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, ["paypal", "ship"], "{v}");

    let (st, v) = ask(json!({
        "operation": "difference",
        "texts": ["How do I get a refund for an order paid with PayPal?", "How do I get a refund for an order?"],
        "k": 1
    }));
    assert_eq!(
        (st, v["nearest"][0]["id"].as_str()),
        (200, Some("paypal")),
        "{v}"
    );

    // Clear 4xx answers, naming the problem.
    let (st, e) = ask(json!({ "operation": "fusion", "texts": ["only one"] }));
    assert_eq!(st, 422, "{e}");
    assert!(
        e.to_string().contains("fusion takes 2 texts, 1 given"),
        "{e}"
    );
    let (st, e) = ask(json!({ "operation": "decode", "texts": ["a", "b"] }));
    assert!(
        st == 422 && e.to_string().contains("decode takes 1 text"),
        "{st} {e}"
    );
    let (st, e) = ask(json!({ "operation": "multiply", "texts": ["a"] }));
    assert!(
        (400..500).contains(&st) && e.to_string().contains("multiply"),
        "{st} {e}"
    );
    let (st, e) = ask(json!({ "operation": "decode", "texts": ["a"], "k": 0 }));
    assert!(st == 422 && e.to_string().contains("k = 0"), "{st} {e}");
    let (st, e) = ask(json!({ "operation": "decode", "texts": ["a"], "extra": 1 }));
    assert!(
        (400..500).contains(&st) && e.to_string().contains("extra"),
        "{st} {e}"
    );
    let (st, e) = call(
        "POST",
        &s.url("/v1/collections/nope/operations"),
        None,
        Some(&json!({ "operation": "decode", "texts": ["a"] })),
    );
    assert!(st == 404 && e.to_string().contains("nope"), "{st} {e}");
    s.stop();
}

fn kindred(data: &Path, model: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kindred"));
    cmd.env("KINDRED_MODEL", model)
        .env("RUST_LOG", "warn")
        .arg("--data")
        .arg(data);
    cmd
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("kindred runs");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// `kindred train operators` on a slice of WikiSplit tune and of the compression pairs past
/// the measured head: the directory it writes has the base's fingerprint (a collection made
/// with the base keeps working), `model info` lists the operators, and `kindred ops` runs the
/// learned ones on that collection.
#[test]
fn trained_operators_join_the_model_directory_without_changing_its_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let rows = |rel: &str, skip: usize, n: usize| -> String {
        let text = std::fs::read_to_string(shared_data(rel)).unwrap();
        text.lines()
            .skip(skip)
            .take(n)
            .map(|l| format!("{l}\n"))
            .collect()
    };
    let (ws, gc) = (dir.path().join("split.tsv"), dir.path().join("pairs.csv"));
    std::fs::write(&ws, rows("wikisplit/tune.tsv", 0, 240)).unwrap();
    let head = "original,compressed\n".to_string();
    std::fs::write(&gc, head + &rows("google_compression/pairs.csv", 2001, 240)).unwrap();
    let (data, out) = (dir.path().join("data"), dir.path().join("with-ops"));
    let base = model_dir().path.clone();
    let summary = run_ok(kindred(&data, &base).args([
        "train",
        "operators",
        "--wikisplit",
        ws.to_str().unwrap(),
        "--compression",
        gc.to_str().unwrap(),
        "--skip-compression",
        "0",
        "--epochs",
        "3",
        "--batch",
        "32",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]));
    let summary: Value = serde_json::from_str(&summary).expect("JSON summary");
    assert_eq!(
        summary["operations"].as_array().unwrap().len(),
        3,
        "{summary}"
    );
    let kept: Vec<String> = summary["operators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        out.join("kindred-operators.safetensors").is_file(),
        !kept.is_empty()
    );

    let info = |model: &Path| -> Value {
        serde_json::from_str(&run_ok(
            kindred(&data, model).args(["model", "info", "--json"]),
        ))
        .unwrap()
    };
    let (mine, theirs) = (info(&out), info(&base));
    assert_eq!(
        mine["identity"]["fingerprint"],
        theirs["identity"]["fingerprint"]
    );
    assert_eq!(mine["operators"], json!(kept), "{mine}");
    assert_eq!(theirs["operators"], json!([]), "{theirs}");

    // A collection made with the base answers operations through the new directory.
    run_ok(kindred(&data, &base).args(["collection", "create", "faq"]));
    let jsonl = dir.path().join("faq.jsonl");
    let lines: String = FAQ
        .iter()
        .map(|(id, text)| format!("{}\n", json!({ "id": id, "text": text })))
        .collect();
    std::fs::write(&jsonl, lines).unwrap();
    run_ok(kindred(&data, &base).args(["add", "--collection", "faq", jsonl.to_str().unwrap()]));
    let ops: Value = serde_json::from_str(&run_ok(kindred(&data, &out).args([
        "ops",
        "compress",
        "--collection",
        "faq",
        "--json",
        "Is there any student discount on a yearly subscription for someone at university?",
    ])))
    .unwrap();
    let learned = kept.iter().any(|k| k == "compression");
    assert_eq!(
        ops["operator"],
        if learned { "learned" } else { "arithmetic" },
        "{ops}"
    );
    assert_eq!(ops["nearest"].as_array().unwrap().len(), 5, "{ops}");
    assert!(ops.get("words").is_none(), "no decoder, no words: {ops}");

    // `kindred eval forum` with the learned compression adds the compressed long-post rows
    // (on three original questions of the forum's dev file, ten related questions each).
    let xml = std::fs::read_to_string(shared_data(
        "semeval2016_task3/SemEval2016-Task3-CQA-QL-dev.xml",
    ))
    .unwrap();
    let blocks: Vec<&str> = xml.split("<OrgQuestion ").skip(1).take(30).collect();
    let forum = dir.path().join("forum.xml");
    std::fs::write(
        &forum,
        format!("<root><OrgQuestion {}", blocks.join("<OrgQuestion ")),
    )
    .unwrap();
    let report_path = dir.path().join("forum.json");
    run_ok(kindred(&data, &out).args([
        "eval",
        "forum",
        forum.to_str().unwrap(),
        "--out",
        report_path.to_str().unwrap(),
    ]));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&report_path).unwrap()).unwrap();
    let compressed: Vec<&Value> = report["report"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["ranking"].as_str().unwrap().contains("compressed above"))
        .collect();
    assert_eq!(compressed.len(), if learned { 4 } else { 0 }, "{report}");
    for r in compressed {
        let map = r["map"].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&map), "{r}");
        assert_eq!(
            r["ap"].as_array().unwrap().len(),
            report["report"]["questions"],
            "{r}"
        );
    }

    // `kindred train decoder` on top: the operators stay, the vectors too, and `kindred ops`
    // reads vectors back as words.
    let decoded = dir.path().join("with-decoder");
    let summary: Value = serde_json::from_str(&run_ok(kindred(&data, &out).args([
        "train",
        "decoder",
        "--wikisplit",
        ws.to_str().unwrap(),
        "--vocabulary",
        "400",
        "--epochs",
        "2",
        "--batch",
        "32",
        "--dev-share",
        "0.1",
        "--out",
        decoded.to_str().unwrap(),
        "--json",
    ])))
    .expect("JSON summary");
    let words = summary["words"].as_u64().unwrap();
    assert!((1..=400).contains(&words), "{summary}");
    assert!(
        summary["dev"]["rouge1"].as_f64().unwrap() > 0.0,
        "{summary}"
    );
    assert!(decoded.join("kindred-decoder.safetensors").is_file());
    let with_decoder = info(&decoded);
    assert_eq!(
        with_decoder["identity"]["fingerprint"],
        theirs["identity"]["fingerprint"]
    );
    assert_eq!(with_decoder["operators"], json!(kept), "{with_decoder}");
    assert_eq!(
        with_decoder["decoder_words"],
        json!(words),
        "{with_decoder}"
    );
    assert_eq!(mine["decoder_words"], Value::Null, "{mine}");
    let question = "How do I reset my password?";
    let decode: Value = serde_json::from_str(&run_ok(kindred(&data, &decoded).args([
        "ops",
        "decode",
        "--collection",
        "faq",
        "--json",
        question,
    ])))
    .unwrap();
    let said = decode["words"].as_array().expect("words");
    assert!((1..=24).contains(&said.len()), "{decode}");
    assert_eq!(decode["nearest"][0]["id"], "reset", "{decode}");
    let text = run_ok(kindred(&data, &decoded).args(["ops", "decode", "-c", "faq", question]));
    assert!(text.contains("decoded words: "), "{text}");
}
