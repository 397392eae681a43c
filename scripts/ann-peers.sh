#!/usr/bin/env bash
# Installs the peer of `cargo bench --bench ann`: hnswlib 0.8.0 (PyPI, built from source
# with the machine's compiler) and numpy, into target/ann-venv. Idempotent.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/target/ann-venv"
if ! "$venv/bin/python" -c "import hnswlib, numpy" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "hnswlib==0.8.0" "numpy>=1.26"
fi
"$venv/bin/python" -c "import hnswlib; print('hnswlib ready in $venv')"
