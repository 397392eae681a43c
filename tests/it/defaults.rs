//! A collection's search defaults (issue 23): set by hand over HTTP or stored by a learner
//! through the library, applied where a request does not say (the request's own value wins,
//! then the collection's, then the server's), reported with where each setting came from,
//! refused with the field named when out of range, cleared, kept but stale (and not applied)
//! after a reindex onto another model, and picked up by `kindred search`. Real sled, the real
//! model, HTTP over a real socket.

use std::process::Command;
use std::sync::Arc;

use serde_json::{json, Value};

use kindred::db::{Database, NewDocument};
use kindred::engine::Engine;
use kindred::search::{Mode, Overrides, Rerank, SearchParams, Source};
use kindred::store::{CollectionSettings, DefaultsSource, Durability, SearchDefaults};
use kindred::{Error, UserError};

use crate::common::{encoder, model_dir, other_model, qqp_questions};
use crate::server::{call, Server};

const QUERY: &str = "how can I get back into my account without my password";

/// The FAQ questions and 150 QQP questions, as a JSON batch.
fn documents() -> Vec<Value> {
    let faq = [
        ("pw-1", "How do I reset my password?"),
        (
            "pw-2",
            "I forgot my password, how can I get back into my account?",
        ),
        ("email", "How can I change the email address on my account?"),
        ("refund", "How do I get a refund for my order?"),
        ("ship", "How long does shipping take?"),
        ("cancel", "How do I cancel my subscription?"),
    ];
    let mut docs: Vec<Value> = faq
        .iter()
        .map(|(id, text)| json!({ "id": id, "text": text }))
        .collect();
    docs.extend(
        qqp_questions("qqp_bimpm/dev.tsv")[..150]
            .iter()
            .enumerate()
            .map(|(i, q)| json!({ "id": format!("qqp-{i}"), "text": q })),
    );
    docs
}

/// A server over `dir` with collection `q` holding [`documents`]. Its request timeout is
/// raised: the 156-document write runs at the write pool's lowered priority, behind whatever
/// else the machine computes (the other tests), and these tests are about defaults, not time.
fn server_with_collection(dir: &std::path::Path) -> Server {
    let s = Server::start(dir, &["--request-timeout-ms", "600000"], &[]);
    let (st, out) = call(
        "POST",
        &s.url("/v1/collections"),
        None,
        Some(&json!({ "name": "q" })),
    );
    assert_eq!(st, 201, "{out}");
    let (st, out) = call(
        "POST",
        &s.url("/v1/collections/q/documents"),
        None,
        Some(&json!(documents())),
    );
    assert_eq!(st, 200, "{out}");
    s
}

fn search(s: &Server, body: Value) -> Value {
    let (st, out) = call(
        "POST",
        &s.url("/v1/collections/q/search"),
        None,
        Some(&body),
    );
    assert_eq!(st, 200, "{body}: {out}");
    out
}

/// (id, score) of every hit.
fn ranked(out: &Value) -> Vec<(String, f64)> {
    out["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| {
            (
                h["id"].as_str().expect("id").to_string(),
                h["score"].as_f64().expect("score"),
            )
        })
        .collect()
}

fn sources(out: &Value) -> [&str; 4] {
    let s = &out["settings"]["source"];
    ["mode", "rerank", "weights", "fusion"].map(|k| s[k].as_str().expect("a source"))
}

fn put_defaults(s: &Server, body: Value) -> (u16, Value) {
    call(
        "PUT",
        &s.url("/v1/collections/q/search-defaults"),
        None,
        Some(&body),
    )
}

fn info(s: &Server) -> Value {
    let (st, info) = call("GET", &s.url("/v1/collections/q"), None, None);
    assert_eq!(st, 200, "{info}");
    info
}

#[test]
fn rerank_probability_orders_the_rcmd_candidates_by_p_duplicate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = server_with_collection(dir.path());
    // k = the rerank depth (100): both orders return the whole candidate pool.
    let by_rcmd = search(&s, json!({ "text": QUERY, "k": 100 }));
    let by_p = search(
        &s,
        json!({ "text": QUERY, "k": 100, "rerank": "probability" }),
    );
    assert_eq!(by_p["settings"]["rerank"], "probability");
    let hits = by_p["hits"].as_array().expect("hits");
    assert!(hits.len() >= 4, "{by_p}");
    let p: Vec<f64> = hits
        .iter()
        .map(|h| h["probability"].as_f64().unwrap())
        .collect();
    assert!(
        p.windows(2).all(|w| w[0] >= w[1]),
        "ordered by P(duplicate): {p:?}"
    );
    for h in hits {
        assert_eq!(h["score"], h["probability"], "{h}");
        assert!(h["stages"]["rcmd"]["rank"].as_u64().unwrap() >= 1, "{h}");
    }
    // The same candidates as the RCMD rerank, only ordered otherwise.
    let order =
        |out: &Value| -> Vec<String> { ranked(out).into_iter().map(|(id, _)| id).collect() };
    let ids = |out: &Value| {
        let mut v = order(out);
        v.sort();
        v
    };
    assert_eq!(ids(&by_p), ids(&by_rcmd));
    // A collection may make it its default, like any rerank.
    let (st, set) = put_defaults(&s, json!({ "rerank": "probability", "reason": "test" }));
    assert_eq!(st, 200, "{set}");
    let defaulted = search(&s, json!({ "text": QUERY, "k": 100 }));
    assert_eq!(defaulted["settings"]["rerank"], "probability");
    assert_eq!(order(&defaulted), order(&by_p));
}

#[test]
fn search_defaults_over_http_apply_where_a_request_does_not_say_and_clear() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = server_with_collection(dir.path());

    // None yet: the server's defaults, and the answer says so.
    assert!(info(&s).get("search_defaults").is_none(), "{}", info(&s));
    let plain = search(&s, json!({ "text": QUERY, "k": 5 }));
    assert_eq!(sources(&plain), ["default"; 4], "{}", plain["settings"]);
    assert_eq!(plain["settings"]["mode"], "hybrid");
    assert_eq!(plain["settings"]["rerank"], "rcmd");
    assert!(plain["settings"].get("stale_defaults").is_none());

    // rerank: context needs the collection's context vectors (`kindred tune` makes them):
    // refused rather than stored to fail every search; a search asking for it says the same.
    let (st, e) = put_defaults(&s, json!({ "mode": "cosine", "rerank": "context" }));
    assert_eq!(st, 422, "{e}");
    let message = e["error"]["message"].as_str().expect("message");
    assert!(message.contains("kindred tune --collection"), "{e}");
    assert!(info(&s).get("search_defaults").is_none(), "{}", info(&s));
    let (st, e) = call(
        "POST",
        &s.url("/v1/collections/q/search"),
        None,
        Some(&json!({ "text": QUERY, "rerank": "context" })),
    );
    assert_eq!(st, 422, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no context vectors"),
        "{e}"
    );

    // Set by hand: cosine, no rerank.
    let reason = "cosine alone, in first-stage order: the operator's choice";
    let (st, set) = put_defaults(
        &s,
        json!({ "mode": "cosine", "rerank": "none", "reason": reason, "evidence": { "note": "by hand" } }),
    );
    assert_eq!(st, 200, "{set}");
    let fingerprint = info(&s)["settings"]["model"]["fingerprint"].clone();
    assert_eq!(
        (&set["mode"], &set["rerank"], &set["weights"]),
        (&json!("cosine"), &json!("none"), &json!("uniform"))
    );
    assert_eq!(set["source"], "set");
    assert_eq!(set["stale"], false);
    assert_eq!(set["reason"], reason);
    assert_eq!(set["model_fingerprint"], fingerprint);
    assert_eq!(set["evidence"]["note"], "by hand");
    let chosen_at = set["chosen_at"].as_str().expect("chosen_at");
    assert!(
        chosen_at.len() == 20 && chosen_at.ends_with('Z') && chosen_at.as_bytes()[10] == b'T',
        "{chosen_at}"
    );
    let shown = info(&s)["search_defaults"].clone();
    assert_eq!(shown, set, "GET shows what PUT stored");

    // A search that does not say takes them; its hits are exactly those of an explicit
    // cosine search without rerank.
    let defaulted = search(&s, json!({ "text": QUERY, "k": 5 }));
    assert_eq!(
        sources(&defaulted),
        ["collection"; 4],
        "{}",
        defaulted["settings"]
    );
    assert_eq!(defaulted["settings"]["mode"], "cosine");
    assert_eq!(defaulted["settings"]["rerank"], "none");
    let explicit = search(
        &s,
        json!({ "text": QUERY, "k": 5, "mode": "cosine", "rerank": "none" }),
    );
    assert_eq!(
        sources(&explicit),
        ["request", "request", "collection", "collection"]
    );
    assert_eq!(ranked(&defaulted), ranked(&explicit));
    assert_ne!(
        ranked(&defaulted),
        ranked(&plain),
        "the defaults changed nothing"
    );
    for h in defaulted["hits"].as_array().expect("hits") {
        // No rerank: the hits are in (and scored by) first-stage order, from the cosine stage.
        assert_eq!(h["score"], h["stages"]["fused"]["score"], "{h}");
        assert!(h["stages"]["cosine"]["rank"].is_u64(), "{h}");
        assert!(h["stages"]["lexical"]["rank"].is_null(), "{h}");
    }

    // A request's own value wins, field by field.
    let mixed = search(&s, json!({ "text": QUERY, "k": 5, "rerank": "rcmd" }));
    assert_eq!(
        sources(&mixed),
        ["collection", "request", "collection", "collection"]
    );
    assert_eq!(
        (&mixed["settings"]["mode"], &mixed["settings"]["rerank"]),
        (&json!("cosine"), &json!("rcmd"))
    );
    for h in mixed["hits"].as_array().expect("hits") {
        assert_eq!(h["score"], h["stages"]["rcmd"]["score"], "{h}");
    }
    // The duplicates endpoint searches its pool with them too.
    let (st, verdict) = call(
        "POST",
        &s.url("/v1/collections/q/duplicates"),
        None,
        Some(&json!({ "text": QUERY })),
    );
    assert_eq!(st, 200, "{verdict}");
    assert_eq!(verdict["settings"]["mode"], "cosine");
    assert_eq!(verdict["settings"]["source"]["mode"], "collection");
    let best = verdict["matches"][0]["id"].as_str().expect("a match");
    assert!(["pw-1", "pw-2"].contains(&best), "{verdict}");

    // Bad values: 422 naming the problem, and the stored defaults stay as they were.
    for (body, needles) in [
        (json!({ "mode": "bm25" }), vec!["bm25", "cosine"]),
        (json!({ "weights": "tfidf" }), vec!["tfidf", "uniform"]),
        (
            json!({ "fusion": { "cosine": 0, "w2": 0, "lexical": 0 } }),
            vec!["fusion", "positive weight"],
        ),
        (
            json!({ "mode": "cosine", "fusion": { "k0": 0 } }),
            vec!["fusion.k0", "above 0"],
        ),
        (
            json!({ "fusion": { "w2": -1 } }),
            vec!["fusion.w2", "0 or more"],
        ),
        (json!({ "reason": "   " }), vec!["reason"]),
        (json!({ "mode": "cosine", "bogus": 1 }), vec!["bogus"]),
    ] {
        let (st, out) = put_defaults(&s, body.clone());
        assert_eq!(st, 422, "{body}: {out}");
        assert_eq!(out["error"]["code"], "invalid_request", "{body}: {out}");
        let message = out["error"]["message"].as_str().expect("message");
        for needle in needles {
            assert!(message.contains(needle), "{body}: {message}");
        }
    }
    assert_eq!(info(&s)["search_defaults"], set);
    let (st, out) = call(
        "PUT",
        &s.url("/v1/collections/nope/search-defaults"),
        None,
        Some(&json!({ "mode": "cosine" })),
    );
    assert_eq!(
        (st, &out["error"]["code"]),
        (404, &json!("collection_not_found"))
    );

    // Cleared: the built-in settings again.
    let url = s.url("/v1/collections/q/search-defaults");
    let (st, out) = call("DELETE", &url, None, None);
    assert_eq!((st, &out["cleared"]), (200, &json!(true)), "{out}");
    let (st, out) = call("DELETE", &url, None, None);
    assert_eq!((st, &out["cleared"]), (200, &json!(false)), "{out}");
    assert!(info(&s).get("search_defaults").is_none());
    let after = search(&s, json!({ "text": QUERY, "k": 5 }));
    assert_eq!(sources(&after), ["default"; 4]);
    assert_eq!(ranked(&after), ranked(&plain));
    s.stop();
}

#[test]
fn search_defaults_go_stale_after_a_reindex_onto_another_model_and_are_not_applied() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = server_with_collection(dir.path());
    let (st, set) = put_defaults(&s, json!({ "mode": "lexical", "rerank": "none" }));
    assert_eq!(st, 200, "{set}");
    assert_eq!(set["reason"], "set by an operator");
    let before = search(&s, json!({ "text": QUERY, "k": 3 }));
    assert_eq!(before["settings"]["mode"], "lexical");

    let url = s.url("/v1/collections/q/reindex");
    let (st, out) = call(
        "POST",
        &url,
        None,
        Some(&json!({ "model": other_model().path })),
    );
    assert_eq!(st, 202, "{out}");
    let status = loop {
        let (st, status) = call("GET", &url, None, None);
        assert_eq!(st, 200, "{status}");
        if status["state"] != "running" {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(status["state"], "done", "{status}");

    // Kept and shown, but stale: chosen for the old model.
    let now = info(&s);
    let d = &now["search_defaults"];
    assert_eq!(d["stale"], true, "{now}");
    assert_eq!(d["mode"], "lexical");
    assert_eq!(d["model_fingerprint"], set["model_fingerprint"]);
    assert_ne!(
        d["model_fingerprint"],
        now["settings"]["model"]["fingerprint"]
    );
    // Not applied: the server's settings, and the answer says the defaults were skipped.
    let out = search(&s, json!({ "text": QUERY, "k": 3 }));
    assert_eq!(sources(&out), ["default"; 4], "{}", out["settings"]);
    assert_eq!(out["settings"]["mode"], "hybrid");
    assert_eq!(out["settings"]["stale_defaults"], true);
    // Set again (every field left out: the server's settings), for the new model.
    let (st, again) = put_defaults(&s, json!({ "reason": "hybrid again after the reindex" }));
    assert_eq!(st, 200, "{again}");
    assert_eq!(
        again["model_fingerprint"],
        now["settings"]["model"]["fingerprint"]
    );
    assert_eq!(
        (&again["mode"], &again["stale"]),
        (&json!("hybrid"), &json!(false))
    );
    s.stop();

    // They persist across a restart.
    let s = Server::start(dir.path(), &[], &[]);
    assert_eq!(info(&s)["search_defaults"], again);
    let out = search(&s, json!({ "text": QUERY, "k": 3 }));
    assert_eq!(sources(&out), ["collection"; 4]);
    assert!(out["settings"].get("stale_defaults").is_none());
    s.stop();
}

fn doc(id: &str, text: &str) -> NewDocument {
    NewDocument {
        id: id.into(),
        text: text.into(),
        metadata: Value::Null,
        context: Vec::new(),
    }
}

/// A database in `dir` with collection `c` of the FAQ questions, for the test model.
fn library_collection(dir: &std::path::Path) -> Arc<Database> {
    let db = Arc::new(Database::open(dir, Durability::Flush).expect("opens"));
    db.create_collection(
        "c",
        &CollectionSettings::for_model(encoder().identity().clone()),
    )
    .expect("created");
    let docs = documents()
        .iter()
        .map(|d| doc(d["id"].as_str().unwrap(), d["text"].as_str().unwrap()))
        .collect();
    crate::common::upsert(&db, "c", encoder(), docs).expect("stored");
    db
}

/// What a learner (`kindred tune`) does: `SearchDefaults::from_params` and
/// `Database::set_search_defaults`; checked, applied, kept across a reopen, a damaged value
/// ignored.
#[test]
fn learned_defaults_are_checked_stored_applied_and_reopened() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = library_collection(dir.path());
    let fingerprint = encoder().identity().fingerprint.clone();
    let chosen = SearchParams {
        mode: Mode::Lexical,
        rerank: Rerank::None,
        k: 4,
        ..SearchParams::default()
    };
    let learned = SearchDefaults::from_params(
        &chosen,
        DefaultsSource::Learned,
        "lexical without rerank: nDCG@10 0.80 against 0.75 for hybrid then RCMD",
        fingerprint.clone(),
        json!([{ "name": "hybrid → RCMD", "ndcg_at_10": 0.75 }, { "name": "lexical", "ndcg_at_10": 0.80 }]),
    );
    // Refused: another model's, or out of range; nothing stored then.
    let foreign = SearchDefaults {
        model_fingerprint: "sha256:another-model".into(),
        ..learned.clone()
    };
    match db.set_search_defaults("c", Some(foreign)) {
        Err(Error::User(UserError::InvalidArgument { name, reason })) => {
            assert_eq!(name, "model_fingerprint");
            assert!(
                reason.contains("sha256:another-model") && reason.contains(&fingerprint),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    let mut bad = learned.clone();
    bad.fusion.k0 = f32::INFINITY;
    assert!(db.set_search_defaults("c", Some(bad)).is_err());
    assert_eq!(db.search_defaults("c").expect("reads"), None);
    assert!(matches!(
        db.set_search_defaults("nope", Some(learned.clone())),
        Err(Error::User(UserError::UnknownCollection { .. }))
    ));

    db.set_search_defaults("c", Some(learned.clone()))
        .expect("stored");
    assert_eq!(
        db.search_defaults("c").expect("reads"),
        Some(learned.clone())
    );
    let info = db.info("c").expect("info").search_defaults.expect("shown");
    assert_eq!(
        (info.defaults.clone(), info.stale),
        (learned.clone(), false)
    );

    // Applied where the caller does not say; the same hits as the explicit parameters.
    let engine = Engine::with_encoder(db.clone(), encoder().clone());
    let col = engine.collection("c").expect("collection");
    let fallback = SearchParams {
        k: 4,
        ..SearchParams::default()
    };
    let out = col
        .search_with_defaults(QUERY, &Overrides::default(), &fallback)
        .expect("searched");
    let settings = out.settings.expect("settings");
    assert_eq!(
        (settings.mode, settings.rerank),
        (Mode::Lexical, Rerank::None)
    );
    assert_eq!(settings.source.mode, Source::Collection);
    let explicit = col.search(QUERY, &chosen).expect("searched");
    assert!(
        explicit.settings.is_none(),
        "explicit parameters: nothing resolved"
    );
    let ids = |o: &kindred::search::SearchOutcome| -> Vec<String> {
        o.hits.iter().map(|h| h.id.clone()).collect()
    };
    assert_eq!(ids(&out), ids(&explicit));
    drop(col);
    drop(engine);
    drop(db);

    // Reopened: still there. Damaged: ignored (searches go on), and replaced by the next set.
    let db = Arc::new(Database::open(dir.path(), Durability::Flush).expect("reopens"));
    assert_eq!(
        db.search_defaults("c").expect("reads"),
        Some(learned.clone())
    );
    db.embedded_store()
        .expect("embedded store")
        .set_meta("c", kindred::store::SEARCH_DEFAULTS_KEY, b"{not json")
        .expect("written");
    drop(db);
    let db = Arc::new(Database::open(dir.path(), Durability::Flush).expect("reopens"));
    assert_eq!(db.search_defaults("c").expect("reads"), None);
    let engine = Engine::with_encoder(db.clone(), encoder().clone());
    let out = engine
        .collection("c")
        .expect("collection")
        .search_with_defaults(QUERY, &Overrides::default(), &fallback)
        .expect("searched");
    assert_eq!(out.settings.expect("settings").source.mode, Source::Default);
    db.set_search_defaults("c", Some(learned.clone()))
        .expect("stored");
    assert_eq!(db.search_defaults("c").expect("reads"), Some(learned));
    db.set_search_defaults("c", None).expect("cleared");
    assert_eq!(db.search_defaults("c").expect("reads"), None);
    assert!(db.info("c").expect("info").search_defaults.is_none());
}

fn kindred(data: &std::path::Path, args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_kindred"))
        .env("KINDRED_MODEL", &model_dir().path)
        .env_remove("RUST_LOG")
        .arg("--data")
        .arg(data)
        .args(args)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn kindred_search_takes_the_collections_search_defaults_and_stats_shows_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let reason = "cosine then no rerank, set for the CLI test";
    {
        let db = library_collection(dir.path());
        let chosen = SearchParams {
            mode: Mode::Cosine,
            rerank: Rerank::None,
            ..SearchParams::default()
        };
        let d = SearchDefaults::from_params(
            &chosen,
            DefaultsSource::Set,
            reason,
            encoder().identity().fingerprint.clone(),
            Value::Null,
        );
        db.set_search_defaults("c", Some(d)).expect("stored");
    }
    let json_of = |args: &[&str]| -> Value {
        serde_json::from_slice(&kindred(dir.path(), args).stdout).expect("JSON")
    };
    let out = json_of(&["search", "-c", "c", QUERY, "-k", "3", "--json"]);
    assert_eq!(out["settings"]["mode"], "cosine", "{}", out["settings"]);
    assert_eq!(out["settings"]["rerank"], "none");
    assert_eq!(sources(&out), ["collection"; 4]);
    let flags = json_of(&[
        "search", "-c", "c", QUERY, "-k", "3", "--json", "--mode", "hybrid",
    ]);
    assert_eq!(
        sources(&flags),
        ["request", "collection", "collection", "collection"]
    );
    assert_eq!(flags["settings"]["mode"], "hybrid");
    // The table says it on stderr; a bad flag is refused by name.
    let table = kindred(dir.path(), &["search", "-c", "c", QUERY, "-k", "3"]);
    let err = String::from_utf8_lossy(&table.stderr);
    assert!(
        err.contains("settings: mode cosine (collection), rerank none (collection)"),
        "{err}"
    );
    let bad = Command::new(env!("CARGO_BIN_EXE_kindred"))
        .env("KINDRED_MODEL", &model_dir().path)
        .arg("--data")
        .arg(dir.path())
        .args(["search", "-c", "c", QUERY, "--rerank", "sometimes"])
        .output()
        .expect("runs");
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("use rcmd, probability, context or none"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );

    let stats = kindred(dir.path(), &["stats", "c"]);
    let text = String::from_utf8_lossy(&stats.stdout);
    assert!(
        text.contains("search defaults mode cosine, rerank none, weights uniform"),
        "{text}"
    );
    assert!(text.contains(&format!("why: {reason}")), "{text}");
    assert!(!text.contains("STALE"), "{text}");
}
