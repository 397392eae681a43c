//! The `kindred` binary as a user runs it.

use std::process::Command;

use crate::common::model_dir;

fn kindred() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kindred"));
    cmd.env("KINDRED_MODEL", &model_dir().path)
        .env_remove("RUST_LOG");
    cmd
}

/// Runs kindred with `args`; asserts success and returns stdout.
fn stdout_of(args: &[&str]) -> Vec<u8> {
    let out = kindred().args(args).output().expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn encode_json_prints_tokens_sentence_and_intent() {
    let stdout = stdout_of(&["encode", "How do I learn Rust?", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&stdout).expect("stdout is JSON");
    let t = &v["texts"][0];
    assert_eq!(t["text"], "How do I learn Rust?");
    assert_eq!(t["tokens"][4]["text"], "rust");
    assert_eq!(t["tokens"][4]["start"], 15);
    assert_eq!(t["tokens"][4]["end"], 19);
    assert_eq!(t["truncated"], false);
    assert_eq!(t["sentence"].as_array().expect("array").len(), 384);
    assert_eq!(t["intent"]["mu"].as_array().expect("array").len(), 384);
    assert_eq!(t["intent"]["sigma"].as_array().expect("array").len(), 384);
    assert!(v["model"]["fingerprint"]
        .as_str()
        .expect("str")
        .starts_with("sha256:"));
}

#[test]
fn bad_model_dir_fails_with_a_message_and_exit_code_2() {
    let out = kindred()
        .args(["--model", "/nonexistent/model", "encode", "hi"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/model") && err.contains("--model DIR"),
        "{err}"
    );
}

#[test]
fn empty_text_fails_with_a_message() {
    let out = kindred().args(["encode", "  "]).output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("empty or whitespace"));
}

#[test]
fn a_file_without_texts_fails_with_a_message() {
    // Before, `encode --file EMPTY` printed nothing (and `--stats` a rate of 0) with status 0.
    let empty = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(empty.path(), "\n   \n").expect("writes");
    for extra in [&[][..], &["--stats"][..]] {
        let out = kindred()
            .args(["encode", "--file"])
            .arg(empty.path())
            .args(extra)
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("nothing to encode") && err.contains(&*empty.path().to_string_lossy()),
            "{err}"
        );
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn ingesting_a_missing_file_creates_nothing_and_names_the_file_once() {
    // Before, `ingest --create` made the collection and then failed to open the file, leaving
    // an empty collection behind; the error also printed the I/O reason twice.
    let data = tempfile::tempdir().expect("tempdir");
    let missing = data.path().join("questions.jsonl");
    let out = kindred()
        .arg("--data")
        .arg(data.path().join("db"))
        .args(["ingest", "--create", "--collection", "faq"])
        .arg(&missing)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&*missing.to_string_lossy()), "{err}");
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
    assert!(!err.contains("created collection"), "{err}");
    let list = kindred()
        .arg("--data")
        .arg(data.path().join("db"))
        .args(["collection", "list"])
        .output()
        .expect("runs");
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(list.status.success() && !listed.contains("faq"), "{listed}");
}

#[test]
fn fetch_without_python_says_what_to_install() {
    let home = tempfile::tempdir().expect("tempdir");
    let empty_path = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_kindred"))
        .args(["model", "fetch"])
        .env_remove("KINDRED_MODEL")
        .env("KINDRED_HOME", home.path())
        .env("PATH", empty_path.path())
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("python3 is not on PATH"), "{err}");
    assert!(
        err.contains("apt-get install python3 python3-pip") && err.contains("--model DIR"),
        "{err}"
    );
}

#[test]
fn demo_answers_sample_questions() {
    let data = tempfile::tempdir().expect("tempdir");
    let data = data.path().to_str().expect("utf-8 path");
    let args = [
        "--data",
        data,
        "demo",
        "--no-serve",
        "I can't remember my password",
        "-k",
        "1",
    ];
    let stdout = stdout_of(&args);
    let stdout = String::from_utf8_lossy(&stdout);
    assert!(
        stdout.contains("forgot my password") || stdout.contains("reset my password"),
        "{stdout}"
    );
}

#[test]
fn demo_on_a_collection_of_the_other_precision_uses_the_collections_own() {
    // A demo collection made in fp32 (as every collection was before int8 became the
    // default) is searched in fp32 by a later default (int8) demo, not refused.
    let data = tempfile::tempdir().expect("tempdir");
    let data = data.path().to_str().expect("utf-8 path");
    let run = |extra: &[&str]| {
        let mut args = vec!["--data", data];
        args.extend_from_slice(extra);
        args.extend([
            "demo",
            "--no-serve",
            "I can't remember my password",
            "-k",
            "1",
        ]);
        String::from_utf8_lossy(&stdout_of(&args)).to_string()
    };
    let first = run(&["--precision", "fp32"]);
    let again = run(&[]);
    assert!(again.contains("password"), "{again}");
    assert_eq!(first, again, "the same collection answers the same way");
}

#[test]
fn explain_json_adds_up_and_aligns_the_shared_words() {
    let stdout = stdout_of(&[
        "explain",
        "How do I learn Rust quickly?",
        "fastest way to learn Rust?",
        "--json",
    ]);
    let e: kindred::score::Explanation = serde_json::from_slice(&stdout).expect("Explanation JSON");
    let total: f32 = e.token_contributions.values.iter().sum();
    assert!((total - e.score).abs() < 1e-5);
    assert!((e.score - 0.5 * (e.forward + e.backward)).abs() < 1e-6);
    let rust = e
        .word_alignments
        .iter()
        .find(|l| e.a.words[l.a].text == "Rust")
        .expect("Rust is aligned");
    assert_eq!(e.b.words[rust.b].text, "Rust");
    assert_eq!(e.token_contributions.rows, e.a.tokens.len());
}

#[test]
fn explain_prints_scores_alignments_and_heatmap() {
    let out = kindred()
        .args(["explain", "How do I learn Rust?", "learning Rust"])
        .env("NO_COLOR", "1")
        .output()
        .expect("runs");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "s_RCMD",
        "a→b",
        "b→a",
        "word alignments",
        "Rust <-> Rust",
        "Σ contributions",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    assert!(
        !text.contains('\x1b'),
        "no colour codes when NO_COLOR is set or stdout is a pipe"
    );
}

/// `eval pairs --weights idf --scores FILE`: every pair's scores as TSV or JSON Lines.
#[test]
fn eval_pairs_writes_every_pairs_scores() {
    let dir = tempfile::tempdir().expect("tempdir");
    let head = |rel: &str, name: &str| {
        let text = std::fs::read_to_string(crate::common::shared_data(rel)).expect("reads");
        let path = dir.path().join(name);
        let lines: Vec<&str> = text.lines().take(40).collect();
        std::fs::write(&path, lines.join("\n") + "\n").expect("writes");
        path.to_str().expect("utf-8").to_string()
    };
    let (dev, test) = (
        head("qqp_bimpm/dev.tsv", "dev.tsv"),
        head("qqp_bimpm/test.tsv", "test.tsv"),
    );
    let path = |name: &str| dir.path().join(name).to_str().expect("utf-8").to_string();
    let (tsv, jsonl, report) = (path("s.tsv"), path("s.jsonl"), path("r.json"));
    for scores in [&tsv, &jsonl] {
        stdout_of(&[
            "eval",
            "pairs",
            "--dev",
            &dev,
            "--test",
            &test,
            "--weights",
            "idf",
            "--scores",
            scores,
            "--out",
            &report,
        ]);
    }
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).expect("report")).expect("JSON");
    assert_eq!(r["weights"], "idf");

    let text = std::fs::read_to_string(&tsv).expect("scores");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1 + 80, "a header and one line per pair");
    assert_eq!(lines[0], kindred::eval::scores::TSV_HEADER);
    let first: Vec<&str> = lines[1].split('\t').collect();
    assert_eq!((first[0], first[1]), ("dev", "0"));
    assert_eq!(lines[41].split('\t').next(), Some("test"));

    let rows: Vec<serde_json::Value> = std::fs::read_to_string(&jsonl)
        .expect("scores")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(rows.len(), 80);
    for row in &rows {
        let get = |k: &str| row[k].as_f64().unwrap_or_else(|| panic!("{k}: {row}"));
        for k in [
            "cosine",
            "rcmd_forward",
            "rcmd_backward",
            "rcmd",
            "lexical",
            "probability",
        ] {
            assert!((-1.0..=1.0).contains(&get(k)), "{k}: {row}");
        }
        assert!(get("w2") >= 0.0);
        assert!((get("rcmd") - (get("rcmd_forward") + get("rcmd_backward")) / 2.0).abs() < 1e-5);
        assert!(row["label"] == 0 || row["label"] == 1, "{row}");
    }

    let out = kindred()
        .args([
            "eval",
            "pairs",
            "--dev",
            &dev,
            "--test",
            &test,
            "--weights",
            "tf",
        ])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("uniform or idf"), "{err}");
}

#[test]
fn a_reader_that_stops_early_ends_the_command_quietly() {
    // `kindred encode --json … | head -c 100`: the reader closes the pipe long before the
    // 2 MB of JSON are written. Before, the next print panicked ("failed printing to stdout:
    // Broken pipe") with a backtrace and exit status 101; now the command ends as `cat` does.
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let texts: Vec<String> = (0..50)
        .map(|i| format!("How do I learn Rust, part {i}?"))
        .collect();
    let mut child = kindred()
        .args([
            "encode",
            "--json",
            "--token-vectors",
            "--precision",
            "fp32",
            "--",
        ])
        .args(&texts)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    let mut head = [0u8; 100];
    child
        .stdout
        .take()
        .expect("stdout")
        .read_exact(&mut head)
        .expect("the first 100 bytes");
    let out = child.wait_with_output().expect("ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {err}",
        out.status
    );
}
