#!/usr/bin/env bash
# Reproduces EVALUATION.md's untrained tables, phrase alignment and ingest (all-MiniLM-L6-v2
# unless KINDRED_MODEL says otherwise; the other tables give their own commands). Reads
# ../shared/data; writes markdown and JSON under target/eval/. About 30 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
D=../shared/data
OUT=target/eval
mkdir -p "$OUT"
cargo build --release --quiet
K=target/release/kindred

$K eval pairs --dev $D/qqp_bimpm/dev.tsv --test $D/qqp_bimpm/test.tsv --out $OUT/pairs.json | tee $OUT/pairs.md
$K eval sts --data $D/stsb/sts-test.csv $D/sick/SICK_test_annotated.txt --out $OUT/sts.json | tee $OUT/sts.md
$K eval retrieval --pairs $D/qqp_bimpm/dev.tsv $D/qqp_bimpm/test.tsv \
    $D/qqp_deep1994_split/dev.tsv $D/qqp_deep1994_split/test.tsv --out $OUT/retrieval.json | tee $OUT/retrieval.md

# Phrase alignment against the iSTS gold (held-out part), own and gold chunks, uniform and idf.
rm -f $OUT/alignment.md
for w in uniform idf; do
  for c in "" --gold-chunks; do
    $K eval alignment --data $D/ists2016_train --weights $w $c | tee -a $OUT/alignment.md
  done
done

# Ingest throughput and peak memory: the same four files as one stream, into a fresh database.
rm -rf "$OUT/ingest-data" && cat $D/qqp_bimpm/{dev,test}.tsv $D/qqp_deep1994_split/{dev,test}.tsv > "$OUT/qqp-all.tsv"
/usr/bin/time -v $K --data "$OUT/ingest-data" ingest "$OUT/qqp-all.tsv" -c qqp --create --format qqp \
    2> >(tee $OUT/ingest.time >&2) | tee $OUT/ingest.md
grep -E "Maximum resident|Elapsed" $OUT/ingest.time
