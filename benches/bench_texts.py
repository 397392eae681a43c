"""Texts the Python peer benches share (encode_peers.py, encode_gpu.py): the long-text set."""
import os

from tokenizers import Tokenizer


def long_texts(texts, model_dir, count=120, wordpieces=256):
    """`count` texts of `wordpieces` wordpieces: consecutive `texts` joined until the model's
    tokenizer truncates them."""
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.no_padding(); tok.enable_truncation(wordpieces)
    out, i = [], 0
    while len(out) < count:
        t = texts[i % len(texts)]; i += 1
        while len(tok.encode(t).ids) < wordpieces:
            t += " " + texts[i % len(texts)]; i += 1
        out.append(t)
    return out
