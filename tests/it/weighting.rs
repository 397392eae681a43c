//! RCMD token weights and explanations over HTTP, on a real server with the real model:
//! `weights: idf` re-scores and re-orders the RCMD stage and is reported in explanations; bad
//! weights are refused; `POST /v1/explain` answers the lexical similarity, P(duplicate) and
//! which vectors it used, in or outside a collection.

use serde_json::{json, Value};

use crate::server::{call, collection_with, Server};

const DOCS: [(&str, &str); 10] = [
    ("pw-1", "How do I reset my password?"),
    (
        "pw-2",
        "I forgot my password, how can I get back into my account?",
    ),
    ("email", "How can I change the email address on my account?"),
    ("refund", "How do I get a refund for my order?"),
    ("cards", "Which payment methods do you accept?"),
    ("ship", "How long does shipping take?"),
    ("broken", "My package arrived damaged, what should I do?"),
    ("cancel", "How do I cancel my subscription?"),
    ("name", "How do I change my account name?"),
    ("delete", "How do I delete my account?"),
];

fn code(e: &Value) -> &str {
    e["error"]["code"].as_str().unwrap_or("")
}

fn message(e: &Value) -> &str {
    e["error"]["message"].as_str().unwrap_or("")
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Each hit's id and RCMD score (scores to 1e-5), in order.
fn summary(out: &Value) -> Vec<(String, i64)> {
    out["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| {
            let id = h["id"].as_str().expect("id").to_string();
            (id, (f(&h["stages"]["rcmd"]["score"]) * 1e5).round() as i64)
        })
        .collect()
}

/// The hit with `id` in a list of hits.
fn hit<'a>(hits: &'a Value, id: &str) -> &'a Value {
    hits.as_array()
        .expect("hits")
        .iter()
        .find(|h| h["id"] == id)
        .unwrap_or_else(|| panic!("no hit {id} in {hits}"))
}

#[test]
fn idf_weights_and_explanations_over_http() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(dir.path(), &[], &[]);
    collection_with(&s, "faq", &DOCS);

    // Search, uniform (the default) and idf: same candidates, the RCMD stage re-scored.
    let search = s.url("/v1/collections/faq/search");
    let query = "How can I reset the password of my account?";
    let ask = |weights: Option<&str>| {
        let mut body = json!({ "text": query, "k": 10, "explain": true });
        if let Some(w) = weights {
            body["weights"] = json!(w);
        }
        let (st, out) = call("POST", &search, None, Some(&body));
        assert_eq!(st, 200, "{out}");
        out
    };
    let (default, uniform, idf) = (ask(None), ask(Some("uniform")), ask(Some("idf")));
    assert_eq!(
        summary(&default),
        summary(&uniform),
        "uniform is the default"
    );
    let mut changed = 0;
    for h in idf["hits"].as_array().expect("hits") {
        let e = &h["explanation"];
        assert_eq!(e["weighting"], "idf", "{e}");
        assert_eq!(e["vectors"], "stored_int8");
        // The explanation repeats the score it explains.
        let (explained, scored) = (f(&e["score"]), f(&h["stages"]["rcmd"]["score"]));
        assert!((explained - scored).abs() < 1e-4, "{explained} vs {scored}");
        let u = hit(&uniform["hits"], h["id"].as_str().expect("id"));
        assert_eq!(u["explanation"]["weighting"], "uniform");
        assert_eq!(u["explanation"]["vectors"], "stored_int8");
        if (f(&h["stages"]["rcmd"]["score"]) - f(&u["stages"]["rcmd"]["score"])).abs() > 1e-3 {
            changed += 1;
        }
        // P(duplicate) reads uniform RCMD whatever the weighting.
        assert!((f(&h["probability"]) - f(&u["probability"])).abs() < 1e-6);
        assert_eq!(h["stages"]["cosine"], u["stages"]["cosine"]);
    }
    assert!(
        changed >= 5,
        "idf weights change most RCMD scores: {:?}",
        summary(&idf)
    );
    // The hits are ordered by the weighted score, and ranked by it.
    let scores: Vec<f64> = idf["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| f(&h["score"]))
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    assert_eq!(idf["hits"][0]["stages"]["rcmd"]["rank"], 1);

    // Duplicates take the weights too; the verdict still follows P(duplicate).
    let duplicates = s.url("/v1/collections/faq/duplicates");
    let (st, out) = call(
        "POST",
        &duplicates,
        None,
        Some(&json!({ "text": query, "weights": "idf" })),
    );
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["matches"][0]["explanation"]["weighting"], "idf");
    assert_eq!(out["matches"][0]["explanation"]["vectors"], "stored_int8");

    // Unknown weights are refused, naming the accepted ones.
    for url in [&search, &duplicates] {
        let (st, e) = call(
            "POST",
            url,
            None,
            Some(&json!({ "text": query, "weights": "bm25" })),
        );
        assert_eq!((st, code(&e)), (422, "invalid_request"), "{e}");
        assert!(
            message(&e).contains("uniform") && message(&e).contains("idf"),
            "{e}"
        );
    }

    // Explain outside a collection: fresh vectors, lexical and P(duplicate) in range.
    let explain = s.url("/v1/explain");
    let pair = json!({ "a": query, "b": DOCS[0].1 });
    let (st, plain) = call("POST", &explain, None, Some(&pair));
    assert_eq!(st, 200, "{plain}");
    assert_eq!(plain["explanation"]["vectors"], "fresh_f32");
    assert_eq!(plain["explanation"]["weighting"], "uniform");
    for field in ["lexical", "probability"] {
        let v = f(&plain[field]);
        assert!((0.0..=1.0).contains(&v) && v > 0.0, "{field}: {plain}");
    }
    assert!(plain["calibration"].is_string(), "{plain}");
    // idf needs a collection's IDF.
    let mut no_collection = pair.clone();
    no_collection["weights"] = json!("idf");
    let (st, e) = call("POST", &explain, None, Some(&no_collection));
    assert_eq!((st, code(&e)), (422, "invalid_request"), "{e}");
    assert!(message(&e).contains("\"collection\""), "{e}");
    let mut bad = pair.clone();
    bad["weights"] = json!("tf");
    let (st, e) = call("POST", &explain, None, Some(&bad));
    assert_eq!((st, code(&e)), (422, "invalid_request"), "{e}");
    let mut nowhere = pair.clone();
    nowhere["collection"] = json!("nope");
    let (st, e) = call("POST", &explain, None, Some(&nowhere));
    assert_eq!((st, code(&e)), (404, "collection_not_found"), "{e}");

    // Explain in the collection: its IDF and calibration, so it agrees with the search's
    // hit up to the stored vectors' int8 rounding; idf weights change the score.
    let mut in_faq = pair.clone();
    in_faq["collection"] = json!("faq");
    let (st, faq) = call("POST", &explain, None, Some(&in_faq));
    assert_eq!(st, 200, "{faq}");
    let h = hit(&uniform["hits"], DOCS[0].0);
    assert!(
        (f(&faq["lexical"]) - f(&h["stages"]["lexical"]["score"])).abs() < 1e-4,
        "{faq} vs {h}"
    );
    assert!((f(&faq["explanation"]["score"]) - f(&h["stages"]["rcmd"]["score"])).abs() < 5e-3);
    assert!((f(&faq["probability"]) - f(&h["probability"])).abs() < 5e-3);
    assert_eq!(faq["calibration"], uniform["calibration"]);
    in_faq["weights"] = json!("idf");
    let (st, faq_idf) = call("POST", &explain, None, Some(&in_faq));
    assert_eq!(st, 200, "{faq_idf}");
    assert_eq!(faq_idf["explanation"]["weighting"], "idf");
    assert_eq!(faq_idf["explanation"]["vectors"], "fresh_f32");
    assert!(
        (f(&faq_idf["explanation"]["score"]) - f(&faq["explanation"]["score"])).abs() > 1e-3,
        "{faq_idf}"
    );
    assert_eq!(faq_idf["probability"], faq["probability"]);
    let hi = hit(&idf["hits"], DOCS[0].0);
    assert!(
        (f(&faq_idf["explanation"]["score"]) - f(&hi["stages"]["rcmd"]["score"])).abs() < 5e-3,
        "{faq_idf} vs {hi}"
    );
    s.stop();
}
