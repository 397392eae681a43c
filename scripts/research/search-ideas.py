#!/usr/bin/env python3
"""Two label-free search-time ideas, measured offline against a forum's labels.

    scripts/research/search-ideas.py COLLECTION.jsonl LABELLED.xml... [--kindred BIN] [--model DIR]

Inputs as for scripts/research/context-search.py (beside this one, whose parsing and scorer it uses).
Each original question ranks its related questions by cosine after one of:

- Rocchio pseudo-relevance feedback: the query moved toward the mean of its k nearest
  questions (`all`: of the whole collection; `cands`: of its own related questions),
  q + β · mean, renormalised;
- neighbour smoothing: each question's vector moved toward the mean of its k nearest in the
  collection, d + γ · mean, renormalised.

Prints MAP ×100 per file and pooled for each setting; the first row is plain cosine
(`kindred eval forum`'s cosine row). Labels only score. Vectors from `kindred encode --json`
(int8 by default). Needs numpy. About 2 minutes on 2 cores for Qatar Living's dev and
train-part2 (docs/research/log.md, session 39).
"""
import argparse
import importlib.util
import os

import numpy as np

from kindred_vectors import encode

_spec = importlib.util.spec_from_file_location(
    "context_search", os.path.join(os.path.dirname(os.path.abspath(__file__)), "context-search.py"))
cs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("collection")
    ap.add_argument("labelled", nargs="+")
    ap.add_argument("--kindred", default="kindred")
    ap.add_argument("--model")
    args = ap.parse_args()

    docs, index, files, queries = cs.load(args.collection, args.labelled)
    X = encode(args.kindred, args.model, [d["text"] for d in docs])
    Q = encode(args.kindred, args.model, [t for _, _, t in queries])
    query = {(p, o): Q[i] for i, (p, o, _) in enumerate(queries)}

    def maps(score):
        per_file = []
        for path, qs in files.items():
            aps = []
            for oid, (_, related) in qs.items():
                ks = [index[r] for r, _ in related]
                order = np.argsort(-score(query[(path, oid)], ks), kind="stable")
                aps.append(cs.average_precision([related[i][1] for i in order]))
            per_file.append(aps)
        cells = [100 * np.mean(a) for a in per_file]
        if len(per_file) > 1:
            cells.append(100 * np.mean([x for a in per_file for x in a]))
        return cells

    def rocchio(k, beta, pool):
        def score(q, ks):
            ids = np.arange(len(X)) if pool == "all" else np.array(ks)
            top = ids[np.argsort(-(X[ids] @ q))[:k]]
            q2 = q + beta * X[top].mean(0)
            return X[ks] @ (q2 / np.linalg.norm(q2))
        return score

    def smoothed(k, gamma):
        sims = X @ X.T
        np.fill_diagonal(sims, -1)
        nearest = np.argsort(-sims, axis=1)[:, :k]
        X2 = X + gamma * X[nearest].mean(1)
        X2 /= np.linalg.norm(X2, axis=1, keepdims=True)
        return lambda q, ks: X2[ks] @ q

    names = [p.rsplit("/", 1)[-1].replace("SemEval2016-Task3-CQA-QL-", "").replace(".xml", "") for p in files]
    print("| ranking | " + " | ".join(names) + (" | pooled |" if len(files) > 1 else " |"))
    print("|---|" + "---:|" * (len(files) + (len(files) > 1)))
    rows = [("cosine", lambda q, ks: X[ks] @ q)]
    rows += [(f"Rocchio {pool} k {k} β {b}", rocchio(k, b, pool))
             for pool in ("all", "cands") for k in (1, 2, 3, 5) for b in (0.25, 0.5, 1.0)]
    rows += [(f"smoothed k {k} γ {g}", smoothed(k, g)) for k in (1, 3, 5) for g in (0.25, 0.5)]
    for name, score in rows:
        print(f"| {name} | " + " | ".join(f"{v:.2f}" for v in maps(score)) + " |")


if __name__ == "__main__":
    main()
