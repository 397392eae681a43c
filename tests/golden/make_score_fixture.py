#!/usr/bin/env python3
"""Writes tests/golden/scores.json: reference cosine, RCMD_1, RCMD_2, s_RCMD, IDF-RCMD and W2
for 20 real sentence pairs of STS-B test, computed with sentence-transformers + numpy (float64).

    python3 tests/golden/make_score_fixture.py --model ~/.cache/kindred/models/all-MiniLM-L6-v2

The pairs are read from ../shared/data/stsb/sts-test.csv (every 69th line from the first); the
fixture stores line numbers and a sha256 of each pair's text, never the text itself, so the data
stays in ../shared/data. Definitions (design.md §3):
- token vectors: last hidden states of the content tokens ([CLS]/[SEP] excluded), L2-normalised;
- cosine: of the normalised sentence vectors (mean pooling incl. [CLS]/[SEP]);
- RCMD_1 = mean_i max_j cos(x_i, y_j); RCMD_2 = mean_j max_i cos(x_i, y_j); s = (RCMD_1+RCMD_2)/2;
- IDF-RCMD: the same with token weights idf(t) = ln((N + 1) / (df(t) + 1)) + 1 over the
  wordpiece ids of all N sentences of the file, normalised per sentence; the weights are stored;
- W2 between moment-matched intents: mu = mean of the token vectors, sigma = population std
  floored at 1e-3; W2 = sqrt(|mu1 - mu2|^2 + |sigma1 - sigma2|^2).
"""
import argparse
import hashlib
import json
import math
import os
from collections import Counter

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "..", "shared", "data", "stsb", "sts-test.csv")
STEP, COUNT, FLOOR = 69, 20, 1e-3


def read_pairs(path):
    with open(path, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    return [(r[5], r[6]) for r in rows]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--out", default=os.path.join(HERE, "scores.json"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    model = SentenceTransformer(args.model, device="cpu")
    tok = model.tokenizer

    pairs = read_pairs(args.data)
    df, n_docs = Counter(), 0
    for a, b in pairs:
        for s in (a, b):
            ids = tok(s, truncation=True, max_length=model.max_seq_length,
                      return_special_tokens_mask=True)
            df.update({i for i, m in zip(ids["input_ids"], ids["special_tokens_mask"]) if not m})
            n_docs += 1

    def idf(i):
        return math.log((n_docs + 1) / (df[i] + 1)) + 1

    def tokens(s):
        enc = tok(s, truncation=True, max_length=model.max_seq_length, return_special_tokens_mask=True)
        emb = model.encode(s, output_value="token_embeddings", convert_to_numpy=False)
        emb = emb.detach().cpu().numpy().astype(np.float64)
        keep = [k for k, m in enumerate(enc["special_tokens_mask"]) if not m]
        x = emb[keep]
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        return x, [enc["input_ids"][k] for k in keep]

    items = []
    for line in range(0, STEP * COUNT, STEP):
        a, b = pairs[line]
        xa, ia = tokens(a)
        xb, ib = tokens(b)
        sa, sb = model.encode([a, b], normalize_embeddings=True).astype(np.float64)
        cos = xa @ xb.T
        r1, r2 = cos.max(axis=1).mean(), cos.max(axis=0).mean()
        wa = np.array([idf(i) for i in ia]); wb = np.array([idf(i) for i in ib])
        i1 = (wa / wa.sum() * cos.max(axis=1)).sum()
        i2 = (wb / wb.sum() * cos.max(axis=0)).sum()
        mu_a, mu_b = xa.mean(axis=0), xb.mean(axis=0)
        sg_a = np.maximum(xa.std(axis=0), FLOOR); sg_b = np.maximum(xb.std(axis=0), FLOOR)
        w2 = math.sqrt(((mu_a - mu_b) ** 2).sum() + ((sg_a - sg_b) ** 2).sum())
        items.append({
            "line": line,
            "sha256": hashlib.sha256(f"{a}\t{b}".encode()).hexdigest(),
            "cosine": float(sa @ sb),
            "rcmd_forward": float(r1), "rcmd_backward": float(r2), "rcmd": float((r1 + r2) / 2),
            "idf_weights_a": [round(float(w), 6) for w in wa],
            "idf_weights_b": [round(float(w), 6) for w in wb],
            "idf_rcmd_forward": float(i1), "idf_rcmd_backward": float(i2),
            "idf_rcmd": float((i1 + i2) / 2),
            "w2": w2,
        })
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"data": "stsb/sts-test.csv", "sigma_floor": FLOOR, "pairs": items}, f, indent=1)
    print(f"wrote {len(items)} pairs to {args.out}")


if __name__ == "__main__":
    main()
