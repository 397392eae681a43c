"""Sentence vectors from the product's own encoder, for the offline scripts beside this one.

    from kindred_vectors import encode
    rows = encode("kindred", None, ["How do I renew my visa?", ...])   # unit rows, float32

Runs `kindred encode --json` (int8 by default, as collections store them) on the texts, one
per line (whitespace folded), with `--model DIR` when a model is given. Needs numpy.
"""
import json
import subprocess
import sys
import tempfile

import numpy as np


def encode(kindred, model, texts):
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        for t in texts:
            f.write(" ".join(t.split()) + "\n")
        f.flush()
        cmd = [kindred, "encode", "--json", "--file", f.name]
        if model:
            cmd += ["--model", model]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = np.array([t["sentence"] for t in json.loads(out)["texts"]], dtype=np.float32)
    if len(rows) != len(texts):
        sys.exit(f"kindred encoded {len(rows)} texts of {len(texts)}: is one of them blank?")
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)
