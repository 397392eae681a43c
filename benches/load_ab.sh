#!/usr/bin/env bash
# The load bench (benches/load.rs) for two server binaries, interleaved: each round restores one
# snapshot of the preloaded data directory before each run and swaps the binary the bench starts
# (target/release/kindred), alternating which goes first; the reports land in OUT, and
# benches/load_ab.py summarises them (means, paired differences with 95% intervals).
#
#   LOAD_SECONDS=1 LOAD_REQUESTS=50 cargo bench --bench load    # once: preload target/load-data
#   benches/load_ab.sh OLD_BINARY NEW_BINARY ROUNDS OUT
#   python3 benches/load_ab.py OUT
#
# OLD_BINARY, e.g.: git worktree add /tmp/old REV && (cd /tmp/old && CARGO_TARGET_DIR=$PWD/target
# cargo build --release --bin kindred) && cp target/release/kindred /tmp/kindred-old, run from
# this checkout (the same Cargo.lock builds no dependency twice).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# = 4 ] || { echo "usage: $0 OLD_BINARY NEW_BINARY ROUNDS OUT" >&2; exit 2; }
old=$1 new=$2 rounds=$3 out=$4
bench=$(ls -t target/release/deps/load-* | grep -v '\.d$' | head -1)
data=target/load-data
[ -d "$data" ] || { echo "error: $data is missing: preload it first (see the top of $0)" >&2; exit 1; }
mkdir -p "$out"
snap="$out/snapshot"
rm -rf "$snap" && cp -a "$data" "$snap"
# Copies first: NEW_BINARY may be target/release/kindred itself, which each run replaces.
cp "$old" "$out/kindred-old" && cp "$new" "$out/kindred-new"
keep=$(mktemp) && cp target/release/kindred "$keep"
for i in $(seq 1 "$rounds"); do
  order="new old"; [ $((i % 2)) = 0 ] && order="old new"
  for which in $order; do
    bin="$out/kindred-$which"
    rm -rf "$data" && cp -a "$snap" "$data"
    cp "$bin" target/release/kindred
    LOAD_SECONDS=${LOAD_SECONDS:-30} "$bench" --bench > "$out/$which-$i.log" 2>&1
    cp target/load-report.json "$out/$which-$i.json"
    echo "round $i: $which done"
  done
done
cp "$keep" target/release/kindred && rm -f "$keep"
rm -rf "$data" && mv "$snap" "$data" && rm -f "$out/kindred-old" "$out/kindred-new"
