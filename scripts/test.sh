#!/usr/bin/env bash
# The whole test suite, as the README gives it and CI runs it (.ci/run).
# Formatting, lints (warnings are errors), every test, and a build of the benches.
# Tests and benches share one release build of the dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null 2>&1 || { echo "error: $1 not found. $2" >&2; exit 1; }; }
need cargo "Install Rust with rustup (https://rustup.rs)."
need python3 "Install Python 3 with pip (apt-get install python3 python3-pip): kindred fetches its default model with pip."
for c in rustfmt clippy; do
  cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1 || rustup component add "$c"
done

if [ "${CI:-}" = "true" ] && [ ! -d ../shared/data ]; then
  echo "error: ../shared/data is missing; CI needs the shared data beside the checkout" >&2
  exit 1
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --all-targets -- -D warnings
echo "== cargo test"
cargo test --release
echo "== cargo bench --no-run"
cargo bench --no-run
