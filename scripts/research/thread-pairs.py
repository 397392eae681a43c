#!/usr/bin/env python3
"""A forum's (question, own comment) pairs as a `kindred train clrcmd` pair file.

    scripts/research/thread-pairs.py COLLECTION.jsonl [N] > /dev/null   # writes thread-train.tsv, thread-dev.tsv

COLLECTION.jsonl is what `kindred eval forum … --write-jsonl` writes (each question with its
comments as `context`). Each question's first N comments (default 3) become duplicate pairs
`1<TAB>question<TAB>comment` in thread-train.tsv; one question in ten (by a hash of its id) is
held out instead, and gives thread-dev.tsv: its first 3 comments against as many comments drawn
from other threads (seed 1), for `--dev`. No labels are read: a question and the answers of its
own thread are the pair. `kindred train context --thread-positives N` adds the same pairs to
the harvested ones; this file trains them alone (docs/research/log.md, session 34). `kindred train
context --grader thread` (and `adapt`) builds the same kind of pairs from the collection in Rust
(`context::thread_sets`; its dev negatives are drawn by hash, not by this seed) and trains the
grader on them itself; this script stays to reproduce session 34's table. Its held-out slice
(the whole sha256 as an integer, mod 10) is not the harvest's (`context::held_out`: the first
8 bytes, little-endian, mod --held-out-every), so a model trained on its pairs has seen the
threads of some of the harvest's held-out questions: no labels are involved, only selection.
"""
import hashlib
import json
import random
import sys


def main():
    rows = [json.loads(line) for line in open(sys.argv[1])]
    rows = [r for r in rows if r.get("context")]
    per_question = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    clean = lambda t: " ".join(t.split())
    held = lambda i: int(hashlib.sha256(i.encode()).hexdigest(), 16) % 10 == 0
    random.seed(1)
    everyone = [clean(c) for r in rows for c in r["context"] if c.strip()]
    train = dev = 0
    with open("thread-train.tsv", "w") as tr, open("thread-dev.tsv", "w") as dv:
        for r in rows:
            q = clean(r["text"])
            comments = [clean(c) for c in r["context"] if c.strip()]
            if held(r["id"]):
                for c in comments[:3]:
                    dv.write(f"1\t{q}\t{c}\n0\t{q}\t{random.choice(everyone)}\n")
                    dev += 2
            else:
                for c in comments[:per_question]:
                    tr.write(f"1\t{q}\t{c}\n")
                    train += 1
    print(f"thread-train.tsv: {train} pairs, thread-dev.tsv: {dev} pairs", file=sys.stderr)


if __name__ == "__main__":
    main()
