//! Duplicate review and file ingest over a real socket: the review queue, verdicts stored in
//! the collection (JSON and the QQP TSV export, surviving a restart), uploads loaded by the
//! ingest pipeline with progress, and their error paths.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::server::{call, call_raw, Server};

const ADMIN: &str = "review-admin-key-0123456789";
const READ: &str = "review-read-key-0123456789";

fn start(dir: &std::path::Path) -> Server {
    let config = dir.join("kindred.toml");
    std::fs::write(&config, "[limits]\nmax_upload_bytes = 4096\n").expect("config");
    Server::start(
        dir,
        &["--config", config.to_str().expect("utf-8")],
        &[("KINDRED_ADMIN_KEY", ADMIN), ("KINDRED_READ_KEY", READ)],
    )
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

fn wait_job(s: &Server, id: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (st, job) = call("GET", &s.url(&format!("/v1/jobs/{id}")), Some(ADMIN), None);
        assert_eq!(st, 200, "{job}");
        if job["state"] != "running" {
            return job;
        }
        assert!(Instant::now() < deadline, "job still running: {job}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn review_queue_verdicts_and_uploads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = start(dir.path());
    let (admin, read) = (Some(ADMIN), Some(READ));
    let (st, _) = call(
        "POST",
        &s.url("/v1/collections"),
        admin,
        Some(&json!({ "name": "faq" })),
    );
    assert_eq!(st, 201);
    let docs = json!([
        { "id": "pw", "text": "How do I reset my password?" },
        { "id": "ship", "text": "How long does shipping take?" },
        { "id": "refund", "text": "How do I get a refund for my order?" },
        { "id": "pw-again", "text": "How can I reset my password?" },
    ]);
    let (st, r) = call(
        "POST",
        &s.url("/v1/collections/faq/documents"),
        admin,
        Some(&docs),
    );
    assert_eq!(st, 200, "{r}");

    // The newest document's near-paraphrase is queued once (not also as pw → pw-again).
    let url = s.url("/v1/collections/faq/review?threshold=0.5&explain=true");
    let (st, page) = call("GET", &url, read, None);
    assert_eq!(st, 200, "{page}");
    let items = page["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{page}");
    let item = &items[0];
    assert_eq!(item["document"]["id"], "pw-again");
    assert_eq!(item["matched"]["id"], "pw");
    assert!(item["matched"]["probability"].as_f64().expect("p") >= 0.5);
    assert!(item["matched"]["explanation"]["word_contributions"].is_object());
    assert_eq!(page["scanned"], 4);
    assert!(page["next_before"].is_null());
    // Paging: the two newest, then the rest.
    let (_, p1) = call(
        "GET",
        &s.url("/v1/collections/faq/review?threshold=0&scan=2"),
        read,
        None,
    );
    let before = p1["next_before"].as_u64().expect("more to look at");
    let (_, p2) = call(
        "GET",
        &s.url(&format!(
            "/v1/collections/faq/review?threshold=0&scan=2&before={before}"
        )),
        read,
        None,
    );
    assert_eq!(
        (p1["scanned"].as_u64(), p2["scanned"].as_u64()),
        (Some(2), Some(2))
    );
    assert!(p2["next_before"].is_null(), "nothing older: {p2}");

    // Verdicts: only the admin key writes them.
    let verdict = json!({
        "a": { "id": "pw-again", "text": "How can I reset my password?" },
        "b": { "id": "pw", "text": "How do I reset my password?" },
        "duplicate": true,
        "probability": item["matched"]["probability"],
    });
    let vurl = s.url("/v1/collections/faq/verdicts");
    let (st, e) = call("POST", &vurl, read, Some(&verdict));
    assert_eq!(st, 403, "{e}");
    let (st, stored) = call("POST", &vurl, admin, Some(&verdict));
    assert_eq!(st, 201, "{stored}");
    assert_eq!(stored["key"], item["key"]);
    // A judged pair leaves the queue.
    let (_, page) = call("GET", &url, read, None);
    assert_eq!(page["items"].as_array().map(Vec::len), Some(0), "{page}");
    // A submitted (unstored) question, and the same pair the other way round replacing it.
    let submitted = json!({
        "a": { "text": "<b>Where is my parcel?</b>" },
        "b": { "id": "ship", "text": "How long does shipping take?" },
        "duplicate": false,
    });
    assert_eq!(call("POST", &vurl, admin, Some(&submitted)).0, 201);
    let flipped = json!({ "a": verdict["b"], "b": verdict["a"], "duplicate": false });
    let (st, again) = call("POST", &vurl, admin, Some(&flipped));
    assert_eq!((st, &again["key"]), (201, &stored["key"]));
    let (st, all) = call("GET", &vurl, read, None);
    assert_eq!(st, 200);
    let all = all.as_array().expect("list").clone();
    assert_eq!(all.len(), 2, "{all:?}");
    let replaced = all
        .iter()
        .find(|v| v["key"] == stored["key"])
        .expect("pair");
    assert_eq!(replaced["duplicate"], false);

    // Bad verdicts.
    for (body, want) in [
        (
            json!({ "a": { "text": " " }, "b": { "text": "x" }, "duplicate": true }),
            "invalid_request",
        ),
        (
            json!({ "a": { "id": "pw", "text": "a" }, "b": { "id": "pw", "text": "b" }, "duplicate": true }),
            "invalid_request",
        ),
        (
            json!({ "a": { "text": "a" }, "duplicate": true }),
            "invalid_request",
        ),
    ] {
        let (st, e) = call("POST", &vurl, admin, Some(&body));
        assert_eq!((st, code(&e)), (422, want), "{body} → {e}");
    }
    let (st, e) = call_raw(&vurl, admin, "application/json", b"{\"a\":");
    assert_eq!((st, code(&e)), (400, "malformed_json"));
    for bad in ["scan=0", "threshold=1.5", "explain=maybe", "colour=red"] {
        let (st, e) = call(
            "GET",
            &s.url(&format!("/v1/collections/faq/review?{bad}")),
            read,
            None,
        );
        assert_eq!(st, 422, "{bad} → {e}");
    }
    let (st, e) = call("GET", &s.url("/v1/collections/nope/review"), read, None);
    assert_eq!((st, code(&e)), (404, "collection_not_found"), "{e}");
    let (st, e) = call("GET", &format!("{vurl}?format=xml"), read, None);
    assert_eq!(st, 422, "{e}");

    // The TSV export is the QQP layout kindred's pair readers take.
    let tsv = ureq::get(&format!("{vurl}?format=tsv"))
        .set("Authorization", &format!("Bearer {READ}"))
        .call()
        .expect("tsv")
        .into_string()
        .expect("text");
    let file = dir.path().join("verdicts.tsv");
    std::fs::write(&file, &tsv).expect("write");
    let pairs = kindred::eval::pairs::read_pairs(&file).expect("reads as pairs");
    assert_eq!(pairs.len(), 2);
    assert!(pairs.iter().all(|p| !p.duplicate));
    assert!(pairs.iter().any(|p| p.a == "<b>Where is my parcel?</b>"));

    // Withdraw.
    let key = stored["key"].as_str().expect("key");
    let del = s.url(&format!("/v1/collections/faq/verdicts/{key}"));
    assert_eq!(call("DELETE", &del, admin, None).0, 200);
    let (st, e) = call("DELETE", &del, admin, None);
    assert_eq!((st, code(&e)), (404, "verdict_not_found"));

    // Upload: JSON Lines with one bad row; the job shows progress and what was rejected.
    let upload = s.url("/v1/collections/faq/ingest?name=more.jsonl");
    let body = concat!(
        "{\"id\": \"cancel\", \"text\": \"How do I cancel my subscription?\"}\n",
        "{\"id\": \"bad\"}\n",
        "{\"id\": \"cards\", \"text\": \"Which payment methods do you accept?\", \"metadata\": {\"topic\": \"billing\"}}\n",
    );
    let (st, e) = call_raw(&upload, read, "application/octet-stream", body.as_bytes());
    assert_eq!(st, 403, "{e}");
    let (st, job) = call_raw(&upload, admin, "application/octet-stream", body.as_bytes());
    assert_eq!(st, 202, "{job}");
    assert_eq!(
        (job["format"].as_str(), job["total_lines"].as_u64()),
        (Some("jsonl"), Some(3))
    );
    let job = wait_job(&s, job["id"].as_u64().expect("id"));
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(
        (job["written"].as_u64(), job["rejected"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(job["rejects"][0]["line"], 2);
    assert_eq!(job["line"], 3);
    let (_, doc) = call(
        "GET",
        &s.url("/v1/collections/faq/documents/cards"),
        read,
        None,
    );
    assert_eq!(doc["metadata"]["topic"], "billing");
    let (st, jobs) = call("GET", &s.url("/v1/jobs"), admin, None);
    assert_eq!((st, jobs.as_array().map(Vec::len)), (200, Some(1)));

    // Upload errors.
    let big = vec![b'x'; 5000];
    for (url, body, want) in [
        (upload.clone(), &big[..], (413, "upload_too_large")),
        (upload.clone(), &b""[..], (422, "invalid_request")),
        (
            s.url("/v1/collections/faq/ingest?format=xlsx"),
            body.as_bytes(),
            (422, "invalid_request"),
        ),
        (
            s.url("/v1/collections/faq/ingest?name=data.bin"),
            body.as_bytes(),
            (422, "invalid_request"),
        ),
        (
            s.url("/v1/collections/nope/ingest?format=jsonl"),
            body.as_bytes(),
            (404, "collection_not_found"),
        ),
    ] {
        let (st, e) = call_raw(&url, admin, "application/octet-stream", body);
        assert_eq!((st, code(&e)), want, "{url} → {e}");
    }
    let (st, e) = call("GET", &s.url("/v1/jobs/99"), admin, None);
    assert_eq!((st, code(&e)), (404, "job_not_found"));
    // Nothing half-written by a refused upload is left behind.
    let uploads: Vec<_> = std::fs::read_dir(dir.path().join("uploads"))
        .expect("uploads folder")
        .collect();
    assert!(uploads.is_empty(), "{uploads:?}");

    // Verdicts are durable: a restart keeps them.
    s.stop();
    let s = start(dir.path());
    let (st, all) = call(
        "GET",
        &s.url("/v1/collections/faq/verdicts"),
        Some(READ),
        None,
    );
    assert_eq!((st, all.as_array().map(Vec::len)), (200, Some(1)), "{all}");
    s.stop();
}
