#!/usr/bin/env python3
"""Would a candidate's stored context help at search time? An offline measurement.

    scripts/research/context-search.py COLLECTION.jsonl LABELLED.xml... [--kindred BIN] [--model DIR]

COLLECTION.jsonl is what `kindred eval forum … --write-jsonl` writes (each related question
with its comments as `context`); each LABELLED.xml is a SemEval-2016 Task 3 file whose related
questions are in it. Each original question ranks its related questions by

    cos(query, question) + w · cos(query, context)

where `context` is the normalised mean of the related question's comment vectors (as `train
context` forms it) and the query, an original question, has none: the comments of a thread
as evidence of what its question asks, the classic use of answers in FAQ retrieval. Prints
MAP ×100 (the task's scorer, as `kindred eval forum` computes it) for each weight, per file and
pooled; w = 0 is `eval forum`'s cosine row, and row `z` sums the two scores each standardised
over the question's candidates (no weight to choose). Labels only score; pick w on one file and
read the other.

`--label-free` also prints what a label-free choice of w would see: every question of the
collection ranks its 30 nearest other questions (by cosine) with the same scores, graded by
how well each candidate's question fits the ranking question's *own* context (cosine of the
candidate's question with the normalised mean of the ranking question's comment vectors) —
evidence the channel never reads, since it uses the candidate's context and a query has none;
nDCG@10 per w.

Vectors come from `kindred encode --json` (the product's encoder, int8 by default). Needs
numpy. About 2 minutes on 2 cores for Qatar Living's dev and train-part2.
"""
import argparse
import html
import json
import re
import sys

import numpy as np

from kindred_vectors import encode

WEIGHTS = [0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, "z"]


def combined(q_scores, c_scores, w):
    """cos(query, question) + w · cos(query, context); w = "z": both standardised, then summed."""
    if w == "z":
        z = lambda s: (s - s.mean()) / (s.std() + 1e-9)  # noqa: E731
        return z(q_scores) + z(c_scores)
    return q_scores + w * c_scores


def ndcg(order, gains, k=10):
    disc = 1 / np.log2(np.arange(2, k + 2))
    top = gains[order][:k]
    ideal = np.sort(gains)[::-1][:k]
    return (top * disc[: len(top)]).sum() / ((ideal * disc[: len(ideal)]).sum() + 1e-12)


def label_free(docs, question, context, depth=30):
    """nDCG@10 per weight of the collection's questions ranking their `depth` nearest others,
    graded by how well each candidate fits the ranking question's own context (see the doc)."""
    texts = [d["text"] for d in docs]
    has = np.linalg.norm(context, axis=1) > 0
    sims, fits, channel = question @ question.T, context @ question.T, question @ context.T
    rows = []
    for w in WEIGHTS:
        vals = []
        for q in np.flatnonzero(has):
            s = sims[q].copy()
            s[[d for d in range(len(docs)) if texts[d] == texts[q]]] = -np.inf  # itself, and copies
            cand = np.argsort(-s)[:depth]
            score = combined(sims[q, cand], channel[q, cand], w)
            vals.append(ndcg(np.argsort(-score, kind="stable"), np.clip(fits[q, cand], 0, None)))
        rows.append((w, float(np.mean(vals)), len(vals)))
    return rows


def question_text(subject, body):
    """As kindred's eval forum joins them: the subject left out when the body starts with it."""
    s, b = subject.strip(), body.strip()
    if not s or b.startswith(s.rstrip(".?!")):
        return b
    return s if not b else f"{s} {b}"


def element(block, name):
    m = re.search(rf"<{name}>(.*?)</{name}>", block, re.S)
    return html.unescape(m.group(1)) if m else ""


def original_questions(xml):
    """{original id: (text, [(related id, relevant)] in file order)}."""
    out = {}
    for oid, block in re.findall(r'<OrgQuestion ORGQ_ID="([^"]+)">(.*?)</OrgQuestion>', xml, re.S):
        rid = re.search(r'RELQ_ID="([^"]+)"', block).group(1)
        label = re.search(r'RELQ_RELEVANCE2ORGQ="([^"]+)"', block).group(1)
        text = question_text(element(block, "OrgQSubject"), element(block, "OrgQBody"))
        out.setdefault(oid, (text, []))[1].append((rid, label != "Irrelevant"))
    return out


def average_precision(flags, top=10):
    correct, total = 0, 0.0
    for i, f in enumerate(flags[:top]):
        if f:
            correct += 1
            total += correct / (i + 1)
    return total / correct if correct else 0.0


def load(collection, labelled):
    """The collection's documents, their row by id, each labelled file's original questions,
    and the queries (file, original id, text) in file order."""
    docs = [json.loads(line) for line in open(collection)]
    index = {d["id"]: k for k, d in enumerate(docs)}
    files = {path: original_questions(open(path).read()) for path in labelled}
    queries = [(path, oid, text) for path, qs in files.items() for oid, (text, _) in qs.items()]
    return docs, index, files, queries


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("collection")
    ap.add_argument("labelled", nargs="+")
    ap.add_argument("--kindred", default="kindred")
    ap.add_argument("--model")
    ap.add_argument("--max-context", type=int, default=10, help="comments read per question (train context's default)")
    ap.add_argument("--label-free", action="store_true", help="also the label-free check of each weight (see above)")
    args = ap.parse_args()

    docs, index, files, queries = load(args.collection, args.labelled)
    missing = [r for qs in files.values() for _, rel in qs.values() for r, _ in rel if r not in index]
    if missing:
        sys.exit(f"{len(missing)} related questions (e.g. {missing[0]}) are not in {args.collection}")

    question = encode(args.kindred, args.model, [d["text"] for d in docs])
    owner, texts = [], []
    for k, d in enumerate(docs):
        for c in [c for c in d.get("context", []) if c.strip()][: args.max_context]:
            owner.append(k)
            texts.append(c)
    comments = encode(args.kindred, args.model, texts)
    context = np.zeros_like(question)
    np.add.at(context, np.array(owner), comments)
    norms = np.linalg.norm(context, axis=1, keepdims=True)
    context = np.divide(context, norms, out=np.zeros_like(context), where=norms > 0)
    query = dict(zip([(p, o) for p, o, _ in queries], encode(args.kindred, args.model, [t for _, _, t in queries])))

    names = [path.rsplit("/", 1)[-1].replace("SemEval2016-Task3-CQA-QL-", "").replace(".xml", "") for path in files]
    print("| w | " + " | ".join(names) + (" | pooled |" if len(files) > 1 else ""))
    print("|---:|" + "---:|" * (len(files) + (len(files) > 1)))
    for w in WEIGHTS:
        per_file = []
        for path, qs in files.items():
            aps = []
            for oid, (_, related) in qs.items():
                q = query[(path, oid)]
                ks = [index[r] for r, _ in related]
                score = combined(question[ks] @ q, context[ks] @ q, w)
                order = np.argsort(-score, kind="stable")
                aps.append(average_precision([related[i][1] for i in order]))
            per_file.append(aps)
        cells = [f"{100 * np.mean(a):.2f}" for a in per_file]
        if len(files) > 1:
            cells.append(f"{100 * np.mean([x for a in per_file for x in a]):.2f}")
        print(f"| {w} | " + " | ".join(cells) + " |")
    if args.label_free:
        rows = label_free(docs, question, context)
        print(f"\nlabel-free check ({rows[0][2]} questions with context, 30 candidates each):")
        print("| w | nDCG@10 |\n|---:|---:|")
        for w, v, _ in rows:
            print(f"| {w} | {v:.4f} |")


if __name__ == "__main__":
    main()
