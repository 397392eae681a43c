//! Synthetic documents for the storage benches (`index`, `scale`): QQP questions from
//! `../shared/data`, and perturbed copies of real vectors (noise of relative size `scale` added
//! to each sentence vector, then re-normalised; mu and sigma perturbed alike). Included with
//! `#[path = "support/synthetic.rs"] mod synthetic;` (not a bench target itself).

#![allow(dead_code)]

use std::path::PathBuf;

use kindred::score::cosine::l2_normalize;
use kindred::Encoded;

/// The questions of a QQP pair file under `../shared/data`, in file order.
pub fn questions(rel: &str) -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data")
        .join(rel);
    let raw = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    String::from_utf8_lossy(&raw)
        .lines()
        .flat_map(|l| {
            l.split('\t')
                .skip(1)
                .take(2)
                .map(str::trim)
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .filter(|q| !q.is_empty())
        .collect()
}

/// A small deterministic Gaussian-ish noise source.
pub struct Noise(pub u64);
impl Noise {
    pub fn next(&mut self) -> f32 {
        let mut s = 0.0;
        for _ in 0..4 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            s += (self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        }
        s * 0.866 // ≈ unit variance
    }
}

/// `e` with its vectors perturbed by noise of relative size `scale`.
pub fn perturb(e: &Encoded, noise: &mut Noise, scale: f32) -> Encoded {
    let d = e.sentence.len() as f32;
    let mut out = e.clone();
    let s = scale / d.sqrt();
    out.sentence.iter_mut().for_each(|x| *x += s * noise.next());
    l2_normalize(&mut out.sentence);
    out.intent
        .mu
        .iter_mut()
        .for_each(|x| *x += 0.5 * s * noise.next());
    out.intent
        .sigma
        .iter_mut()
        .for_each(|x| *x = (*x * (1.0 + 0.5 * scale * noise.next())).max(1e-3));
    out
}
