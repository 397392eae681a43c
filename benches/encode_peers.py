"""Encode speed of kindred (fp32 and int8) against sentence-transformers (torch fp32) and ONNX
Runtime fp32 / int8, in ONE run on the same machine: the project's own version of
../shared/bench/encode_peers.py, with both kindred precisions as rows and a row of long texts.

Same method as the shared script: 2,000 distinct QQP questions (qqp_bimpm/test.tsv), 2 threads
for every engine, model load excluded (kindred reports its own encode time with --stats),
rounds alternate between engines, best round reported. The long-text row encodes 120 texts of
256 wordpieces (QQP questions joined until the tokenizer truncates them) at batch 32.

Setup (see ../shared/bench/README.md):
  python3 -m venv /tmp/peers && /tmp/peers/bin/pip install sentence-transformers onnxruntime onnx
  MODEL=$(target/release/kindred model info --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["path"])')
  /tmp/peers/bin/python ../shared/bench/export_onnx.py "$MODEL" /tmp/peers/onnx
Run:
  /tmp/peers/bin/python benches/encode_peers.py target/release/kindred "$MODEL" /tmp/peers/onnx [batches] [rounds]
Extra kindred rows: KINDRED_EXTRA="name=/path/to/kindred --flag,..." (e.g. an older build).
"""
import json, os, subprocess, sys, tempfile, time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np, torch, onnxruntime as ort
from tokenizers import Tokenizer
from sentence_transformers import SentenceTransformer

import bench_texts

torch.set_num_threads(2)
kbin, model_dir, onnx_dir = sys.argv[1:4]
bss = [int(b) for b in (sys.argv[4] if len(sys.argv) > 4 else "1,32,128").split(",")]
rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 2
here = os.path.dirname(os.path.abspath(__file__))
data = os.path.join(here, "..", "..", "shared", "data", "qqp_bimpm", "test.tsv")
seen, texts = set(), []
for line in open(data, encoding="utf-8", errors="replace"):
    p = line.rstrip("\n").split("\t")
    if len(p) >= 3 and p[1].strip() and p[1].strip() not in seen:
        seen.add(p[1].strip()); texts.append(p[1].strip())
    if len(texts) == 2000:
        break
tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json")); tok.no_padding(); tok.enable_truncation(256)
long_texts = bench_texts.long_texts(texts, model_dir)  # 120 texts of 256 wordpieces


def text_file(xs):
    f = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    f.write("\n".join(xs) + "\n"); f.close()
    return f.name


files = {"short": text_file(texts), "long": text_file(long_texts)}
sets = {"short": texts, "long": long_texts}


class Ort:
    def __init__(self, path):
        o = ort.SessionOptions(); o.intra_op_num_threads = 2; o.inter_op_num_threads = 1
        o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.s = ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])

    def encode(self, xs, batch_size, normalize_embeddings=True):
        order = np.argsort([-len(x) for x in xs]); out = [None] * len(xs)
        for i in range(0, len(xs), batch_size):
            idx = order[i:i + batch_size]; encs = tok.encode_batch([xs[j] for j in idx])
            L = max(len(e.ids) for e in encs)
            ids = np.zeros((len(idx), L), np.int64); am = np.zeros_like(ids)
            for r, e in enumerate(encs):
                ids[r, :len(e.ids)] = e.ids; am[r, :len(e.ids)] = 1
            h = self.s.run(None, {"input_ids": ids, "attention_mask": am, "token_type_ids": np.zeros_like(ids)})[0]
            v = (h * am[..., None]).sum(1) / am.sum(1, keepdims=True); v /= np.linalg.norm(v, axis=1, keepdims=True)
            for r, j in enumerate(idx):
                out[j] = v[r]
        return np.stack(out)


kindreds = {"kindred fp32": (kbin, ["--precision", "fp32"]), "kindred int8": (kbin, ["--precision", "int8"])}
for spec in filter(None, os.environ.get("KINDRED_EXTRA", "").split(",")):
    name, cmd = spec.split("=", 1); parts = cmd.split()
    kindreds[name] = (parts[0], parts[1:])
torch_m = SentenceTransformer(model_dir, device="cpu")
torch_m.max_seq_length = 256
engines = {"torch fp32": torch_m, "ORT fp32": Ort(os.path.join(onnx_dir, "model.onnx")),
           "ORT int8": Ort(os.path.join(onnx_dir, "model_qint8.onnx"))}
ref = torch_m.encode(texts[:500], normalize_embeddings=True)
for n in ["ORT fp32", "ORT int8"]:
    c = np.sum(ref * engines[n].encode(texts[:500], 32), 1)
    print(f"{n} vs torch fp32 cosine over 500: mean {c.mean():.6f} min {c.min():.6f}", flush=True)
for m in engines.values():
    m.encode(texts[:64], batch_size=32)

runs = [("short", bs) for bs in bss] + [("long", 32)]
res = {}
for rnd in range(rounds):
    for which, bs in runs:
        for name, (binary, extra) in kindreds.items():
            out = subprocess.check_output([binary, "encode", "--file", files[which], "--batch-size", str(bs), "--stats"] + extra,
                                          env=dict(os.environ, KINDRED_MODEL=model_dir), stderr=subprocess.DEVNULL)
            res.setdefault((name, which, bs), []).append(json.loads(out)["texts_per_sec"])
        for name, m in engines.items():
            xs = sets[which]
            t0 = time.perf_counter(); m.encode(xs, batch_size=bs, normalize_embeddings=True)
            res.setdefault((name, which, bs), []).append(len(xs) / (time.perf_counter() - t0))
        print(rnd, which, bs, {k[0]: round(v[-1], 1) for k, v in res.items() if k[1:] == (which, bs)}, flush=True)

names = list(kindreds) + list(engines)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"\nCPU: {cpu}, 2 threads per engine; sentences/s, best of {rounds} rounds")
print("| texts | batch | " + " | ".join(names) + " | fp32/ORT fp32 | int8/ORT int8 |")
print("|---|---" + "|---:" * (len(names) + 2) + "|")
for which, bs in runs:
    best = {n: max(res[(n, which, bs)]) for n in names}
    label = "QQP questions" if which == "short" else "256 wordpieces"
    print(f"| {label} | {bs} | " + " | ".join(f"{best[n]:.0f}" for n in names)
          + f" | {best['kindred fp32'] / best['ORT fp32']:.2f} | {best['kindred int8'] / best['ORT int8']:.2f} |")
for f in files.values():
    os.unlink(f)
