//! Crash safety: a child `kindred add` ingests real questions and is killed with SIGKILL at
//! random moments, 20 times: in odd rounds counted from its start (a kill may land while it
//! loads the model or opens the store), in even rounds from its first acknowledgement (so it
//! lands among writes however slowly a loaded machine starts the child). After every kill,
//! each acknowledged document must be present with identical text, vectors and metadata, and
//! the indexes must agree with the store.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kindred::db::Database;
use kindred::store::{CollectionSettings, Durability};

use crate::common::{cosine, encoder, model_dir, qqp_questions};

const ROUNDS: usize = 20;
const PER_ROUND: usize = 160;
const STEP: usize = 120; // rounds overlap by 40 documents: re-runs replace documents

#[test]
fn acknowledged_writes_survive_sigkill() {
    let questions = qqp_questions("qqp_bimpm/dev.tsv");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    {
        let db = Database::open(&data, Durability::Flush).expect("opens");
        db.create_collection(
            "qqp",
            &CollectionSettings::for_model(encoder().identity().clone()),
        )
        .expect("creates");
    }
    let mut seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64
        | 1;
    eprintln!("crash test seed {seed}");
    let mut acked: HashMap<String, usize> = HashMap::new();

    for round in 0..ROUNDS {
        let start = round * STEP;
        let file = dir.path().join(format!("round{round}.jsonl"));
        let mut f = std::fs::File::create(&file).expect("create");
        for (i, q) in questions.iter().enumerate().skip(start).take(PER_ROUND) {
            let line = serde_json::json!({ "id": format!("q{i}"), "text": q, "metadata": { "n": i, "round": round } });
            writeln!(f, "{line}").expect("write");
        }
        drop(f);

        let mut child = Command::new(env!("CARGO_BIN_EXE_kindred"))
            .args(["--batch-size", "8", "add", "--collection", "qqp"])
            .arg(&file)
            .env("KINDRED_MODEL", &model_dir().path)
            .env("KINDRED_DATA", &data)
            .env_remove("KINDRED_RELAXED_DURABILITY")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawns");
        let stdout = child.stdout.take().expect("stdout");
        let (first_ack, acking) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| l.strip_prefix("ack ").map(String::from))
                .inspect(|_| {
                    let _ = first_ack.send(());
                })
                .collect::<Vec<String>>()
        });
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        if round % 2 == 0 {
            // The child has written (or ended: it has nothing left to write) before the clock
            // starts.
            let _ = acking.recv_timeout(Duration::from_secs(300));
            std::thread::sleep(Duration::from_millis(seed % 1000));
        } else {
            std::thread::sleep(Duration::from_millis(300 + seed % 1500));
        }
        child.kill().expect("SIGKILL"); // std sends SIGKILL on Unix
        child.wait().expect("reaped");
        let this_round = reader.join().expect("reader");
        for id in &this_round {
            let n: usize = id[1..].parse().expect("qN");
            acked.insert(id.clone(), n);
        }

        let db = Database::open(&data, Durability::Flush).expect("reopens after SIGKILL");
        let count = db.count("qqp").expect("count");
        for (id, &n) in &acked {
            let doc = db
                .get("qqp", id)
                .expect("get")
                .unwrap_or_else(|| panic!("round {round}: acknowledged {id} lost"));
            assert_eq!(doc.text, questions[n], "round {round}: text of {id}");
            assert_eq!(doc.metadata()["n"], n, "round {round}: metadata of {id}");
        }
        // Vectors of this round's acknowledged documents equal a fresh encoding.
        for id in this_round.iter().rev().take(8) {
            let doc = db.get("qqp", id).expect("get").expect("present");
            let fresh = encoder().encode_one(&doc.text).expect("encodes");
            let diff = doc
                .sentence
                .iter()
                .zip(&fresh.sentence)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                diff < 1e-5,
                "round {round}: sentence vector of {id} differs by {diff}"
            );
            assert_eq!(doc.tokens, fresh.tokens);
            let decoded = doc.token_vectors().decode();
            for (a, b) in decoded
                .chunks(fresh.dim())
                .zip(fresh.token_vectors.chunks(fresh.dim()))
            {
                assert!(cosine(a, b) > 0.999, "round {round}: token vector of {id}");
            }
        }
        // Indexes agree with the store.
        let info = db.info("qqp").expect("info");
        assert_eq!(
            info.index.cosine_points - info.index.tombstones,
            count as usize,
            "round {round}"
        );
        assert_eq!(
            info.index.lexical_documents, count as usize,
            "round {round}"
        );
        for id in this_round.iter().take(5) {
            let doc = db.get("qqp", id).expect("get").expect("present");
            let top = &crate::common::cosine_hits(&db, "qqp", &doc.sentence, 1)[0];
            assert!(
                top.0.id == doc.id || top.0.sentence == doc.sentence,
                "round {round}: {id} does not find itself first (got {})",
                top.0.id
            );
        }
        eprintln!(
            "round {round}: {} acknowledged this round, {count} stored",
            this_round.len()
        );
    }
    assert!(
        acked.len() > 100,
        "the children made progress ({} acknowledged)",
        acked.len()
    );
}
