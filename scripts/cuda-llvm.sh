#!/usr/bin/env bash
# Makes `cargo build --release --features cuda` build from the package registries alone.
#
# burn-cuda 0.22.1 -> cubecl-cuda 0.11.3 -> cubecl-llvm 0.11.3 (not optional), whose build
# dependency tracel-llvm-bundler downloads a prebuilt LLVM 23.1 from GitHub in its build script,
# unless its install directory already exists. This script fills that directory with the LLVM
# 23.1 static build that PyPI ships (mlc-llvm-static, with the NVPTX and AMDGPU targets from
# mlc-llvm-static-extra-targets), so the bundler finds it and downloads nothing. Debian's LLVM
# cannot stand in: bookworm's newest (19) lacks C functions cubecl-llvm calls.
#
# Usage: scripts/cuda-llvm.sh [VENV_DIR]   (default ~/.cache/kindred/llvm-venv), then
#        cargo build --release --features cuda
# Needs python3 >= 3.10 with venv. Idempotent.
set -euo pipefail
VENV=${1:-${HOME}/.cache/kindred/llvm-venv}
VERSION=23.1.1.post0
BUNDLED=tracel-llvm-23.1.0-4   # the directory tracel-llvm-bundler 23.1.0-4 looks for

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install -q "mlc-llvm-static==$VERSION" "mlc-llvm-static-extra-targets==$VERSION"
PREFIX=$("$VENV/bin/python" -m mlc_llvm_static.config --prefix)
[ -x "$PREFIX/bin/llvm-config" ] || { echo "error: no llvm-config under $PREFIX" >&2; exit 1; }

DATA="${XDG_DATA_HOME:-$HOME/.local/share}/tracel"
mkdir -p "$DATA"
ln -sfn "$PREFIX" "$DATA/$BUNDLED"
touch "$DATA/$BUNDLED/.tracel-llvm-installed"
echo "LLVM $("$PREFIX/bin/llvm-config" --version) from PyPI at $DATA/$BUNDLED"
echo "now: cargo build --release --features cuda"
