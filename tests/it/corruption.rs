//! Damaged files under a data directory, as bad luck or a careless copy leaves them: the sled
//! store cut at many lengths, bytes flipped through it, its `conf` and snapshot damaged or
//! gone, the store emptied under its indexes, index meta files and the store-owner file
//! garbled. For each, the real binary (`kindred collection list` and `kindred search`) must
//! finish (no hang), never crash (exit code 101 is a panic), and either answer or refuse with
//! exit code 2 and a message saying what to do. Index files themselves: `hostile` (a real
//! server) and the `index::graph` unit tests (every truncation and byte of a graph).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kindred::db::{Database, NewDocument};
use kindred::store::{CollectionSettings, Durability};

use crate::common::{encoder, model_dir, upsert};

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read").flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if src.is_dir() {
            copy_dir(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).expect("copy");
        }
    }
}

/// Runs `kindred --data DATA ARGS` with a deadline: (exit code, stdout, stderr).
fn kindred(data: &Path, args: &[&str]) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kindred"))
        .arg("--data")
        .arg(data)
        .args(args)
        .env("KINDRED_MODEL", &model_dir().path)
        .env("RUST_BACKTRACE", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn kindred");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("kindred {args:?} on {} hung for 60 s", data.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

struct Outcome {
    answered: usize,
    refused: usize,
}

/// Both commands on a damaged copy: each answers (exit 0, and a search finds the document
/// it names) or refuses with exit 2 and a fix. Never a panic or a hang.
fn check(what: &str, data: &Path, out: &mut Outcome) {
    for args in [
        &["collection", "list"][..],
        &[
            "search",
            "-c",
            "faq",
            "-k",
            "1",
            "question number 17 about resetting",
        ][..],
    ] {
        let (code, stdout, stderr) = kindred(data, args);
        eprintln!("{what}: {} -> exit {code}", args[0]);
        // A panic caught inside sled is a clean refusal, not a panic message and a
        // backtrace before it (RUST_BACKTRACE is 1 here, so one would show).
        assert!(
            !stderr.contains("panicked at") && !stderr.contains("stack backtrace"),
            "{what}: {args:?} printed a panic: {stderr}"
        );
        match code {
            0 => {
                out.answered += 1;
                if args[0] == "collection" {
                    assert!(
                        stdout.contains("faq"),
                        "{what}: {args:?} answered {stdout:?}"
                    );
                }
            }
            2 => {
                out.refused += 1;
                let last = stderr.lines().last().unwrap_or_default();
                assert!(
                    last.starts_with("error: ")
                        && (last.contains("restore") || last.contains("remove")),
                    "{what}: {args:?} refused without saying what to do: {stderr}"
                );
            }
            _ => panic!("{what}: {args:?} exited {code}: {stderr}"),
        }
    }
}

/// A small real store with saved indexes, made through the library with the real model.
fn pristine(root: &Path) -> PathBuf {
    let data = root.join("pristine");
    let db = Database::open(&data, Durability::Flush).expect("open");
    db.create_collection(
        "faq",
        &CollectionSettings::for_model(encoder().identity().clone()),
    )
    .expect("create");
    let docs: Vec<NewDocument> = (0..120)
        .map(|i| NewDocument {
            id: format!("q{i}"),
            text: format!("How do I reset the password of question number {i} about resetting?"),
            metadata: serde_json::json!({ "n": i }),
            context: Vec::new(),
        })
        .collect();
    for chunk in docs.chunks(40) {
        upsert(&db, "faq", encoder(), chunk.to_vec()).expect("upsert");
    }
    assert_eq!(db.checkpoint().expect("checkpoint"), 1);
    drop(db);
    data
}

#[test]
fn damaged_data_directories_are_answered_or_refused_never_a_crash_or_a_hang() {
    let root = tempfile::tempdir().expect("tempdir");
    let pristine = pristine(root.path());
    let mut out = Outcome {
        answered: 0,
        refused: 0,
    };
    check("the undamaged copy", &pristine, &mut out);
    assert_eq!((out.answered, out.refused), (2, 0));

    let mut n = 0;
    let mut damaged = |what: String, f: &dyn Fn(&Path)| {
        n += 1;
        let data = root.path().join(format!("case{n}"));
        copy_dir(&pristine, &data);
        f(&data);
        check(&what, &data, &mut out);
        std::fs::remove_dir_all(&data).expect("clean up");
    };
    let db_file = |d: &Path| d.join("store").join("db");
    let len = std::fs::metadata(db_file(&pristine)).expect("db").len();

    // sled's log cut short (before: a cut in its second half panicked inside sled, exit 101;
    // at 95 % `collection list` spun forever on a page it could not read).
    for pct in [0u64, 1, 10, 30, 50, 60, 70, 80, 90, 95, 97, 99] {
        damaged(format!("store/db cut to {pct} %"), &|d: &Path| {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(db_file(d))
                .expect("open db");
            f.set_len(len * pct / 100).expect("truncate");
        });
    }
    // Bytes flipped through it.
    for i in 1..=12u64 {
        let at = len * i / 13;
        damaged(format!("store/db byte {at} flipped"), &|d: &Path| {
            let mut bytes = std::fs::read(db_file(d)).expect("read");
            bytes[at as usize] ^= 0xa5;
            std::fs::write(db_file(d), bytes).expect("write");
        });
    }
    // Its other files.
    damaged("store/conf garbled".into(), &|d: &Path| {
        std::fs::write(d.join("store/conf"), b"segment_size: banana\n\x00\xff").expect("write");
    });
    damaged("store/conf removed".into(), &|d: &Path| {
        std::fs::remove_file(d.join("store/conf")).expect("rm");
    });
    for (what, garble) in [("removed", false), ("garbled", true)] {
        damaged(format!("store snapshot {what}"), &|d: &Path| {
            for e in std::fs::read_dir(d.join("store")).expect("read").flatten() {
                if e.file_name().to_string_lossy().starts_with("snap.") {
                    if garble {
                        std::fs::write(e.path(), b"\x13\x37 not a snapshot").expect("write");
                    } else {
                        std::fs::remove_file(e.path()).expect("rm");
                    }
                }
            }
        });
    }
    // The store emptied or swapped under its indexes (before: opened as a new, empty store).
    damaged("store removed".into(), &|d: &Path| {
        std::fs::remove_dir_all(d.join("store")).expect("rm");
    });
    // Index-side files.
    damaged("index meta garbled".into(), &|d: &Path| {
        std::fs::write(d.join("indexes/faq/cosine.meta.json"), b"{\"seq\": \"x\"").expect("w");
    });
    damaged("index meta from the future".into(), &|d: &Path| {
        let p = d.join("indexes/faq/w2.meta.json");
        let meta = std::fs::read_to_string(&p).expect("meta");
        let mut v: serde_json::Value = serde_json::from_str(&meta).expect("json");
        v["seq"] = serde_json::json!(1_000_000);
        std::fs::write(&p, v.to_string()).expect("write");
    });
    damaged(
        "index folder's store-owner file garbled".into(),
        &|d: &Path| {
            std::fs::write(d.join("indexes/STORE"), b"\xff\xfe garbage").expect("write");
        },
    );
    damaged(
        "index folder's store-owner file removed".into(),
        &|d: &Path| {
            std::fs::remove_file(d.join("indexes/STORE")).expect("rm");
        },
    );
    eprintln!(
        "{n} damaged copies: {} commands answered, {} refused with a fix, 0 crashes, 0 hangs",
        out.answered - 2,
        out.refused
    );
    // The damage is real: most cuts and flips of the log are refused.
    assert!(out.refused >= 20, "{} refused", out.refused);
}
