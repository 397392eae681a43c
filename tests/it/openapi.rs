//! The OpenAPI document as an API user meets it: served by a real server, accepted by
//! openapi-spec-validator, and good enough for a generated client (openapi-python-client) to
//! create a collection, write documents, search and ask for duplicates
//! (scripts/openapi-client.sh installs both tools from PyPI into target/openapi-venv).

use std::process::Command;

use crate::server::Server;

#[test]
fn a_client_generated_from_the_openapi_document_runs_a_search() {
    let data = tempfile::tempdir().expect("tempdir");
    let server = Server::start(data.path(), &[], &[]);
    let doc = ureq::get(&server.url("/openapi.json"))
        .call()
        .expect("GET /openapi.json")
        .into_string()
        .expect("text");
    let path = data.path().join("openapi.json");
    std::fs::write(&path, doc).expect("written");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash")
        .arg(root.join("scripts/openapi-client.sh"))
        .arg(&path)
        .arg(server.url(""))
        .output()
        .expect("runs scripts/openapi-client.sh");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains(": OK"), "validator: {stdout}");
    assert!(stdout.contains("generated client: search ok"), "{stdout}");
    server.stop();
}
