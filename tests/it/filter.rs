//! Filtered search over the API (a real server, real model, real store): the filter applies to
//! every first stage before its depth cut, so a search returns k hits whenever k documents
//! match — the k best of them — in every mode, with `in` lists and numeric ranges, while
//! documents are ingested, while the graphs are compacted in the background and through a
//! reindex, also when the filter is broad enough for a graph walk. Also graph reachability:
//! 5,000 near-duplicate questions and all 36,737 distinct qqp_bimpm dev + test questions are
//! each found first by their own text.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::server::{call, call_raw, Server};

fn create(s: &Server, name: &str) {
    let (st, out) = call(
        "POST",
        &s.url("/v1/collections"),
        None,
        Some(&json!({ "name": name })),
    );
    assert_eq!(st, 201, "{out}");
}

fn put(s: &Server, name: &str, docs: &[Value]) {
    let body: String = docs.iter().map(|d| format!("{d}\n")).collect();
    let (st, out) = call_raw(
        &s.url(&format!("/v1/collections/{name}/documents")),
        None,
        "application/x-ndjson",
        body.as_bytes(),
    );
    assert_eq!(st, 200, "{out}");
}

fn search(s: &Server, name: &str, body: Value) -> Value {
    let (st, out) = call(
        "POST",
        &s.url(&format!("/v1/collections/{name}/search")),
        None,
        Some(&body),
    );
    assert_eq!(st, 200, "{body}: {out}");
    out
}

/// The ids of a search answer's hits, in order.
pub fn hit_ids(out: &Value) -> Vec<String> {
    out["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| h["id"].as_str().expect("id").to_string())
        .collect()
}

/// Each hit's id and cosine stage score, in order.
fn cosine_scores(out: &Value) -> Vec<(String, f64)> {
    out["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| {
            let id = h["id"].as_str().expect("id").to_string();
            (id, h["stages"]["cosine"]["score"].as_f64().expect("cosine"))
        })
        .collect()
}

/// The repro: 150 pasta questions (g = b) and 10 train questions (g = a).
fn pasta_and_trains() -> Vec<Value> {
    let mut docs: Vec<Value> = (0..150)
        .map(|i| {
            json!({ "id": format!("pasta-{i}"), "metadata": { "g": "b", "n": i },
                    "text": format!("How long should I boil pasta number {i} for dinner?") })
        })
        .collect();
    docs.extend((0..10).map(|i| {
        json!({ "id": format!("train-{i}"), "metadata": { "g": "a", "n": 1000 + i, "tags": ["rail", format!("t{i}")] },
                "text": format!("Which train goes from station {i} to the airport?") })
    }));
    docs
}

#[test]
fn a_filter_applies_before_every_stage_cuts_and_returns_the_k_best_matches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(dir.path(), &[], &[]);
    create(&s, "f");
    put(&s, "f", &pasta_and_trains());

    // The repro: every mode returns all 10 matching documents, none other.
    let trains: HashSet<String> = (0..10).map(|i| format!("train-{i}")).collect();
    for mode in ["hybrid", "cosine", "w2"] {
        for rerank in ["rcmd", "probability", "none"] {
            let out = search(
                &s,
                "f",
                json!({ "text": "How long do I boil spaghetti?", "k": 10, "mode": mode,
                        "rerank": rerank, "filter": { "g": "a" } }),
            );
            let got: HashSet<String> = hit_ids(&out).into_iter().collect();
            assert_eq!(got, trains, "{mode}/{rerank}: {out}");
            assert_eq!(out["filtered"], json!({ "matching": 10, "exact": true }));
        }
    }
    // Duplicates too: only matching documents, and the answer says what the filter admitted
    // (before, a duplicates answer did not).
    let (st, out) = call(
        "POST",
        &s.url("/v1/collections/f/duplicates"),
        None,
        Some(
            &json!({ "text": "How long do I boil spaghetti?", "k": 3, "explain": false,
                      "filter": { "g": "a" } }),
        ),
    );
    assert_eq!(st, 200, "{out}");
    assert_eq!(
        out["filtered"],
        json!({ "matching": 10, "exact": true }),
        "{out}"
    );
    let matches = out["matches"].as_array().expect("matches");
    assert_eq!(matches.len(), 3, "{out}");
    assert!(
        matches
            .iter()
            .all(|m| trains.contains(m["id"].as_str().unwrap())),
        "{out}"
    );
    // Lexical: 150 better-scoring pasta documents share the query's words, and the lexical
    // depth is 20; the filter still finds the 10 that match.
    let out = search(
        &s,
        "f",
        json!({ "text": "how long should I boil the train", "k": 10, "mode": "lexical",
                "depths": { "lexical": 20 }, "filter": { "g": "a" } }),
    );
    assert_eq!(hit_ids(&out).len(), 10, "{out}");

    // Exactly the k best: the 4 returned are the 4 highest cosines among the 10 matching.
    let all = search(
        &s,
        "f",
        json!({ "text": "How long do I boil spaghetti?", "k": 10, "mode": "cosine",
                "rerank": "none", "filter": { "g": "a" } }),
    );
    let mut by_cosine = cosine_scores(&all);
    by_cosine.sort_by(|a, b| b.1.total_cmp(&a.1));
    let best4: Vec<String> = by_cosine[..4].iter().map(|(id, _)| id.clone()).collect();
    let top = search(
        &s,
        "f",
        json!({ "text": "How long do I boil spaghetti?", "k": 4, "mode": "cosine",
                "rerank": "none", "filter": { "g": "a" } }),
    );
    assert_eq!(hit_ids(&top), best4, "{top}");

    // `in`, ranges, lists in metadata, and combinations.
    for (filter, want) in [
        (json!({ "g": { "in": ["a", "zzz"] } }), 10),
        (json!({ "n": { "gte": 1003, "lt": 1007 } }), 4),
        (json!({ "n": { "lt": 5 } }), 5),
        (json!({ "tags": "rail", "n": { "gt": 1008 } }), 1),
        (json!({ "g": "b", "n": { "gte": 140 } }), 10),
        (json!({ "g": "nobody" }), 0),
    ] {
        let out = search(
            &s,
            "f",
            json!({ "text": "Which train goes to the airport?", "k": 50, "filter": filter }),
        );
        assert_eq!(hit_ids(&out).len(), want, "{filter}: {out}");
        assert_eq!(out["filtered"]["matching"], want, "{filter}");
    }

    // A bad filter is refused before any work, naming the key and the accepted forms.
    let (st, out) = call(
        "POST",
        &s.url("/v1/collections/f/search"),
        None,
        Some(&json!({ "text": "train", "filter": { "g": ["a", "b"] } })),
    );
    assert_eq!(st, 422, "{out}");
    let msg = out["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("\"g\"") && msg.contains("\"in\""), "{out}");
    s.stop();
}

#[test]
fn filtered_searches_stay_complete_during_ingest_and_background_compaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(dir.path(), &[], &[]);
    create(&s, "f");
    put(&s, "f", &pasta_and_trains());
    let filler = |round: usize| -> String {
        (0..1200)
            .map(|i| {
                let d = json!({ "id": format!("filler-{i}"), "metadata": { "g": "c", "round": round },
                               "text": format!("How many minutes to cook noodles type {i}, round {round}?") });
                format!("{d}\n")
            })
            .collect()
    };
    let check = |s: &Server| {
        let out = search(
            s,
            "f",
            json!({ "text": "Which train goes to the airport?", "k": 10, "filter": { "g": "a" } }),
        );
        assert_eq!(hit_ids(&out).len(), 10, "{out}");
    };
    // Round 0 adds 1,200 documents; round 1 replaces all of them (1,200 tombstones, far past
    // the compaction ratio), so a background compaction starts while searches go on.
    for round in 0..2 {
        let url = s.url("/v1/collections/f/documents");
        let body = filler(round);
        let ingest = std::thread::spawn(move || {
            call_raw(&url, None, "application/x-ndjson", body.as_bytes())
        });
        let mut answered = 0;
        while !ingest.is_finished() {
            check(&s);
            answered += 1;
        }
        let (st, r) = ingest.join().expect("ingest");
        assert_eq!(st, 200, "{r}");
        assert!(
            answered >= 2,
            "round {round}: {answered} searches during the ingest"
        );
    }
    // Searches stay complete until a compaction has swapped the new graphs in: 2,560 points
    // were inserted in all, fewer remain, and the tombstones left are under the ratio.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        check(&s);
        let (_, info) = call("GET", &s.url("/v1/collections/f"), None, None);
        let (points, dead) = (
            info["index"]["cosine_points"].as_u64().unwrap(),
            info["index"]["tombstones"].as_u64().unwrap(),
        );
        if points < 2560 {
            assert_eq!(points - dead, 1360, "{info}");
            assert!(dead * 5 <= 1360, "{info}");
            break;
        }
        assert!(Instant::now() < deadline, "no compaction in 120 s: {info}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The compacted graphs are saved and loaded again after a restart.
    s.stop();
    let s = Server::start(dir.path(), &[], &[]);
    check(&s);
    let (_, info) = call("GET", &s.url("/v1/collections/f"), None, None);
    assert_eq!(info["stats"]["documents"], 1360, "{info}");
    s.stop();
}

#[test]
fn each_of_5000_near_duplicates_is_found_by_its_own_text() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(dir.path(), &[], &[]);
    create(&s, "nd");
    let text = |i: usize| format!("How long should I boil pasta number {i} for dinner?");
    let docs: Vec<Value> = (0..5000)
        .map(|i| json!({ "id": format!("p{i}"), "text": text(i) }))
        .collect();
    put(&s, "nd", &docs);
    let mut lost = Vec::new();
    for i in (0..5000).step_by(7) {
        let out = search(
            &s,
            "nd",
            json!({ "text": text(i), "k": 1, "mode": "cosine", "rerank": "none" }),
        );
        let hit = &out["hits"][0];
        let own = hit["id"] == format!("p{i}");
        let tied = hit["stages"]["cosine"]["score"].as_f64().unwrap_or(0.0) >= 1.0 - 1e-6;
        if !(own || tied) {
            lost.push(i);
        }
    }
    assert!(lost.is_empty(), "not found by their own text: {lost:?}");
    s.stop();
}

/// Every one of the 36,737 distinct questions of qqp_bimpm dev + test, stored through the API
/// at the default settings, is the first hit of a search for its own text in cosine and in W2
/// mode (or tied with it at distance 0): every point of both graphs is reachable at the
/// default ef (`tests/it/recall.rs` checks the same at the index level, with ef 1000 too).
#[test]
fn every_one_of_36737_real_questions_is_found_by_its_own_text() {
    let questions = crate::common::qqp_bimpm_dev_test_questions();
    assert!(questions.len() > 36_000, "{} questions", questions.len());
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(dir.path(), &[], &[]);
    create(&s, "qqp");
    let t = Instant::now();
    let docs: Vec<Value> = questions
        .iter()
        .enumerate()
        .map(|(i, q)| json!({ "id": format!("q{i}"), "text": q }))
        .collect();
    for chunk in docs.chunks(1_000) {
        put(&s, "qqp", chunk);
    }
    eprintln!(
        "stored {} questions in {:.0}s",
        docs.len(),
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let lost: Vec<(usize, &str)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|w| {
                let (s, questions) = (&s, &questions);
                scope.spawn(move || {
                    let mut lost = Vec::new();
                    for i in (w..questions.len()).step_by(2) {
                        for mode in ["cosine", "w2"] {
                            let out = search(
                                s,
                                "qqp",
                                json!({ "text": questions[i], "k": 1, "mode": mode,
                                        "rerank": "none" }),
                            );
                            let hit = &out["hits"][0];
                            let own = hit["id"] == format!("q{i}");
                            let tied = match mode {
                                "cosine" => hit["stages"]["cosine"]["score"]
                                    .as_f64()
                                    .is_some_and(|c| c >= 1.0 - 1e-6),
                                _ => hit["stages"]["w2"]["score"]
                                    .as_f64()
                                    .is_some_and(|d| d <= 1e-4),
                            };
                            if !(own || tied) {
                                lost.push((i, mode));
                            }
                        }
                    }
                    lost
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("searches"))
            .collect()
    });
    eprintln!(
        "searched each question by its own text in both modes in {:.0}s",
        t.elapsed().as_secs_f64()
    );
    assert!(
        lost.is_empty(),
        "not found first by their own text: {lost:?}"
    );
    s.stop();
}

/// A filter broad enough that the vector stages walk the graph admitting only its documents
/// (more than `EXACT_SCAN_MAX` match) instead of scanning them: over the API, with 10,000 real
/// encoded documents. The walk returns the k best matches (checked against the unfiltered
/// ranking filtered by hand), goes through a region of non-matching nearer documents to reach
/// matching ones far from the query, and stays complete while a reindex onto another model runs.
#[test]
fn a_broad_filter_walks_the_graph_returns_the_k_best_matches_and_stays_complete_through_a_reindex()
{
    use kindred::index::hnsw::EXACT_SCAN_MAX;
    const TRAINS: usize = 9_000;
    const PASTA: usize = 1_000;
    const {
        assert!(
            TRAINS - 500 > EXACT_SCAN_MAX,
            "the filters below must be broad"
        )
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(dir.path(), &[], &[]);
    create(&s, "broad");
    let docs: Vec<Value> = (0..TRAINS)
        .map(|i| {
            json!({ "id": format!("train-{i}"), "metadata": { "g": "a", "n": i },
                    "text": format!("Which train goes from station {i} to the airport in city {}?", i % 37) })
        })
        .chain((0..PASTA).map(|i| {
            json!({ "id": format!("pasta-{i}"), "metadata": { "g": "b", "n": 100_000 + i },
                    "text": format!("How long should I boil pasta number {i} for dinner?") })
        }))
        .collect();
    for chunk in docs.chunks(1_000) {
        put(&s, "broad", chunk);
    }

    // The k best matches: the filtered walk's cosines are the first 10 of the unfiltered
    // ranking (deep enough to hold them) once the non-matching documents are dropped.
    let query = "Which train goes from station 17 to the airport in city 17?";
    let range = json!({ "g": "a", "n": { "gte": 500 } });
    let walked = search(
        &s,
        "broad",
        json!({ "text": query, "k": 10, "mode": "cosine", "rerank": "none", "filter": range }),
    );
    assert_eq!(
        walked["filtered"],
        json!({ "matching": TRAINS - 500, "exact": false }),
        "{walked}"
    );
    let unfiltered = search(
        &s,
        "broad",
        json!({ "text": query, "k": 100, "mode": "cosine", "rerank": "none",
                "depths": { "cosine": 100 } }),
    );
    let by_hand: Vec<(String, f64)> = cosine_scores(&unfiltered)
        .into_iter()
        .filter(|(id, _)| {
            id.strip_prefix("train-")
                .and_then(|n| n.parse::<usize>().ok())
                .is_some_and(|n| n >= 500)
        })
        .take(10)
        .collect();
    let got = cosine_scores(&walked);
    assert_eq!(got.len(), 10, "{walked}");
    for ((id, c), (want_id, want)) in got.iter().zip(&by_hand) {
        // Ties between near-duplicates may order ids differently; the scores may not differ.
        assert!((c - want).abs() < 1e-5, "{id} {c} vs {want_id} {want}");
    }
    assert!(
        !got.iter().any(|(id, _)| id == "train-17"),
        "the best document is filtered out"
    );

    // Far matches behind a region of nearer non-matching documents, in every mode.
    let far = |s: &Server| {
        for mode in ["hybrid", "cosine", "w2"] {
            let out = search(
                s,
                "broad",
                json!({ "text": "How long do I boil spaghetti?", "k": 10, "mode": mode,
                        "filter": { "g": "a" } }),
            );
            let ids = hit_ids(&out);
            assert_eq!(ids.len(), 10, "{mode}: {out}");
            assert!(
                ids.iter().all(|id| id.starts_with("train-")),
                "{mode}: {out}"
            );
            assert_eq!(out["filtered"]["matching"], TRAINS, "{mode}");
        }
    };
    far(&s);

    // Through a reindex onto another model (the metadata index and both graphs are rebuilt
    // beside the serving ones, then swapped).
    let url = s.url("/v1/collections/broad/reindex");
    let (st, out) = call(
        "POST",
        &url,
        None,
        Some(&json!({ "model": crate::common::other_model().path })),
    );
    assert_eq!(st, 202, "{out}");
    let mut during = 0;
    let status = loop {
        let (st, status) = call("GET", &url, None, None);
        assert_eq!(st, 200, "{status}");
        if status["state"] != "running" {
            break status;
        }
        far(&s);
        during += 1;
    };
    assert_eq!(status["state"], "done", "{status}");
    eprintln!("{during} rounds of filtered searches ran during the reindex");
    assert!(during > 0, "no search ran during the reindex");
    far(&s);
}
