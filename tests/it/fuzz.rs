//! The fuzz targets (`kindred::fuzzing`) on stable, for a fixed budget: every file of the
//! committed corpus (`fuzz/corpus/<target>/`), then random mutations of it (bit flips, byte
//! and token insertions, deletions, duplicated ranges, splices of two entries) for
//! `KINDRED_FUZZ_SECONDS` per target (3 by default: CI). Any panic fails the test, saving the
//! input under `target/fuzz-failures/` and naming it; any input taking over 5 s fails it too.
//! The seed is printed; `KINDRED_FUZZ_SEED=<seed>` replays the same inputs. Coverage-guided
//! runs: `cargo +nightly fuzz run <target>` (RELIABILITY.md, "Fuzzing").

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kindred::fuzzing::{graph_seed, record_seed, Target, TARGETS};

use crate::common::Rng;

/// Fragments that matter to the readers: separators, quotes, entities, markup, odd bytes.
const TOKENS: &[&[u8]] = &[
    b"\"",
    b"\n",
    b"\r\n",
    b"\t",
    b",",
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b"\\",
    b"\\u0000",
    b"&#",
    b"&#x",
    b";",
    b"&amp;",
    b"<",
    b">",
    b"</",
    b"<!--",
    b"\xef\xbb\xbf",
    b"\xff",
    b"\x00",
    b"\xc3",
    b"1e999",
    b"-1",
    b"18446744073709551616",
    b"null",
    b"true",
    b"\"filter\":",
    b"\"text\":",
    b"\"metadata\":",
    b"\"context\":",
    b"\"k\":",
];

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir(target))
        .unwrap_or_else(|e| panic!("the corpus of {target}: {e}"))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let mut out: Vec<Vec<u8>> = files
        .iter()
        .map(|p| std::fs::read(p).expect("corpus file"))
        .collect();
    out.push(Vec::new());
    out
}

fn mutate(rng: &mut Rng, pool: &[Vec<u8>]) -> Vec<u8> {
    let mut b = pool[rng.below(pool.len())].clone();
    for _ in 0..1 + rng.below(6) {
        let at = rng.below(b.len() + 1);
        match rng.below(7) {
            0 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
            1 => b.insert(at, rng.next() as u8),
            2 => {
                let t = TOKENS[rng.below(TOKENS.len())];
                b.splice(at..at, t.iter().copied());
            }
            3 if !b.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(b.len());
                b.drain(at.min(end)..end);
            }
            4 if !b.is_empty() => {
                let start = rng.below(b.len());
                let end = (start + 1 + rng.below(32)).min(b.len());
                let piece = b[start..end].to_vec();
                b.splice(at..at, piece);
            }
            5 => {
                let other = &pool[rng.below(pool.len())];
                let from = rng.below(other.len() + 1);
                b.truncate(at);
                b.extend_from_slice(&other[from..]);
            }
            _ => b.truncate(at),
        }
    }
    b
}

fn run_one(target: &str, f: Target, input: &[u8]) {
    let started = Instant::now();
    let outcome = std::panic::catch_unwind(|| f(input));
    let slow = started.elapsed() > Duration::from_secs(5);
    if outcome.is_err() || slow {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-failures");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let name = format!("{target}-{:016x}", fnv(input));
        std::fs::write(dir.join(&name), input).expect("save the input");
        panic!(
            "fuzz target {target} {} on target/fuzz-failures/{name} ({} bytes); replay it with \
             `cargo +nightly fuzz run {target} target/fuzz-failures/{name}`",
            if slow { "took over 5 s" } else { "panicked" },
            input.len()
        );
    }
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3)
    })
}

#[test]
fn fuzz_targets_survive_their_corpus_and_its_mutations() {
    let seconds: f64 = std::env::var("KINDRED_FUZZ_SECONDS")
        .ok()
        .map(|s| s.parse().expect("KINDRED_FUZZ_SECONDS is a number"))
        .unwrap_or(3.0);
    let seed = std::env::var("KINDRED_FUZZ_SEED")
        .ok()
        .map(|s| s.parse().expect("KINDRED_FUZZ_SEED is a number"))
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("clock")
                .as_nanos() as u64
        });
    eprintln!("fuzz seed {seed}, {seconds} s per target");
    for &(target, f) in TARGETS {
        let mut pool = corpus(target);
        assert!(pool.len() > 1, "fuzz/corpus/{target} is empty");
        match target {
            "record" => pool.push(record_seed()),
            "graph_file" => pool.push(graph_seed()),
            _ => {}
        }
        for input in &pool {
            run_one(target, f, input);
        }
        let mut rng = Rng(seed ^ fnv(target.as_bytes()));
        let deadline = Instant::now() + Duration::from_secs_f64(seconds);
        let mut runs = 0u64;
        while Instant::now() < deadline {
            let input = mutate(&mut rng, &pool);
            run_one(target, f, &input);
            runs += 1;
        }
        eprintln!(
            "fuzz {target}: {} corpus entries, {runs} mutations, no panic",
            pool.len()
        );
    }
}

/// Writes the generated seeds (a real record, a real graph file) into the corpus; run once
/// after their format changes: `cargo test --release --test it write_generated_fuzz_seeds --
/// --ignored`.
#[test]
#[ignore]
fn write_generated_fuzz_seeds() {
    for (target, bytes) in [("record", record_seed()), ("graph_file", graph_seed())] {
        std::fs::write(corpus_dir(target).join("generated"), bytes).expect("write the seed");
    }
}
