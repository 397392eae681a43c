#!/usr/bin/env python3
"""Paired comparison of two `kindred eval forum` reports (kindred-eval-forum.json).

    scripts/forum-paired.py BEFORE.json AFTER.json [--row-a NAME] [--row-b NAME]

For each ranking both reports have (or the one pair of rows named), prints MAP before and
after, the mean per-question difference, its standard error over questions, a paired
bootstrap 95% interval (10,000 resamples of the original questions, seed 0) and how many
questions got better / worse. Standard library only.
"""
import argparse
import json
import math
import random


def rows(path):
    with open(path) as f:
        report = json.load(f)
    report = report.get("report", report)  # the file wraps the report with model and data
    out = {}
    for r in report["rows"]:
        if not r.get("ap"):
            raise SystemExit(f"{path}: row {r['ranking']!r} has no per-question AP; "
                             "re-run `kindred eval forum` with a build that writes them")
        out[r["ranking"]] = r["ap"]
    return out


def compare(a, b, resamples=10_000, seed=0):
    if len(a) != len(b):
        raise SystemExit(f"the reports rank different question sets ({len(a)} vs {len(b)})")
    d = [y - x for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1)) if n > 1 else 0.0
    rng = random.Random(seed)
    boots = sorted(sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    lo, hi = boots[int(0.025 * resamples)], boots[int(0.975 * resamples) - 1]
    better = sum(x > 1e-9 for x in d)
    worse = sum(x < -1e-9 for x in d)
    return sum(a) / n, sum(b) / n, mean, sd / math.sqrt(n), lo, hi, better, worse


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--row-a", help="the ranking to take from BEFORE (default: every shared one)")
    p.add_argument("--row-b", help="the ranking to take from AFTER (default: --row-a)")
    args = p.parse_args()
    a, b = rows(args.before), rows(args.after)
    if args.row_a:
        pairs = [(args.row_a, args.row_b or args.row_a)]
    else:
        pairs = [(k, k) for k in a if k in b]
    print("| ranking | MAP before | MAP after | difference | SE | 95% bootstrap | better / worse |")
    print("|---|---|---|---|---|---|---|")
    for ka, kb in pairs:
        for k, side, path in ((ka, a, args.before), (kb, b, args.after)):
            if k not in side:
                raise SystemExit(f"{path} has no row {k!r}; it has {sorted(side)}")
        ma, mb, diff, se, lo, hi, better, worse = compare(a[ka], b[kb])
        name = ka if ka == kb else f"{ka} → {kb}"
        print(f"| {name} | {ma:.2f} | {mb:.2f} | {diff:+.2f} | {se:.2f} | "
              f"[{lo:+.2f}, {hi:+.2f}] | {better} / {worse} |")


if __name__ == "__main__":
    main()
