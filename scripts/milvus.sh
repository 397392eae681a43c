#!/usr/bin/env bash
# Installs the Milvus servers that kindred's Milvus tests start into virtual environments:
# - the PyPI package `milvus` (the Milvus 2.3.5 standalone server binary with an embedded etcd
#   and local storage) into target/milvus-venv, or $KINDRED_MILVUS_VENV;
# - with `lite`, the PyPI package `milvus-lite` 3.2.2 (a Python server speaking the Milvus 2.6
#   API: several vector fields per collection, BM25 full-text search) into
#   target/milvus-lite-venv, or $KINDRED_MILVUS_LITE_VENV.
# Idempotent.
#
#   scripts/milvus.sh [lite]            install (or check) it
#   scripts/milvus.sh [lite] python     print the venv's python (what tests run milvus_server.py with)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "lite" ]; then
  shift
  VENV="${KINDRED_MILVUS_LITE_VENV:-$PWD/target/milvus-lite-venv}"
  NAME="milvus-lite"
  MODULE="milvus_lite.adapter.grpc.server"
  # milvus-lite imports pymilvus's generated gRPC code without declaring it.
  PACKAGES=("milvus-lite==3.2.2" "pymilvus==3.0.2")
else
  VENV="${KINDRED_MILVUS_VENV:-$PWD/target/milvus-venv}"
  NAME="milvus"
  MODULE="milvus"
  PACKAGES=("milvus==2.3.5")
fi
PY="$VENV/bin/python"
if [ "${1:-}" = "python" ]; then
  echo "$PY"
  exit 0
fi
if [ -x "$PY" ] && "$PY" -c "import $MODULE" 2>/dev/null; then
  echo "$NAME server installed in $VENV"
  exit 0
fi
python3 -m venv "$VENV"
"$PY" -m pip install --quiet --disable-pip-version-check "${PACKAGES[@]}"
"$PY" -c "import $MODULE" && echo "$NAME server installed in $VENV"
