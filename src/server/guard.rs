//! Browser safety: what a hostile web page could make a visitor's browser send to a kindred on
//! that visitor's machine is refused before any handler runs.
//!
//! Owns three checks, each a pure function of the request's headers:
//! - **Host** (DNS rebinding): a server listening on loopback answers only requests addressed
//!   to a loopback name (`localhost`, `127.0.0.1`, `[::1]`, any port) or one listed in
//!   `allowed_hosts`, so `evil.example` resolving to 127.0.0.1 reaches nothing.
//! - **Origin** (cross-site writes): a request that changes something (any method but GET,
//!   HEAD and OPTIONS) from another origin (`Sec-Fetch-Site: cross-site` or `same-site`, or an
//!   `Origin` that is neither this server's Host nor a name in `allowed_hosts`) is refused.
//! - **Content type**: an allowlist. A body must say `application/json` (parameters such as
//!   `charset` allowed) or an NDJSON type (`application/x-ndjson`, `application/jsonl`); a file
//!   upload (`POST …/ingest`) may carry any type but those a page may send without asking the
//!   server first (`text/plain`, form types). No type, or any other, is refused, so a
//!   cross-origin "simple request" cannot carry JSON in and a near miss (`application/jsonx`,
//!   a list of types) is not read as JSON.
//!
//! Also one protocol check: a request with more than one `Host` header is 400 (RFC 9112
//! §3.2), since the two could name different servers.

use axum::http::{header, HeaderMap, Method, StatusCode};

use super::error::ApiError;

/// The request's headers and method, checked against where the server listens.
pub fn check(
    (method, path): (&Method, &str),
    headers: &HeaderMap,
    authority: Option<&str>,
    loopback: bool,
    allowed_hosts: &[String],
) -> Result<(), ApiError> {
    if headers.get_all(header::HOST).iter().nth(1).is_some() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the request has more than one Host header; send exactly one (RFC 9112 section 3.2)",
        ));
    }
    let host = authority.or_else(|| headers.get(header::HOST).and_then(|v| v.to_str().ok()));
    if loopback {
        check_host(host, allowed_hosts)?;
    }
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    check_origin(headers, host, allowed_hosts)?;
    check_content_type(headers, is_upload(method, path))
}

/// A file upload (`POST /v1/collections/{c}/ingest`): its body is a file of any type.
fn is_upload(method: &Method, path: &str) -> bool {
    *method == Method::POST && path.starts_with("/v1/collections/") && path.ends_with("/ingest")
}

/// The media type of a `Content-Type` value, lower case, without parameters (`""`: none).
pub fn essence(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Whether `essence` is an NDJSON type.
pub fn is_ndjson_type(essence: &str) -> bool {
    matches!(essence, "application/x-ndjson" | "application/jsonl")
}

/// The host part of a `Host` value: `[::1]:7700` → `::1`, `localhost:80` → `localhost`.
fn host_name(value: &str) -> &str {
    let v = value.trim();
    if let Some(rest) = v.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    v.rsplit_once(':').map_or(v, |(h, port)| {
        if port.chars().all(|c| c.is_ascii_digit()) {
            h
        } else {
            v
        }
    })
}

fn is_loopback_name(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn check_host(host: Option<&str>, allowed: &[String]) -> Result<(), ApiError> {
    let Some(host) = host else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "missing_host",
            "the request has no Host header; HTTP/1.1 requires one",
        ));
    };
    let name = host_name(host);
    if is_loopback_name(name) || allowed.iter().any(|a| a.eq_ignore_ascii_case(name)) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "unexpected_host",
        format!(
            "Host {:?} is not a loopback name; a server listening on loopback answers only localhost, 127.0.0.1 and [::1] (a guard against DNS rebinding). Behind a proxy that keeps the Host header, add the name to allowed_hosts in the configuration",
            truncate(host)
        ),
    ))
}

fn check_origin(
    headers: &HeaderMap,
    host: Option<&str>,
    allowed: &[String],
) -> Result<(), ApiError> {
    let refuse = |why: String| {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_origin",
            format!("{why}: writes from another web origin are refused (a guard against cross-site requests); call the API from a script, curl or kindred's own UI"),
        ))
    };
    let site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if site.eq_ignore_ascii_case("cross-site") || site.eq_ignore_ascii_case("same-site") {
        return refuse(format!("Sec-Fetch-Site is {site}"));
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("null");
    // `scheme://host[:port]`; it must name this server as the Host header does, or a name in
    // `allowed_hosts` (a proxy that rewrites Host keeps the browser's Origin).
    let authority = origin.split_once("://").map(|(_, a)| a);
    match (authority, host) {
        (Some(a), Some(h)) if a.eq_ignore_ascii_case(h.trim()) => Ok(()),
        (Some(a), _) if allowed.iter().any(|n| n.eq_ignore_ascii_case(host_name(a))) => Ok(()),
        _ => refuse(format!(
            "the request comes from origin {:?}",
            truncate(origin)
        )),
    }
}

fn check_content_type(headers: &HeaderMap, upload: bool) -> Result<(), ApiError> {
    let has_body = headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0");
    if !has_body {
        return Ok(());
    }
    let essence = essence(headers);
    let simple = matches!(
        essence.as_str(),
        "" | "text/plain" | "application/x-www-form-urlencoded" | "multipart/form-data"
    );
    let json = essence == "application/json" || is_ndjson_type(&essence);
    if json || (upload && !simple) {
        return Ok(());
    }
    let given = if essence.is_empty() {
        "no Content-Type".to_string()
    } else {
        format!("Content-Type {}", truncate(&essence))
    };
    let why = if simple {
        ". Plain-text and form bodies are refused so that no web page can write here"
    } else {
        ""
    };
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        format!("a body with {given}; send Content-Type: application/json (application/x-ndjson for a document stream; a file upload may be application/octet-stream){why}"),
    ))
}

fn truncate(s: &str) -> String {
    s.chars().take(100).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn code(method: Method, pairs: &[(&str, &str)], loopback: bool) -> Option<&'static str> {
        check(
            (&method, "/v1/collections/faq/search"),
            &headers(pairs),
            None,
            loopback,
            &["kindred.internal".into()],
        )
        .err()
        .map(|e| e.code)
    }

    #[test]
    fn two_host_headers_are_a_bad_request() {
        let mut h = headers(&[("host", "localhost:7700")]);
        h.append(header::HOST, "evil.example".parse().unwrap());
        let e = check((&Method::GET, "/v1/collections"), &h, None, true, &[]).unwrap_err();
        assert_eq!((e.status, e.code), (StatusCode::BAD_REQUEST, "bad_request"));
    }

    #[test]
    fn loopback_servers_answer_only_loopback_hosts() {
        for host in [
            "localhost:7700",
            "127.0.0.1:7700",
            "[::1]:7700",
            "LOCALHOST",
            "a.localhost",
            "kindred.internal:80",
        ] {
            assert_eq!(code(Method::GET, &[("host", host)], true), None, "{host}");
        }
        for host in ["evil.example:7700", "127.0.0.1.evil.example", "[::2]:1"] {
            assert_eq!(
                code(Method::GET, &[("host", host)], true),
                Some("unexpected_host"),
                "{host}"
            );
        }
        // A server on a public address has keys; its Host is not checked.
        assert_eq!(
            code(Method::GET, &[("host", "kindred.example.com")], false),
            None
        );
        assert_eq!(code(Method::GET, &[], true), Some("missing_host"));
    }

    #[test]
    fn cross_origin_writes_are_refused_and_reads_are_not() {
        let json = ("content-type", "application/json");
        let len = ("content-length", "2");
        let host = ("host", "127.0.0.1:7700");
        let same = ("origin", "http://127.0.0.1:7700");
        assert_eq!(code(Method::POST, &[host, json, len, same], true), None);
        assert_eq!(code(Method::POST, &[host, json, len], true), None);
        let other = ("origin", "http://evil.example");
        assert_eq!(
            code(Method::POST, &[host, json, len, other], true),
            Some("cross_origin")
        );
        assert_eq!(
            code(Method::DELETE, &[host, other], true),
            Some("cross_origin")
        );
        assert_eq!(
            code(Method::POST, &[host, json, len, ("origin", "null")], true),
            Some("cross_origin")
        );
        let site = ("sec-fetch-site", "cross-site");
        assert_eq!(
            code(Method::POST, &[host, json, len, site], true),
            Some("cross_origin")
        );
        assert_eq!(code(Method::GET, &[host, other, site], true), None);
        // A proxy rewrote Host; the browser's origin is an allowed name.
        let proxied = ("origin", "https://kindred.internal");
        assert_eq!(code(Method::POST, &[host, json, len, proxied], true), None);
    }

    #[test]
    fn bodies_a_page_could_send_unasked_are_refused() {
        let host = ("host", "localhost:7700");
        let len = ("content-length", "10");
        for ty in [
            "text/plain",
            "text/plain;charset=UTF-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
        ] {
            assert_eq!(
                code(Method::POST, &[host, len, ("content-type", ty)], true),
                Some("unsupported_media_type"),
                "{ty}"
            );
        }
        assert_eq!(
            code(Method::POST, &[host, len], true),
            Some("unsupported_media_type")
        );
        for ty in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
            "application/x-ndjson",
            "application/jsonl",
        ] {
            assert_eq!(
                code(Method::POST, &[host, len, ("content-type", ty)], true),
                None,
                "{ty}"
            );
        }
        // An allowlist: near misses and lists of types are not JSON (before: accepted).
        for ty in [
            "application/jsonx",
            "text/plain, application/json",
            "application/octet-stream",
            "text/csv",
            "application/xml",
        ] {
            assert_eq!(
                code(Method::POST, &[host, len, ("content-type", ty)], true),
                Some("unsupported_media_type"),
                "{ty}"
            );
        }
        // A file upload carries a file of any type, but not one a page could send unasked.
        let upload = |ty: &str| {
            check(
                (&Method::POST, "/v1/collections/faq/ingest"),
                &headers(&[host, len, ("content-type", ty)]),
                None,
                true,
                &[],
            )
            .err()
            .map(|e| e.code)
        };
        assert_eq!(upload("application/octet-stream"), None);
        assert_eq!(upload("text/csv"), None);
        assert_eq!(upload("text/plain"), Some("unsupported_media_type"));
        // No body, no type needed (DELETE, a bodiless POST).
        assert_eq!(
            code(Method::POST, &[host, ("content-length", "0")], true),
            None
        );
    }
}
