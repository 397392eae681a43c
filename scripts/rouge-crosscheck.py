#!/usr/bin/env python3
"""Checks kindred's ROUGE of decoded text against Google's rouge-score package (PyPI
`rouge-score`, no stemmer): reads the read-backs `kindred eval operators --read-backs FILE`
wrote (one `{"said", "target"}` per line) and prints rouge-score's mean ROUGE-1/2/L F-measures
over them, to compare with the `decode` row kindred printed.

    python3 -m venv target/rouge-venv && target/rouge-venv/bin/pip install rouge-score
    kindred --model DIR eval operators --wikisplit ... --compression ... --read-backs rb.jsonl
    target/rouge-venv/bin/python scripts/rouge-crosscheck.py rb.jsonl [--sample N]
"""
import argparse
import json
import random

from rouge_score import rouge_scorer


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("read_backs")
    ap.add_argument("--sample", type=int, default=0, help="score N random lines (0: all)")
    args = ap.parse_args()
    with open(args.read_backs, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if args.sample and args.sample < len(rows):
        rows = random.Random(0).sample(rows, args.sample)
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=False)
    sums = {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    for r in rows:
        s = scorer.score(r["target"], r["said"])
        for k in sums:
            sums[k] += s[k].fmeasure
    n = max(len(rows), 1)
    print(json.dumps({"read_backs": len(rows), **{k: round(v / n, 4) for k, v in sums.items()}}))


if __name__ == "__main__":
    main()
