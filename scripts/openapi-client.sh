#!/usr/bin/env bash
# Checks kindred's OpenAPI document the way an API user meets it: validates it with
# openapi-spec-validator, generates a Python client with openapi-python-client, and runs a
# search through the generated code against a live server.
#
# Usage: scripts/openapi-client.sh OPENAPI_JSON BASE_URL
# The tools are installed from PyPI into target/openapi-venv (KINDRED_OPENAPI_VENV) once.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
doc="$1"
base="$2"
venv="${KINDRED_OPENAPI_VENV:-$root/target/openapi-venv}"
if [ ! -x "$venv/bin/openapi-python-client" ] || [ ! -x "$venv/bin/openapi-spec-validator" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "openapi-spec-validator==0.9.0" "openapi-python-client==0.29.1"
fi
"$venv/bin/openapi-spec-validator" "$doc"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if ! "$venv/bin/openapi-python-client" generate --path "$doc" \
  --output-path "$work/kindred_client" --meta none >"$work/generate.log" 2>&1; then
  cat "$work/generate.log" >&2
  exit 1
fi
"$venv/bin/python" "$root/tests/openapi/client_search.py" "$work" "$base"
