//! Unit tests of the Milvus backend's pure parts (no server).

use super::*;

#[test]
fn reading_by_key_prefix_returns_every_row_once_past_the_page_limit() {
    let mut rng = crate::score::stats::SplitMix64(5);
    let mut keys: Vec<String> = (0..2000)
        .map(|_| format!("{:016x}{:016x}", rng.next_u64(), rng.next_u64()))
        .collect();
    // A crowded prefix: splitting goes down to whole keys.
    keys.extend((0..40).map(|i| format!("abcdef{i:026x}")));
    let mut queries = 0;
    for page in [2, 7, 100, 5000] {
        let got = by_key_prefix(page, |head| {
            queries += 1;
            // As Milvus answers a capped `like` query: any `page` of the matching rows.
            Ok(keys
                .iter()
                .rev()
                .filter(|k| k.starts_with(head))
                .take(page)
                .cloned()
                .collect())
        })
        .expect("reads");
        let (mut got, mut want) = (got, keys.clone());
        got.sort();
        want.sort();
        assert_eq!(got, want, "page {page}");
    }
    assert!(queries > 4, "full pages were split");
}

#[test]
fn physical_names_are_distinct_and_milvus_safe() {
    assert_eq!(physical("faq"), "kd_faq");
    assert_ne!(physical("a-b"), physical("a_b"));
    assert_ne!(physical("a_hb"), physical("a-b"));
    assert!(physical("x-_y")
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_'));
}

#[test]
fn internal_ids_are_stable_and_fit_int64() {
    assert_eq!(internal_id("q1"), internal_id("q1"));
    assert_ne!(internal_id("q1"), internal_id("q2"));
    assert!(internal_id("anything") <= i64::MAX as u64);
}

#[test]
fn both_servers_words_for_an_unloaded_collection_are_recognised() {
    assert!(not_loaded("collection not loaded[collection=4]"));
    assert!(not_loaded("Milvus server error (code=101, message=Collection 'kindred_meta' is in state 'released'; call load() before search/get/query)"));
    assert!(!not_loaded("collection not found"));
}

#[test]
fn capabilities_and_layouts_follow_the_server_version() {
    let split = Capabilities {
        vector_fields: false,
        full_text: false,
    };
    assert_eq!(capabilities("v2.3.5-lite"), split);
    assert_eq!(
        capabilities("v2.4.17"),
        Capabilities {
            vector_fields: true,
            full_text: false
        }
    );
    assert_eq!(
        capabilities("v2.5.4"),
        Capabilities {
            vector_fields: true,
            full_text: true
        }
    );
    assert_eq!(
        capabilities("2.6.0"),
        Capabilities {
            vector_fields: true,
            full_text: true
        }
    );
    assert_eq!(
        capabilities("milvus_lite-3.2.2"),
        Capabilities {
            vector_fields: true,
            full_text: true
        }
    );
    assert_eq!(capabilities("milvus_lite-2.4.10"), split);
    assert_eq!(capabilities("unknown"), split);
    assert_eq!(Layout::for_server(capabilities("v2.3.5")), Layout::Split);
    assert_eq!(Layout::for_server(capabilities("v2.4.0")), Layout::One);
    assert_eq!(Layout::for_server(capabilities("v2.6.1")), Layout::FullText);
    for l in [Layout::Split, Layout::One, Layout::FullText] {
        assert_eq!(Layout::from_name(l.name()), Some(l));
    }
}

#[test]
fn lexical_terms_keep_bigrams_one_token_and_stop_between_terms() {
    assert_eq!(lexical_terms("How do I?", 1000), "how do i how_do do_i");
    assert_eq!(lexical_terms("How do I?", 9), "how do i");
    assert_eq!(lexical_terms("  ?! ", 100), "");
}

#[test]
fn versions_before_2_3_are_refused() {
    assert!(supported("v2.3.5-lite"));
    assert!(supported("2.6.1"));
    assert!(supported("v3.2.2"));
    assert!(!supported("v2.2.16"));
    assert!(supported("unknown"));
}

#[test]
fn filters_become_milvus_expressions() {
    let raw =
        json!({"lang": "en", "year": {"gte": 2020, "lt": 2024.5}, "tag": {"in": ["a", "b\"c"]}});
    let f = Filter::parse(raw.as_object().unwrap()).unwrap();
    let e = expression(&f, "meta").unwrap();
    assert!(
        e.contains(r#"(meta["lang"] == "en" or json_contains_any(meta["lang"], ["en"]))"#),
        "{e}"
    );
    assert!(
        e.contains(r#"(meta["year"] >= 2020.0 and meta["year"] < 2024.5)"#),
        "{e}"
    );
    assert!(e.contains(r#"["a","b\"c"]"#), "{e}");
    assert!(
        e.contains(r#"(meta["tag"] == "a" or meta["tag"] == "b\"c" or json_contains_any("#),
        "{e}"
    );
    assert_eq!(expression(&Filter::default(), "meta"), None);
}
