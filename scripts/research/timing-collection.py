#!/usr/bin/env python3
"""A collection of N questions with context, for timing `kindred adapt` at a size no labelled
forum here has. Timing only: the context is not the questions' own.

    scripts/research/timing-collection.py N FORUM.jsonl > bigN.jsonl

The questions are QQP's (../shared/data: the BiMPM and deep1994 dev and test files, about
73,500 distinct), then STS-B's and SICK's sentences (95,066 distinct texts in all); each gets
10 comments drawn by hash from FORUM.jsonl's contexts (what
`kindred eval forum … --write-jsonl` writes for Qatar Living). Since that context is not about
its questions, `train context` refuses it unless given `--allow-unrelated-context` (which a
timing run needs). Standard library only.
"""
import csv
import hashlib
import json
import os
import sys

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data")
# (file, the columns holding texts, header lines): QQP first, then STS-B and SICK sentences.
FILES = [
    ("qqp_bimpm/dev.tsv", slice(1, 3), 0),
    ("qqp_bimpm/test.tsv", slice(1, 3), 0),
    ("qqp_deep1994_split/dev.tsv", slice(1, 3), 0),
    ("qqp_deep1994_split/test.tsv", slice(1, 3), 0),
    ("stsb/sts-train.csv", slice(5, 7), 0),
    ("stsb/sts-dev.csv", slice(5, 7), 0),
    ("stsb/sts-test.csv", slice(5, 7), 0),
    ("sick/SICK_train.txt", slice(1, 3), 1),
    ("sick/SICK_trial.txt", slice(1, 3), 1),
    ("sick/SICK_test_annotated.txt", slice(1, 3), 1),
]


def main():
    n, forum = int(sys.argv[1]), sys.argv[2]
    seen, questions = set(), []
    for name, columns, header in FILES:
        if len(questions) >= n:
            break
        with open(os.path.join(DATA, name), errors="replace") as f:
            for row in list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[header:]:
                for text in row[columns]:
                    text = " ".join(text.split())
                    if len(text) > 10 and text not in seen:
                        seen.add(text)
                        questions.append(text)
    if len(questions) < n:
        sys.exit(f"only {len(questions)} distinct texts; ask for fewer")
    with open(forum) as f:
        pool = [c for line in f for c in json.loads(line).get("context", [])]
    for i, q in enumerate(questions[:n]):
        h = int(hashlib.md5(q.encode()).hexdigest(), 16)
        context = [pool[(h >> (8 * j)) % len(pool)] for j in range(10)]
        print(json.dumps({"id": f"q{i}", "text": q, "context": context}))


if __name__ == "__main__":
    main()
