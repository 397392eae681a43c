#!/usr/bin/env bash
# Installs the Milvus standalone server that kindred's Milvus tests start (PyPI package
# `milvus`, the Milvus 2.3 server binary with an embedded etcd and local storage) into a
# virtual environment: target/milvus-venv, or $KINDRED_MILVUS_VENV. Idempotent.
#
#   scripts/milvus.sh            install (or check) it
#   scripts/milvus.sh python     print the venv's python (what tests run milvus_server.py with)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${KINDRED_MILVUS_VENV:-$PWD/target/milvus-venv}"
PY="$VENV/bin/python"
if [ "${1:-}" = "python" ]; then
  echo "$PY"
  exit 0
fi
if [ -x "$PY" ] && "$PY" -c "import milvus" 2>/dev/null; then
  echo "milvus server installed in $VENV"
  exit 0
fi
python3 -m venv "$VENV"
"$PY" -m pip install --quiet --disable-pip-version-check "milvus==2.3.5"
"$PY" -c "import milvus" && echo "milvus server installed in $VENV"
