"""The `cuda` build on a GPU, in ONE run: the golden check, agreement, and encode speed against
sentence-transformers (torch fp32) on the same GPU.

What it checks, each printed as it finishes:
  1. golden: `kindred encode --device cuda --precision fp32` on tests/golden/encoder.json's 30
     texts against the fixture written by sentence-transformers: the same wordpieces, offsets and
     truncation flags, sentence cosine >= 0.9999, token cosine >= 0.999 (the bars of
     tests/it/golden.rs). The same for `--device cpu` as the control.
  2. agreement over the texts file (2,000 QQP questions): kindred cuda against kindred cpu fp32
     and against torch on the GPU (sentence vectors, cosine mean / min).
  3. speed: texts/s at each batch size, each engine `rounds` times in one process (kindred:
     `encode --stats --repeat`), best round reported and the first (which pays for kernel
     compilation); kindred also without its length buckets (KINDRED_PAD_MULTIPLE=1); a row of
     120 texts of 256 wordpieces at batch 32. kindred's timing excludes model load; torch's
     includes the copy back.

Usage (on a machine with the NVIDIA driver, PyTorch and sentence-transformers):
  python3 benches/encode_gpu.py KINDRED_BIN MODEL_DIR TEXTS_FILE [batches] [rounds] [out.json]
KINDRED_BIN is a `cargo build --release --features cuda` binary; MODEL_DIR the model directory
(all-MiniLM-L6-v2 as kindred caches it); TEXTS_FILE one question per line.
Exit status 1 when a golden bar fails. ENCODE_GPU_SPEED_ONLY=1 skips the golden check and the
agreement (for a model directory of the same shapes with other weights).
"""
import json, os, subprocess, sys, tempfile, time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np, torch
from sentence_transformers import SentenceTransformer

import bench_texts

kbin, model_dir, texts_file = sys.argv[1:4]
bss = [int(b) for b in (sys.argv[4] if len(sys.argv) > 4 else "1,32,128").split(",")]
rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 3
out_json = sys.argv[6] if len(sys.argv) > 6 else None
here = os.path.dirname(os.path.abspath(__file__))
# ENCODE_GPU_DEVICE=cpu runs the same steps on the CPU: a dry run of this script without a GPU.
dev = os.environ.get("ENCODE_GPU_DEVICE", "cuda")
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
env = dict(os.environ, KINDRED_MODEL=model_dir, KINDRED_HOME=tempfile.mkdtemp())
report = {"gpu": torch.cuda.get_device_name(0) if dev == "cuda" else "none (dry run)",
          "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")}
print(report, flush=True)


def text_file(xs):
    f = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    f.write("\n".join(xs) + "\n"); f.close()
    return f.name


def kindred(device, path, extra=(), inline=()):
    args = [kbin, "encode", "--device", device, "--precision", "fp32"] + (["--file", path] if path else []) + list(extra)
    args += ["--"] + list(inline) if inline else []
    t0 = time.perf_counter()
    p = subprocess.run(args, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"FAILED ({p.returncode}): {' '.join(args)}\n{p.stderr[-3000:]}", flush=True)
        sys.exit(2)
    return json.loads(p.stdout), time.perf_counter() - t0


def unit(v):
    v = np.asarray(v, np.float64)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


speed_only = os.environ.get("ENCODE_GPU_SPEED_ONLY") == "1"  # any weights of the model's shapes
# 1. golden
fx = {"texts": []} if speed_only else json.load(open(os.path.join(here, "..", "tests", "golden", "encoder.json")))
failed = False
for device in [] if speed_only else [dev, "cpu"]:
    got, secs = kindred(device, None, ["--json", "--token-vectors"], [t["text"] for t in fx["texts"]])
    worst_s, worst_t, problems = 1.0, 1.0, []
    for item, e in zip(fx["texts"], got["texts"]):
        if e["tokens"] != item["tokens"] or e["truncated"] != item["truncated"]:
            problems.append(f"wordpieces of {item['text']!r}")
            continue
        s = float(np.dot(unit(e["sentence"]), unit(item["sentence"])))
        ref = np.frombuffer(__import__("base64").b64decode(item["token_vectors_f16"]), np.float16).astype(np.float64)
        ref = ref.reshape(-1, fx["dim"]); mine = np.asarray(e["token_vectors"], np.float64).reshape(-1, fx["dim"])
        t = float(np.min(np.sum(unit(mine) * unit(ref), 1))) if len(ref) == len(mine) else -1.0
        worst_s, worst_t = min(worst_s, s), min(worst_t, t)
    ok = not problems and len(got["texts"]) == len(fx["texts"]) and worst_s >= 0.9999 and worst_t >= 0.999
    failed |= not ok
    report[f"golden_{device}"] = {"texts": len(got["texts"]), "worst_sentence_cosine": worst_s,
                                  "worst_token_cosine": worst_t, "problems": problems, "pass": ok, "seconds": secs}
    print(f"golden {device}: {'PASS' if ok else 'FAIL'} worst sentence cosine {worst_s:.7f}, "
          f"worst token cosine {worst_t:.7f}, {problems[:3]} ({secs:.1f} s with load)", flush=True)

# 2. agreement
texts = [l.strip() for l in open(texts_file, encoding="utf-8") if l.strip()]
tfile = text_file(texts)
vec = {}
for device in [] if speed_only else [dev, "cpu"]:
    got, _ = kindred(device, tfile, ["--json"])
    vec[device] = unit([t["sentence"] for t in got["texts"]])
torch_m = SentenceTransformer(model_dir, device=dev)
torch_m.max_seq_length = 256
vec["torch"] = None if speed_only else unit(torch_m.encode(texts, batch_size=32, normalize_embeddings=True))
for other in [] if speed_only else ["cpu", "torch"]:
    c = np.sum(vec[dev] * vec[other], 1)
    report[f"agreement_cuda_vs_{other}"] = {"mean": float(c.mean()), "min": float(c.min())}
    print(f"kindred cuda vs {other} over {len(texts)}: cosine mean {c.mean():.7f} min {c.min():.7f}", flush=True)

# 3. speed: each engine encodes each set `rounds` times in one process (kindred: --repeat),
# engines one after another; best and first round reported.
long_texts = bench_texts.long_texts(texts, model_dir)
files = {"short": tfile, "long": text_file(long_texts)}
sets = {"short": texts, "long": long_texts}
runs = [("short", bs) for bs in bss] + [("long", 32)]
res = {}
torch_m.encode(texts[:64], batch_size=32)
kindred_rows = {"kindred cuda fp32": {}, "kindred cuda fp32, no length buckets": {"KINDRED_PAD_MULTIPLE": "1"}}
for which, bs in runs:
    for name, extra_env in kindred_rows.items():
        env_saved = dict(env); env.update(extra_env)
        got, _ = kindred(dev, files[which], ["--batch-size", str(bs), "--stats", "--repeat", str(rounds)])
        env.clear(); env.update(env_saved)
        res[(name, which, bs)] = got["rounds_texts_per_sec"]
    for _ in range(rounds):
        sync(); t0 = time.perf_counter()
        torch_m.encode(sets[which], batch_size=bs, normalize_embeddings=True)
        sync()
        res.setdefault(("torch cuda fp32", which, bs), []).append(len(sets[which]) / (time.perf_counter() - t0))
    print(which, bs, {k[0]: [round(x) for x in v] for k, v in res.items() if k[1:] == (which, bs)}, flush=True)
names = list(kindred_rows) + ["torch cuda fp32"]
print(f"\nGPU: {report['gpu']}; CPU: {report['cpu']}; texts/s, best of {rounds} rounds in one process (first in brackets)")
print("| texts | batch | " + " | ".join(names) + " | kindred/torch |")
print("|---|---" + "|---:" * (len(names) + 1) + "|")
report["speed"] = []
for which, bs in runs:
    best = {n: max(res[(n, which, bs)]) for n in names}
    first = {n: res[(n, which, bs)][0] for n in names}
    label = "QQP questions" if which == "short" else "256 wordpieces"
    print(f"| {label} | {bs} | " + " | ".join(f"{best[n]:.0f} ({first[n]:.0f})" for n in names)
          + f" | {best[names[0]] / best['torch cuda fp32']:.2f} |", flush=True)
    report["speed"].append({"texts": label, "batch": bs, "best": best, "first": first,
                            "rounds": {n: res[(n, which, bs)] for n in names}})
if out_json:
    json.dump(report, open(out_json, "w"), indent=1)
sys.exit(1 if failed else 0)
