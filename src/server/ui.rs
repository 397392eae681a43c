//! The admin web UI: the files of `web/`, embedded in the binary at build time and served at
//! `/ui/` with a strict Content-Security-Policy (scripts and styles from this origin only, no
//! inline code), so one binary is the whole deployment.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

use super::error::ApiError;

/// Every file of `web/` the UI needs: (name, content type, bytes).
pub const FILES: &[(&str, &str, &[u8])] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("../../web/index.html"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_bytes!("../../web/style.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../web/app.js"),
    ),
    (
        "api.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../web/api.js"),
    ),
    (
        "dom.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../web/dom.js"),
    ),
    (
        "explain.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../web/explain.js"),
    ),
];

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `GET /` and `GET /ui`: to the UI.
pub async fn redirect() -> Redirect {
    Redirect::to("/ui/")
}

/// `GET /ui/`: the page.
pub async fn index() -> Response {
    serve("index.html")
}

/// `GET /ui/{file}`: a script or style sheet.
pub async fn file(Path(name): Path<String>) -> Response {
    serve(&name)
}

fn serve(name: &str) -> Response {
    match FILES.iter().find(|(n, _, _)| *n == name) {
        Some((_, mime, bytes)) => (
            [
                (header::CONTENT_TYPE, *mime),
                (header::CONTENT_SECURITY_POLICY, CSP),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
                (header::REFERRER_POLICY, "no-referrer"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            *bytes,
        )
            .into_response(),
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            "route_not_found",
            format!("no UI file {name:?}"),
        )
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::FILES;

    #[test]
    fn every_web_file_is_embedded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("web");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .expect("web/ exists")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n != "README.md")
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = FILES.iter().map(|(n, _, _)| n.to_string()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded, "add new web/ files to server::ui::FILES");
    }
}
