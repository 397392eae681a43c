//! Training data: labelled pairs turned into contrastive items, and seeded batches of them.
//!
//! A duplicate pair (a, b) is an item: anchor a, positive b. Its hard negative is a question
//! the pairs label *not* a duplicate of a (or of b) when one exists; otherwise a question from
//! another non-duplicate pair — a real, topical Quora question, harder than a random one and
//! never a known duplicate of the anchor. Batches are drawn from a seeded permutation per
//! epoch, so step n of a run is the same batch whether or not the run was resumed.
//!
//! Items without a labelled hard negative can instead get a *mined* one
//! ([`Dataset::mine_negatives`]): the question nearest the anchor by the base model's cosine
//! that the pairs do not make a duplicate of it. Duplicates are closed transitively (a ~ b and
//! b ~ c make a ~ c), both for mining and for leaving known duplicates out of the softmax.

use std::collections::{HashMap, HashSet};

use rayon::prelude::*;

use crate::eval::LabelledPair;
use crate::math::dot;
pub use crate::score::stats::SplitMix64;

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
    /// Duplicate cluster of each text of a duplicate pair (transitive closure).
    cluster: HashMap<String, usize>,
}

impl Dataset {
    /// Builds items from labelled pairs (duplicates become items; non-duplicates give the
    /// hard negatives). Pairs of a text with itself are skipped.
    pub fn new(pairs: &[LabelledPair]) -> Self {
        let mut non_dup: HashMap<&str, Vec<&str>> = HashMap::new();
        let mut clusters = Clusters::default();
        let mut pool = Vec::new();
        let mut seen_pool = HashSet::new();
        for p in pairs.iter().filter(|p| p.a != p.b) {
            if p.duplicate {
                clusters.join(&p.a, &p.b);
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
        let cluster = clusters.into_map();
        let same = |a: &str, b: &str| {
            a == b || matches!((cluster.get(a), cluster.get(b)), (Some(x), Some(y)) if x == y)
        };
        let mut seen = HashSet::new();
        let items = pairs
            .iter()
            .filter(|p| p.duplicate && p.a != p.b)
            .filter(|p| seen.insert((p.a.as_str(), p.b.as_str())))
            .map(|p| {
                let negative = [p.a.as_str(), p.b.as_str()]
                    .iter()
                    .flat_map(|t| non_dup.get(t).into_iter().flatten())
                    .find(|n| !same(&p.a, n) && !same(&p.b, n))
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
            cluster,
        }
    }

    /// True when the pairs make `a` and `b` duplicates, directly or through other duplicates
    /// (or they are the same text).
    pub fn is_duplicate(&self, a: &str, b: &str) -> bool {
        a == b
            || matches!(
                (self.cluster.get(a), self.cluster.get(b)),
                (Some(x), Some(y)) if x == y
            )
    }

    /// Every distinct question of the data (anchors, positives, the pool), in a stable order:
    /// the texts [`mine_negatives`](Self::mine_negatives) searches.
    pub fn texts(&self) -> Vec<&str> {
        let mut seen = HashSet::new();
        self.items
            .iter()
            .flat_map(|i| [i.anchor.as_str(), i.positive.as_str()])
            .chain(self.pool.iter().map(String::as_str))
            .filter(|t| seen.insert(*t))
            .collect()
    }

    /// Gives every item without a labelled hard negative the text of `texts` whose vector is
    /// nearest its anchor's (dot product of L2-normalised vectors, one per text) among those
    /// that are not duplicates of the anchor or the positive and not near-identical to the
    /// anchor (cosine ≥ `max_cosine`, likely an unlabelled duplicate). Returns how many items
    /// got one. Texts missing from `texts` are skipped.
    pub fn mine_negatives(
        &mut self,
        texts: &[&str],
        vectors: &[Vec<f32>],
        max_cosine: f32,
    ) -> usize {
        assert_eq!(texts.len(), vectors.len(), "one vector per text");
        let index: HashMap<&str, usize> = texts.iter().enumerate().map(|(i, t)| (*t, i)).collect();
        let mined: Vec<Option<String>> = self
            .items
            .par_iter()
            .map(|item| {
                if item.negative.is_some() {
                    return None;
                }
                let a = &vectors[*index.get(item.anchor.as_str())?];
                let mut scored: Vec<(f32, usize)> = vectors
                    .iter()
                    .enumerate()
                    .map(|(j, v)| (dot(a, v), j))
                    .filter(|(c, _)| *c < max_cosine)
                    .collect();
                // Best first; only the top few are sorted and checked (string hashing), the
                // rest only if all of those are duplicates.
                let best_first = |x: &(f32, usize), y: &(f32, usize)| y.0.total_cmp(&x.0);
                let top = MINING_SHORTLIST.min(scored.len());
                if top < scored.len() {
                    scored.select_nth_unstable_by(top, best_first);
                }
                let (head, rest) = scored.split_at_mut(top);
                head.sort_unstable_by(best_first);
                let usable = |&(_, j): &(f32, usize)| {
                    let t = texts[j];
                    !self.is_duplicate(&item.anchor, t) && !self.is_duplicate(&item.positive, t)
                };
                let found = head.iter().find(|c| usable(c)).copied().or_else(|| {
                    rest.sort_unstable_by(best_first);
                    rest.iter().find(|c| usable(c)).copied()
                });
                found.map(|(_, j)| texts[j].to_string())
            })
            .collect();
        let mut count = 0;
        for (item, negative) in self.items.iter_mut().zip(mined) {
            if negative.is_some() {
                item.negative = negative;
                count += 1;
            }
        }
        count
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

/// Nearest texts sorted and checked first when mining.
const MINING_SHORTLIST: usize = 32;

/// Union-find over texts: the transitive closure of the duplicate relation.
#[derive(Default)]
struct Clusters {
    id: HashMap<String, usize>,
    parent: Vec<usize>,
}

impl Clusters {
    fn node(&mut self, t: &str) -> usize {
        if let Some(&i) = self.id.get(t) {
            return i;
        }
        let i = self.parent.len();
        self.parent.push(i);
        self.id.insert(t.to_string(), i);
        i
    }

    fn root(&mut self, mut i: usize) -> usize {
        while self.parent[i] != i {
            self.parent[i] = self.parent[self.parent[i]];
            i = self.parent[i];
        }
        i
    }

    fn join(&mut self, a: &str, b: &str) {
        let (a, b) = (self.node(a), self.node(b));
        let (ra, rb) = (self.root(a), self.root(b));
        self.parent[ra] = rb;
    }

    /// Each text's cluster (its root).
    fn into_map(mut self) -> HashMap<String, usize> {
        let ids: Vec<(String, usize)> = self.id.drain().collect();
        ids.into_iter()
            .map(|(t, i)| {
                let r = self.root(i);
                (t, r)
            })
            .collect()
    }
}

/// The indices (into `n` graded pairs) of global step `step`'s `batch` graded pairs: the pairs
/// are walked in a seeded shuffle, reshuffled each time they run out, independently of the
/// duplicate pairs' epochs (so a resumed run sees the same pairs). Empty when `n` is 0.
pub fn graded_batch(n: usize, step: usize, batch: usize, seed: u64) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let mut shuffles: Vec<(usize, Vec<usize>)> = Vec::new();
    (step * batch..(step + 1) * batch)
        .map(|p| {
            let round = p / n;
            if !shuffles.iter().any(|(r, _)| *r == round) {
                let mut rng =
                    SplitMix64(seed ^ 0x6772_6164_6564 ^ (round as u64).wrapping_mul(0x9E37_79B9));
                shuffles.push((round, rng.permutation(n)));
            }
            let (_, order) = shuffles
                .iter()
                .find(|(r, _)| *r == round)
                .expect("made above");
            order[p % n]
        })
        .collect()
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
    fn duplicates_close_transitively() {
        let data = Dataset::new(&[
            pair("a", "b", true),
            pair("b", "c", true),
            pair("x", "y", true),
            pair("c", "z", false),
        ]);
        assert!(data.is_duplicate("a", "c") && data.is_duplicate("c", "a"));
        assert!(!data.is_duplicate("a", "x") && !data.is_duplicate("a", "z"));
    }

    #[test]
    fn mined_negatives_are_the_nearest_non_duplicates() {
        let mut data = Dataset::new(&[
            pair("a", "b", true),
            pair("b", "c", true),
            pair("d", "e", true),
            pair("f", "g", false),
            pair("d", "g", false),
        ]);
        let texts = data.texts();
        assert_eq!(texts, vec!["a", "b", "c", "d", "e", "f", "g"]);
        let unit = |x: f32| vec![x.cos(), x.sin()];
        // Angles: c (a duplicate of a through b) is nearest a; f is the nearest non-duplicate.
        let angle = |t: &str| match t {
            "a" => 0.0,
            "b" => 0.5,
            "c" => 0.05,
            "d" => 2.0,
            "e" => 2.5,
            "f" => 0.2,
            _ => 3.0,
        };
        let vectors: Vec<Vec<f32>> = texts.iter().map(|t| unit(angle(t))).collect();
        let texts: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mut strict = data.clone();
        let mined = data.mine_negatives(&refs, &vectors, 0.999);
        assert_eq!(mined, 2, "d has a labelled negative (g)");
        let negative = |anchor: &str| {
            data.items
                .iter()
                .find(|i| i.anchor == anchor)
                .and_then(|i| i.negative.clone())
        };
        assert_eq!(negative("a").as_deref(), Some("f"), "c is a duplicate of a");
        assert_eq!(negative("b").as_deref(), Some("f"));
        assert_eq!(
            negative("d").as_deref(),
            Some("g"),
            "labelled negatives are kept"
        );
        // cos(0.2) ≈ 0.980: above a 0.97 cap f counts as a likely unlabelled duplicate of a.
        strict.mine_negatives(&refs, &vectors, 0.97);
        assert_eq!(strict.items[0].negative.as_deref(), Some("d"));
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

    #[test]
    fn graded_batches_cover_every_pair_once_per_round_and_repeat_for_a_seed() {
        let n = 10;
        let seen: Vec<usize> = (0..5).flat_map(|s| graded_batch(n, s, 4, 7)).collect();
        // 20 positions = two full rounds: each pair twice.
        for i in 0..n {
            assert_eq!(seen.iter().filter(|&&x| x == i).count(), 2, "{seen:?}");
        }
        assert_eq!(graded_batch(n, 3, 4, 7), graded_batch(n, 3, 4, 7));
        assert_ne!(graded_batch(n, 0, 4, 7), graded_batch(n, 0, 4, 8));
        assert!(graded_batch(0, 3, 4, 7).is_empty());
    }
}
