//! Training data: labelled pairs turned into contrastive items, and seeded batches of them.
//!
//! A duplicate pair (a, b) is an item: anchor a, positive b. Its hard negative is a question
//! the pairs label *not* a duplicate of a (or of b) when one exists; otherwise a question from
//! another non-duplicate pair — a real, topical Quora question, harder than a random one and
//! never a known duplicate of the anchor. Batches are drawn from a seeded permutation per
//! epoch, so step n of a run is the same batch whether or not the run was resumed.

use std::collections::{HashMap, HashSet};

use crate::eval::LabelledPair;

/// One contrastive item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// The anchor question.
    pub anchor: String,
    /// Its duplicate.
    pub positive: String,
    /// A question labelled not a duplicate of the anchor or the positive, if the pairs have one.
    pub negative: Option<String>,
}

/// Items, the pool of non-duplicate questions, and the known duplicate relation.
#[derive(Debug, Clone, Default)]
pub struct Dataset {
    /// One item per distinct duplicate pair.
    pub items: Vec<Item>,
    /// Questions of non-duplicate pairs, for items without a linked hard negative.
    pub pool: Vec<String>,
    duplicates: HashSet<(String, String)>,
}

impl Dataset {
    /// Builds items from labelled pairs (duplicates become items; non-duplicates give the
    /// hard negatives). Pairs of a text with itself are skipped.
    pub fn new(pairs: &[LabelledPair]) -> Self {
        let mut non_dup: HashMap<&str, Vec<&str>> = HashMap::new();
        let mut duplicates = HashSet::new();
        let mut pool = Vec::new();
        let mut seen_pool = HashSet::new();
        for p in pairs.iter().filter(|p| p.a != p.b) {
            if p.duplicate {
                duplicates.insert((p.a.clone(), p.b.clone()));
                duplicates.insert((p.b.clone(), p.a.clone()));
            } else {
                non_dup.entry(&p.a).or_default().push(&p.b);
                non_dup.entry(&p.b).or_default().push(&p.a);
                for t in [&p.a, &p.b] {
                    if seen_pool.insert(t.as_str()) {
                        pool.push(t.clone());
                    }
                }
            }
        }
        let mut seen = HashSet::new();
        let items = pairs
            .iter()
            .filter(|p| p.duplicate && p.a != p.b)
            .filter(|p| seen.insert((p.a.as_str(), p.b.as_str())))
            .map(|p| {
                let negative = [p.a.as_str(), p.b.as_str()]
                    .iter()
                    .flat_map(|t| non_dup.get(t).into_iter().flatten())
                    .find(|n| !duplicates.contains(&(p.a.clone(), n.to_string())))
                    .map(|n| n.to_string());
                Item {
                    anchor: p.a.clone(),
                    positive: p.b.clone(),
                    negative,
                }
            })
            .collect();
        Dataset {
            items,
            pool,
            duplicates,
        }
    }

    /// True when the pairs label `a` and `b` duplicates (or they are the same text).
    pub fn is_duplicate(&self, a: &str, b: &str) -> bool {
        a == b || self.duplicates.contains(&(a.to_string(), b.to_string()))
    }

    /// Items with a linked (labelled) hard negative.
    pub fn linked_negatives(&self) -> usize {
        self.items.iter().filter(|i| i.negative.is_some()).count()
    }

    /// Full batches per epoch at `batch_size` (the last partial batch is dropped).
    pub fn batches_per_epoch(&self, batch_size: usize) -> usize {
        self.items.len() / batch_size.max(1)
    }

    /// The items of global step `step` (0-based): epoch `step / batches_per_epoch`, shuffled
    /// with `seed + epoch`; each item paired with its hard negative (linked, or drawn from the
    /// pool deterministically when `hard_negatives`).
    pub fn batch(
        &self,
        step: usize,
        batch_size: usize,
        seed: u64,
        hard_negatives: bool,
    ) -> Vec<(&Item, Option<&str>)> {
        let per_epoch = self.batches_per_epoch(batch_size).max(1);
        let (epoch, index) = (step / per_epoch, step % per_epoch);
        let mut rng = SplitMix64(seed ^ (epoch as u64).wrapping_mul(0xA076_1D64_78BD_642F));
        let order = rng.permutation(self.items.len());
        order
            .iter()
            .skip(index * batch_size)
            .take(batch_size)
            .map(|&i| {
                let item = &self.items[i];
                let negative = if !hard_negatives {
                    None
                } else if let Some(n) = &item.negative {
                    Some(n.as_str())
                } else {
                    (0..8)
                        .map(|_| self.pool.get(rng.below(self.pool.len())))
                        .find_map(|n| {
                            n.filter(|n| {
                                !self.is_duplicate(&item.anchor, n)
                                    && !self.is_duplicate(&item.positive, n)
                            })
                        })
                        .map(String::as_str)
                };
                (item, negative)
            })
            .collect()
    }
}

/// SplitMix64: a small, seedable generator (reproducible batches without a `rand` dependency).
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when n is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    /// A uniformly shuffled `0..n` (Fisher–Yates).
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut v: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            v.swap(i, self.below(i + 1));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(a: &str, b: &str, duplicate: bool) -> LabelledPair {
        LabelledPair {
            a: a.into(),
            b: b.into(),
            duplicate,
        }
    }

    #[test]
    fn items_link_labelled_non_duplicates_as_hard_negatives() {
        let pairs = [
            pair("a", "b", true),
            pair("a", "c", false),
            pair("d", "e", true),
            pair("f", "g", false),
            pair("a", "b", true),
            pair("h", "h", true),
        ];
        let data = Dataset::new(&pairs);
        assert_eq!(
            data.items.len(),
            2,
            "duplicate rows and self pairs are dropped"
        );
        assert_eq!(data.items[0].negative.as_deref(), Some("c"));
        assert_eq!(data.items[1].negative, None);
        assert_eq!(data.linked_negatives(), 1);
        assert!(data.is_duplicate("b", "a") && !data.is_duplicate("a", "c"));
        assert_eq!(data.pool, vec!["a", "c", "f", "g"]);
    }

    #[test]
    fn batches_are_reproducible_and_cover_an_epoch() {
        let pairs: Vec<LabelledPair> = (0..10)
            .map(|i| pair(&format!("q{i}"), &format!("p{i}"), true))
            .chain((0..4).map(|i| pair(&format!("n{i}"), &format!("m{i}"), false)))
            .collect();
        let data = Dataset::new(&pairs);
        assert_eq!(data.batches_per_epoch(3), 3);
        let epoch: Vec<String> = (0..3)
            .flat_map(|s| data.batch(s, 3, 42, true))
            .map(|(i, n)| {
                assert!(n.is_some_and(|n| n.starts_with('n') || n.starts_with('m')));
                i.anchor.clone()
            })
            .collect();
        let distinct: HashSet<&String> = epoch.iter().collect();
        assert_eq!(distinct.len(), 9, "an epoch visits distinct items");
        let again: Vec<String> = (0..3)
            .flat_map(|s| data.batch(s, 3, 42, true))
            .map(|(i, _)| i.anchor.clone())
            .collect();
        assert_eq!(epoch, again, "same seed, same batches");
        let next: Vec<String> = (3..6)
            .flat_map(|s| data.batch(s, 3, 42, true))
            .map(|(i, _)| i.anchor.clone())
            .collect();
        assert_ne!(epoch, next, "each epoch reshuffles");
    }
}
