#!/usr/bin/env python3
"""Writes tests/golden/rouge.json: ROUGE-1, ROUGE-2 and ROUGE-L F-measures from the rouge-score
package (Google's reference implementation, PyPI `rouge-score`, no stemmer) for hand-written
pairs with the cases a tokenizer gets wrong (case, punctuation, digits, accents, repeats, empty
sides) and for 150 pseudo-random pairs over a small vocabulary (repeated words, reordering),
so that kindred's own ROUGE (src/eval/rouge.rs) can be checked against it.

    python3 -m venv /tmp/rouge && /tmp/rouge/bin/pip install rouge-score
    /tmp/rouge/bin/python tests/golden/make_rouge_fixture.py
"""
import importlib.metadata
import json
import os
import random

from rouge_score import rouge_scorer

HERE = os.path.dirname(os.path.abspath(__file__))

HAND = [
    ("the cat the cat sat", "The cat sat on the mat."),
    ("How do I reset my password?", "how can i reset the password"),
    ("reset password how", "How do I reset my password?"),
    ("Café's 2FA codes, (again)!", "cafe s 2fa codes again"),
    ("", "an empty candidate"),
    ("an empty reference", ""),
    ("¿—!", "???"),
    ("a a a a", "a"),
    ("New York is big and New York is old", "new york is old and big"),
    ("paid with paypal refund order", "How do I get a refund for an order paid with PayPal?"),
    ("It was founded in 1998 in Berlin .", "The company was founded in Berlin in 1998 ."),
    ("Ünïcödé words dropped", "unicode words dropped"),
]


def main():
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=False)
    rng = random.Random(2026)
    vocab = "a the cat dog sat ran on in mat park red big".split()
    pairs = list(HAND)
    for _ in range(150):
        cand = " ".join(rng.choice(vocab) for _ in range(rng.randint(1, 12)))
        ref = " ".join(rng.choice(vocab) for _ in range(rng.randint(1, 12)))
        pairs.append((cand, ref))
    rows = []
    for cand, ref in pairs:
        s = scorer.score(ref, cand)  # score(target, prediction)
        rows.append({
            "candidate": cand,
            "reference": ref,
            "rouge1": s["rouge1"].fmeasure,
            "rouge2": s["rouge2"].fmeasure,
            "rougeL": s["rougeL"].fmeasure,
        })
    out = {
        "source": "rouge-score " + importlib.metadata.version("rouge-score") + ", use_stemmer=False",
        "pairs": rows,
    }
    with open(os.path.join(HERE, "rouge.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
