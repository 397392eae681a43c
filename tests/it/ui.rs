//! The admin web UI in a real browser: Debian's headless chromium, driven by playwright-core
//! (tests/ui/e2e.mjs), against a real `kindred serve` holding real QQP questions. The browser
//! checks search, the collection's search defaults with their reason, explanations (heatmap
//! cells and their sum, a 40×40 heatmap), duplicate review with stored verdicts, a compound
//! question's two entries, a file upload
//! with progress and XSS questions; this side prepares the data and checks the verdicts
//! through the API afterwards.
//!
//! Needs node, tests/ui/node_modules (`npm ci --prefix tests/ui`) and /usr/bin/chromium
//! (`apt-get install chromium chromium-driver`); `./scripts/test.sh` installs them. Missing,
//! the test fails and says so: it never skips.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::common::shared_data;
use crate::server::{call, Server};

const ADMIN: &str = "ui-admin-key-0123456789";

/// Duplicate pairs (label 1) of the QQP dev file: (question 1, question 2).
fn duplicate_pairs(n: usize) -> Vec<(String, String)> {
    let raw = std::fs::read(shared_data("qqp_bimpm/dev.tsv")).expect("QQP dev");
    String::from_utf8_lossy(&raw)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f.len() >= 3 && f[0] == "1" && f[1].len() > 20 && f[2].len() > 20)
                .then(|| (f[1].trim().to_string(), f[2].trim().to_string()))
        })
        .take(n)
        .collect()
}

fn require_tools(ui_dir: &Path) -> PathBuf {
    let chromium = PathBuf::from(std::env::var("CHROMIUM").unwrap_or("/usr/bin/chromium".into()));
    assert!(
        chromium.is_file(),
        "{} missing: install Debian's chromium and chromium-driver (apt-get install chromium chromium-driver), or run ./scripts/test.sh, which does",
        chromium.display()
    );
    assert!(
        Command::new("node").arg("--version").output().is_ok(),
        "node missing: install Node.js 18+ (apt-get install nodejs npm)"
    );
    assert!(
        ui_dir.join("node_modules/playwright-core").is_dir(),
        "{}/node_modules missing: run `npm ci --prefix tests/ui` (./scripts/test.sh does)",
        ui_dir.display()
    );
    chromium
}

#[test]
fn admin_ui_in_headless_chromium() {
    let ui_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui");
    let chromium = require_tools(&ui_dir);
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ui-screenshots");
    std::fs::create_dir_all(&shots).expect("screenshot folder");

    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(dir.path(), &[], &[("KINDRED_ADMIN_KEY", ADMIN)]);
    let admin = Some(ADMIN);
    let (st, r) = call(
        "POST",
        &s.url("/v1/collections"),
        admin,
        Some(&json!({ "name": "qqp" })),
    );
    assert_eq!(st, 201, "{r}");

    // 150 duplicate pairs from QQP dev: first every question 1, then every question 2, so the
    // newest documents have their duplicates stored (the review queue finds them).
    let pairs = duplicate_pairs(150);
    // Four FAQ entries first (the oldest, so the review queue does not show them): two a
    // submitted compound question asks together, two a stored one does (stored last, so the
    // review queue shows it covering both).
    let mut docs: Vec<Value> = vec![
        json!({ "id": "faq-reset", "text": "How do I reset my password?" }),
        json!({ "id": "faq-email", "text": "How can I change the email address on my account?" }),
        json!({ "id": "faq-cancel", "text": "How do I cancel my subscription?" }),
        json!({ "id": "faq-invoice", "text": "How do I download my invoices?" }),
    ];
    docs.extend(pairs.iter().enumerate().map(
        |(i, (a, _))| json!({ "id": format!("a{i}"), "text": a, "metadata": { "source": "qqp dev" } }),
    ));
    // Attack questions: rendered as text or the browser test fails (the img one, searched last,
    // also carries attack metadata).
    let attacks = [
        "<a href=\"javascript:window.__xss='link'\">click</a> javascript:alert(1) How do I stop spam calls?",
        "<script>window.__xss=\"doc\"</script> How do I learn Rust quickly?",
        "<img src=x onerror=\"window.__xss='img'\"> What is the best way to learn Python?",
    ];
    for (i, text) in attacks.iter().enumerate() {
        docs.push(json!({ "id": format!("xss-{i}"), "text": text,
            "metadata": { "source": "<img src=x onerror=alert(1)>" } }));
    }
    // Pair 0's second question is the browser's query: a paraphrase that is not stored.
    docs.extend(
        pairs
            .iter()
            .enumerate()
            .skip(1)
            .map(|(i, (_, b))| json!({ "id": format!("b{i}"), "text": b })),
    );
    docs.push(json!({ "id": "faq-both", "text": "How do I cancel my subscription and download my invoices?" }));
    for chunk in docs.chunks(200) {
        let (st, r) = call(
            "POST",
            &s.url("/v1/collections/qqp/documents"),
            admin,
            Some(&json!(chunk)),
        );
        assert_eq!(st, 200, "{r}");
    }

    // Search defaults set by hand: the built-in settings (so the browser's results are the
    // same), which the pages show with their reason.
    let reason = "set for the UI test: hybrid then RCMD, as <b>built in</b>";
    let (st, r) = call(
        "PUT",
        &s.url("/v1/collections/qqp/search-defaults"),
        admin,
        Some(&json!({ "mode": "hybrid", "rerank": "rcmd", "reason": reason })),
    );
    assert_eq!(st, 200, "{r}");

    // The file the browser uploads: 40 other QQP questions as TSV with a header, each with an
    // answer the browser names as a context field.
    let upload = dir.path().join("more-questions.tsv");
    let extra = duplicate_pairs(190);
    let mut tsv = String::from("id\ttext\tanswer\n");
    for (i, (a, _)) in extra[150..].iter().enumerate() {
        tsv.push_str(&format!("up{i}\t{}\tanswer {i}\n", a.replace('\t', " ")));
    }
    std::fs::write(&upload, tsv).expect("upload file");

    let long = |seed: &str| -> String {
        let words: Vec<&str> = seed.split_whitespace().collect();
        (0..40)
            .map(|i| words[i % words.len()])
            .collect::<Vec<_>>()
            .join(" ")
    };
    let out = Command::new("node")
        .arg(ui_dir.join("e2e.mjs"))
        .env("KINDRED_URL", &s.base)
        .env("KINDRED_ADMIN_KEY", ADMIN)
        .env("KINDRED_COLLECTION", "qqp")
        .env("SCREENSHOT_DIR", &shots)
        .env("CHROMIUM", &chromium)
        .env("UPLOAD_FILE", &upload)
        .env("UPLOAD_ROWS", "40")
        .env("ATTACKS", json!(attacks).to_string())
        .env("QUERY", &pairs[0].1)
        .env(
            "COMPOUND",
            "How do I reset my password and change the email on my account?",
        )
        .env("COMPOUND_COVERS", json!(["faq-reset", "faq-email"]).to_string())
        .env("REVIEW_COMPOUND", "faq-both")
        .env(
            "REVIEW_COMPOUND_COVERS",
            json!(["faq-cancel", "faq-invoice"]).to_string(),
        )
        .env("DEFAULTS_REASON", reason)
        .env(
            "LONG_A",
            long("how can a small team keep its answers consistent when many customers ask the same question in different words every single day"),
        )
        .env(
            "LONG_B",
            long("what is the best way for a small support team to avoid answering the same customer question again and again in different words"),
        )
        .output()
        .expect("node runs");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{log}");
    assert!(out.status.success(), "browser test failed:\n{log}");

    // What the browser did is in the store: two verdicts (one duplicate, one not), the upload.
    let (st, v) = call("GET", &s.url("/v1/collections/qqp/verdicts"), admin, None);
    assert_eq!(st, 200);
    let v = v.as_array().expect("verdicts");
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(v
        .iter()
        .any(|x| x["duplicate"] == true && x["b"]["id"].is_string()));
    assert!(v
        .iter()
        .any(|x| x["duplicate"] == false && x["a"]["id"].is_null()));
    let (_, info) = call("GET", &s.url("/v1/collections/qqp"), admin, None);
    assert_eq!(info["stats"]["documents"], docs.len() + 40);
    let (st, up) = call(
        "GET",
        &s.url("/v1/collections/qqp/documents/up7"),
        admin,
        None,
    );
    assert_eq!((st, &up["context"]), (200, &json!(["answer 7"])), "{up}");
    for shot in [
        "collections",
        "search",
        "search-compound",
        "explain",
        "explain-40x40",
        "review",
        "compound",
        "ingest",
    ] {
        assert!(shots.join(format!("{shot}.png")).is_file(), "{shot}.png");
    }
    s.stop();
}
