#!/usr/bin/env python3
"""Paired comparison of two models' pair AUCs: DeLong's test on `kindred eval pairs --scores`.

    scripts/pairs-paired.py BEFORE.tsv AFTER.tsv [--split test] [--score cosine] [--score-b NAME]

Both files are the per-pair scores of the same pair files (`kindred --model M eval pairs
--dev ... --test ... --scores M.tsv`, TSV or JSON Lines), one per model. For the split asked
(default test) and each score (default: cosine and probability; `w2` is negated, lower being
closer), prints both AUCs, their difference, its standard error by DeLong, DeLong and
Clarke-Pearson (1988: the two AUCs' covariance from the same pairs' placement values), a
normal 95% interval and a two-sided p-value. Because the two models score the same pairs,
the difference is far more precise than either AUC alone. Standard library only.
"""
import argparse
import csv
import json
import math
import sys


def load(path, split):
    """{pair index: (label, row)} of one split of a scores file."""
    with open(path, newline="") as f:
        if path.endswith((".jsonl", ".ndjson")):
            rows = [json.loads(line) for line in f if line.strip()]
        else:
            csv.field_size_limit(sys.maxsize)
            rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    out = {int(r["pair"]): r for r in rows if r["split"] == split}
    if not out:
        raise SystemExit(f"{path}: no pairs of split {split!r}; its splits: "
                         f"{sorted({r['split'] for r in rows})}")
    return out


def value(row, score):
    v = row.get(score)
    if v is None or v == "":
        raise SystemExit(f"pair {row['pair']} has no {score!r} score (a model without a classifier "
                         "has no 'siamese')")
    return -float(v) if score == "w2" else float(v)


def midranks(xs):
    """1-based ranks of xs, ties sharing their mean rank."""
    order = sorted(range(len(xs)), key=xs.__getitem__)
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def placements(pos, neg):
    """DeLong's placement values: for each positive the share of negatives it beats (ties half),
    for each negative the share of positives that beat it."""
    m, n = len(pos), len(neg)
    all_ranks = midranks(pos + neg)
    rp, rn = midranks(pos), midranks(neg)
    v10 = [(all_ranks[i] - rp[i]) / n for i in range(m)]
    v01 = [1 - (all_ranks[m + j] - rn[j]) / m for j in range(n)]
    return v10, v01


def cov(a, b):
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    return sum((x - ma) * (y - mb) for x, y in zip(a, b)) / (len(a) - 1)


def delong(labels, a, b):
    """AUC of a, AUC of b, their difference and its standard error (DeLong et al. 1988)."""
    pa = [s for s, y in zip(a, labels) if y]
    na = [s for s, y in zip(a, labels) if not y]
    pb = [s for s, y in zip(b, labels) if y]
    nb = [s for s, y in zip(b, labels) if not y]
    if not pa or not na:
        raise SystemExit("the split needs both duplicate and non-duplicate pairs")
    a10, a01 = placements(pa, na)
    b10, b01 = placements(pb, nb)
    auc_a, auc_b = sum(a10) / len(a10), sum(b10) / len(b10)
    var = ((cov(a10, a10) + cov(b10, b10) - 2 * cov(a10, b10)) / len(a10)
           + (cov(a01, a01) + cov(b01, b01) - 2 * cov(a01, b01)) / len(a01))
    return auc_a, auc_b, auc_b - auc_a, math.sqrt(max(var, 0.0))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--split", default="test")
    p.add_argument("--score", action="append",
                   help="the score to compare (repeatable; default cosine and probability)")
    p.add_argument("--score-b", help="take this score from AFTER instead (one --score only)")
    args = p.parse_args()
    scores = args.score or ["cosine", "probability"]
    if args.score_b and len(scores) != 1:
        raise SystemExit("--score-b pairs with exactly one --score")
    a, b = load(args.before, args.split), load(args.after, args.split)
    if a.keys() != b.keys():
        raise SystemExit(f"the files score different pairs ({len(a)} vs {len(b)} in {args.split!r})")
    keys = sorted(a)
    for k in keys:
        if (a[k]["label"], a[k]["q1"], a[k]["q2"]) != (b[k]["label"], b[k]["q1"], b[k]["q2"]):
            raise SystemExit(f"pair {k} differs between the files: were they scored on the same data?")
    labels = [str(a[k]["label"]) == "1" for k in keys]
    print(f"{len(keys)} pairs ({sum(labels)} duplicates), split {args.split}")
    print("| score | AUC before | AUC after | difference | SE (DeLong) | 95% interval | p |")
    print("|---|---|---|---|---|---|---|")
    for s in scores:
        sb = args.score_b or s
        xa = [value(a[k], s) for k in keys]
        xb = [value(b[k], sb) for k in keys]
        auc_a, auc_b, diff, se = delong(labels, xa, xb)
        z = diff / se if se > 0 else 0.0
        pval = math.erfc(abs(z) / math.sqrt(2))
        name = s if s == sb else f"{s} → {sb}"
        print(f"| {name} | {auc_a:.4f} | {auc_b:.4f} | {diff:+.4f} | {se:.4f} | "
              f"[{diff - 1.96 * se:+.4f}, {diff + 1.96 * se:+.4f}] | {pval:.3f} |")


if __name__ == "__main__":
    main()
