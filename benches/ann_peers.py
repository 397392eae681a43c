"""The peers' side of `cargo bench --bench ann`: hnswlib (one query per call, as kindred is
asked) and FAISS `IndexHNSWFlat` and `IndexHNSWSQ` (8-bit scalar quantised vectors; both with
the queries in one batched call, FAISS's own way), on the same vectors
(target/ann-data/*.f32, raw little-endian f32 written by the Rust bench), the same split, M,
ef_construction, threads and ef values. Prints one JSON object per (library, metric, ef):
build vectors/s, search QPS (one thread), recall@10 against brute force.

Usage: ann_peers.py DATA_DIR N QUERIES THREADS [ROUNDS]  (search passes per ef, best kept)
"""
import json
import sys
import time

import faiss
import hnswlib
import numpy as np

K = 10
EFS = [16, 32, 64, 128]


def recall_of(found, truth):
    return float(np.mean([len(set(f) & set(t_)) / K for f, t_ in zip(found, truth)]))


def run(path, dim, space, name, n, queries, threads, rounds):
    data = np.fromfile(path, dtype="<f4").reshape(-1, dim)
    n = min(n, len(data) - queries)
    base, qs = data[:n], data[len(data) - queries:]
    if space == "ip":
        truth = np.argsort(-(qs @ base.T), axis=1)[:, :K]
    else:
        d = (qs * qs).sum(1)[:, None] - 2 * qs @ base.T + (base * base).sum(1)[None, :]
        truth = np.argsort(d, axis=1)[:, :K]
    run_hnswlib(base, qs, truth, dim, space, name, threads, rounds)
    metric = faiss.METRIC_INNER_PRODUCT if space == "ip" else faiss.METRIC_L2
    run_faiss("FAISS 1.15 HNSWFlat", lambda: faiss.IndexHNSWFlat(dim, 16, metric),
              base, qs, truth, name, threads, rounds)
    run_faiss("FAISS 1.15 HNSWSQ8",
              lambda: faiss.IndexHNSWSQ(dim, faiss.ScalarQuantizer.QT_8bit, 16, metric),
              base, qs, truth, name, threads, rounds)


def run_faiss(library, make, base, qs, truth, name, threads, rounds):
    """A FAISS HNSW index: trained (the SQ8 ranges) and built on `threads`, searched on one
    thread with all queries in one call."""
    index = make()
    index.hnsw.efConstruction = 200
    faiss.omp_set_num_threads(threads)
    t = time.perf_counter()
    if not index.is_trained:
        index.train(base)
    index.add(base)
    build = len(base) / (time.perf_counter() - t)
    faiss.omp_set_num_threads(1)
    for ef in EFS:
        index.hnsw.efSearch = ef
        qps = 0.0
        for _ in range(rounds):
            t = time.perf_counter()
            _, found = index.search(qs, K)
            qps = max(qps, len(qs) / (time.perf_counter() - t))
        print(json.dumps({"library": library, "metric": name, "build": build, "ef": ef,
                          "qps": qps, "recall": recall_of(found, truth)}))


def run_hnswlib(base, qs, truth, dim, space, name, threads, rounds):
    n, queries = len(base), len(qs)
    index = hnswlib.Index(space=space, dim=dim)
    index.init_index(max_elements=n, M=16, ef_construction=200, random_seed=100)
    index.set_num_threads(threads)
    t = time.perf_counter()
    index.add_items(base, np.arange(n), num_threads=threads)
    build = n / (time.perf_counter() - t)
    index.set_num_threads(1)
    for ef in EFS:
        index.set_ef(ef)
        qps = 0.0
        for _ in range(rounds):
            t = time.perf_counter()
            found = [index.knn_query(q, k=K)[0][0] for q in qs]  # one query per call, like kindred
            qps = max(qps, queries / (time.perf_counter() - t))
        print(json.dumps({"library": "hnswlib 0.8", "metric": name, "build": build, "ef": ef,
                          "qps": qps, "recall": recall_of(found, truth)}))


def main():
    data_dir, n, queries, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    run(f"{data_dir}/cosine.f32", 384, "ip", "cosine (384-d)", n, queries, threads, rounds)
    run(f"{data_dir}/l2.f32", 768, "l2", "L2 (768-d [μ;σ])", n, queries, threads, rounds)


if __name__ == "__main__":
    main()
