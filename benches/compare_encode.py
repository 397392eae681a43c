#!/usr/bin/env python3
"""Encode the same questions with kindred and with sentence-transformers in one run; print both
rates (sentences/s) and their ratio per batch size.

    python3 -m venv /tmp/st && /tmp/st/bin/pip install sentence-transformers
    cargo build --release
    /tmp/st/bin/python benches/compare_encode.py            # 2,000 questions, batch 1/32/128

The questions are the first N distinct question1 strings of ../shared/data/qqp_bimpm/test.tsv.
Both engines load the same model directory (kindred's cached default unless --model) and
run on the same CPU threads (torch.set_num_threads(--threads)); load time is excluded.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def questions(path, n):
    seen, out = set(), []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3:
                continue
            q = parts[1].strip()
            if q and q not in seen:
                seen.add(q)
                out.append(q)
                if len(out) == n:
                    break
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "qqp_bimpm", "test.tsv"))
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--batch-sizes", default="1,32,128")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kindred", default=os.path.join(ROOT, "target", "release", "kindred"))
    ap.add_argument("--model", default=None, help="model dir (default: kindred's cached default)")
    args = ap.parse_args()

    if not os.path.exists(args.data):
        sys.exit(f"missing {args.data}: the benchmark reads QQP from ../shared/data")
    if not os.path.exists(args.kindred):
        sys.exit(f"missing {args.kindred}: run `cargo build --release` first")
    texts = questions(args.data, args.n)
    env = dict(os.environ)
    if args.model:
        env["KINDRED_MODEL"] = args.model
    model_dir = args.model or json.loads(subprocess.check_output(
        [args.kindred, "model", "info", "--json"], env=env))["path"]

    import torch
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(args.threads)
    st = SentenceTransformer(model_dir, device="cpu")
    st.encode(texts[:64], batch_size=32)  # warm-up

    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write("\n".join(texts) + "\n")
        text_file = f.name

    rows = []
    for bs in [int(b) for b in args.batch_sizes.split(",")]:
        out = subprocess.check_output(
            [args.kindred, "encode", "--file", text_file, "--batch-size", str(bs), "--stats"], env=env)
        k_rate = json.loads(out)["texts_per_sec"]
        t0 = time.perf_counter()
        st.encode(texts, batch_size=bs, normalize_embeddings=True)
        s_rate = len(texts) / (time.perf_counter() - t0)
        rows.append((bs, k_rate, s_rate))
        print(f"batch {bs}: kindred {k_rate:.1f}/s, sentence-transformers {s_rate:.1f}/s", file=sys.stderr)
    os.unlink(text_file)

    print(f"\n{len(texts)} questions from {os.path.relpath(args.data, ROOT)}, {args.threads} threads, "
          f"torch {torch.__version__}\n")
    print("| batch | kindred (sent/s) | sentence-transformers (sent/s) | ratio |")
    print("|---:|---:|---:|---:|")
    for bs, k, s in rows:
        print(f"| {bs} | {k:.1f} | {s:.1f} | {k / s:.2f} |")


if __name__ == "__main__":
    main()
