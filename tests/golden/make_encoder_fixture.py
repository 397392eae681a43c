#!/usr/bin/env python3
"""Writes tests/golden/encoder.json: the sentence-transformers reference for kindred's encoder.

Usage (any Python with sentence-transformers; no network beyond the model directory):
    python3 -m pip install sentence-transformers
    kindred model fetch          # or any local BERT-family directory
    python3 tests/golden/make_encoder_fixture.py --model ~/.cache/kindred/models/all-MiniLM-L6-v2

For each text it records what kindred must reproduce:
- tokens: the content wordpieces (no [CLS]/[SEP]) with char offsets, from the fast tokenizer;
- truncated: whether the text has more than max_seq_length wordpieces;
- sentence: model.encode(normalize_embeddings=True), i.e. mean pooling over all non-pad tokens
  including [CLS]/[SEP], then L2 normalisation;
- token_vectors_f16: the content tokens' last hidden states, L2-normalised, as little-endian
  float16, base64 (keeps the fixture small; f16 rounding costs < 1e-6 of cosine).
"""
import argparse
import base64
import json
import os

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

TEXTS = [
    "How do I learn Rust?",
    "What is the best way to learn the Rust programming language?",
    "Café naïve résumé — accents everywhere",
    "Ünïcödé façade: Zürich, São Paulo, Kraków",
    "I love pizza 🍕🍕 and tacos 🌮!",
    "😀",
    "東京はどこですか？",
    "我想学习机器学习。",
    "Как выучить русский язык?",
    "مرحبا كيف حالك؟",
    "What's 2 + 2 = 4? And 3.14159 * 10^6?",
    "!!!???...,,,;;;",
    "The year 1999 had 365 days; 2024 had 366.",
    "   leading and trailing whitespace   ",
    "MiXeD CaSe QuEsTiOn AbOuT iPhone 15 Pro Max",
    "e-mail: someone@example.com, URL: https://example.org/path?q=1",
    "tabs\tand\nnewlines\r\nin text",
    "Why is the sky blue?",
    "How can I increase my Quora answer views?",
    " ".join(["How do I learn machine learning and deep learning from scratch?"] * 30),
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "C++ vs. C# vs. F#: which one?",
    "<script>alert('x')</script>",
    "don't won't can't shouldn't",
    "a",
    "Zero-width\u200bspace and non\u00a0breaking space",
    "Ελληνικά: Πώς είσαι;",
    "नमस्ते, आप कैसे हैं?",
    "👩‍👩‍👧‍👦 family emoji with ZWJ",
    "[CLS] literal special token text",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="model directory")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "encoder.json"))
    args = ap.parse_args()

    torch.set_num_threads(2)
    model = SentenceTransformer(args.model, device="cpu")
    tok = model.tokenizer
    max_len = model.max_seq_length

    sentences = model.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    token_embs = model.encode(TEXTS, output_value="token_embeddings", convert_to_numpy=False)

    items = []
    for text, sent, tokemb in zip(TEXTS, sentences, token_embs):
        enc = tok(text, truncation=True, max_length=max_len, return_offsets_mapping=True,
                  return_special_tokens_mask=True)
        full = tok(text, truncation=False)["input_ids"]
        ids, offsets, special = enc["input_ids"], enc["offset_mapping"], enc["special_tokens_mask"]
        pieces = tok.convert_ids_to_tokens(ids)
        assert tokemb.shape[0] == len(ids), (text, tokemb.shape, len(ids))
        content = [i for i, s in enumerate(special) if not s]
        vecs = tokemb.detach().cpu().numpy()[content].astype(np.float32)
        vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        items.append({
            "text": text,
            "truncated": len(full) > max_len,
            "tokens": [{"text": pieces[i], "id": ids[i], "start": offsets[i][0], "end": offsets[i][1]}
                       for i in content],
            "sentence": [round(float(x), 7) for x in sent],
            "token_vectors_f16": base64.b64encode(vecs.astype("<f2").tobytes()).decode(),
        })
    out = {"model": os.path.basename(os.path.normpath(args.model)), "max_seq_length": max_len,
           "dim": int(sentences.shape[1]), "texts": items}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
    print(f"wrote {len(items)} texts to {args.out}")


if __name__ == "__main__":
    main()
