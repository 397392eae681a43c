//! Pair-classification metrics: ROC AUC (with ties handled by average ranks, i.e. the
//! Mann–Whitney U statistic), accuracy at a threshold, and the accuracy-maximising threshold.
//! Scores are "higher means more likely positive"; negate a distance before passing it.
//! Also re-exports [`SplitMix64`], the seedable generator training and tests draw from
//! ([`crate::math`]).

/// ROC AUC of `scores` against boolean `labels`: the probability that a random positive scores
/// above a random negative (ties count one half). `None` when either class is absent.
pub fn auc(scores: &[f64], labels: &[bool]) -> Option<f64> {
    assert_eq!(scores.len(), labels.len(), "one label per score");
    let positives = labels.iter().filter(|&&l| l).count();
    let negatives = labels.len() - positives;
    if positives == 0 || negatives == 0 {
        return None;
    }
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    // Average 1-based ranks over runs of equal scores.
    let mut rank_sum_pos = 0.0;
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && scores[order[j + 1]] == scores[order[i]] {
            j += 1;
        }
        let avg_rank = (i + j) as f64 / 2.0 + 1.0;
        rank_sum_pos += avg_rank * order[i..=j].iter().filter(|&&k| labels[k]).count() as f64;
        i = j + 1;
    }
    let (p, n) = (positives as f64, negatives as f64);
    Some((rank_sum_pos - p * (p + 1.0) / 2.0) / (p * n))
}

/// Fraction of pairs classified correctly by `score >= threshold`.
pub fn accuracy(scores: &[f64], labels: &[bool], threshold: f64) -> f64 {
    assert_eq!(scores.len(), labels.len(), "one label per score");
    if scores.is_empty() {
        return 0.0;
    }
    let correct = scores
        .iter()
        .zip(labels)
        .filter(|(&s, &l)| (s >= threshold) == l)
        .count();
    correct as f64 / scores.len() as f64
}

/// The threshold that maximises accuracy on (scores, labels), and that accuracy. The threshold
/// is the midpoint between two adjacent distinct scores (or just above the top score when
/// calling everything negative is best), so it generalises to scores not seen here.
pub fn best_threshold(scores: &[f64], labels: &[bool]) -> (f64, f64) {
    assert_eq!(scores.len(), labels.len(), "one label per score");
    if scores.is_empty() {
        return (0.0, 0.0);
    }
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let negatives = labels.iter().filter(|&&l| !l).count();
    // Threshold above everything: all negative.
    let mut correct = negatives;
    let mut best = (correct, scores[order[0]] + 1e-6);
    let mut i = 0;
    while i < order.len() {
        // Move every pair with this score to the positive side.
        let s = scores[order[i]];
        while i < order.len() && scores[order[i]] == s {
            if labels[order[i]] {
                correct += 1;
            } else {
                correct -= 1;
            }
            i += 1;
        }
        let threshold = match order.get(i) {
            Some(&next) => (s + scores[next]) / 2.0,
            None => s,
        };
        if correct > best.0 {
            best = (correct, threshold);
        }
    }
    (best.1, best.0 as f64 / scores.len() as f64)
}

/// Ranks (1-based) with ties given their average rank.
pub fn average_ranks(x: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..x.len()).collect();
    order.sort_by(|&a, &b| x[a].total_cmp(&x[b]));
    let mut ranks = vec![0.0; x.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && x[order[j + 1]] == x[order[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        order[i..=j].iter().for_each(|&k| ranks[k] = avg);
        i = j + 1;
    }
    ranks
}

/// Pearson correlation; `None` when either side is constant or the lengths are below 2.
pub fn pearson(x: &[f64], y: &[f64]) -> Option<f64> {
    assert_eq!(x.len(), y.len(), "paired samples");
    if x.len() < 2 {
        return None;
    }
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx).powi(2);
        syy += (b - my).powi(2);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

/// Spearman rank correlation (Pearson on average ranks, so ties are handled as scipy does).
pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    pearson(&average_ranks(x), &average_ranks(y))
}

/// Retrieval quality of one ranked list against a set of relevant ids (binary relevance).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct RankedQuality {
    /// Relevant ids in the top 1 / number relevant.
    pub recall_at_1: f64,
    /// Relevant ids in the top 10 / number relevant.
    pub recall_at_10: f64,
    /// 1 / rank of the first relevant id in the top 10 (0 if none).
    pub mrr_at_10: f64,
    /// DCG@10 / ideal DCG@10 with gains 1 / log2(rank + 1).
    pub ndcg_at_10: f64,
}

/// Scores one ranked list.
pub fn ranked_quality<S: AsRef<str>>(
    ranked: &[S],
    relevant: &std::collections::HashSet<String>,
) -> RankedQuality {
    if relevant.is_empty() {
        return RankedQuality::default();
    }
    let hit = |i: usize| {
        ranked
            .get(i)
            .is_some_and(|id| relevant.contains(id.as_ref()))
    };
    let in_top = |k: usize| (0..k.min(ranked.len())).filter(|&i| hit(i)).count() as f64;
    let n = relevant.len() as f64;
    let dcg: f64 = (0..10.min(ranked.len()))
        .filter(|&i| hit(i))
        .map(|i| 1.0 / (i as f64 + 2.0).log2())
        .sum();
    let ideal: f64 = (0..relevant.len().min(10))
        .map(|i| 1.0 / (i as f64 + 2.0).log2())
        .sum();
    RankedQuality {
        recall_at_1: in_top(1) / n,
        recall_at_10: in_top(10) / n,
        mrr_at_10: (0..10.min(ranked.len()))
            .find(|&i| hit(i))
            .map_or(0.0, |i| 1.0 / (i as f64 + 1.0)),
        ndcg_at_10: dcg / ideal,
    }
}

pub use crate::math::SplitMix64;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn spearman_of_known_cases() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert!((spearman(&x, &[2.0, 4.0, 6.0, 8.0, 100.0]).unwrap() - 1.0).abs() < 1e-12);
        assert!((spearman(&x, &[5.0, 4.0, 3.0, 2.0, 1.0]).unwrap() + 1.0).abs() < 1e-12);
        // Ties share their average rank: y ranks [1, 4, 2.5, 2.5, 5], so r = 6.5 / √95
        // (scipy.stats.spearmanr gives the same 0.66688…).
        let r = spearman(&x, &[1.0, 3.0, 2.0, 2.0, 5.0]).unwrap();
        assert!((r - 6.5 / 95f64.sqrt()).abs() < 1e-12, "{r}");
        assert_eq!(spearman(&x, &[1.0; 5]), None);
    }

    #[test]
    fn ranked_quality_of_known_lists() {
        let rel: std::collections::HashSet<String> = ["b".to_string()].into();
        let q = ranked_quality(&["a", "b", "c"], &rel);
        assert_eq!(q.recall_at_1, 0.0);
        assert_eq!(q.recall_at_10, 1.0);
        assert_eq!(q.mrr_at_10, 0.5);
        assert!((q.ndcg_at_10 - 1.0 / 3f64.log2()).abs() < 1e-12);
        let q = ranked_quality(&["b"], &rel);
        assert_eq!((q.recall_at_1, q.mrr_at_10, q.ndcg_at_10), (1.0, 1.0, 1.0));
        let none: [&str; 0] = [];
        assert_eq!(ranked_quality(&none, &rel), RankedQuality::default());
    }

    #[test]
    fn auc_of_known_cases() {
        assert_eq!(
            auc(&[0.9, 0.8, 0.1, 0.2], &[true, true, false, false]),
            Some(1.0)
        );
        assert_eq!(
            auc(&[0.1, 0.2, 0.9, 0.8], &[true, true, false, false]),
            Some(0.0)
        );
        assert_eq!(auc(&[0.5, 0.5], &[true, false]), Some(0.5));
        // One positive above one of two negatives.
        assert_eq!(auc(&[0.5, 0.9, 0.1], &[true, false, false]), Some(0.5));
        assert_eq!(auc(&[0.5], &[true]), None);
    }

    #[test]
    fn best_threshold_separates_separable_data() {
        let scores = [0.1, 0.2, 0.3, 0.7, 0.8];
        let labels = [false, false, false, true, true];
        let (t, acc) = best_threshold(&scores, &labels);
        assert_eq!(acc, 1.0);
        assert!(t > 0.3 && t < 0.7, "{t}");
        assert_eq!(accuracy(&scores, &labels, t), 1.0);
        // All negative is best when positives score lowest and are few.
        let (t, acc) = best_threshold(&[0.1, 0.9, 0.8], &[true, false, false]);
        assert!((acc - 2.0 / 3.0).abs() < 1e-12);
        assert!(t > 0.9);
    }

    proptest! {
        #[test]
        fn auc_matches_pair_counting(
            data in proptest::collection::vec((0u8..20, any::<bool>()), 2..60)
        ) {
            let scores: Vec<f64> = data.iter().map(|(s, _)| *s as f64).collect();
            let labels: Vec<bool> = data.iter().map(|(_, l)| *l).collect();
            let mut wins = 0.0;
            let mut pairs = 0.0;
            for (i, &li) in labels.iter().enumerate() {
                for (j, &lj) in labels.iter().enumerate() {
                    if li && !lj {
                        pairs += 1.0;
                        wins += match scores[i].partial_cmp(&scores[j]).unwrap() {
                            std::cmp::Ordering::Greater => 1.0,
                            std::cmp::Ordering::Equal => 0.5,
                            std::cmp::Ordering::Less => 0.0,
                        };
                    }
                }
            }
            match auc(&scores, &labels) {
                Some(a) => prop_assert!((a - wins / pairs).abs() < 1e-12),
                None => prop_assert_eq!(pairs, 0.0),
            }
        }

        #[test]
        fn best_threshold_is_optimal(
            data in proptest::collection::vec((0u8..20, any::<bool>()), 1..60)
        ) {
            let scores: Vec<f64> = data.iter().map(|(s, _)| *s as f64).collect();
            let labels: Vec<bool> = data.iter().map(|(_, l)| *l).collect();
            let (t, acc) = best_threshold(&scores, &labels);
            prop_assert!((accuracy(&scores, &labels, t) - acc).abs() < 1e-12);
            for cut in 0..=21 {
                prop_assert!(accuracy(&scores, &labels, cut as f64 - 0.5) <= acc + 1e-12);
            }
        }
    }
}
