#!/usr/bin/env bash
# Installs the peers of `cargo bench --bench ann`: hnswlib 0.8.0 (PyPI, built from source
# with the machine's compiler), FAISS 1.15.1 (PyPI faiss-cpu) and numpy, into target/ann-venv.
# Idempotent.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/target/ann-venv"
if ! "$venv/bin/python" -c "import hnswlib, faiss, numpy" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "hnswlib==0.8.0" "faiss-cpu==1.15.1" "numpy>=1.26"
fi
"$venv/bin/python" -c "import hnswlib, faiss; print(f'hnswlib and FAISS {faiss.__version__} ready in $venv')"
